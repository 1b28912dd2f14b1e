"""MemoryLLM chapter: the resident-memory probe (fresh processes reading their own RSS).

The probe is checked against known allocations, its children are cleaned up on failure
and timeout, and bad input is refused before any process starts.
"""

from __future__ import annotations

import subprocess

import numpy as np
import psutil
import pytest
import torch

from minirepro.papers.memoryllm import memory
from minirepro.papers.memoryllm.memory import ProbeError, measure_rss, run_probe
from minirepro.papers.memoryllm.model import Arch, MemoryLM, n_params
from minirepro.papers.memoryllm.tol import build_tol, save_tol

MB = 2 ** 20


def _live_children() -> set[int]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def _children_before():
    """Processes this test process already had (other tests in the same xdist worker may
    leave ones that are still being reaped); only the probe's own must be gone."""
    global _BEFORE
    _BEFORE = _live_children()
    yield


_BEFORE: set[int] = set()


def _no_children() -> None:
    kids = _live_children() - _BEFORE
    assert not kids, f"processes left running: {[psutil.Process(k).cmdline()[:3] for k in kids]}"


def _decoders(d: int = 96, vocab: int = 97):
    torch.manual_seed(0)
    kw = dict(vocab=vocab, d=d, n_layers=2, n_heads=d // 48, n_kv_heads=1, d_ff=8 * d // 3, max_len=128)
    base, mem = MemoryLM(Arch("base", **kw)).eval(), MemoryLM(Arch("memory", **kw)).eval()
    return base, mem


def test_probe_sees_a_known_allocation():
    out = run_probe({"task": "alloc", "mb": 48})
    grew = out["rss_after"] - out["rss_before"]
    assert abs(grew - 48 * MB) < 0.1 * 48 * MB, grew / MB
    _no_children()


def test_probe_sees_mapped_pages_only_once_read(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(np.arange(32 * MB, dtype=np.uint8).tobytes())
    out = run_probe({"task": "map", "path": str(path)})
    assert out["rss_mapped"] - out["rss_before"] < 2 * MB          # mapped, not read: ~0
    read = out["rss_read"] - out["rss_before"]
    assert abs(read - 32 * MB) < 0.1 * 32 * MB, read / MB        # read: ~ the file's size
    assert out["checksum"] == int(np.arange(32 * MB, dtype=np.uint8).sum(dtype=np.uint64))


def test_measure_rss_base_vs_memory(tmp_path):
    base, mem = _decoders(d=384, vocab=448)  # weights of 13 and 4 MB dominate the fixed costs
    folder = save_tol(build_tol(mem), tmp_path / "tol", bits=16)
    for layer in mem.layers:
        del layer.mlp
    rows = {r["variant"]: r for r in measure_rss(base, mem, folder, n_tokens=8, reps=1, workdir=tmp_path)}
    for name, model in (("base", base), ("memory", mem)):
        r = rows[name]
        assert r["weights_bytes"] == 4 * n_params(model)
        # loading costs the float32 weights, within the allocator's slack
        assert abs(r["load_increase"] - r["weights_bytes"]) < 0.15 * r["weights_bytes"] + 3 * MB
    assert rows["memory"]["increase"] < rows["base"]["increase"]
    assert rows["base"]["tol_rows"] == 0 and rows["memory"]["tol_rows"] > 0
    assert rows["memory"]["tol_row_bytes"] == 2 * 384
    assert rows["memory"]["tol_mapped_loaded"] == 0                      # opened, nothing read yet
    assert 0 < rows["memory"]["tol_mapped_decoded"] <= rows["memory"]["tol_file_bytes"]
    m = rows["memory"]
    assert m["tol_rows"] * 768 <= m["tol_page_bytes"] <= m["tol_mapped_decoded"]  # rows ⊂ their pages ⊂ mapped
    _no_children()


def test_child_that_fails_gives_a_clear_error_and_no_orphan(tmp_path):
    base, _ = _decoders()
    weights = tmp_path / "broken.safetensors"
    weights.write_bytes(b"not a safetensors file" * 10)
    spec = {"task": "decode", "variant": "base", "arch": base.arch.to_dict(), "weights": str(weights),
            "tol": None, "n_tokens": 4, "prompt_len": 8, "seed": 0}
    with pytest.raises(ProbeError, match="failed .exit code"):
        run_probe(spec)
    _no_children()


def test_child_that_times_out_is_killed(tmp_path):
    with pytest.raises(ProbeError, match="timed out"):
        run_probe({"task": "alloc", "mb": 1}, timeout=0.05)
    _no_children()


@pytest.fixture
def no_process(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.mark.usefixtures("no_process")
def test_bad_input_raises_before_a_process_starts(tmp_path):
    base, mem = _decoders()
    folder = save_tol(build_tol(mem), tmp_path / "tol", bits=16)
    with pytest.raises(FileNotFoundError, match="no ToL"):
        measure_rss(base, mem, tmp_path / "missing", n_tokens=4, reps=1, workdir=tmp_path)
    for n in (0, -3):
        with pytest.raises(ValueError, match="n_tokens"):
            measure_rss(base, mem, folder, n_tokens=n, reps=1, workdir=tmp_path)
    with pytest.raises(ValueError, match="reps"):
        measure_rss(base, mem, folder, n_tokens=4, reps=0, workdir=tmp_path)
    spec = {"task": "decode", "variant": "memory", "arch": mem.arch.to_dict(), "weights": str(tmp_path / "w"),
            "tol": str(folder), "n_tokens": 4, "prompt_len": 8, "seed": 0}
    with pytest.raises(FileNotFoundError, match="weights"):
        run_probe(spec)
    with pytest.raises(ValueError, match="unknown probe task"):
        run_probe({"task": "sleep"})
    with pytest.raises(ValueError, match="mb must be positive"):
        run_probe({"task": "alloc", "mb": 0})


def test_weights_that_do_not_match_the_architecture_raise(tmp_path):
    from safetensors.torch import save_file

    base, mem = _decoders()
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in base.state_dict().items()}, str(path))
    with pytest.raises(ValueError, match="does not match the architecture"):
        memory.load_decoder(mem.arch, path, drop_ffn_m=True)
    loaded = memory.load_decoder(base.arch, path, drop_ffn_m=False)
    ids = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        assert torch.equal(loaded(ids), base(ids))


def test_counting_tol_rows_and_pages():
    import mmap

    from minirepro.papers.memoryllm.tol import ToL

    table = torch.randn(3, 100, 384)
    tol = memory.CountingToL(ToL.in_memory(table, 16))
    out = tol(1, torch.tensor([[5, 7, 5], [99, 7, 0]]))
    assert torch.equal(out, torch.from_numpy(table[1, [[5, 7, 5], [99, 7, 0]]].numpy().astype(np.float16)).float())
    assert tol.seen == {(1, 5), (1, 7), (1, 99), (1, 0)} and tol.row_bytes == 768
    page = mmap.PAGESIZE
    pages = {b // page for layer, t in tol.seen for b in range((layer * 100 + t) * 768, (layer * 100 + t + 1) * 768)}
    assert tol.page_bytes() == len(pages) * page


def test_rss_ratios_table_and_reading_from_rows():
    import pandas as pd

    from minirepro.papers.memoryllm.experiment import rss_ratios, rss_reading, rss_table

    rows = []
    for rep, (b, m) in enumerate([(30e6, 12e6), (40e6, 10e6)]):
        common = dict(rep=rep, rss_imports=2e8, load_increase=0.0)
        rows.append(dict(variant="base", increase=b, weights_bytes=26e6, counted_bytes=13e6, tol_mapped_decoded=0,
                         tol_file_bytes=0, tol_rows=0, tol_touched_bytes=0, tol_page_bytes=0, **common))
        rows.append(dict(variant="memory", increase=m, weights_bytes=8e6, counted_bytes=4e6, tol_mapped_decoded=1e6,
                         tol_file_bytes=2e6, tol_rows=10, tol_touched_bytes=7680, tol_page_bytes=40960, **common))
    df = pd.DataFrame(rows)
    np.testing.assert_allclose(rss_ratios(df), [0.4, 0.25])
    tab = rss_table(df)
    assert list(tab.index) == ["base", "MemoryLLM"]
    assert tab.loc["base", "RSS +decode"] == 35.0 and tab.loc["MemoryLLM", "ToL mapped"] == 1.0

    class Settled:
        verdict = "reproduced"

    text = rss_reading(df, Settled())
    assert "0.33 of base's" in text and "range 0.25 to 0.40" in text and "0.31 counted" in text
    assert "paper's 0.63: below" in text and "50% of the ToL file" in text
