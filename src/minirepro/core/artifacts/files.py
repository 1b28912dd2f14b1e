"""Artifact folders on disk: where they live, their manifests, and file checks."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from minirepro.core.artifacts.recipes import ArtifactError
from minirepro.core.paths import ARTIFACTS_ENV, artifacts_root  # noqa: F401 - re-exported

MANIFEST = "MANIFEST.json"
MANIFEST_FORMAT = 1
ALLOWED_SUFFIXES = (".safetensors", ".json", ".txt")
BUDGET_BYTES = 40 * 1024 * 1024  # all committed artifacts together


def cache_dir() -> Path:
    """Where :func:`load` rebuilds: ``$MINIREPRO_CACHE/artifacts`` (default ``~/.cache/minirepro``)."""
    env = os.environ.get("MINIREPRO_CACHE")
    if env:
        return Path(env).expanduser() / "artifacts"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "minirepro" / "artifacts"


def resolve_root(root: str | Path | None) -> Path:
    return Path(root) if root is not None else artifacts_root()


def read_manifest(folder: Path) -> dict:
    """The manifest of the artifact in ``folder``; raises :class:`ArtifactError` if unreadable."""
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArtifactError(f"{path} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path} is not readable JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ArtifactError(f"{path} has no 'files' table")
    return data


def manifest(name: str, root: str | Path | None = None) -> dict:
    """The manifest of artifact ``name`` under ``root`` (default :func:`artifacts_root`)."""
    return read_manifest(resolve_root(root) / name)


# ------------------------------------------------------------------ file checks

def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def format_problem(path: Path, label: str | None = None) -> str | None:
    """Why ``path`` may not be in an artifact (pickle, unknown format), or ``None``.

    ``label`` names the file in the message (default: its name)."""
    label = label or path.name
    if path.suffix not in ALLOWED_SUFFIXES:
        return (f"{label} is not allowed (only {', '.join(ALLOWED_SUFFIXES)}; "
                f"never pickle)")
    with open(path, "rb") as fh:
        head = fh.read(8)
        if path.suffix == ".safetensors":  # 8-byte little-endian header size, then JSON
            size = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 2 <= size <= path.stat().st_size - 8:
                return f"{label} is not a safetensors file"
            try:
                json.loads(fh.read(size))
            except ValueError:
                return f"{label} is not a safetensors file (bad header)"
            return None
    if head[:1] == b"\x80" or head[:4] == b"PK\x03\x04":
        return f"{label} looks like a pickle or a torch.save archive; never pickle"
    return None


def list_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def file_problems(folder: Path) -> list[str]:
    """What is wrong with the files in ``folder`` compared with its manifest (``[]``: none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder} does not exist"]
    try:
        listed = read_manifest(folder)["files"]
    except ArtifactError as exc:
        return [str(exc)]
    problems = []
    for rel in sorted(listed):
        path = folder / rel
        entry = listed[rel] if isinstance(listed[rel], dict) else {}
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            problems.append(f"the manifest lists a path outside the folder: {rel}")
        elif not path.is_file():
            problems.append(f"{rel} is missing")
        elif (bad := format_problem(path, rel)) is not None:
            problems.append(bad)
        elif path.stat().st_size != entry.get("bytes"):
            problems.append(f"{rel} is corrupt ({path.stat().st_size} bytes, "
                            f"the manifest says {entry.get('bytes')})")
        elif sha256_file(path) != entry.get("sha256"):
            problems.append(f"{rel} is corrupt (its sha256 does not match the manifest)")
    for rel in list_files(folder):
        if rel != MANIFEST and rel not in listed:
            bad = format_problem(folder / rel, rel)
            problems.append(bad if bad else f"{rel} is not listed in the manifest")
    return problems


def total_bytes(root: str | Path | None = None) -> int:
    """Bytes of every file under ``root`` (default :func:`artifacts_root`); 0 if it is absent."""
    folder = resolve_root(root)
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
