"""Model-Dowser: the estimator against exact Jacobians, the masked update, equal fractions, bad input."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from minirepro.papers import model_dowser as md
from minirepro.papers.model_dowser.data import N_VIS, SEQ


def _mlp(seed: int = 0):
    torch.manual_seed(seed)
    return nn.Linear(5, 7), nn.Linear(7, 6)


def test_hutchinson_matches_exact_jacobian_row_norms_within_its_variance():
    lin1, lin2 = _mlp()
    x = torch.randn(3, 5)
    z = lin1(x).detach()

    def fn(zz):
        return lin2(torch.tanh(zz))

    exact = torch.stack([torch.func.jacrev(fn)(z[i:i + 1])[0, :, 0, :] for i in range(3)])  # (3, V, out)
    sq = (exact ** 2).sum(1)                                          # ||J_i||^2, (3, out)
    var1 = 2 * (sq ** 2 - (exact ** 4).sum(1))                       # variance of one probe
    R = 400
    est = md.hutchinson_sq_norms(fn, z, R, torch.Generator().manual_seed(1))
    zscore = (est - sq) / (var1 / R).sqrt().clamp_min(1e-12)
    assert zscore.abs().max() < 5, zscore
    assert (zscore.abs() < 2.5).float().mean() > 0.8
    # unbiased: averaging many independent estimates converges on the exact value
    many = torch.stack([md.hutchinson_sq_norms(fn, z, R, torch.Generator().manual_seed(s)) for s in range(20)]).mean(0)
    torch.testing.assert_close(many, sq, rtol=0.05, atol=1e-4)


def test_dowser_scores_match_the_exact_formula_on_a_small_network():
    lin1, lin2 = _mlp(3)
    x = torch.randn(4, 1, 5)  # 4 prompts, one position

    def forward():
        return lin2(torch.tanh(lin1(x)))[:, 0]

    z = lin1(x).detach()[:, 0]
    jac = torch.stack([torch.func.jacrev(lambda zz: lin2(torch.tanh(zz)))(z[i]) for i in range(4)])  # (4, V, out)
    jnorm = jac.pow(2).sum(1).sqrt()                                  # (4, out)
    exact = lin1.weight.detach().abs() * (jnorm.T @ x[:, 0].abs()) / 4
    got = md.dowser_scores(forward, {"lin1": lin1}, 3000, torch.Generator().manual_seed(0))["lin1"]
    torch.testing.assert_close(got, exact, rtol=0.08, atol=1e-5)


def test_masked_adamw_leaves_frozen_weights_bit_identical_and_is_adamw_otherwise():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    ref = copy.deepcopy(net)
    frozen_copy = copy.deepcopy(net)
    masks = [torch.rand(p.shape) < 0.3 for p in net.parameters()]
    opt = md.MaskedAdamW(list(net.parameters()), masks, lr=1e-2, weight_decay=0.5)
    opt_full = md.MaskedAdamW(list(ref.parameters()), [None] * 4, lr=1e-2, weight_decay=0.5)
    torch_ref = copy.deepcopy(frozen_copy)
    opt_torch = torch.optim.AdamW(torch_ref.parameters(), lr=1e-2, weight_decay=0.5)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    for _ in range(50):
        for model, o in ((net, opt), (ref, opt_full), (torch_ref, opt_torch)):
            o.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            o.step()
    for p, p0, m in zip(net.parameters(), frozen_copy.parameters(), masks):
        assert torch.equal(p[~m], p0[~m]), "a frozen weight moved"
        assert not torch.equal(p[m], p0[m])
    for a, b in zip(ref.parameters(), torch_ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return md.TinyMLLM(d=16, heads=2, layers=2, mlp=32, vis=8).eval()


@pytest.mark.parametrize("rho", [0.01, 0.1, 0.37, 1.0])
def test_equal_update_fractions_across_methods(small_model, rho):
    layers = md.finetune_linears(small_model, "deep")
    cfg = md.Config.preset("smoke", n_prompts=8, n_probes=2)
    for depth in ("shallow", "deep"):
        counts = {}
        for method in md.MASKED:
            masks = md.layer_masks(md.mask_scores(method, small_model, depth, cfg, seed=0), rho)
            counts[method] = {n: int(m.sum()) for n, m in masks.items()}
            for m in masks.values():
                assert int(m.sum()) == max(1, round(rho * m.numel()))
        assert len({tuple(sorted(c.items())) for c in counts.values()}) == 1
    # LoRA: the adapter size r (in + out) lies within one rank of rho * in * out per layer
    for n, r in md.lora_ranks(layers, rho).items():
        o, i = layers[n].weight.shape
        target = rho * o * i
        assert r == max(1, min(min(o, i), round(target / (o + i))))
        assert abs(r * (o + i) - target) <= (o + i) / 2 + 1e-9 or r in (1, min(o, i))


def test_lora_adapter_trains_only_adapters_and_merges_back(small_model):
    model = copy.deepcopy(small_model)
    layers = md.finetune_linears(model, "shallow")
    peft_model = md.lora_model(model, layers, 0.2, seed=0)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    n_lora = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    ranks = md.lora_ranks(layers, 0.2)
    assert n_lora == sum(r * sum(layers[n].weight.shape) for n, r in ranks.items())


@pytest.mark.parametrize("rho", [0.0, -0.1, 1.01, float("nan"), float("inf")])
def test_bad_fraction_raises(rho):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        md.check_fraction(rho)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        md.layer_masks({"a": torch.rand(3, 3)}, rho)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        md.lora_ranks({"a": nn.Linear(3, 3)}, rho)


def test_model_with_nothing_to_mask_raises():
    with pytest.raises(ValueError, match="no parameters to mask"):
        md.layer_masks({}, 0.1)
    with pytest.raises(ValueError, match="no parameters to mask"):
        md.dowser_scores(lambda: torch.zeros(2, 3), {}, 4, torch.Generator())
    with pytest.raises(ValueError, match="no parameters to mask"):
        md.magnitude_scores({})
    with pytest.raises(ValueError, match="no parameters"):
        md.MaskedAdamW([], [], lr=1e-3)
    with pytest.raises(ValueError, match="does not match"):
        md.MaskedAdamW([torch.zeros(3, requires_grad=True)], [torch.ones(2, dtype=torch.bool)])


def test_spider_blend_against_a_direct_numpy_reading():
    rng = np.random.default_rng(0)
    pre, new, g = (rng.normal(size=(5, 4)) for _ in range(3))

    def z(a):
        return (a - a.mean()) / a.std(ddof=1)

    ip, ift = 1 / (1 + np.exp(-z(np.abs(pre)))), 1 / (1 + np.exp(-z(np.abs(g))))
    c = np.where(ift > ip, ift / (ip + ift), 0.0)
    c = np.minimum(c / c[c > 0].mean(), 1.0)
    want = pre * (1 - c) + new * c
    got = md.spider_blend(*(torch.tensor(a) for a in (pre, new, g))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_post_hoc_merges_keep_the_stated_fraction():
    torch.manual_seed(0)
    pre, ft = torch.randn(20, 10), torch.randn(20, 10)
    for out in (md.graft(pre, ft, 0.1), md.model_tailor(pre, ft, torch.randn(20, 10), torch.rand(20, 10), 0.1)):
        assert int((out != pre).sum()) == 20
        changed = out != pre
        torch.testing.assert_close(out[changed], ft[changed])
    g = md.graft(pre, ft, 0.1)
    kept = (g != pre)
    assert (ft - pre).abs()[kept].min() >= (ft - pre).abs()[~kept].max()
    d = md.dare(pre, ft, 0.5, torch.Generator().manual_seed(0))
    changed = d != pre
    torch.testing.assert_close(d[changed], pre[changed] + 2 * (ft - pre)[changed])


def test_h_score_and_prompts():
    assert md.h_score(0.0, 0.0) == 0.0
    assert md.h_score(0.5, 1.0) == pytest.approx(2 / 3)
    ups = md.upstream_sets("test")
    assert set(ups) == set(md.UPSTREAM) and len(ups[md.UPSTREAM[3]]) == 100
    ds = md.downstream_set("train")
    assert ds.tokens.shape[1] == SEQ and (ds.tokens[:, :N_VIS] != ds.tokens[0, N_VIS]).all()
    x, y = md.split_digits("train")
    assert torch.equal(ds.target, (y + 1) % 10)


def test_artifact_model_loads_and_answers_upstream():
    pre = md.load_model()
    sets = md.upstream_sets("test")
    assert md.accuracy(pre, sets["which digit"]) > 0.9
    assert md.accuracy(pre, md.downstream_set("test")) < 0.2
