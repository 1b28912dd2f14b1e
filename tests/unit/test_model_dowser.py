"""Model-Dowser: the estimator against exact Jacobians, the masked update, equal fractions, bad input."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from minirepro.papers import model_dowser as md
from minirepro.papers.model_dowser.data import N_VIS, SEQ


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread, as the chapter runs (set_seed): on a loaded 2-core machine two threads
    make these many small backward passes some 40 times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


class _TwoPath(nn.Module):
    """A toy with the chapter's shape: an "image" path (``proj``, used only by prompts with an
    image, like the projector) added to the token path, then ``lin1`` -> tanh -> ``lin2``,
    pooled over T positions into V outputs per prompt."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.proj, self.lin1, self.lin2 = nn.Linear(3, 5), nn.Linear(5, 7), nn.Linear(7, 6)

    def head(self, z):                      # lin1's output (B, T, 7) -> outputs (B, 6)
        return self.lin2(torch.tanh(z)).mean(1)

    def forward(self, x, img=None):
        h = x if img is None else x + self.proj(img)
        return self.head(self.lin1(h))


def _exact_scores(net: _TwoPath, batches) -> dict[str, torch.Tensor]:
    """Eq. (model-dowser-eq-score) from exact Jacobians (``torch.func.jacrev``), prompt by prompt,
    averaged over every prompt of every batch that passes through the layer."""
    acc = {"proj": [], "lin1": []}
    for x, img in batches:
        for n in range(len(x)):
            h = x[n] if img is None else x[n] + net.proj(img[n])
            z1 = net.lin1(h).detach()
            j1 = torch.func.jacrev(lambda z: net.head(z[None])[0])(z1)       # (V, T, 7)
            jn = j1.pow(2).sum(0).sqrt().mean(0)                               # ||J_i|| pooled over T
            acc["lin1"].append(torch.outer(jn, h.detach().abs().mean(0)))
            if img is not None:
                zp = net.proj(img[n]).detach()
                xn = x[n]
                jp = torch.func.jacrev(lambda z, xn=xn: net.head(net.lin1(xn + z)[None])[0])(zp)  # (V, T, 5)
                acc["proj"].append(torch.outer(jp.pow(2).sum(0).sqrt().mean(0), img[n].abs().mean(0)))
    return {k: getattr(net, k).weight.detach().abs() * torch.stack(v).mean(0) for k, v in acc.items() if v}


def _batches(gen):
    """Three batches as the chapter's probes: two with images, then a text-only one (last)."""
    return [(torch.randn(3, 4, 5, generator=gen), torch.randn(3, 4, 3, generator=gen)),
            (torch.randn(2, 4, 5, generator=gen), torch.randn(2, 4, 3, generator=gen)),
            (torch.randn(4, 4, 5, generator=gen) * 3, None)]


def test_dowser_scores_over_several_batches_match_the_exact_score_over_all_prompts():
    """The score is a mean over every probe prompt: run over three batches (the layer hooked once
    per batch, the projector-like layer only on the first two), it must match the exact score
    over all nine prompts, and not the score of the last batch alone."""
    net = _TwoPath(1)
    batches = _batches(torch.Generator().manual_seed(2))

    def forward():
        return torch.cat([net(x, img) for x, img in batches])

    exact = _exact_scores(net, batches)
    got = md.dowser_scores(forward, {"proj": net.proj, "lin1": net.lin1}, 4000, torch.Generator().manual_seed(0))
    for k in ("proj", "lin1"):
        torch.testing.assert_close(got[k], exact[k], rtol=0.06, atol=1e-6)
    last = _exact_scores(net, batches[-1:])["lin1"]       # what a hook that overwrites would score
    assert (last - exact["lin1"]).abs().max() > 0.3 * exact["lin1"].abs().max()
    with_images = _exact_scores(net, batches[1:2])["proj"]  # the projector's last batch alone
    assert (with_images - exact["proj"]).abs().max() > 0.1 * exact["proj"].abs().max()


def test_dowser_scores_do_not_depend_on_how_the_prompts_are_batched():
    """The same prompts in one batch or in three give the same scores (the same probes xi, drawn
    over the concatenated outputs)."""
    net = _TwoPath(4)
    x = torch.randn(9, 4, 5, generator=torch.Generator().manual_seed(5))
    layers = {"lin1": net.lin1, "lin2": net.lin2}
    one = md.dowser_scores(lambda: net(x), layers, 16, torch.Generator().manual_seed(3))
    three = md.dowser_scores(lambda: torch.cat([net(x[:2]), net(x[2:6]), net(x[6:])]), layers, 16,
                             torch.Generator().manual_seed(3))
    for k in layers:
        torch.testing.assert_close(three[k], one[k], rtol=1e-5, atol=1e-8)


def test_dowser_scores_of_the_model_on_its_probe_batches_use_every_batch():
    """On the chapter's model and probes (three image batches, then text-only sums), a decoder
    layer's score over all four batches is the prompt-weighted mean of its scores on each batch
    alone, and the projector's the mean over the three image batches, up to Hutchinson noise."""
    torch.manual_seed(0)
    model = md.TinyMLLM(d=16, heads=2, layers=2, mlp=32, vis=8).eval()
    probes = md.probe_batches(16, torch.Generator().manual_seed(0))
    layers = {k: v for k, v in md.finetune_linears(model, "deep").items()
              if k in ("projector", "blocks.1.qkv", "blocks.0.fc2")}

    def scores(batches, seed, names):
        return md.dowser_scores(lambda: torch.cat([model.logits(b) for b in batches]),
                                {k: layers[k] for k in names}, 600, torch.Generator().manual_seed(seed))

    every = scores(probes, 0, list(layers))
    blocks = ["blocks.1.qkv", "blocks.0.fc2"]
    alone = [scores([b], 1 + i, blocks + (["projector"] if i < 3 else [])) for i, b in enumerate(probes)]
    sizes = [len(b) for b in probes]
    for name in blocks:
        want = sum(w * a[name] for w, a in zip(sizes, alone)) / sum(sizes)
        torch.testing.assert_close(every[name], want, rtol=0.1, atol=1e-6)
        assert not torch.allclose(every[name], alone[-1][name], rtol=0.1)  # not the text batch alone
    want = sum(w * a["projector"] for w, a in zip(sizes[:3], alone[:3])) / sum(sizes[:3])
    torch.testing.assert_close(every["projector"], want, rtol=0.1, atol=1e-6)
    assert not torch.allclose(every["projector"], alone[2]["projector"], rtol=0.1)  # not the last image batch


def test_dowser_scores_refuse_a_layer_the_forward_never_runs():
    net = _TwoPath(0)
    with pytest.raises(ValueError, match=r"never ran layers \['proj'\]"):
        md.dowser_scores(lambda: net(torch.randn(2, 4, 5)), {"proj": net.proj, "lin1": net.lin1}, 2,
                         torch.Generator().manual_seed(0))


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
