"""SparseInfer's memory-offload reader: the memory-mapped path computes the in-memory sliced FFN."""

from __future__ import annotations

import glob
import os
import tempfile

import numpy as np
import pytest
import torch

from minirepro.core.lm import ModelConfig, build_lm, load_substrate
from minirepro.papers.sparseinfer import Config, ffn_blocks, sliced_ffn
from minirepro.papers.sparseinfer.offload import (
    decode_inputs,
    drop_pages,
    ffn_file,
    offload_measurement,
    offload_step,
    page_bound,
    read_rows,
    resident_fraction,
    row_runs,
    synthetic_offload,
)

TOK = load_substrate("smoke-opt").tokenizer


def tiny(arch: str = "opt"):
    cfg = ModelConfig(arch=arch, d_model=32, n_layers=3, n_heads=2, n_kv_heads=2 if arch == "opt" else 1,
                        d_ff=64, max_len=256)
    return build_lm(cfg, TOK, seed=5)


def _leftovers() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "sparseinfer-offload-*")))


@torch.no_grad()
def test_memory_mapped_rows_compute_the_in_memory_sliced_ffn():
    model = tiny()
    blocks = ffn_blocks(model)
    rng = np.random.default_rng(0)
    x = {i: rng.standard_normal(32).astype(np.float32) for i in (1, 2)}
    core = {1: np.sort(rng.choice(64, 25, replace=False)), 2: np.sort(rng.choice(64, 10, replace=False))}
    with ffn_file(model, [1, 2]) as ff:
        assert (ff.d_ff, ff.d_model, ff.row_floats) == (64, 32, 65)
        sparse = offload_step(ff, core, x, drop=True)
        dense = offload_step(ff, {1: None, 2: None}, x, drop=True)
        mixed = read_rows(ff, {1: None, 2: core[2]})
        assert mixed[1].shape == (64, 65) and mixed[2].shape == (10, 65)
    full = {i: blocks[i].down(torch.relu(blocks[i].up[0](torch.as_tensor(x[i])))).numpy() for i in (1, 2)}
    with sliced_ffn(model, {i: torch.as_tensor(core[i]) for i in (1, 2)}):
        sliced = {i: blocks[i].down(torch.relu(blocks[i].up[0](torch.as_tensor(x[i])))).numpy() for i in (1, 2)}
    for i in (1, 2):
        np.testing.assert_allclose(sparse[i], sliced[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dense[i], full[i], rtol=1e-5, atol=1e-6)
        assert np.abs(sparse[i] - full[i]).max() > 1e-4  # the core rows are not the whole FFN


def test_the_reader_refuses_a_gated_ffn():
    with pytest.raises(ValueError, match="OPT-style"):
        with ffn_file(tiny("llama"), [1]):
            pass


def test_row_runs_and_the_page_bound():
    assert row_runs(np.array([0, 1, 2, 5, 7, 8])) == [(0, 3), (5, 6), (7, 9)]
    assert row_runs(np.array([], dtype=int)) == []
    model = tiny()
    with ffn_file(model, [1]) as ff:  # rows of 65 floats (260 bytes): 64 rows fill 4.06 pages -> 5 pages
        assert page_bound(ff, {1: np.arange(64)}) == pytest.approx(1.0)
        assert page_bound(ff, {1: np.arange(10)}) == pytest.approx(5 / 1)  # 10 rows: 2600 bytes, one page
        # row 63 (bytes 16380..16639) straddles pages 3 and 4: with row 0, three pages
        assert page_bound(ff, {1: np.array([0, 63])}) == pytest.approx(5 / 3)


def test_decode_inputs_give_one_ffn_input_per_step_and_the_core_rows():
    model = tiny()
    prompt = torch.tensor(TOK("calc 3 + 4 * 2 =")["input_ids"])
    core, steps = decode_inputs(model, prompt, 5, [1], 0.2, 0.4)
    assert len(steps) == 5 and steps[0][1].shape == (32,)
    assert len(core[1]) == int(0.4 * 64) and (np.diff(core[1]) > 0).all()


def test_measurements_report_every_arm_and_leave_no_file_behind():
    before = _leftovers()
    model = tiny()
    prompt = torch.tensor(TOK("calc 3 + 4 * 2 =")["input_ids"])
    out = offload_measurement(model, [prompt], [1], 0.2, 0.4, n_steps=2, repeats=1)
    wide = synthetic_offload(64, 256, 0.4, n_steps=2, repeats=1)
    for r in (out[0], wide):
        assert {"disk dense", "disk core", "cache dense", "cache core"} <= set(r)
        assert all(r[k] > 0 for k in ("disk dense", "disk core", "cache dense", "cache core"))
        assert r["bytes bound"] == pytest.approx(64 / 25 if r is out[0] else 256 / 102)
        assert 1 <= r["page bound"] <= 1.1 * r["bytes bound"]
        res = r["resident after drop"]
        assert np.isnan(res) or 0 <= res <= 1
    assert _leftovers() == before


def test_dropping_pages_is_seen_by_mincore_where_it_works(tmp_path):
    p = tmp_path / "w.bin"
    with open(p, "wb") as f:
        f.write(np.ones(4096 * 8, np.float32).tobytes())
        f.flush()
        os.fsync(f.fileno())
    p.read_bytes()
    cached = resident_fraction(p)
    drop_pages(p)
    after = resident_fraction(p)
    if np.isnan(cached):
        pytest.skip("mincore is not available here")
    assert cached == pytest.approx(1.0) and 0 <= after <= 1  # tmpfs keeps its pages: no assert on 'after'


def test_config_checks_the_offload_knobs():
    with pytest.raises(ValueError):
        Config(offload_steps=0)
    with pytest.raises(ValueError):
        Config(offload_wide=-1)
    assert Config.from_params({"scale": "smoke"}).offload_wide == 0
