"""Building the book with Jupyter Book 1.x, with a cache that follows the code.

jupyter-cache keys a notebook only on its code cells and kernel, so a change in
``src/`` would leave the book showing results of old code. ``build`` therefore
keeps one cache folder per scale and per hash of everything the notebooks read
besides their own cells (``src/``, ``book/claims/``, ``book/papers.yml``), and
removes the stale folders of that scale.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from minirepro.chapters import repo_root
from minirepro.core.scale import resolve_scale

CELL_TIMEOUT = 300  # seconds a cell may take in the book build


def inputs_hash(root: Path) -> str:
    """Hash of the files whose change must re-execute the notebooks."""
    h = hashlib.sha256()
    files = sorted([*(root / "src").rglob("*.py"), *(root / "book" / "claims").glob("*.json"),
                    root / "book" / "papers.yml"])
    for f in files:
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def build(scale: str | None = None, root: Path | None = None, strict: bool = True,
          timeout: int = CELL_TIMEOUT) -> Path:
    """Build the whole book at ``scale``; return the path of ``index.html``.

    Raises:
        RuntimeError: the build failed (a notebook raised, a warning under ``strict``).
    """
    root = (root or repo_root()).resolve()
    scale = resolve_scale(scale)
    out = root / "_build" / scale
    cache_root = root / "_build" / ".jupyter_cache"
    key = f"{scale}-{inputs_hash(root)}"
    cache = cache_root / key
    if cache_root.exists():
        for old in cache_root.glob(f"{scale}-*"):
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config.setdefault("execute", {})
    config["execute"].update({"execute_notebooks": "cache", "cache": str(cache),
                              "timeout": timeout, "allow_errors": False})
    out.mkdir(parents=True, exist_ok=True)
    derived = out / "_config.derived.yml"
    derived.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(root),
           "--config", str(derived), "--path-output", str(out), "--keep-going"]
    if strict:
        cmd += ["-W", "-n"]
    env = dict(os.environ, MINIREPRO_SCALE=scale, TQDM_DISABLE="1",
               PYTHONHASHSEED="0", MINIREPRO_ROOT=str(root))
    env.pop("MINIREPRO_RESULTS", None)
    env.pop("MINIREPRO_FIGDIR", None)
    proc = subprocess.run(cmd, cwd=root, env=env, check=False)
    index = out / "_build" / "html" / "index.html"
    reports = sorted((out / "_build" / "html" / "reports").glob("**/*.err.log")) \
        if (out / "_build" / "html" / "reports").exists() else []
    if proc.returncode != 0 or not index.exists():
        where = "; execution reports: " + ", ".join(str(r) for r in reports) if reports else ""
        raise RuntimeError(f"the book build failed (exit {proc.returncode}){where}")
    return index
