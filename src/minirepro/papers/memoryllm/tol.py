"""Token-wise lookups (ToLs): FFN-M precomputed for the whole vocabulary, quantised, on disk.

``ToL[L, t] = FFN_L(N_L(e_t))`` (§3.2) for every layer ``L`` and token ``t``: a
``(N, |V|, d)`` table. Inference adds ``ToL[L, ids]`` instead of running the FFN.

Storage (:func:`save_tol`, :func:`open_tol`): a folder with ``header.json`` (shape,
bits, and every file's byte count and sha256) and raw arrays read through
``numpy.memmap``, so only the rows a batch touches are read from disk. ``bits``:

* 32 or 16: the floats themselves (float32 / float16);
* 8, 4, 2: per-row affine quantisation (:func:`quantize_rows`), codes packed
  ``8 / bits`` to a byte, with a float32 scale and minimum per row.

Opening checks the byte counts (and, with ``verify=True``, the checksums) and raises a
clear :class:`ToLError` on a truncated or corrupted file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minirepro.papers.memoryllm.model import MemoryLM

BITS: tuple[int, ...] = (32, 16, 8, 4, 2)
HEADER = "header.json"


class ToLError(ValueError):
    """§3.2: A ToL file that is missing, truncated or corrupted, or a bad lookup."""


@torch.no_grad()
def build_tol(model: MemoryLM) -> torch.Tensor:
    """§3.2: ``FFN_L(N_L(E))`` for every layer and vocabulary token, ``(N, |V|, d)`` float32."""
    if model.arch.variant == "base":
        raise ValueError("a base model's FFN reads the residual stream: it has no token-wise lookup")
    e = model.embed_tokens.weight.float()
    return torch.stack([layer.memory(e) for layer in model.layers])


@dataclass
class QRows:
    """Eq. (memoryllm-eq-quant): Per-row affine codes: ``x ≈ lo + scale · code``; ``codes`` packed ``8 // bits`` per byte."""

    codes: np.ndarray     # (..., d * bits // 8) uint8
    scale: np.ndarray     # (...,) float32
    lo: np.ndarray        # (...,) float32
    bits: int
    d: int


def quantize_rows(x: np.ndarray, bits: int) -> QRows:
    """[reconstruction] Per-row min-max affine quantisation to ``bits`` ∈ {8, 4, 2}.

    Each row (last axis, length ``d``) gets ``scale = (max - min) / (2^bits - 1)``; the
    round-trip error of every entry is at most ``scale / 2`` (a tested bound).
    """
    if bits not in (8, 4, 2):
        raise ValueError(f"bits must be 8, 4 or 2 for quantisation, got {bits}")
    x = np.asarray(x, dtype=np.float32)
    d = x.shape[-1]
    per = 8 // bits
    if d % per:
        raise ValueError(f"row length {d} must be divisible by {per} to pack {bits}-bit codes")
    lo, hi = x.min(-1), x.max(-1)
    scale = ((hi - lo) / (2 ** bits - 1)).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0).astype(np.float32)
    q = np.clip(np.rint((x - lo[..., None]) / safe[..., None]), 0, 2 ** bits - 1).astype(np.uint8)
    q = q.reshape(*x.shape[:-1], d // per, per)
    packed = np.zeros(q.shape[:-1], dtype=np.uint8)
    for k in range(per):
        packed |= q[..., k] << (bits * k)
    return QRows(packed, scale, lo.astype(np.float32), bits, d)


def unpack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Eq. (memoryllm-eq-quant): Unpack ``8 // bits`` codes per byte: ``(..., n) -> (..., n * 8 // bits)`` uint8."""
    per, mask = 8 // bits, (1 << bits) - 1
    parts = [(codes >> (bits * k)) & mask for k in range(per)]
    return np.stack(parts, -1).reshape(*codes.shape[:-1], codes.shape[-1] * per)


def dequantize_rows(codes: np.ndarray, scale: np.ndarray, lo: np.ndarray, bits: int) -> np.ndarray:
    """Eq. (memoryllm-eq-quant): Inverse of :func:`quantize_rows`: ``lo + scale · code``, float32."""
    q = unpack_codes(np.asarray(codes), bits).astype(np.float32)
    return np.asarray(lo, np.float32)[..., None] + np.asarray(scale, np.float32)[..., None] * q


def _files(bits: int) -> dict[str, str]:
    if bits == 32:
        return {"values": "values.f32"}
    if bits == 16:
        return {"values": "values.f16"}
    return {"codes": "codes.u8", "scale": "scale.f32", "lo": "lo.f32"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def save_tol(table: torch.Tensor | np.ndarray, folder: str | Path, bits: int = 16) -> Path:
    """§3.2: Write a ``(N, |V|, d)`` table at ``bits`` ∈ {32, 16, 8, 4, 2} into ``folder`` (memmap-able)."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    x = table.detach().float().numpy() if isinstance(table, torch.Tensor) else np.asarray(table, np.float32)
    if x.ndim != 3:
        raise ValueError(f"a ToL table is (layers, vocab, d), got shape {x.shape}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if bits in (32, 16):
        arrays = {"values": x.astype(np.float32 if bits == 32 else np.float16)}
    else:
        q = quantize_rows(x, bits)
        arrays = {"codes": q.codes, "scale": q.scale, "lo": q.lo}
    files = {}
    for key, name in _files(bits).items():
        arr = np.ascontiguousarray(arrays[key])
        (folder / name).write_bytes(arr.tobytes())
        files[name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "bytes": arr.nbytes,
                       "sha256": _sha(folder / name)}
    header = {"shape": list(x.shape), "bits": bits, "files": files}
    (folder / HEADER).write_text(json.dumps(header, indent=1) + "\n", encoding="utf-8")
    return folder


class ToL:
    """Eq. (memoryllm-eq-tol): A ToL read on demand: ``tol(layer, ids) -> (B, T, d)`` float32 (callable by the model).

    Built by :func:`open_tol` (memory-mapped) or :meth:`in_memory`. ``nbytes`` is the
    table's storage size, ``rows_read`` counts rows fetched so far.
    """

    def __init__(self, arrays: dict[str, np.ndarray], shape: tuple[int, int, int], bits: int) -> None:
        self.arrays, self.shape, self.bits = arrays, tuple(shape), bits
        self.rows_read = 0

    @classmethod
    def in_memory(cls, table: torch.Tensor | np.ndarray, bits: int = 32) -> ToL:
        """The same lookup held in RAM (quantised like :func:`save_tol` when ``bits`` < 16)."""
        x = table.detach().float().numpy() if isinstance(table, torch.Tensor) else np.asarray(table, np.float32)
        if bits in (32, 16):
            return cls({"values": x.astype(np.float32 if bits == 32 else np.float16)}, x.shape, bits)
        q = quantize_rows(x, bits)
        return cls({"codes": q.codes, "scale": q.scale, "lo": q.lo}, x.shape, bits)

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))

    def rows(self, layer: int, ids: np.ndarray) -> np.ndarray:
        """Dequantised rows ``ToL[layer, ids]``, float32 ``(*ids.shape, d)``."""
        n, v, _ = self.shape
        if not 0 <= layer < n:
            raise ToLError(f"layer {layer} out of range 0..{n - 1}")
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= v):
            raise ToLError(f"token id out of range: the ToL covers ids 0..{v - 1}, got "
                           f"min {int(ids.min())}, max {int(ids.max())}")
        self.rows_read += int(ids.size)
        if "values" in self.arrays:
            return np.asarray(self.arrays["values"][layer][ids], dtype=np.float32)
        a = self.arrays
        return dequantize_rows(a["codes"][layer][ids], a["scale"][layer][ids], a["lo"][layer][ids], self.bits)

    def __call__(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.rows(layer, ids.numpy()))


def open_tol(folder: str | Path, verify: bool = True) -> ToL:
    """§3.2: Memory-map the ToL in ``folder``; check sizes (and checksums when ``verify``).

    Raises:
        ToLError: a missing header or file, a file whose size or sha256 does not match
            the header (truncated or corrupted).
    """
    folder = Path(folder)
    try:
        header = json.loads((folder / HEADER).read_text(encoding="utf-8"))
        bits, shape = int(header["bits"]), tuple(header["shape"])
        files = header["files"]
    except (OSError, ValueError, KeyError) as err:
        raise ToLError(f"corrupted or missing ToL header in {folder}: {err}") from None
    arrays = {}
    for key, name in _files(bits).items():
        path, meta = folder / name, files.get(name)
        if meta is None or not path.exists():
            raise ToLError(f"ToL file {path} is missing")
        if path.stat().st_size != meta["bytes"]:
            raise ToLError(f"corrupted ToL file {path}: {path.stat().st_size} bytes, the header says "
                           f"{meta['bytes']} (truncated or overwritten); rebuild it with save_tol")
        if verify and _sha(path) != meta["sha256"]:
            raise ToLError(f"corrupted ToL file {path}: its sha256 does not match the header; "
                           f"rebuild it with save_tol")
        arrays[key] = np.memmap(path, dtype=np.dtype(meta["dtype"]), mode="r", shape=tuple(meta["shape"]))
    return ToL(arrays, shape, bits)
