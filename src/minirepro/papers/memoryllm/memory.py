"""Resident memory of decoding, measured in a fresh process (§4.7 [reconstruction]).

The paper reports 6.04 against 9.54 GB of memory for MemoryLLM against base. Here each
decoder is loaded and decodes in a process of its own, started by :func:`run_probe`
(``python -m minirepro.papers.memoryllm.memory SPEC.json``). The child reads its
resident set size (RSS, :mod:`psutil`) after its imports, after loading, and after
decoding, and prints one JSON line. The increase over the after-imports baseline is
what the decoder itself costs: Python's and torch's own footprint cancels. The
baseline is read after a warm-up (a one-layer, width-48 copy of the decoder decodes 2
tokens), so that torch's lazily loaded code and first-call buffers, which do not grow
with the model, fall in the baseline too.

Child tasks (``spec["task"]``):

* ``"decode"``: load a decoder's weights (safetensors, float32: the CPU compute type) and, for MemoryLLM, open
  its ToL with :func:`~minirepro.papers.memoryllm.tol.open_tol` (``numpy.memmap``);
  greedily decode ``n_tokens``. It also reports the distinct ToL rows looked up and the
  resident bytes of the ToL's mapping (the file's pages this process has mapped).
* ``"alloc"`` and ``"map"``: calibrations of the probe (allocate and touch ``mb`` MB;
  memory-map a file, then read all of it), used by the unit tests.

The parent checks its inputs before a process starts, kills the child on a timeout,
and raises :class:`ProbeError` with the child's last error line if it fails.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import psutil
import torch

from minirepro.papers.memoryllm.model import Arch, MemoryLM, greedy_decode, n_params
from minirepro.papers.memoryllm.tol import ToL, build_tol, open_tol

MARK = "RSS-PROBE "
TASKS = ("decode", "alloc", "map")


class ProbeError(RuntimeError):
    """A measuring child that failed, timed out, or printed no report."""


def rss() -> int:
    """Resident set size of this process, bytes."""
    return int(psutil.Process().memory_info().rss)


def mapped_rss(path: str | Path) -> int:
    """Resident bytes of this process's mappings of the file ``path`` (0 if unmapped)."""
    target = os.path.realpath(path)
    return int(sum(m.rss for m in psutil.Process().memory_maps(grouped=True)
                   if m.path and os.path.realpath(m.path) == target))


class CountingToL:
    """A ToL that records the distinct ``(layer, token)`` rows it is asked for."""

    def __init__(self, tol: ToL) -> None:
        self.tol, self.seen = tol, set()

    def __call__(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        self.seen.update((layer, int(i)) for i in ids.flatten().tolist())
        return self.tol(layer, ids)

    @property
    def row_bytes(self) -> int:
        n, v, _ = self.tol.shape
        return self.tol.nbytes // (n * v)

    def page_bytes(self) -> int:
        """Bytes of the distinct memory pages that hold the rows looked up (a float16 or float32
        ToL: row ``(layer, t)`` starts at byte ``(layer · |V| + t) · row_bytes``)."""
        v, rb, page = self.tol.shape[1], self.row_bytes, mmap.PAGESIZE
        pages = set()
        for layer, t in self.seen:
            start = (layer * v + t) * rb
            pages.update(range(start // page, (start + rb - 1) // page + 1))
        return len(pages) * page


def _warm_up(variant: str, vocab: int) -> None:
    """Decode 2 tokens with a one-layer, width-48 copy, so that torch's lazily loaded code
    and first-call buffers fall in the baseline rather than in the decoder's increase."""
    tiny = MemoryLM(Arch(variant, vocab=vocab, d=48, n_layers=1, n_heads=1, n_kv_heads=1, d_ff=128,
                         max_len=16)).eval()
    tol = ToL.in_memory(build_tol(tiny), 16) if variant == "memory" else None
    with torch.no_grad():
        greedy_decode(tiny, torch.tensor([[4, 5, 6, 7]]), 2, tol=tol)


def load_decoder(arch: Arch, weights: str | Path, drop_ffn_m: bool) -> MemoryLM:
    """A decoder with the float32 weights in ``weights`` (safetensors), copied tensor by tensor
    into its parameters; with ``drop_ffn_m`` its FFN-M is deleted first (a ToL replaces it)."""
    from safetensors import safe_open

    model = MemoryLM(arch)
    if drop_ffn_m:
        for layer in model.layers:
            del layer.mlp
    params = dict(model.named_parameters())
    with safe_open(str(weights), framework="pt") as f, torch.no_grad():
        if set(f.keys()) != set(params):
            raise ValueError(f"weights file {weights} does not match the architecture: missing "
                             f"{sorted(set(params) - set(f.keys()))[:3]}, unexpected "
                             f"{sorted(set(f.keys()) - set(params))[:3]}")
        for key in f.keys():
            params[key].copy_(f.get_tensor(key))
    return model.eval().requires_grad_(False)


def _child_decode(spec: dict) -> dict:
    arch = Arch(**spec["arch"])
    _warm_up(arch.variant, arch.vocab)
    base_rss = rss()
    model = load_decoder(arch, spec["weights"], drop_ffn_m=spec["tol"] is not None)
    tol = CountingToL(open_tol(spec["tol"], verify=False)) if spec["tol"] is not None else None
    values = tol.tol.arrays.get("values") if tol is not None else None
    loaded_rss = rss()
    tol_mapped_loaded = mapped_rss(values.filename) if values is not None else 0
    prompt = torch.randint(4, arch.vocab, (1, spec["prompt_len"]),
                           generator=torch.Generator().manual_seed(spec["seed"]))
    with torch.no_grad():
        greedy_decode(model, prompt, spec["n_tokens"], tol=tol)
    decoded_rss = rss()
    full = psutil.Process().memory_full_info()
    return {"rss_imports": base_rss, "rss_loaded": loaded_rss, "rss_decoded": decoded_rss,
            "uss_decoded": int(full.uss), "weights_bytes": 4 * n_params(model),
            "tol_rows": len(tol.seen) if tol is not None else 0,
            "tol_row_bytes": tol.row_bytes if tol is not None else 0,
            "tol_page_bytes": tol.page_bytes() if tol is not None else 0,
            "tol_file_bytes": int(values.nbytes) if values is not None else 0,
            "tol_mapped_loaded": tol_mapped_loaded,
            "tol_mapped_decoded": mapped_rss(values.filename) if values is not None else 0}


def _child_alloc(spec: dict) -> dict:
    before = rss()
    block = np.ones(int(spec["mb"] * 2 ** 20), dtype=np.uint8)  # ones: every page written
    return {"rss_before": before, "rss_after": rss(), "bytes": int(block.nbytes)}


def _child_map(spec: dict) -> dict:
    before = rss()
    mm = np.memmap(spec["path"], dtype=np.uint8, mode="r")
    mapped = rss()
    total = int(mm.sum(dtype=np.uint64))  # reads every page
    return {"rss_before": before, "rss_mapped": mapped, "rss_read": rss(), "bytes": int(mm.nbytes),
            "checksum": total}


def _child_main(spec_path: str) -> None:
    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    task = spec.get("task")
    if task not in TASKS:
        raise ValueError(f"unknown probe task {task!r}; expected one of {TASKS}")
    out = {"decode": _child_decode, "alloc": _child_alloc, "map": _child_map}[task](spec)
    print(MARK + json.dumps(out), flush=True)


def check_spec(spec: dict) -> None:
    """Raise ``ValueError`` for a spec a child could not run (before any process starts)."""
    task = spec.get("task")
    if task not in TASKS:
        raise ValueError(f"unknown probe task {task!r}; expected one of {TASKS}")
    if task == "decode":
        if int(spec["n_tokens"]) <= 0:
            raise ValueError(f"n_tokens must be a positive number of tokens to decode, got {spec['n_tokens']}")
        if not Path(spec["weights"]).is_file():
            raise FileNotFoundError(f"decoder weights {spec['weights']} not found")
        if spec["tol"] is not None and not (Path(spec["tol"]) / "header.json").is_file():
            raise FileNotFoundError(f"no ToL at {spec['tol']} (expected a folder written by save_tol, "
                                    f"with header.json)")
        Arch(**spec["arch"])
    elif task == "alloc" and not float(spec["mb"]) > 0:
        raise ValueError(f"mb must be positive, got {spec['mb']}")
    elif task == "map" and not Path(spec["path"]).is_file():
        raise FileNotFoundError(f"file to map {spec['path']} not found")


def _child_env() -> dict:
    """The parent's environment, with this ``minirepro`` first on the path and one thread."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def start_probe(spec: dict, workdir: str | Path) -> tuple[subprocess.Popen, Path]:
    """Check ``spec``, write it to ``workdir`` and start the child (its output is piped)."""
    check_spec(spec)
    fd, name = tempfile.mkstemp(prefix=f"probe-{spec['task']}-", suffix=".json", dir=workdir)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    proc = subprocess.Popen([sys.executable, "-m", "minirepro.papers.memoryllm.memory", name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env())
    return proc, Path(name)


def finish_probe(proc: subprocess.Popen, timeout: float) -> dict:
    """Wait for a child; kill it on a timeout; its JSON report, or :class:`ProbeError`."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise ProbeError(f"the measuring process timed out after {timeout:g} s and was killed") from None
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    lines = [ln for ln in out.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "(no error output)")
        raise ProbeError(f"the measuring process failed (exit code {proc.returncode}): {last}")
    return json.loads(lines[-1][len(MARK):])


def run_probes(specs: list[dict], workdir: str | Path, timeout: float = 120.0) -> list[dict]:
    """Run one fresh process per spec, all at once; every child is checked before any starts
    and none is left running when this returns or raises."""
    for spec in specs:
        check_spec(spec)
    procs = []
    try:
        for spec in specs:
            procs.append(start_probe(spec, workdir)[0])
        return [finish_probe(p, timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def run_probe(spec: dict, workdir: str | Path | None = None, timeout: float = 120.0) -> dict:
    """One spec in one fresh process (see the module docstring for the tasks)."""
    with tempfile.TemporaryDirectory() as tmp:
        return run_probes([spec], workdir if workdir is not None else tmp, timeout)[0]


def measure_rss(base: MemoryLM, memory: MemoryLM, tol_folder: str | Path, n_tokens: int, reps: int,
                workdir: str | Path, seed: int = 0, prompt_len: int = 32, timeout: float = 120.0) -> list[dict]:
    """§4.7 [reconstruction]: RSS of decoding ``n_tokens`` with ``base`` (live FFNs) and with
    ``memory`` (its ToL memory-mapped from ``tol_folder``), each in a fresh process.

    ``memory``'s FFN-M weights are not written: the child holds everything but FFN-M and
    reads the ToL from disk. ``reps`` pairs of processes (base and MemoryLLM run at the same
    time). Returns one row per process: ``variant``, ``rep``, RSS (bytes) after imports,
    loading and decoding, the increase over the after-imports baseline, ``tol_rows``
    (distinct rows looked up), ``tol_touched_bytes`` (those rows' bytes), ``tol_page_bytes``
    (the pages holding them) and ``tol_mapped_decoded`` (resident bytes of the ToL's mapping).
    """
    from safetensors.torch import save_file

    if int(n_tokens) <= 0:
        raise ValueError(f"n_tokens must be a positive number of tokens to decode, got {n_tokens}")
    if int(reps) < 1:
        raise ValueError(f"reps must be at least 1, got {reps}")
    if not (Path(tol_folder) / "header.json").is_file():
        raise FileNotFoundError(f"no ToL at {tol_folder} (expected a folder written by save_tol)")
    workdir = Path(workdir)
    specs = []
    for name, model, tol in (("base", base, None), ("memory", memory, str(tol_folder))):
        state = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()
                 if not (tol is not None and ".mlp." in k)}
        path = workdir / f"rss-{name}.safetensors"
        save_file(state, str(path))
        specs.append({"task": "decode", "variant": name, "arch": model.arch.to_dict(), "weights": str(path),
                      "tol": tol, "n_tokens": int(n_tokens), "prompt_len": int(prompt_len), "seed": int(seed)})
    rows = []
    for rep in range(int(reps)):
        for spec, out in zip(specs, run_probes(specs, workdir, timeout), strict=True):
            rows.append({"variant": spec["variant"], "rep": rep, **out,
                         "increase": out["rss_decoded"] - out["rss_imports"],
                         "load_increase": out["rss_loaded"] - out["rss_imports"],
                         "tol_touched_bytes": out["tol_rows"] * out["tol_row_bytes"]})
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m minirepro.papers.memoryllm.memory SPEC.json")
    _child_main(sys.argv[1])
