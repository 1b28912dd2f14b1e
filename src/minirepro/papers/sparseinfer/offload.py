"""The memory-offload setting: FFN weights memory-mapped from disk and read at every decoding step.

The paper's 10.33x comes from a model whose weights do not fit in GPU memory: every
decoding step moves FFN weights over the bus, and skipping neurons skips their
bytes. This module stages that setting on a CPU with a disk: the sparsified layers'
FFN weights are written to a file, memory-mapped, and at every decoding step each
method reads the rows it needs (every row for dense, the core rows for SparseInfer)
and computes the FFN from them. To keep the operating system's page cache from
turning the "disk" into RAM, the file's pages are dropped before each step with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (unprivileged on one's own file);
:func:`resident_fraction` checks with ``mincore`` that the drop took effect.

Layout ``[reconstruction]``: one ``(d_ff, 2 d + 1)`` float32 block per layer whose
row ``j`` bundles neuron ``j``'s weights, ``[W1[j, :], b1[j], W2[:, j]]`` (the
row-column bundling of offloading systems), so a neuron is one contiguous read.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from minirepro.papers.sparseinfer.neurons import capture_preactivations, core_neurons, ffn_blocks
from minirepro.papers.sparseinfer.protocol import greedy_steps, prefill_with_preacts

PAGE = mmap.PAGESIZE


@dataclass
class FFNFile:
    """The sparsified layers' FFN weights on disk: ``layers[l]``'s block is ``(d_ff, 2 d_model + 1)`` float32.

    ``b2`` (the output bias, ``d_model`` floats per layer) stays in memory.
    """

    path: Path
    layers: list[int]
    d_ff: int
    d_model: int
    b2: dict[int, np.ndarray]

    @property
    def row_floats(self) -> int:
        return 2 * self.d_model + 1

    def open(self) -> np.memmap:
        """A fresh read-only memory map ``(len(layers), d_ff, 2 d_model + 1)``."""
        return np.memmap(self.path, np.float32, "r", shape=(len(self.layers), self.d_ff, self.row_floats))


def write_ffn_file(model: PreTrainedModel, layers: Sequence[int], path: Path) -> FFNFile:
    """Write ``layers``' FFN weights (OPT-style ``fc2(relu(fc1 x))``) to ``path``, synced to disk."""
    blocks = {b.index: b for b in ffn_blocks(model)}
    if any(len(blocks[i].up) != 1 for i in layers):
        raise ValueError("the offload reader handles ReLU FFNs with one up projection (OPT-style)")
    rows, b2 = [], {}
    for i in layers:
        up, down = blocks[i].up[0], blocks[i].down
        w1 = up.weight.detach().float().numpy()
        b1 = (up.bias.detach().float().numpy() if up.bias is not None else np.zeros(w1.shape[0], np.float32))
        w2t = down.weight.detach().float().numpy().T
        rows.append(np.concatenate([w1, b1[:, None], w2t], axis=1).astype(np.float32))
        b2[i] = (down.bias.detach().float().numpy() if down.bias is not None
                 else np.zeros(w1.shape[1], np.float32))
    data = np.stack(rows)
    with open(path, "wb") as f:
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())  # dirty pages cannot be dropped
    return FFNFile(Path(path), list(layers), data.shape[1], (data.shape[2] - 1) // 2, b2)


def drop_pages(path: Path) -> None:
    """Ask the kernel to evict ``path``'s pages from the page cache (``POSIX_FADV_DONTNEED``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_fraction(path: Path) -> float:
    """Share of ``path``'s pages in the page cache (``mincore``); NaN where it cannot be asked."""
    size = os.path.getsize(path)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            buf = (ctypes.c_char * size).from_buffer(m)
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec)
            del buf
        finally:
            m.close()
    except (OSError, AttributeError, ValueError):
        return float("nan")
    return float("nan") if rc != 0 else float(np.mean([v & 1 for v in vec]))


def row_runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """Sorted row indices as half-open runs of consecutive rows: ``[0, 1, 2, 5]`` -> ``[(0, 3), (5, 6)]``."""
    rows = np.asarray(rows)
    if rows.size == 0:
        return []
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(rows, cut)]


def read_rows(ff: FFNFile, rows: dict[int, np.ndarray | None], announce: bool = True) -> dict[int, np.ndarray]:
    """Read each layer's rows (``None``: all) from disk, ``(k, 2 d + 1)`` per layer.

    Each arm reads its bytes the fastest way we found for it. Every row (dense):
    one ``pread`` of the layer's contiguous block. Selected rows (core): a fresh
    memory map advised ``MADV_RANDOM`` (no read-around beyond what is asked),
    every run of consecutive rows announced with ``MADV_WILLNEED`` (the reads are
    issued together, as an offloading runtime would), then gathered; the map is
    closed afterwards, since a mapped page cannot be dropped. (Reading every row
    through the map, or the core rows with one ``pread`` per run, was slower.)
    With ``announce=False`` (pages known to be cached) the advice is skipped.
    """
    rb = ff.row_floats * 4
    out: dict[int, np.ndarray] = {}
    if any(rows.get(i) is None for i in ff.layers):
        fd = os.open(ff.path, os.O_RDONLY)
        try:
            for li, i in enumerate(ff.layers):
                if rows.get(i) is None:
                    buf = np.empty((ff.d_ff, ff.row_floats), np.float32)
                    if os.preadv(fd, [memoryview(buf).cast("B")], li * ff.d_ff * rb) != buf.nbytes:
                        raise OSError(f"short read from {ff.path}")
                    out[i] = buf
        finally:
            os.close(fd)
    picked = [(li, i) for li, i in enumerate(ff.layers) if rows.get(i) is not None]
    if picked:
        mm = ff.open()
        m = getattr(mm, "_mmap", None)
        if announce and m is not None and hasattr(mmap, "MADV_WILLNEED"):
            m.madvise(mmap.MADV_RANDOM)
            for li, i in picked:
                for a, b in row_runs(np.asarray(rows[i])):
                    lo = (li * ff.d_ff + a) * rb // PAGE * PAGE
                    m.madvise(mmap.MADV_WILLNEED, lo, (li * ff.d_ff + b) * rb - lo)
        for li, i in picked:
            out[i] = np.take(mm[li], np.asarray(rows[i]), axis=0)
        del mm, m
    return out


def ffn_from_rows(ff: FFNFile, layer: int, data: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Eq. (sparseinfer-eq-decode) from bundled rows ``(k, 2 d + 1)``: ``W2[:, C] relu(W1[C] x + b1[C]) + b2``, ``(d,)``."""
    d = ff.d_model
    h = np.maximum(data[:, :d] @ x + data[:, d], 0.0)
    return h @ data[:, d + 1:] + ff.b2[layer]


def offload_step(ff: FFNFile, rows: dict[int, np.ndarray | None], xs: dict[int, np.ndarray],
                 drop: bool = True) -> dict[int, np.ndarray]:
    """One decoding step's FFNs: drop the file's pages (``drop``), read the rows, compute each layer's output.

    Without ``drop`` the pages stay in the page cache (RAM) and the reads are not announced.
    """
    if drop:
        drop_pages(ff.path)
    data = read_rows(ff, rows, announce=drop)
    return {i: ffn_from_rows(ff, i, data[i], xs[i]) for i in ff.layers}


def page_bound(ff: FFNFile, rows: dict[int, np.ndarray]) -> float:
    """Pages read by dense over pages touched by ``rows``: the bytes bound at page granularity."""
    rb = ff.row_floats * 4
    dense = core = 0
    for li, i in enumerate(ff.layers):
        base = li * ff.d_ff * rb
        dense += (base + ff.d_ff * rb - 1) // PAGE - base // PAGE + 1
        pages: set[int] = set()
        for a, b in row_runs(np.sort(np.asarray(rows[i]))):
            pages.update(range((base + a * rb) // PAGE, (base + b * rb - 1) // PAGE + 1))
        core += len(pages)
    return dense / core


@contextlib.contextmanager
def ffn_file(model: PreTrainedModel, layers: Sequence[int]) -> Iterator[FFNFile]:
    """:func:`write_ffn_file` into a fresh temporary folder, removed on exit."""
    folder = tempfile.mkdtemp(prefix="sparseinfer-offload-")
    try:
        yield write_ffn_file(model, layers, Path(folder) / "ffn.f32")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@torch.no_grad()
def decode_inputs(model: PreTrainedModel, prompt: torch.Tensor, n_steps: int, layers: Sequence[int],
                  token_sparsity: float, sparsity: float) -> tuple[dict[int, np.ndarray], list[dict[int, np.ndarray]]]:
    """Dense prefill of ``prompt (T,)``: the core rows per layer, and the FFN inputs ``(d,)`` of ``n_steps`` dense decoding steps."""
    first, cache, acts = prefill_with_preacts(model, prompt)
    core = {i: np.sort(core_neurons(acts[i], token_sparsity, sparsity).numpy()) for i in layers}
    store: dict[int, list[torch.Tensor]] = {}
    inputs: dict[int, list[torch.Tensor]] = {}
    with capture_preactivations(model, store, inputs):
        greedy_steps(model, first, cache, n_steps + 1, None)
    steps = [{i: inputs[i][t][0].float().numpy() for i in layers} for t in range(n_steps)]
    return core, steps


def time_offload(ff: FFNFile, core: dict[int, np.ndarray], steps: Sequence[dict[int, np.ndarray]],
                 repeats: int = 3, drop: bool = True) -> dict[str, float]:
    """Median seconds per decoding step's FFNs, dense (every row) and core rows only, interleaved.

    Each repeat runs every step once per arm, dense and core alternating (the
    order flips between repeats); with ``drop`` the file's pages are evicted before
    every step, so every step reads from the disk.
    """
    arms = {"dense": {i: None for i in ff.layers}, "core": core}
    samples: dict[str, list[float]] = {"dense": [], "core": []}
    offload_step(ff, arms["dense"], steps[0], drop)  # warm-up: code paths, not pages
    for r in range(repeats):
        for xs in steps:
            for name in (("dense", "core") if r % 2 == 0 else ("core", "dense")):
                t0 = time.perf_counter()
                offload_step(ff, arms[name], xs, drop)
                samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def offload_measurement(model: PreTrainedModel, prompts: Sequence[torch.Tensor], layers: Sequence[int],
                        token_sparsity: float, sparsity: float, n_steps: int, repeats: int = 3) -> list[dict]:
    """Per prompt: FFN seconds per step from disk (pages dropped) and from the page cache, dense and core-only.

    Returns one dict per prompt: ``disk dense``, ``disk core``, ``cache dense``,
    ``cache core`` (median seconds per step), ``resident after drop`` (share of the
    file's pages still cached right after a drop; near 0 when dropping works),
    ``bytes bound`` (``d_ff / |core|``) and ``page bound`` (:func:`page_bound`).
    The temporary weight file is removed afterwards.
    """
    out = []
    with ffn_file(model, layers) as ff:
        for p in prompts:
            core, steps = decode_inputs(model, p, n_steps, layers, token_sparsity, sparsity)
            drop_pages(ff.path)
            resident = resident_fraction(ff.path)
            disk = time_offload(ff, core, steps, repeats, drop=True)
            cached = time_offload(ff, core, steps, repeats, drop=False)
            k = np.mean([len(core[i]) for i in layers])
            out.append({"disk dense": disk["dense"], "disk core": disk["core"],
                        "cache dense": cached["dense"], "cache core": cached["core"],
                        "resident after drop": resident, "bytes bound": ff.d_ff / k,
                        "page bound": page_bound(ff, core)})
    return out


def synthetic_offload(d_model: int, d_ff: int, sparsity: float, n_steps: int, repeats: int = 3,
                      seed: int = 0) -> dict[str, float]:
    """:func:`offload_measurement` for one random FFN layer of a paper-like width, with a random core set.

    Rows of ``2 d_model + 1`` floats span several pages when ``d_model`` is large
    (1024: 8 KB, two pages), as in the paper's billion-parameter models; the book
    model's rows (192: 1.5 KB) are smaller than a page. Random weights and inputs;
    the core set is a uniformly random ``floor(sparsity * d_ff)`` rows.
    """
    rng = np.random.default_rng(seed)
    k = max(1, int(sparsity * d_ff))
    core = {0: np.sort(rng.choice(d_ff, k, replace=False))}
    steps = [{0: rng.standard_normal(d_model).astype(np.float32)} for _ in range(n_steps)]
    folder = tempfile.mkdtemp(prefix="sparseinfer-offload-")
    try:
        path = Path(folder) / "ffn.f32"
        with open(path, "wb") as f:
            for _ in range(d_ff):  # row by row: no second copy of the layer in memory
                f.write((rng.standard_normal(2 * d_model + 1) * 0.02).astype(np.float32).tobytes())
            f.flush()
            os.fsync(f.fileno())
        ff = FFNFile(path, [0], d_ff, d_model, {0: np.zeros(d_model, np.float32)})
        drop_pages(path)
        resident = resident_fraction(path)
        disk = time_offload(ff, core, steps, repeats, drop=True)
        cached = time_offload(ff, core, steps, repeats, drop=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"disk dense": disk["dense"], "disk core": disk["core"], "cache dense": cached["dense"],
            "cache core": cached["core"], "resident after drop": resident, "bytes bound": d_ff / k,
            "page bound": page_bound(ff, core)}
