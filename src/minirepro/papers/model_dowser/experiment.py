"""The chapter's experiment: every method fine-tunes the pretrained model on the downstream
task, at both depths, over several seeds, and is scored on upstream and downstream accuracy."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from minirepro.core import ScaledConfig, progress
from minirepro.core.stats import per_seed_wide, seed_summary
from minirepro.papers.model_dowser import baselines as B
from minirepro.papers.model_dowser.data import UPSTREAM, Batch, downstream_set, upstream_sets
from minirepro.papers.model_dowser.dowser import (
    MaskedAdamW,
    check_fraction,
    dowser_scores,
    layer_masks,
    probe_batches,
    state_bytes,
)
from minirepro.papers.model_dowser.model import TinyMLLM, accuracy, finetune_linears

TRAINED = ("full FT", "LoRA", "Model-Dowser", "magnitude", "Wanda", "random", "SPIDER")
POST_HOC = ("Grafting", "DARE", "ModelTailor")
METHODS = TRAINED + POST_HOC
MASKED = ("Model-Dowser", "magnitude", "Wanda", "random")


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature. The paper: 2 B-7 B MLLMs, rho = 0.1, last 5-32 decoder layers.

    ``seed`` is the first reported seed (seed 0 chose ``ft_steps`` and ``lr``, so it is never
    reported); a run's seeds are ``seeds`` = seed .. seed + n_seeds - 1."""

    seed: int = 1
    rho: float = 0.1
    ft_steps: int = 50
    batch_size: int = 64
    lr: float = 1e-2
    weight_decay: float = 0.01
    n_prompts: int = 64
    n_probes: int = 8
    n_seeds: int = 5
    depths: tuple[str, ...] = ("shallow", "deep")
    sweep_fractions: tuple[float, ...] = (0.02, 0.1, 0.3, 1.0)
    sweep_methods: tuple[str, ...] = ("Model-Dowser", "random")
    sweep_seeds: int = 1
    n_test: int = 0
    methods: tuple[str, ...] = METHODS
    ZERO_COUNTS: ClassVar = ("n_test",)  # n_test = 0: every test prompt (EvalSets.build)
    PRESETS: ClassVar = {
        "smoke": {"ft_steps": 20, "batch_size": 32, "n_seeds": 1, "n_prompts": 16, "n_probes": 2,
                  "n_test": 150, "methods": tuple(m for m in METHODS if m != "LoRA"), "sweep_fractions": (0.1, 1.0), "sweep_methods": ("Model-Dowser",)},
        "book": {},
        "full": {"ft_steps": 400, "n_seeds": 10, "n_prompts": 256, "n_probes": 32,
                 "sweep_fractions": (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0), "sweep_seeds": 3},
    }


def h_score(up: float, down: float) -> float:
    """The H-score, the harmonic mean ``2 a b / (a + b)`` of upstream and downstream accuracy
    (0 when both are 0); no normalisation by the zero-shot or fine-tuned accuracies."""
    return 0.0 if up + down == 0 else 2 * up * down / (up + down)


@dataclass
class EvalSets:
    """Held-out prompts: one batch per upstream task, the downstream batch, and the
    downstream training prompts."""

    upstream: dict[str, Batch]
    downstream: Batch
    train: Batch

    @classmethod
    def build(cls, n_test: int = 0) -> EvalSets:
        """The sets; ``n_test > 0`` keeps the first ``n_test`` test prompts of each image task."""
        if n_test < 0:
            raise ValueError(f"n_test must be >= 0 (0: all), got {n_test}")
        up, down = upstream_sets("test"), downstream_set("test")
        if n_test:
            keep = torch.arange(min(n_test, len(down)))
            up = {t: (b if t == UPSTREAM[3] else b.take(keep)) for t, b in up.items()}
            down = down.take(keep)
        return cls(up, down, downstream_set("train"))


def evaluate(model: TinyMLLM, sets: EvalSets) -> dict[str, float]:
    """Upstream accuracy per task and their mean, downstream accuracy and the H-score."""
    up = {t: accuracy(model, b) for t, b in sets.upstream.items()}
    row = {f"up: {t}": v for t, v in up.items()}
    row["upstream"] = float(np.mean(list(up.values())))
    row["downstream"] = accuracy(model, sets.downstream)
    row["H"] = h_score(row["upstream"], row["downstream"])
    return row


def _train(model, params, opt, sets: EvalSets, cfg: Config, gen: torch.Generator, after_step=None) -> list[float]:
    """Cross-entropy steps on downstream training prompts; returns the loss every 10 steps."""
    model.train()
    curve, run = [], []
    for step in range(cfg.ft_steps):
        b = sets.train.take(torch.randint(0, len(sets.train), (cfg.batch_size,), generator=gen))
        loss = F.cross_entropy(model.logits(b), b.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if after_step is not None:
            after_step()
        run.append(loss.item())
        if (step + 1) % 10 == 0:
            curve.append(float(np.mean(run)))
            run = []
    model.eval()
    return curve


def _prepare(pre: TinyMLLM, depth: str):
    model = copy.deepcopy(pre).requires_grad_(False)
    layers = finetune_linears(model, depth)
    for lin in layers.values():
        lin.weight.requires_grad_(True)
    return model, layers


def mask_scores(method: str, pre: TinyMLLM, depth: str, cfg: Config, seed: int,
                probes: list[Batch] | None = None) -> dict[str, torch.Tensor]:
    """The per-weight scores of a mask method on the pretrained model (lowest = trainable).
    Model-Dowser and Wanda read ``probes`` (default: the synthetic probe prompts)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    model, layers = _prepare(pre, depth)
    probes = probes if probes is not None else probe_batches(cfg.n_prompts, gen)

    def forward():
        return torch.cat([model.logits(b) for b in probes])
    if method == "Model-Dowser":
        return dowser_scores(forward, layers, cfg.n_probes, gen)
    if method == "magnitude":
        return B.magnitude_scores(layers)
    if method == "Wanda":
        return B.wanda_scores(forward, layers)
    if method == "random":
        return B.random_scores(layers, gen)
    raise ValueError(f"unknown mask method {method!r}; expected one of {MASKED}")


def run_method(method: str, pre: TinyMLLM, depth: str, cfg: Config, seed: int, sets: EvalSets,
               rho: float | None = None) -> tuple[TinyMLLM, dict]:
    """Fine-tune a copy of ``pre`` with one trained method; returns the model and a record
    (seconds including scoring, extra state bytes, update fraction, loss curve)."""
    rho = check_fraction(cfg.rho if rho is None else rho)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    model, layers = _prepare(pre, depth)
    weights = [lin.weight for lin in layers.values()]
    n_total = sum(w.numel() for w in weights)
    after, extra, n_upd = None, [], n_total
    if method in MASKED:
        masks = layer_masks(mask_scores(method, pre, depth, cfg, seed), rho)
        opt = MaskedAdamW(weights, [masks[n] for n in layers], lr=cfg.lr, weight_decay=cfg.weight_decay)
        extra, n_upd = list(masks.values()), int(sum(m.sum() for m in masks.values()))
    elif method == "full FT" or method == "SPIDER":
        opt = MaskedAdamW(weights, [None] * len(weights), lr=cfg.lr, weight_decay=cfg.weight_decay)
        if method == "SPIDER":
            pre_w = [w.detach().clone() for w in weights]
            gsum = [torch.zeros_like(w) for w in weights]
            extra = pre_w + gsum

            def after():
                with torch.no_grad():
                    for w, p0, g in zip(weights, pre_w, gsum):
                        g += w.grad
                        w.copy_(B.spider_blend(p0, w, g))
    elif method == "LoRA":
        for w in weights:
            w.requires_grad_(False)
        model = B.lora_model(model, layers, rho, seed)
        weights = [p for n, p in model.named_parameters() if p.requires_grad]
        n_upd = sum(w.numel() for w in weights)
        opt = MaskedAdamW(weights, [None] * len(weights), lr=cfg.lr, weight_decay=cfg.weight_decay)
        extra = list(weights)
    else:
        raise ValueError(f"unknown trained method {method!r}; expected one of {TRAINED}")
    curve = _train(model, weights, opt, sets, cfg, gen, after)
    if method == "LoRA":
        model = model.merge_and_unload()
    if method == "SPIDER":
        n_upd = int(sum((w != p0).sum() for w, p0 in zip(weights, pre_w)))
    seconds = time.perf_counter() - t0
    opt_state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    return model, {"seconds": seconds, "extra bytes": state_bytes(opt_state + extra),
                   "update fraction": n_upd / n_total, "curve": curve}


def downstream_grads(model: TinyMLLM, layers, sets: EvalSets, cfg: Config, gen: torch.Generator,
                     n_batches: int = 8) -> tuple[dict, dict]:
    """Mean gradient and mean squared minibatch gradient (a diagonal Fisher stand-in) of the
    downstream loss for each layer's weight, over ``n_batches`` training minibatches."""
    grad = {n: torch.zeros_like(lin.weight) for n, lin in layers.items()}
    fisher = {n: torch.zeros_like(lin.weight) for n, lin in layers.items()}
    for lin in layers.values():
        lin.weight.requires_grad_(True)
    for _ in range(n_batches):
        b = sets.train.take(torch.randint(0, len(sets.train), (cfg.batch_size,), generator=gen))
        gs = torch.autograd.grad(F.cross_entropy(model.logits(b), b.target),
                                 [lin.weight for lin in layers.values()])
        for n, g in zip(layers, gs):
            grad[n] += g / n_batches
            fisher[n] += g * g / n_batches
    for lin in layers.values():
        lin.weight.requires_grad_(False)
    return grad, fisher


def post_hoc(method: str, pre: TinyMLLM, ft: TinyMLLM, depth: str, cfg: Config, seed: int,
             sets: EvalSets) -> tuple[TinyMLLM, dict]:
    """Grafting, DARE or Model Tailor applied to the full fine-tuning result ``ft``."""
    rho = check_fraction(cfg.rho)
    gen = torch.Generator().manual_seed(20_000 + seed)
    t0 = time.perf_counter()
    model = copy.deepcopy(ft).requires_grad_(False)
    pre_l, ft_l, out_l = (finetune_linears(m, depth) for m in (pre, ft, model))
    if method == "ModelTailor":
        probe = copy.deepcopy(ft)
        grad, fisher = downstream_grads(probe, finetune_linears(probe, depth), sets, cfg, gen)
    with torch.no_grad():
        for n in out_l:
            p0, p1 = pre_l[n].weight, ft_l[n].weight
            if method == "Grafting":
                new = B.graft(p0, p1, rho)
            elif method == "DARE":
                new = B.dare(p0, p1, rho, gen)
            elif method == "ModelTailor":
                new = B.model_tailor(p0, p1, grad[n], fisher[n], rho)
            else:
                raise ValueError(f"unknown post-hoc method {method!r}; expected one of {POST_HOC}")
            out_l[n].weight.copy_(new)
    n_upd = sum(int((out_l[n].weight != pre_l[n].weight).sum()) for n in out_l)
    n_total = sum(lin.weight.numel() for lin in out_l.values())
    return model, {"seconds": time.perf_counter() - t0, "update fraction": n_upd / n_total}


def run_seed(pre: TinyMLLM, cfg: Config, seed: int, depth: str, sets: EvalSets,
             methods: tuple[str, ...] = METHODS) -> tuple[list[dict], dict[str, list[float]]]:
    """Every method on one seed and depth: rows of metrics, and the training curves."""
    unknown = set(methods) - set(METHODS)
    if unknown or "Model-Dowser" not in methods:
        raise ValueError(f"methods must include Model-Dowser and come from {METHODS}; unknown: {sorted(unknown)}")
    rows, curves, ft_info = [], {}, None
    trained = {}
    for m in [m for m in methods if m in TRAINED] or []:
        model, info = run_method(m, pre, depth, cfg, seed, sets)
        curves[m] = info.pop("curve")
        trained[m] = (model, info)
        rows.append({"method": m, "seed": seed, "depth": depth, **info, **evaluate(model, sets)})
    ft_model, ft_info = trained.get("full FT", (None, None))
    for m in [m for m in methods if m in POST_HOC]:
        if ft_model is None:
            raise ValueError("post-hoc methods need 'full FT' among the methods")
        model, info = post_hoc(m, pre, ft_model, depth, cfg, seed, sets)
        info["seconds"] += ft_info["seconds"]
        info["extra bytes"] = ft_info["extra bytes"] + state_bytes(
            [lin.weight for lin in finetune_linears(pre, depth).values()])  # keeps theta_pre
        rows.append({"method": m, "seed": seed, "depth": depth, **info, **evaluate(model, sets)})
    return rows, curves


@dataclass
class Experiment:
    """The chapter's results: ``table`` (one row per method, seed, depth), ``sweep`` (H-score
    against the update fraction), the training ``curves`` of the first seed, and the
    pretrained model's own row."""

    table: pd.DataFrame
    sweep: pd.DataFrame
    curves: dict = field(default_factory=dict)
    pretrained: dict = field(default_factory=dict)


def run_sweep(pre: TinyMLLM, cfg: Config, seeds: list[int], sets: EvalSets) -> pd.DataFrame:
    """H-score against the update fraction (shallow depth) for ``cfg.sweep_methods``."""
    rows = []
    jobs = [(m, r, s) for s in seeds[: cfg.sweep_seeds] for m in cfg.sweep_methods for r in cfg.sweep_fractions]
    for m, r, s in progress(jobs, desc="fraction sweep"):
        if r == cfg.rho:
            continue  # taken from the main table
        model, info = run_method(m, pre, "shallow", cfg, s, sets, rho=r)
        ev = evaluate(model, sets)
        rows.append({"method": m, "rho": r, "seed": s, "update fraction": info["update fraction"],
                     "upstream": ev["upstream"], "downstream": ev["downstream"], "H": ev["H"]})
    return pd.DataFrame(rows)


def run_experiment(cfg: Config, pre: TinyMLLM | None = None) -> Experiment:
    """The chapter's experiment: :func:`run_seed` for every seed of ``cfg.seeds`` and depth,
    then the sweep."""
    from minirepro.papers.model_dowser.loading import load_model

    pre = pre if pre is not None else load_model()
    seeds = cfg.seeds
    sets = EvalSets.build(cfg.n_test)
    rows, curves = [], {}
    for depth in cfg.depths:
        for s in progress(seeds, desc=f"{depth} fine-tuning"):
            r, c = run_seed(pre, cfg, s, depth, sets, methods=tuple(cfg.methods))
            rows += r
            if s == seeds[0]:
                curves[depth] = c
    table = pd.DataFrame(rows)
    sweep = run_sweep(pre, cfg, seeds, sets)
    main = table[(table.depth == "shallow") & table.method.isin(cfg.sweep_methods)
                 & table.seed.isin(seeds[: cfg.sweep_seeds])]
    main = main.assign(rho=cfg.rho)[["method", "rho", "seed", "update fraction", "upstream", "downstream", "H"]]
    sweep = pd.concat([sweep, main], ignore_index=True).sort_values(["method", "rho", "seed"])
    return Experiment(table, sweep.reset_index(drop=True), curves, evaluate(pre, sets))


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and 95% t interval over seeds of upstream, downstream and H per depth and method
    (``minirepro.core.stats.seed_summary``)."""
    return seed_summary(table, ["depth", "method"], ["upstream", "downstream", "H"], index=False)


def per_seed(table: pd.DataFrame, depth: str, column: str = "H") -> pd.DataFrame:
    """``column`` of every method at one depth, one row per seed (aligned for paired rules)."""
    return per_seed_wide(table, column, depth=depth)


__all__ = ["Config", "EvalSets", "Experiment", "METHODS", "MASKED", "POST_HOC", "TRAINED", "evaluate",
           "h_score", "mask_scores", "per_seed", "post_hoc", "run_experiment", "run_method", "run_seed",
           "run_sweep", "summarise", "mask_overlap"]


def mask_overlap(pre: TinyMLLM, cfg: Config, seed: int, depth: str = "shallow") -> tuple[pd.DataFrame, dict]:
    """Per layer, the Jaccard overlap of Model-Dowser's trainable set (synthetic probes) with
    the magnitude, Wanda and random masks and with Model-Dowser probed on real upstream
    training prompts; also returns the scores of Model-Dowser and magnitude."""
    ups = upstream_sets("train")
    real = [b.take(torch.arange(cfg.n_prompts // 4)) for b in ups.values()]
    scores = {m: mask_scores(m, pre, depth, cfg, seed) for m in MASKED}
    scores["Model-Dowser (real data)"] = mask_scores("Model-Dowser", pre, depth, cfg, seed, probes=real)
    masks = {m: layer_masks(s, cfg.rho) for m, s in scores.items()}
    base = masks["Model-Dowser"]
    cols = {}
    for m, mk in masks.items():
        if m != "Model-Dowser":
            cols[m] = {n: float((mk[n] & base[n]).sum() / (mk[n] | base[n]).sum()) for n in base}
    return pd.DataFrame(cols), {m: scores[m] for m in ("Model-Dowser", "magnitude")}
