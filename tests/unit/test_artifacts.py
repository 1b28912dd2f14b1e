"""Trained models as checked artifacts (minirepro.core.artifacts) and `minirepro artifacts`.

A tiny demo recipe (a few-KB tensor dict) is written to a temporary module and built into a
temporary artifacts root, so no test writes into the repository. The last tests check the
REAL registry: every committed artifact must match its recipe's config and code.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from minirepro.cli import main
from minirepro.core import artifacts
from minirepro.core.sourcehash import SourceError, normalised_source, source_hash

REPO = Path(__file__).resolve().parents[2]
NAME = "demo-tiny"
COMMAND = f"minirepro artifacts build {NAME}"

HELPER = '''\
"""Weights of the demo artifact."""
import torch


def make_weights(n, seed):
    g = torch.Generator().manual_seed(seed)  # seeded: the same tensors every build
    return {"w": torch.randn(n, n, generator=g), "b": torch.zeros(n, dtype=torch.float16)}
'''

RECIPE = '''\
"""A demo recipe for the artifact tests."""
import json
from dataclasses import dataclass

from safetensors.torch import save_file

from minirepro.core import artifacts
import demo_artifact_helper as helper

CALLS = []


@dataclass
class DemoConfig:
    n: int = 16
    seed: int = 0


CONFIG = DemoConfig()


@artifacts.recipe("demo-tiny", config=CONFIG, sources=("demo_artifact_helper",),
                  description="a few-KB tensor dict for the tests")
def build_demo(config, out):
    CALLS.append(out)
    save_file(helper.make_weights(config.n, config.seed), str(out / "weights.safetensors"))
    (out / "info.json").write_text(json.dumps({"n": config.n}))
    (out / "tok").mkdir()
    (out / "tok" / "vocab.txt").write_text("a\\nb\\n")
    return artifacts.BuildResult(quality={"mean": 0.5}, data_hash="no-data")
'''


def _import_fresh(name: str):
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """An empty artifacts root and cache; the repository is never written."""
    monkeypatch.setenv("MINIREPRO_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv("MINIREPRO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "artifacts"


@pytest.fixture
def demo(tmp_path, monkeypatch, root):
    """The demo recipe, registered from module files in tmp (its source can be edited).

    The registry holds only the demo while the test runs (the committed recipes are
    checked against the repository's artifacts at the end of this file)."""
    from minirepro.core.artifacts import recipes as recipes_module

    monkeypatch.setattr(artifacts, "RECIPE_MODULES", ())
    monkeypatch.setattr(recipes_module, "_REGISTRY", {})
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "demo_artifact_helper.py").write_text(HELPER)
    (mods / "demo_artifact_recipe.py").write_text(RECIPE)
    monkeypatch.syspath_prepend(str(mods))
    _import_fresh("demo_artifact_helper")
    module = _import_fresh("demo_artifact_recipe")
    yield module
    artifacts.unregister(NAME)
    for name in ("demo_artifact_recipe", "demo_artifact_helper"):
        sys.modules.pop(name, None)


def _expected():
    return {"w": torch.randn(16, 16, generator=torch.Generator().manual_seed(0)),
            "b": torch.zeros(16, dtype=torch.float16)}


# ------------------------------------------------------------------ build and load

def test_build_writes_manifest_and_load_verifies(demo, root):
    folder = artifacts.build(NAME)
    assert folder == root / NAME
    assert sorted(p.name for p in root.iterdir()) == [NAME]  # no temporary folder left
    man = artifacts.manifest(NAME)
    for key in ("name", "description", "config", "recipe_source_hash", "data_hash", "files",
                "train_seconds", "quality", "versions", "built_at", "machine", "command"):
        assert key in man, key
    assert man["config"] == {"n": 16, "seed": 0} and man["command"] == COMMAND
    assert man["quality"] == {"mean": 0.5} and man["data_hash"] == "no-data"
    assert set(man["files"]) == {"weights.safetensors", "info.json", "tok/vocab.txt"}
    assert man["files"]["info.json"]["bytes"] == len('{"n": 16}')
    assert {"python", "torch", "transformers", "tokenizers", "safetensors",
            "numpy"} <= set(man["versions"])
    assert man["recipe_source_hash"] == source_hash(["demo_artifact_recipe",
                                                     "demo_artifact_helper"])
    assert man["source_modules"] == ["demo_artifact_recipe", "demo_artifact_helper"]
    assert artifacts.verify(NAME) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = artifacts.load(NAME)
    assert path == folder
    tensors = load_file(str(path / "weights.safetensors"))
    assert torch.equal(tensors["w"], _expected()["w"]) and tensors["b"].dtype == torch.float16
    # an artifact that verifies is not re-made unless forced
    assert len(demo.CALLS) == 1
    assert artifacts.build(NAME) == folder and len(demo.CALLS) == 1
    assert artifacts.build(NAME, force=True) == folder and len(demo.CALLS) == 2
    assert artifacts.verify(NAME) == []


@pytest.mark.parametrize("where", [0, -1], ids=["header", "data"])
def test_corrupt_byte_is_refused_and_rebuilt_into_the_cache(demo, root, tmp_path, where):
    artifacts.build(NAME)
    weights = root / NAME / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[where] ^= 0x01
    weights.write_bytes(bytes(data))
    problems = artifacts.verify(NAME)
    assert len(problems) == 1 and "weights.safetensors" in problems[0] and COMMAND in problems[0]
    with pytest.warns(artifacts.ArtifactWarning, match="not loading.*rebuilding it into") as rec:
        path = artifacts.load(NAME)
    assert len(str(rec[0].message).splitlines()) == 1
    assert path == tmp_path / "cache" / "artifacts" / NAME  # the cache, not the repo copy
    assert weights.read_bytes() == bytes(data)  # the committed copy is left as it was
    assert artifacts.file_problems(path) == []
    assert torch.equal(load_file(str(path / "weights.safetensors"))["w"], _expected()["w"])
    # the next load reuses the rebuilt copy (still saying why)
    with pytest.warns(artifacts.ArtifactWarning, match="using the copy rebuilt"):
        assert artifacts.load(NAME) == path
    assert len(demo.CALLS) == 2


def test_corrupt_cache_copy_is_rebuilt_too(demo, root, tmp_path):
    (root / NAME).mkdir(parents=True)  # a folder with no manifest
    with pytest.warns(artifacts.ArtifactWarning, match="MANIFEST.json does not exist"):
        path = artifacts.load(NAME)
    weights = path / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.warns(artifacts.ArtifactWarning, match="rebuilding it into"):
        assert artifacts.load(NAME) == path
    assert artifacts.file_problems(path) == [] and len(demo.CALLS) == 2


@pytest.mark.parametrize("what", ["file", "folder"])
def test_missing_file_or_folder_is_rebuilt(demo, root, tmp_path, what):
    artifacts.build(NAME)
    if what == "file":
        (root / NAME / "weights.safetensors").unlink()
        assert any("weights.safetensors is missing" in p for p in artifacts.verify(NAME))
    else:
        import shutil

        shutil.rmtree(root / NAME)
        assert any("does not exist" in p and COMMAND in p for p in artifacts.verify(NAME))
    with pytest.warns(artifacts.ArtifactWarning, match="rebuilding"):
        path = artifacts.load(NAME)
    assert path.parent == tmp_path / "cache" / "artifacts"
    assert (path / "weights.safetensors").is_file() and artifacts.file_problems(path) == []


@pytest.mark.parametrize("extra", ["model.pt", "weights.pkl", "disguised.json",
                                   "tok/nested.bin"])
def test_a_pickle_in_an_artifact_folder_is_refused(demo, root, tmp_path, extra):
    artifacts.build(NAME)
    torch.save({"w": torch.ones(2)}, root / NAME / extra)  # torch.save: a zip of pickles
    problems = artifacts.verify(NAME)
    assert any(extra in p and "pickle" in p for p in problems), problems
    with pytest.warns(artifacts.ArtifactWarning, match="pickle"):
        path = artifacts.load(NAME)
    assert path.parent == tmp_path / "cache" / "artifacts" and not (path / extra).exists()


def test_a_plain_pickle_listed_in_the_manifest_is_refused(demo, root):
    import pickle

    artifacts.build(NAME)
    info = root / NAME / "info.json"
    info.write_bytes(pickle.dumps({"n": 16}))
    man = json.loads((root / NAME / "MANIFEST.json").read_text())
    man["files"]["info.json"]["bytes"] = info.stat().st_size  # a forged manifest
    (root / NAME / "MANIFEST.json").write_text(json.dumps(man))
    assert any("never pickle" in p for p in artifacts.verify(NAME))


def test_a_recipe_that_writes_a_pickle_or_fails_leaves_nothing(demo, root):
    @artifacts.recipe("demo-pickle")
    def _pickle(config, out):
        torch.save({"w": torch.ones(2)}, out / "model.bin")
        return artifacts.BuildResult()

    @artifacts.recipe("demo-crash")
    def _crash(config, out):
        (out / "half.safetensors").write_bytes(b"x")
        raise RuntimeError("boom")

    @artifacts.recipe("demo-noresult")
    def _noresult(config, out):
        (out / "a.txt").write_text("a")
        return {"quality": 1}

    try:
        with pytest.raises(artifacts.ArtifactError, match="never pickle"):
            artifacts.build("demo-pickle")
        with pytest.raises(artifacts.ArtifactError, match="not an artifacts.BuildResult"):
            artifacts.build("demo-noresult")
        with pytest.raises(RuntimeError, match="boom"):
            artifacts.build("demo-crash")
        assert not root.exists() or list(root.iterdir()) == []
        # a failed forced re-make leaves the good copy in place (atomic rename)
        artifacts.build(NAME)
        before = {p: p.read_bytes() for p in (root / NAME).rglob("*") if p.is_file()}
        demo.CONFIG.n = "not a number"
        with pytest.raises(TypeError):
            artifacts.build(NAME, force=True)
        demo.CONFIG.n = 16
        assert {p: p.read_bytes() for p in (root / NAME).rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in root.iterdir()) == [NAME]
        assert artifacts.verify(NAME) == []
    finally:
        for name in ("demo-pickle", "demo-crash", "demo-noresult"):
            artifacts.unregister(name)


# ------------------------------------------------------------------ stale manifests

def test_config_change_is_reported_with_the_command(demo, root, capsys):
    artifacts.build(NAME)
    demo.CONFIG.n = 8
    problems = artifacts.verify(NAME)
    assert len(problems) == 1
    assert "config differs" in problems[0] and "n: 16 -> 8" in problems[0]
    assert problems[0].endswith(f"re-make it with `{COMMAND}`")
    with pytest.warns(artifacts.ArtifactWarning, match="config differs"):
        assert artifacts.load(NAME) == root / NAME  # the files are fine: used, with a warning
    assert main(["artifacts", "verify"]) == 1
    assert COMMAND in capsys.readouterr().err
    assert main(["artifacts", "build", NAME]) == 0
    assert artifacts.verify(NAME) == [] and artifacts.manifest(NAME)["config"]["n"] == 8


@pytest.mark.parametrize("module", ["demo_artifact_recipe", "demo_artifact_helper"])
def test_source_change_is_reported_but_not_docstrings_or_comments(demo, root, tmp_path, module):
    artifacts.build(NAME)
    path = tmp_path / "mods" / f"{module}.py"
    code = path.read_text()
    # docstrings, comments and blank lines: not a change
    path.write_text('"""Reworded module docstring."""\n# a new comment\n\n'
                    + code.split('"""', 2)[2].replace("\n\n", "\n\n\n") + "\n# trailing\n")
    assert artifacts.verify(NAME) == []
    path.write_text(code + "\n\ndef extra():\n    return 1\n")
    problems = artifacts.verify(NAME)
    assert len(problems) == 1 and "code changed" in problems[0] and module in problems[0]
    assert COMMAND in problems[0]


# ------------------------------------------------------------------ source_hash

def _write(folder: Path, name: str, code: str) -> Path:
    path = folder / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(code))
    return path


def test_source_hash_ignores_docstrings_comments_and_layout(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, "sh_mod", '''
        """Module doc."""
        X = 1  # a comment


        class A:
            """Class doc."""
            y: int = 2
            """Attribute doc."""

            def f(self, a):
                """Method doc."""
                return a + self.y
        ''')
    module = _import_fresh("sh_mod")
    try:
        base = source_hash("sh_mod")
        assert source_hash(module) == base == source_hash(["sh_mod", module])  # str or module
        _write(tmp_path, "sh_mod", '''
            # header comment
            X = 1
            class A:
                y: int = 2
                def f(self,
                      a):
                    return (a + self.y)  # same code, other layout
            ''')
        assert source_hash("sh_mod") == base
        _write(tmp_path, "sh_mod", "X = 1\nclass A:\n    y: int = 2\n    def f(self, a):\n"
                                   "        return a - self.y\n")
        assert source_hash("sh_mod") != base
    finally:
        sys.modules.pop("sh_mod", None)


def test_source_hash_of_packages_and_several_modules(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path / "sh_pkg", "__init__", "from sh_pkg.sub import f\n")
    sub = _write(tmp_path / "sh_pkg" / "inner", "sub2", "def g():\n    return 2\n")
    _write(tmp_path / "sh_pkg", "sub", "def f():\n    return 1\n")
    _write(tmp_path, "sh_other", "Z = 3\n")
    importlib.invalidate_caches()
    try:
        whole = source_hash("sh_pkg")  # not imported: found, not executed
        assert "sh_pkg" not in sys.modules
        assert source_hash(["sh_pkg", "sh_other"]) == source_hash(["sh_other", "sh_pkg"])
        assert source_hash(["sh_pkg", "sh_other"]) != whole
        sub.write_text("def g():\n    return 3\n")  # a file deep in the package
        assert source_hash("sh_pkg") != whole
        assert source_hash("sh_pkg.sub") == source_hash(importlib.import_module("sh_pkg.sub"))
    finally:
        for name in ("sh_pkg", "sh_pkg.sub", "sh_other"):
            sys.modules.pop(name, None)
    with pytest.raises(SourceError, match="cannot find module"):
        source_hash("no_such_module_anywhere")
    with pytest.raises(SourceError, match="no Python source"):
        source_hash("sys")
    with pytest.raises(TypeError):
        source_hash([3])


def test_normalised_source_keeps_code_strings():
    assert normalised_source("x = 'a'") != normalised_source("x = 'b'")
    assert normalised_source("def f():\n    'doc'\n    return 1") == normalised_source(
        "def f():\n    return 1")
    assert normalised_source("if x:\n    'note'\n    y = 1\nelse:\n    'n'\n    y = 2") == \
        normalised_source("if x:\n    y = 1\nelse:\n    y = 2")


PINNED_SNIPPET = '''
"""Doc."""
import math
from dataclasses import dataclass


@dataclass
class C:
    """Doc."""
    n: int = 3  # comment
    xs: tuple = (1, 2.5, "a", b"b", None, True, ...)

    async def f(self, *a, k=1, **kw):
        async with a as b:
            return [i ** 2 for i in range(self.n) if i % 2] or {k: v for k, v in kw.items()}


def g(x, /, y=lambda z: z, *, w=None) -> str:
    global G
    try:
        match x:
            case [1, *rest]:
                pass
            case {"a": 1} | C(n=2):
                pass
    except* ValueError:
        pass
    finally:
        del G
    return f"{x!r:>10} {y=} {{lit}} {math.pi:.{w}f}" + 'x' 'y'
'''


def test_normalised_source_is_the_same_on_every_python():
    """A hash pinned from Python 3.11, 3.12 and 3.13 (all three gave this value): if a
    Python version parses differently, every committed manifest would look stale there."""
    digest = hashlib.sha256(normalised_source(PINNED_SNIPPET).encode()).hexdigest()
    assert digest == "fa7bb21d9a8d1d9271efdca19bb5f5498b34a4608134530f7e3c598cb09a3a0b", (
        f"source_hash normalises code differently on Python {sys.version.split()[0]}; "
        f"fix minirepro.core.sourcehash._dump before re-making the artifacts")


def test_source_hash_of_the_real_package_is_stable():
    """The LM cache key and the artifact manifests use it on the package's own modules."""
    from minirepro.core import sourcehash

    assert source_hash("minirepro.core.sourcehash") == source_hash(sourcehash)
    assert len(source_hash(["minirepro.core.seed", "minirepro.core.scale"])) == 64


# ------------------------------------------------------------------ registration

def test_registration_rejects_bad_recipes(demo):
    for bad in ("Demo", "demo_tiny", "demo--x", "", "-demo"):
        with pytest.raises(artifacts.ArtifactError, match="lowercase words"):
            artifacts.recipe(bad)
    with pytest.raises(artifacts.ArtifactError, match="already registered"):
        @artifacts.recipe(NAME)
        def other(config, out):
            return artifacts.BuildResult()
    with pytest.raises(artifacts.ArtifactError, match="dataclass instance or a mapping"):
        artifacts.recipe("demo-badconfig", config=[1, 2])(lambda config, out: None)
    with pytest.raises(artifacts.ArtifactError, match=f"unknown artifact 'nope'; artifacts: .*{NAME}"):
        artifacts.get("nope")
    rec = artifacts.registry()[NAME]
    assert rec.module == rec.registered_by == "demo_artifact_recipe"
    # a function defined in one module and registered by another: both are hashed
    helper = sys.modules["demo_artifact_helper"]
    try:
        other = artifacts.recipe("demo-elsewhere")(helper.make_weights)
        assert other is helper.make_weights
        rec = artifacts.get("demo-elsewhere")
        assert (rec.module, rec.registered_by) == ("demo_artifact_helper", __name__)
        assert [getattr(m, "__name__", m) for m in rec.source_modules()] == [
            "demo_artifact_helper", __name__]
    finally:
        artifacts.unregister("demo-elsewhere")


# ------------------------------------------------------------------ the command

def test_cli_list_build_verify(demo, root, capsys):
    assert main(["artifacts", "list"]) == 0
    assert f"{NAME}  (not built: `{COMMAND}`)" in capsys.readouterr().out
    assert main(["artifacts", "verify", NAME]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["artifacts", "build", NAME]) == 0
    assert f"{NAME}: {root / NAME}, built" in capsys.readouterr().out
    assert main(["artifacts", "verify"]) == 0
    assert "all fine" in capsys.readouterr().out
    assert main(["artifacts", "list"]) == 0
    out = capsys.readouterr().out
    assert "MB  built" in out and "mean 0.5" in out and "of 40 MB" in out
    assert main(["artifacts", "build", NAME]) == 0 and len(demo.CALLS) == 1
    assert f"{NAME} is up to date" in capsys.readouterr().out
    assert main(["artifacts", "build", NAME, "--force"]) == 0 and len(demo.CALLS) == 2
    (root / ".demo-tiny.building-x1").mkdir()  # what a killed build leaves behind
    assert main(["artifacts", "verify"]) == 1
    assert "building-x1 is not made by any recipe" in capsys.readouterr().err
    assert main(["artifacts", "verify", NAME]) == 0  # one artifact: only its own checks
    (root / ".demo-tiny.building-x1").rmdir()
    capsys.readouterr()
    (root / NAME / "info.json").write_text('{"n": 17}')
    assert main(["artifacts", "verify"]) == 1
    err = capsys.readouterr().err
    assert "info.json is corrupt" in err and COMMAND in err


@pytest.mark.parametrize("argv", [["artifacts", "build", "nope"],
                                  ["artifacts", "build", "nope", "--force"],
                                  ["artifacts", "verify", "nope"],
                                  ["artifacts", "frobnicate"],
                                  ["artifacts"]])
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(demo, root, tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as info:
        sys.exit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    if "nope" in argv:
        assert f"unknown artifact 'nope'; artifacts: {NAME}" in err
    assert not root.exists() and not (tmp_path / "cache").exists()


def test_console_script_names_the_choices(tmp_path):
    import os
    import subprocess

    env = {**os.environ, "MINIREPRO_ARTIFACTS": str(tmp_path / "a")}
    out = subprocess.run([sys.executable, "-m", "minirepro.cli", "artifacts", "build", "nope"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "unknown artifact 'nope'; artifacts:" in out.stderr
    assert not (tmp_path / "a").exists()


# ------------------------------------------------------------------ the committed artifacts

REAL = sorted(artifacts.registry())


@pytest.fixture
def repo_artifacts(monkeypatch) -> Path:
    monkeypatch.delenv("MINIREPRO_ARTIFACTS", raising=False)
    return REPO / "artifacts"


def _withdrawn_needs() -> set[str]:
    import yaml

    path = REPO / "book" / "claims" / "withdrawn.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    return {n for entry in (data or {}).values() for n in entry.get("needs", [])}


@pytest.mark.parametrize("name", REAL)
def test_committed_artifact_matches_its_recipe(name, repo_artifacts):
    if not (repo_artifacts / name).exists() and name in _withdrawn_needs():
        pytest.skip(f"{name} is not built; book/claims/withdrawn.yml withdraws the records that need it "
                    "(test_project checks they come back once it verifies)")
    if not (repo_artifacts / name).exists() and artifacts.optional_note(name):
        pytest.skip(f"{name} is optional and not built ({artifacts.optional_note(name)})")
    problems = artifacts.verify(name, root=repo_artifacts)
    assert problems == [], (f"artifact {name} no longer matches its recipe; re-make it with "
                            f"`minirepro artifacts build {name}`:\n" + "\n".join(problems))


def test_every_recipe_module_registers_a_recipe():
    """Keeps the test above from passing vacuously: each listed module has recipes."""
    modules = {rec.registered_by for rec in artifacts.registry().values()}
    for module in artifacts.RECIPE_MODULES:
        assert module in modules, f"{module} is in RECIPE_MODULES but registers no recipe"
    assert set(REAL) >= {n for n, r in artifacts.registry().items()
                         if r.registered_by in artifacts.RECIPE_MODULES}


def test_every_committed_folder_has_a_recipe(repo_artifacts):
    assert artifacts.orphans(repo_artifacts) == []


def test_committed_artifacts_fit_the_budget(repo_artifacts):
    total = artifacts.total_bytes(repo_artifacts)
    assert total < artifacts.BUDGET_BYTES == 40 * 2**20, (
        f"artifacts/ holds {total / 2**20:.1f} MB; the budget is 40 MB (store fp16/bf16)")


def test_total_bytes_counts_every_file(root):
    assert artifacts.total_bytes(root) == 0
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.txt").write_bytes(b"12345")
    (root / "y.json").write_bytes(b"{}")
    assert artifacts.total_bytes(root) == 7


def test_gitattributes_marks_weights_binary():
    lines = (REPO / ".gitattributes").read_text().splitlines()
    assert "artifacts/**/*.safetensors binary" in lines


def test_loading_one_artifact_imports_only_its_own_recipe_module():
    """artifacts.load reads the manifest's recipe_module and imports that first: loading
    a chapter's artifact does not import every chapter's recipe (and their libraries)."""
    import subprocess

    code = ("import sys\n"
            "from minirepro.core import artifacts\n"
            "artifacts.load('active-o3-task-cnn')\n"
            "others = [m for m in artifacts.RECIPE_MODULES if m in sys.modules]\n"
            "print(others)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['minirepro.papers.active_o3.artifact']", out.stdout + out.stderr


def test_verified_folder_uses_the_committed_copy_without_the_recipe_and_falls_back_to_load(
        tmp_path, monkeypatch):
    from minirepro.core.artifacts import store

    calls = []
    monkeypatch.setattr(store, "load", lambda name, root=None: calls.append(name) or tmp_path / "rebuilt")
    good = artifacts.verified_folder("tasm-icl-transformer")  # the committed, intact copy
    assert good == artifacts.artifacts_root() / "tasm-icl-transformer" and calls == []
    assert artifacts.verified_folder("tasm-icl-transformer", root=tmp_path) == tmp_path / "rebuilt"
    assert calls == ["tasm-icl-transformer"]  # missing files: load() warns and rebuilds


# ------------------------------------------------------------------ the shared loader and recipe helpers

class _Demo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(16, 16))
        self.b = torch.nn.Parameter(torch.ones(16))


def test_load_weights_gives_a_frozen_float32_model(demo, root):
    folder = artifacts.build(NAME)
    model = artifacts.load_weights(NAME, _Demo().train(), "weights.safetensors")
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())  # b is stored as float16
    assert torch.equal(model.w, _expected()["w"]) and torch.equal(model.b, torch.zeros(16))
    assert artifacts.folder_of(NAME) == folder and artifacts.folder_of(NAME, "x") == Path("x")
    assert artifacts.read_json(NAME, "info.json", folder) == {"n": 16}
    state = {f"one/{k}": v for k, v in artifacts.read_weights(NAME, "weights.safetensors").items()}
    state["other/w"] = torch.ones(3)
    assert torch.equal(artifacts.frozen(_Demo(), state, prefix="one/").w, _expected()["w"])
    demo_artifact = artifacts.ModelArtifact(NAME, "weights.safetensors", _Demo, curve="info.json")
    assert demo_artifact.artifact_folder() == folder and demo_artifact.load_curve() == {"n": 16}
    assert torch.equal(demo_artifact.load_model(folder).w, _expected()["w"])


def test_store_writes_safetensors_and_json_lines(tmp_path):
    model = torch.nn.Linear(3, 2)
    artifacts.write_files(tmp_path, "m.safetensors", artifacts.float16_state(model),
                    {"curve.json": {"loss": [1.0]}, "meta.json": {"a": 1}}, indent=None)
    back = load_file(str(tmp_path / "m.safetensors"))
    assert back["weight"].dtype == torch.float16 and torch.equal(back["weight"], model.weight.half())
    assert (tmp_path / "curve.json").read_text() == '{"loss": [1.0]}\n'
    artifacts.write_files(tmp_path, "m.safetensors", {}, {"meta.json": {"a": 1}}, indent=1)
    assert (tmp_path / "meta.json").read_text() == '{\n "a": 1\n}\n'
    assert artifacts.sha256_hex(b"ab", b"c") == hashlib.sha256(b"abc").hexdigest()


def test_clipped_one_cycle_step_is_the_recipes_step():
    """one_cycle_adamw + clipped_step do what the recipes wrote out: AdamW, one-cycle
    schedule, zero_grad, backward, clip to norm 1, step, schedule step."""
    def loss_of(model):
        return (model(torch.ones(4, 3)) ** 2).sum() * 10

    torch.manual_seed(0)
    mine, theirs = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    theirs.load_state_dict(mine.state_dict())
    opt, sched = artifacts.one_cycle_adamw(mine, 1e-2, 5, weight_decay=0.02)
    ref = torch.optim.AdamW(theirs.parameters(), lr=1e-2, weight_decay=0.02)
    ref_sched = torch.optim.lr_scheduler.OneCycleLR(ref, 1e-2, total_steps=5, pct_start=0.1)
    for _ in range(5):
        got = artifacts.clipped_step(mine, opt, sched, loss_of(mine))
        loss = loss_of(theirs)
        ref.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        ref.step()
        ref_sched.step()
        assert got == loss.item()
    assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), theirs.state_dict().values()))


@pytest.mark.parametrize("module", ["active_o3", "model_dowser", "tasm"])
def test_chapter_loaders_return_the_committed_weights_as_float32(module):
    loading = importlib.import_module(f"minirepro.papers.{module}.loading")
    model = loading.load_model()
    stored = load_file(str(loading.artifact_folder() / loading.WEIGHTS))
    assert set(model.state_dict()) == set(stored) and not model.training
    assert all(torch.equal(v, stored[k].float()) for k, v in model.state_dict().items())
    assert loading.load_curve()["every"] == 50


def test_no_exported_name_hides_a_submodule():
    """``from minirepro.core.artifacts import store`` must stay the module (tests patch it)."""
    import inspect

    folder = Path(artifacts.__file__).parent
    for path in folder.glob("*.py"):
        if path.stem != "__init__":
            assert inspect.ismodule(getattr(artifacts, path.stem, importlib.import_module(
                f"minirepro.core.artifacts.{path.stem}"))), path.stem
