"""One seed of the chapter's comparison, and the sparsity sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core.lm.corpus import generate_split
from minirepro.core.lm.pretrain import PretrainedLM
from minirepro.core.progress import progress
from minirepro.core.scale import ScaledConfig
from minirepro.core.seed import set_seed
from minirepro.papers.sparseinfer.baselines import (
    fit_similarity_index,
    predictor_recall,
    static_hot_sets,
    train_dejavu,
)
from minirepro.papers.sparseinfer.core import capture_preactivations, ffn_blocks, sparse_layer_ids
from minirepro.papers.sparseinfer.experiment import (
    METHODS,
    dense_preacts,
    evaluate_method,
    make_items,
    method_rules,
    similarity,
    stability,
)


@dataclass
class SparseInferConfig(ScaledConfig):
    """The chapter's knobs.

    Attributes:
        token_sparsity: ``alpha``, token-wise top fraction of the positive pre-activations (paper: 0.2).
        sparsity: ``gamma``, kept fraction of FFN neurons per sparsified layer (paper: 0.4).
        layers: ``"middle"`` (paper: first and last layer stay dense) or ``"all"``.
        n_prompts: test prompts per seed (families in turn).
        n_sweep_prompts: how many of them the sparsity sweep uses.
        n_calib: calibration prompts from the train split (static hot, DejaVu, clusters).
        n_clusters: KMeans clusters of the similarity-guided variant.
        dejavu_rank, dejavu_steps: the low-rank predictor's rank and training steps.
        prefix_frac: share of each prompt used as the prefill.
        sweep: kept fractions of the sparsity sweep.
        decode_tokens: tokens generated in the timing run.
        timing_repeats: timing samples per arm (medians reported).
        threads: torch threads for the experiment (one: the model is too small to gain from two).
    """

    token_sparsity: float = 0.2
    sparsity: float = 0.4
    layers: str = "middle"
    n_prompts: int = 64
    n_sweep_prompts: int = 32
    n_calib: int = 120
    n_clusters: int = 8
    dejavu_rank: int = 16
    dejavu_steps: int = 100
    prefix_frac: float = 0.5
    sweep: tuple[float, ...] = (0.1, 0.2, 0.4, 0.6, 0.8)
    decode_tokens: int = 32
    timing_repeats: int = 9
    threads: int = 1

    PRESETS: ClassVar = {
        "smoke": {"n_prompts": 32, "n_sweep_prompts": 16, "n_calib": 48, "n_clusters": 4, "dejavu_steps": 60,
                  "sweep": (0.2, 0.4, 0.8), "decode_tokens": 16, "timing_repeats": 5},
        "book": {},
        "full": {"n_prompts": 400, "n_sweep_prompts": 200, "n_calib": 600, "n_clusters": 12, "dejavu_steps": 400,
                 "timing_repeats": 21},
    }

    def __post_init__(self) -> None:
        for name in ("token_sparsity", "sparsity"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        if self.layers not in ("middle", "all"):
            raise ValueError(f"layers must be 'middle' or 'all', got {self.layers!r}")
        if self.n_prompts < 4 or self.n_calib < self.n_clusters:
            raise ValueError("need n_prompts >= 4 and n_calib >= n_clusters")
        self.sweep = tuple(float(s) for s in self.sweep)


@dataclass
class Calibration:
    """Offline artefacts fitted on training prompts: static sets, clusters, DejaVu predictors."""

    layers: list[int]
    static: dict[int, torch.Tensor]
    index: Any
    predictors: dict
    recall: float = float("nan")
    extra: dict = field(default_factory=dict)


@torch.no_grad()
def calibrate(lm: PretrainedLM, cfg: SparseInferConfig, seed: int, sparsity: float | None = None) -> Calibration:
    """Fit the offline parts of the baselines on ``n_calib`` training prompts (seeded choice)."""
    sparsity = cfg.sparsity if sparsity is None else sparsity
    model, tok = lm.model, lm.tokenizer
    layers = sparse_layer_ids(len(ffn_blocks(model)), cfg.layers)
    rng = np.random.default_rng(seed)
    train = lm.corpus.train
    chosen = [train[j] for j in rng.choice(len(train), size=min(cfg.n_calib, len(train)), replace=False)]
    acts, xs, ys = [], {}, {}
    for e in chosen:
        ids = torch.tensor(tok(e.prompt)["input_ids"])
        store, inputs = {}, {}
        with capture_preactivations(model, store, inputs):
            model(input_ids=ids[None], use_cache=False)
        acts.append([torch.cat(store[i]) for i in sorted(store)])
        for i in layers:
            xs.setdefault(i, []).append(torch.cat(inputs[i]))
            ys.setdefault(i, []).append(torch.cat(store[i]))
    xs = {i: torch.cat(v) for i, v in xs.items()}
    ys = {i: torch.cat(v) for i, v in ys.items()}
    static = static_hot_sets(acts, layers, sparsity)
    index = fit_similarity_index(acts, layers, cfg.n_clusters, cfg.token_sparsity, sparsity, seed=seed)
    preds = train_dejavu(xs, ys, rank=cfg.dejavu_rank, steps=cfg.dejavu_steps, seed=seed)
    return Calibration(layers, static, index, preds, extra={"xs": xs, "ys": ys})


def test_examples(lm: PretrainedLM, cfg: SparseInferConfig, seed: int):
    """Fresh test prompts for ``seed`` (a split the model never saw, generated from seed 10_000 + seed)."""
    return generate_split(lm.corpus.config, cfg.n_prompts, 10_000 + seed)


def run_seed(lm: PretrainedLM, cfg: SparseInferConfig, seed: int,
             methods: tuple[str, ...] = METHODS) -> dict[str, Any]:
    """Everything for one seed: quality of every method, stability, similarity, predictor recall."""
    set_seed(seed, threads=cfg.threads)
    model, tok = lm.model, lm.tokenizer
    cal = calibrate(lm, cfg, seed)
    examples = test_examples(lm, cfg, seed)
    items = make_items(tok, examples, cfg.prefix_frac)
    rng = np.random.default_rng(seed)
    rows = []
    for m in progress(methods, desc=f"methods (seed {seed})"):
        kind, rule = method_rules(m, cal.layers, cfg.token_sparsity, cfg.sparsity, rng,
                                  cal.static, cal.index, cal.predictors)
        q = evaluate_method(model, tok, items, kind, rule, cal.layers)
        rows.append({"seed": seed, "method": m, "ppl": q.ppl, "accuracy": q.accuracy,
                     **{f"acc_{f}": v for f, v in q.per_family.items()}})
    acts = [dense_preacts(model, it.ids) for it in items]
    stab = stability(acts, items, cal.layers, cfg.token_sparsity, cfg.sparsity)
    prompt_acts = [[a[:it.answer_pos] for a in A] for A, it in zip(acts, items)]
    text = [j for j, e in enumerate(examples) if e.family == "text"]
    sim_topic, M, names = similarity([prompt_acts[j] for j in text], [examples[j].topic for j in text],
                                     cal.layers, cfg.token_sparsity, cfg.sparsity)
    sim_family, Mf, fnames = similarity(prompt_acts, [e.family for e in examples], cal.layers,
                                        cfg.token_sparsity, cfg.sparsity)
    test_x, test_y = _token_io(model, items, cal.layers)
    recall = predictor_recall(cal.predictors, test_x, test_y, cfg.sparsity)
    return {"quality": pd.DataFrame(rows), "stability": stab, "similarity_topic": sim_topic,
            "topic_matrix": (M, names), "similarity_family": sim_family,
            "family_matrix": (Mf, fnames), "dejavu_recall": recall, "layers": cal.layers,
            "active_fraction": float(np.mean([float((y > 0).float().mean()) for y in test_y.values()]))}


@torch.no_grad()
def _token_io(model, items, layers):
    xs, ys = {}, {}
    for it in items:
        store, inputs = {}, {}
        with capture_preactivations(model, store, inputs):
            model(input_ids=it.ids[None], use_cache=False)
        for i in layers:
            xs.setdefault(i, []).append(torch.cat(inputs[i]))
            ys.setdefault(i, []).append(torch.cat(store[i]))
    return {i: torch.cat(v) for i, v in xs.items()}, {i: torch.cat(v) for i, v in ys.items()}


def run_sweep(lm: PretrainedLM, cfg: SparseInferConfig, seed: int,
              methods: tuple[str, ...] = ("SparseInfer", "random", "static hot")) -> pd.DataFrame:
    """Continuation perplexity and accuracy of fixed-set methods at every kept fraction in ``cfg.sweep``."""
    set_seed(seed, threads=cfg.threads)
    model, tok = lm.model, lm.tokenizer
    examples = test_examples(lm, cfg, seed)[:cfg.n_sweep_prompts]
    items = make_items(tok, examples, cfg.prefix_frac)
    rng = np.random.default_rng(seed)
    layers = sparse_layer_ids(len(ffn_blocks(model)), cfg.layers)
    calib = _calibration_acts(lm, cfg, seed) if "static hot" in methods else None
    rows = []
    for g in progress(cfg.sweep, desc="sparsity sweep"):
        static = static_hot_sets(calib, layers, g) if calib is not None else None
        for m in methods:
            kind, rule = method_rules(m, layers, cfg.token_sparsity, g, rng, static=static)
            q = evaluate_method(model, tok, items, kind, rule, layers)
            rows.append({"kept": g, "method": m, "ppl": q.ppl, "accuracy": q.accuracy})
    dense = evaluate_method(model, tok, items, "dense", None, layers)
    rows.append({"kept": 1.0, "method": "dense", "ppl": dense.ppl, "accuracy": dense.accuracy})
    return pd.DataFrame(rows)


@torch.no_grad()
def _calibration_acts(lm, cfg, seed):
    rng = np.random.default_rng(seed)
    train = lm.corpus.train
    chosen = [train[j] for j in rng.choice(len(train), size=min(cfg.n_calib, len(train)), replace=False)]
    return [dense_preacts(lm.model, torch.tensor(lm.tokenizer(e.prompt)["input_ids"])) for e in chosen]


def settle_claims(claims: dict, quality: pd.DataFrame, runs: list[dict], cfg: SparseInferConfig) -> dict[str, str]:
    """Apply the rules stated in the chapter to the measurements; returns ``{claim: verdict}``."""
    from minirepro.results import decide

    stab = [r["stability"] for r in runs]
    beats_random = all(s["self"] >= s["random"] + 0.1 for s in stab)
    beats_other = all(s["self"] > s["other"] for s in stab)
    claims["stability"].settle(
        "self {:.2f} vs other {:.2f} vs random {:.2f}".format(
            np.mean([s["self"] for s in stab]), np.mean([s["other"] for s in stab]), stab[0]["random"]),
        decide(beats_random and beats_other, partly=beats_random))
    sim = [r["similarity_topic"] for r in runs]
    gaps = [s["within"] - s["across"] for s in sim]
    claims["similarity"].settle(
        "within {:.2f} vs across {:.2f}".format(np.mean([s["within"] for s in sim]),
                                                np.mean([s["across"] for s in sim])),
        decide(all(g >= 0.05 for g in gaps), partly=all(g > 0 for g in gaps)))
    q = quality.pivot_table(index="seed", columns="method", values=["ppl", "accuracy"])
    ppl, acc = q["ppl"], q["accuracy"]
    close = (ppl["SparseInfer"].mean() <= 1.10 * ppl["dense"].mean()
             and acc["SparseInfer"].mean() >= acc["dense"].mean() - 0.05)
    beats = bool(((ppl["SparseInfer"] < ppl["random"]) & (ppl["SparseInfer"] < ppl["static hot"])).all())
    claims["quality"].settle(
        "ppl {:.3g} vs dense {:.3g} (random {:.3g}, static {:.3g}); acc {:.2f} vs {:.2f}".format(
            ppl["SparseInfer"].mean(), ppl["dense"].mean(), ppl["random"].mean(),
            ppl["static hot"].mean(), acc["SparseInfer"].mean(), acc["dense"].mean()),
        decide(close and beats, partly=close or beats))
    return {k: c.verdict for k, c in claims.items()}
