"""MemoryLLM chapter: the decoder against transformers, the lookup identity, parameter
counts, ToL quantisation bounds, memory-mapped storage, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minirepro.papers.memoryllm.model import (
    Arch,
    MemoryLM,
    active_params,
    ffn_m_params,
    greedy_decode,
    n_params,
)
from minirepro.papers.memoryllm.tol import (
    ToL,
    ToLError,
    build_tol,
    dequantize_rows,
    open_tol,
    quantize_rows,
    save_tol,
)

SMALL = dict(vocab=97, d=48, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=128, max_len=40)


def _model(variant: str, beta: int = 0, seed: int = 0) -> MemoryLM:
    torch.manual_seed(seed)
    m = MemoryLM(Arch(variant, beta=beta, **SMALL)).eval()
    with torch.no_grad():  # non-trivial norms, so a wrong norm placement shows
        for p in m.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.mul_(5.0)
    return m


def _ids(b: int = 3, t: int = 17, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, SMALL["vocab"], (b, t), generator=torch.Generator().manual_seed(seed))


def test_base_equals_transformers_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    m = _model("base")
    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=SMALL["vocab"], hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=40, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=True, attention_dropout=0.0)).eval()
    state = {f"model.{k}": v for k, v in m.state_dict().items()}
    state["lm_head.weight"] = m.embed_tokens.weight.detach()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing)
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[0, -5:] = 0  # right padding on one row
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).logits
        out = m(ids, attention_mask=mask)
    keep = mask.bool()
    assert torch.allclose(out[keep], ref[keep], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant,beta", [("memory", 0), ("flex", 1), ("flex", 3)])
def test_lookup_identity(variant, beta):
    m = _model(variant, beta)
    ids = _ids()
    tol = ToL.in_memory(build_tol(m), bits=32)
    with torch.no_grad():
        live, looked = m(ids), m(ids, tol=tol)
    assert float((live - looked).abs().max()) < 1e-4
    assert tol.rows_read == ids.numel() * SMALL["n_layers"]


def test_lookup_is_context_free_but_base_is_not():
    """The FFN-M output at a position depends on that token only (nothing positional in X0)."""
    m = _model("memory")
    ids = _ids(1, 12)
    other = ids.clone()
    other[0, :6] = (other[0, :6] + 1) % SMALL["vocab"]
    cap = []
    h = m.layers[1].mlp.register_forward_hook(lambda _m, _i, o: cap.append(o.detach()))
    with torch.no_grad():
        m(ids)
        m(other)
    h.remove()
    assert torch.equal(cap[0][0, 6:], cap[1][0, 6:])


def test_equal_parameter_counts():
    counts = {}
    for variant, beta in [("base", 0), ("memory", 0), ("flex", 1), ("flex", 2), ("flex", 3)]:
        m = MemoryLM(Arch(variant, beta=beta, **SMALL))
        big = sum(p.numel() for p in m.parameters() if p.ndim > 1)
        counts[(variant, beta)] = (big, n_params(m), active_params(m))
    bigs = {c[0] for c in counts.values()}
    assert len(bigs) == 1  # every weight matrix count identical
    totals = [c[1] for c in counts.values()]
    assert max(totals) - min(totals) <= SMALL["n_layers"] * SMALL["d"]  # one norm vector per layer
    # active parameters grow by beta * d^2 per layer from MemoryLLM to Flex, and equal all for base
    d2L = SMALL["d"] ** 2 * SMALL["n_layers"]
    mem = counts[("memory", 0)][2]
    for beta in (1, 2, 3):
        assert counts[("flex", beta)][2] - mem == beta * d2L + SMALL["n_layers"] * SMALL["d"]
    assert counts[("base", 0)][2] == counts[("base", 0)][1]
    assert ffn_m_params(MemoryLM(Arch("memory", **SMALL))) == 3 * (3 * 48 * 128 + 48)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([8, 4, 2]), st.floats(1e-3, 1e3))
@example(999, 8, 1000.0).via("an entry near 0 in a row reaching 2e3, its code at 170.5000016")
def test_quantise_dequantise_bound(seed, bits, spread):
    x = np.random.default_rng(seed).normal(0, spread, (5, 7, 16)).astype(np.float32)
    x[0, 0] = 3.0  # a constant row
    q = quantize_rows(x, bits)
    y = dequantize_rows(q.codes, q.scale, q.lo, bits)
    assert q.codes.shape == (5, 7, 16 * bits // 8)
    err = np.abs(y.astype(np.float64) - x)
    # scale / 2 in exact arithmetic. In float32 (unit roundoff u = eps/2) x - lo, the division
    # by scale (itself rounded) and lo + scale * code each round at the row's magnitude
    # M = max|row|, not at |x|: at most 4uR (code misrounded near .5) + uR + uM <= 11 u M with
    # range R <= 2M, i.e. 5.5 eps M (worst seen over all 10001 seeds x 3 bits x 4 spreads:
    # 1.4 eps M). A bound of 1e-6 |x| failed for entries near 0 in wide rows.
    rounding = 6 * np.finfo(np.float32).eps * np.abs(x).max(-1, keepdims=True).astype(np.float64)
    assert np.all(err <= q.scale[..., None] / 2 + rounding)
    assert np.all(err[0, 0] == 0)


def test_more_bits_smaller_error():
    x = np.random.default_rng(0).normal(size=(2, 50, 32)).astype(np.float32)
    errs = [np.abs(dequantize_rows(*(lambda q: (q.codes, q.scale, q.lo))(quantize_rows(x, b)), b) - x).max()
            for b in (8, 4, 2)]
    assert errs[0] < errs[1] < errs[2]


@pytest.mark.parametrize("bits", [32, 16, 8, 4, 2])
def test_memmap_equals_in_memory(tmp_path, bits):
    table = build_tol(_model("memory"))
    disk = open_tol(save_tol(table, tmp_path / f"t{bits}", bits=bits))
    mem = ToL.in_memory(table, bits=bits)
    assert isinstance(next(iter(disk.arrays.values())), np.memmap)
    ids = _ids()
    for layer in range(SMALL["n_layers"]):
        assert torch.equal(disk(layer, ids), mem(layer, ids))
    assert disk.nbytes == mem.nbytes
    if bits == 32:
        assert torch.equal(disk(1, ids), table[1][ids])


def test_bad_token_id_raises():
    m = _model("memory")
    tol = ToL.in_memory(build_tol(m))
    bad = torch.tensor([[1, 2, SMALL["vocab"]]])
    with pytest.raises(ValueError, match="token id out of range"):
        m(bad)
    with pytest.raises(ToLError, match="token id out of range"):
        tol(0, bad)
    with pytest.raises(ToLError, match="layer 5 out of range"):
        tol(5, bad[:, :2])


def test_corrupted_tol_file_raises(tmp_path):
    folder = save_tol(build_tol(_model("memory")), tmp_path / "tol", bits=4)
    codes = folder / "codes.u8"
    data = bytearray(codes.read_bytes())
    data[10] ^= 0xFF
    codes.write_bytes(bytes(data))
    with pytest.raises(ToLError, match="sha256 does not match"):
        open_tol(folder)
    codes.write_bytes(bytes(data[:-3]))
    with pytest.raises(ToLError, match="truncated"):
        open_tol(folder, verify=False)
    (folder / "header.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ToLError, match="header"):
        open_tol(folder)


def test_base_has_no_tol_and_arch_validation():
    with pytest.raises(ValueError, match="no token-wise lookup"):
        build_tol(_model("base"))
    with pytest.raises(ValueError, match="variant"):
        Arch("moe")
    with pytest.raises(ValueError, match="beta"):
        Arch("memory", beta=2)
    with pytest.raises(ValueError, match="beta"):
        Arch("flex", beta=0)


@pytest.mark.parametrize("variant", ["base", "memory"])
def test_cached_decode_equals_full_forward(variant):
    m = _model(variant)
    prompt = _ids(1, 9)
    tol = ToL.in_memory(build_tol(m)) if variant == "memory" else None
    out = greedy_decode(m, prompt, 6, tol=tol)
    seq = prompt
    with torch.no_grad():
        for _ in range(6):
            seq = torch.cat([seq, m(seq)[:, -1:].argmax(-1)], 1)
    assert torch.equal(out, seq[0, 9:])


@pytest.mark.parametrize("bad", [{"n_seeds": 6}, {"n_test": 10}, {"alphas": (1.0, 0.25)},
                                 {"tol_bits": (16, 3)}, {"timing_d": 50}, {"timing_reps": 1},
                                 {"rss_d": 100}, {"rss_tokens": 0}, {"rss_tokens": 97}, {"rss_reps": 0},
                                 {"data_seed": -1}, {"timing_tokens": 97}])
def test_config_rejects_bad_values(bad):
    from minirepro.papers.memoryllm import Config

    with pytest.raises(ValueError):
        Config(**bad)


def test_cli_bad_parameter_exits_2_with_one_line(capsys):
    from minirepro.cli import main

    assert main(["run", "memoryllm", "--scale", "smoke", "-p", "n_test", "many"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "n_test" in err


def test_every_preset_is_a_valid_config():
    """The full preset once asked for 128 timing tokens, past the decoders' 128 positions."""
    from minirepro.papers.memoryllm import Config

    for scale in ("smoke", "book", "full"):
        cfg = Config.preset(scale)
        assert cfg.timing_tokens + 32 <= 128 and cfg.rss_tokens + 32 <= 128


def test_data_seed_draws_fresh_test_lines_from_the_same_generator():
    """None is the artifact corpus's test split; a data_seed gives other lines, deterministic,
    from the same fact table and copy pool, each with the answer its prompt implies."""
    from minirepro.core.lm.corpus import FACTS, solve
    from minirepro.papers.memoryllm.experiment import test_split

    recorded = test_split(60)
    assert [e.text for e in test_split(60, None)] == [e.text for e in recorded]
    fresh = test_split(60, 0)
    assert [e.text for e in test_split(60, 0)] == [e.text for e in fresh]  # deterministic
    other = test_split(60, 1000)
    assert {e.family for e in fresh} == {"facts", "copy"} and len(fresh) == 60
    assert len({e.text for e in fresh} & {e.text for e in recorded if e.family == "copy"}) == 0
    assert [e.text for e in fresh] != [e.text for e in other]
    for e in fresh:
        assert solve(e) == e.answer
        if e.family == "facts":
            assert FACTS[e.prompt.split()[-2]] == e.answer
