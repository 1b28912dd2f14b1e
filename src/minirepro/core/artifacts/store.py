"""Checking, building and loading artifacts."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from minirepro.core.artifacts.files import (
    MANIFEST,
    MANIFEST_FORMAT,
    cache_dir,
    file_problems,
    format_problem,
    list_files,
    read_manifest,
    resolve_root,
    sha256_file,
)
from minirepro.core.artifacts.recipes import (
    ArtifactError,
    ArtifactWarning,
    BuildResult,
    Recipe,
    get,
    registry,
)


def recipe_problems(rec: Recipe, man: dict) -> list[str]:
    """Where the manifest ``man`` no longer describes the recipe ``rec`` (config, code, name)."""
    problems = []
    if man.get("name") != rec.name:
        problems.append(f"the manifest is for {man.get('name')!r}, not {rec.name!r}")
    now, then = rec.config_dict(), man.get("config")
    if now != then:
        then = then if isinstance(then, dict) else {}
        keys = sorted(k for k in set(now) | set(then) if now.get(k, "-") != then.get(k, "-"))
        diff = ", ".join(f"{k}: {_short(then.get(k, '-'))} -> {_short(now.get(k, '-'))}"
                         for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
        problems.append(f"the recipe's config differs from the manifest ({diff})")
    if rec.source_hash() != man.get("recipe_source_hash"):
        mods = ", ".join(m if isinstance(m, str) else m.__name__ for m in rec.source_modules())
        problems.append(f"the recipe's code changed since the build (source hash of {mods})")
    return problems


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def home(rec: Recipe, root: str | Path | None = None) -> Path:
    """Where artifact ``rec`` lives: ``root/<name>`` (committed) or, for a ``"cache"``
    recipe, ``cache_dir()/<name>`` (``root`` does not apply)."""
    return cache_dir() / rec.name if rec.location == "cache" else resolve_root(root) / rec.name


def _folder_and_recipe(name: str, root: str | Path | None) -> tuple[Path, Recipe]:
    """The committed folder of ``name`` under ``root`` and its recipe (the manifest's
    ``recipe_module``, when readable, is imported first: see :func:`get`)."""
    folder = resolve_root(root) / name
    hint = None
    with contextlib.suppress(ArtifactError, OSError, ValueError):
        hint = read_manifest(folder).get("recipe_module")
    return folder, get(name, module_hint=hint)


def verify(name: str, root: str | Path | None = None) -> list[str]:
    """Problems with artifact ``name`` under ``root``, each naming the fix; ``[]`` when fine.

    Checks every file's size and sha256 against the manifest, refuses pickles and
    unlisted files, and compares the recipe's current config and source hash with the
    manifest's. For a ``"cache"`` recipe it runs the recipe's ``source_check`` (the
    installed input and its pinned hash); its cache copy is made, checked and re-made
    by :func:`load`, so its state is reported by :func:`describe`, not as a problem.
    """
    folder, rec = _folder_and_recipe(name, root)
    if rec.location == "cache":
        try:
            _check_source(rec)
        except ArtifactError as exc:
            return [f"{name}: {exc}"]
        return []
    problems = file_problems(folder)
    if folder.is_dir() and (folder / MANIFEST).is_file():
        with contextlib.suppress(ArtifactError):
            problems += recipe_problems(rec, read_manifest(folder))
    return [f"{name}: {p}; re-make it with `{rec.command}`" for p in problems]


def _check_source(rec: Recipe) -> str:
    """The recipe's ``source_check`` (one line on what it checked); raises ArtifactError."""
    if rec.source_check is None:
        return "no input to check"
    return rec.source_check()


def _cache_problems(rec: Recipe, folder: Path) -> list[str]:
    """Why the cache copy of a ``"cache"`` recipe cannot be used (``[]``: it can)."""
    problems = file_problems(folder)
    if not problems:
        with contextlib.suppress(ArtifactError):
            problems = recipe_problems(rec, read_manifest(folder))
    return problems


def describe(name: str) -> str:
    """One line on a ``"cache"`` artifact: the input it was checked against and the state
    of its cache copy (for ``minirepro artifacts verify`` and ``list``)."""
    rec = get(name)
    if rec.location != "cache":
        return f"{name}: committed under {resolve_root(None) / name}"
    try:
        source = _check_source(rec)
    except ArtifactError as exc:
        return f"{name}: {exc}"
    folder = home(rec)
    if not folder.exists():
        state = "not converted yet (made on first use)"
    elif (problems := _cache_problems(rec, folder)):
        state = f"the copy in {folder} will be re-made on first use ({problems[0]})"
    else:
        man = read_manifest(folder)
        size = sum(f.get("bytes", 0) for f in man["files"].values()) / 2**20
        state = (f"converted copy in {folder} verifies ({size:.0f} MB, made in "
                 f"{man.get('train_seconds', '?')} s)")
    return f"{name}: {source}; {state}"


# ------------------------------------------------------------------ building

def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "transformers", "tokenizers", "safetensors", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _machine() -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info: dict[str, object] = {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform()}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        with contextlib.suppress(Exception):
            info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (so parallel test workers do not build twice)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_into(rec: Recipe, dest: Path) -> Path:
    """Run ``rec`` into a temporary folder next to ``dest``, write the manifest, rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    config, code_hash = rec.config_dict(), rec.source_hash()  # the code that runs now
    tmp = Path(tempfile.mkdtemp(prefix=f".{rec.name}.building-", dir=dest.parent))
    try:
        start = time.perf_counter()
        result = rec.fn(rec.config, tmp)
        seconds = time.perf_counter() - start
        if not isinstance(result, BuildResult) or not isinstance(result.data_hash, str):
            raise ArtifactError(f"recipe {rec.name!r} returned {result!r}, not an "
                                f"artifacts.BuildResult(quality={{...}}, data_hash='...')")
        names = list_files(tmp)
        if MANIFEST in names:
            raise ArtifactError(f"recipe {rec.name!r} wrote {MANIFEST} itself; it is ours")
        bad = [p for p in (format_problem(tmp / n, n) for n in names) if p]
        if bad or not names:
            raise ArtifactError(f"recipe {rec.name!r}: " + ("; ".join(bad) or "wrote no files"))
        man = {
            "manifest_format": MANIFEST_FORMAT,
            "name": rec.name,
            "description": rec.description,
            "command": rec.command,
            "config": config,
            "recipe_module": rec.module,
            "source_modules": [m if isinstance(m, str) else m.__name__
                               for m in rec.source_modules()],
            "recipe_source_hash": code_hash,
            "data_hash": result.data_hash,
            "files": {n: {"sha256": sha256_file(tmp / n), "bytes": (tmp / n).stat().st_size}
                      for n in names},
            "train_seconds": round(seconds, 2),
            "quality": json.loads(json.dumps(result.quality, default=float)),
            "versions": _versions(),
            "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": _machine(),
        }
        (tmp / MANIFEST).write_text(json.dumps(man, indent=2) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)  # mkdtemp made it private
        old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
        if dest.exists():
            os.rename(dest, old)
        try:
            os.rename(tmp, dest)
        except OSError:
            if old.exists() and not dest.exists():
                os.rename(old, dest)  # put the previous copy back
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def build(name: str, force: bool = False, root: str | Path | None = None) -> Path:
    """(Re-)make artifact ``name`` under ``root`` (default: the committed ``artifacts/``;
    a ``"cache"`` recipe: its cache folder).

    Without ``force`` an artifact that already verifies is left alone. Returns its folder.
    """
    rec = get(name)
    if rec.location == "cache":
        return _load_cached(rec, force=force)
    dest = resolve_root(root) / name
    if not force and dest.is_dir() and not verify(name, root):
        return dest
    return _build_into(rec, dest)


def verified_folder(name: str, root: str | Path | None = None) -> Path:
    """The committed folder of ``name`` when its files match their manifest's checksums,
    without importing the recipe (a chapter's loading stays light: the recipe modules pull
    in the training code); otherwise :func:`load`, which warns and rebuilds."""
    folder = resolve_root(root) / name
    return folder if not file_problems(folder) else load(name, root)


def _checked(name: str, folder: Path, what: str) -> Path:
    """``folder`` when its files match its manifest; else an :class:`ArtifactError` naming the
    first problem (``what``: how the message names the folder)."""
    left = file_problems(folder)
    if left:
        raise ArtifactError(f"artifact {name}: {what} {folder} does not verify: {left[0]}")
    return folder


def _load_cached(rec: Recipe, force: bool = False) -> Path:
    """The verified cache copy of a ``"cache"`` recipe, made (under a lock, once across
    processes) when it is absent, corrupt or stale; a corrupt or stale copy is never used."""
    folder = home(rec)
    if not force and not _cache_problems(rec, folder):
        return folder
    with _lock(cache_dir() / f".{rec.name}.lock"):
        problems = _cache_problems(rec, folder)  # another process may have made it meanwhile
        if not force and not problems:
            return folder
        _check_source(rec)  # a missing or altered input: one line naming the fix
        if not force and folder.exists() and file_problems(folder):  # corrupt, not just stale
            warnings.warn(f"artifact {rec.name}: {problems[0]}; not loading {folder}, "
                          f"re-making it from its source", ArtifactWarning, stacklevel=3)
        _build_into(rec, folder)
    return _checked(rec.name, folder, "the copy made in")


def load(name: str, root: str | Path | None = None) -> Path:
    """The folder of artifact ``name``, every file checked against its manifest.

    The committed copy when it verifies (a one-line warning if its manifest no longer
    matches the recipe's config or code). Otherwise, with a one-line
    :class:`ArtifactWarning`, a copy rebuilt into :func:`cache_dir` (reused when it
    verifies and matches the recipe); the bad files are never returned.
    """
    folder, rec = _folder_and_recipe(name, root)
    if rec.location == "cache":
        return _load_cached(rec)
    problems = file_problems(folder)
    if not problems:
        stale = recipe_problems(rec, read_manifest(folder))
        if stale:
            warnings.warn(f"artifact {name}: {stale[0]}; using it anyway "
                          f"(re-make it with `{rec.command}`)", ArtifactWarning, stacklevel=2)
        return folder
    cached = cache_dir() / name
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    with _lock(cache_dir() / f".{name}.lock"):
        if not file_problems(cached) and not recipe_problems(rec, read_manifest(cached)):
            warnings.warn(f"artifact {name}: {problems[0]}{more}; not loading {folder}, "
                          f"using the copy rebuilt in {cached}", ArtifactWarning, stacklevel=2)
            return cached
        cost = ""
        with contextlib.suppress(ArtifactError):
            cost = f" (about {read_manifest(folder).get('train_seconds', '?')} s)"
        warnings.warn(f"artifact {name}: {problems[0]}{more}; not loading {folder}, "
                      f"rebuilding it into {cached}{cost}", ArtifactWarning, stacklevel=2)
        _build_into(rec, cached)
    return _checked(name, cached, "the rebuilt copy in")



def orphans(root: str | Path | None = None) -> list[str]:
    """Entries of the artifacts folder that no registered recipe makes (e.g. a leftover
    ``.NAME.building-*`` folder of a killed build), each with what to do."""
    folder, known = resolve_root(root), registry()
    entries = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    return [f"{folder / e} is not made by any recipe; delete it, or list the module that "
            f"registers its recipe as an entry point of the group minirepro.artifacts (pyproject.toml)" for e in entries if e not in known]
