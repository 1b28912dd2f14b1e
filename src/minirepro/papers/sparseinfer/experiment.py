"""The chapter's config, one seed of the comparison, the sparsity sweep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core.lm.corpus import Corpus, Example, generate_split
from minirepro.core.lm.substrate import Substrate
from minirepro.core.progress import progress
from minirepro.core.scale import ScaledConfig
from minirepro.core.seed import set_seed
from minirepro.papers.sparseinfer.baselines import (
    fit_similarity_index,
    predictor_recall,
    static_hot_sets,
    train_dejavu,
)
from minirepro.papers.sparseinfer.neurons import (
    capture_preactivations,
    ffn_blocks,
    sparse_layer_ids,
)
from minirepro.papers.sparseinfer.protocol import (
    METHODS,
    Item,
    core_jaccard_matrix,
    decode_item,
    full_set_mismatches,
    make_items,
    method_rules,
    prefill_with_preacts,
    score_item,
    similarity,
    stability,
    token_jaccard_matrix,
    token_overlap_control,
    trace_example,
)


@dataclass
class Config(ScaledConfig):
    """The chapter's knobs.

    Attributes:
        substrate: the shipped substrate model (:func:`~minirepro.core.lm.load_substrate` preset).
        token_sparsity: ``alpha``, token-wise top fraction of the positive pre-activations (paper: 0.2).
        sparsity: ``gamma``, kept fraction of FFN neurons per sparsified layer (paper: 0.4).
        layers: ``"middle"`` (paper: first and last layer stay dense) or ``"all"``.
        n_seeds: seeds (test prompts, calibration prompts, random draws).
        qa_families: corpus families scored by exact match.
        n_qa: test prompts per QA family per seed.
        n_trace: trace-writing prompts per seed.
        n_sweep: how many of the first seed's trace prompts the sparsity sweep uses.
        n_topic: ``text`` prompts per seed for the similarity analysis.
        stab_families: multi-token QA families added to the traces in the same-family
            stability test (``n_trace`` prompts each; their continuation is the answer).
        n_calib: calibration prompts (static hot, DejaVu, clusters), fresh per seed.
        n_clusters: KMeans clusters of the similarity-guided variant.
        dejavu_rank, dejavu_steps: the low-rank predictor's rank and training steps.
        sweep: kept fractions of the sparsity sweep (first seed, trace prompts).
        decode_tokens: tokens generated in the timing runs.
        n_timing_prompts: prompts timed (each a median of ``timing_repeats``).
        timing_repeats: timing samples per arm and prompt.
        offload_steps: decoding steps timed per prompt in the memory-offload setting.
        offload_repeats: timing samples per step and arm in the memory-offload setting.
        offload_wide: ``d_model`` of the random paper-width FFN layer timed beside the
            model (``d_ff = 4 d_model``; 0 skips it).
        threads: torch threads (one: the model is too small to gain from two).
    """

    substrate: str = "book-opt"
    model_name: str | None = None  # a local checkpoint folder or hub id instead of the shipped model
    token_sparsity: float = 0.2
    sparsity: float = 0.4
    layers: str = "middle"
    n_seeds: int = 5
    qa_families: tuple[str, ...] = ("text", "facts", "relay", "arith")
    n_qa: int = 8
    n_trace: int = 16
    n_sweep: int = 8
    n_topic: int = 32
    stab_families: tuple[str, ...] = ("copy", "multi")
    n_calib: int = 64
    n_clusters: int = 8
    dejavu_rank: int = 16
    dejavu_steps: int = 60
    sweep: tuple[float, ...] = (0.1, 0.2, 0.4, 0.6, 0.8)
    decode_tokens: int = 32
    n_timing_prompts: int = 5
    timing_repeats: int = 5
    offload_steps: int = 16
    offload_repeats: int = 3
    offload_wide: int = 1024
    threads: int = 1

    PRESETS: ClassVar = {
        "smoke": {"substrate": "smoke-opt", "n_seeds": 1, "n_qa": 4, "n_trace": 6, "n_sweep": 4, "n_topic": 8,
                  "n_calib": 16, "n_clusters": 4, "dejavu_steps": 20, "sweep": (0.2, 0.8),
                  "decode_tokens": 8, "n_timing_prompts": 2, "timing_repeats": 3,
                  "offload_steps": 8, "offload_wide": 0},
        "book": {},
        "full": {"n_seeds": 10, "n_qa": 50, "n_trace": 60, "n_sweep": 30, "n_topic": 80, "n_calib": 300,
                 "n_clusters": 12, "dejavu_steps": 300, "timing_repeats": 9},
    }

    def __post_init__(self) -> None:
        for name in ("token_sparsity", "sparsity"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        if self.layers not in ("middle", "all"):
            raise ValueError(f"layers must be 'middle' or 'all', got {self.layers!r}")
        if self.offload_steps < 1 or self.offload_repeats < 1 or self.offload_wide < 0:
            raise ValueError("need offload_steps >= 1, offload_repeats >= 1, offload_wide >= 0")
        if self.n_trace < 2 or self.n_topic < 4 or self.n_calib < self.n_clusters or self.n_seeds < 1:
            raise ValueError("need n_trace >= 2, n_topic >= 4, n_calib >= n_clusters, n_seeds >= 1")
        self.sweep = tuple(float(s) for s in self.sweep)
        self.qa_families = tuple(self.qa_families)
        self.stab_families = tuple(self.stab_families)


def _prompts(corpus: Corpus, families: tuple[str, ...], n: int, seed: int) -> list[Example]:
    """``n`` fresh examples of ``families`` (in turn), generated from ``seed`` (never a training line)."""
    cfg = dataclasses.replace(corpus.config, families=families, train_weights=())  # weights: train split only
    return generate_split(cfg, n, seed, Corpus(cfg), "test")


def test_items(sub: Substrate, cfg: Config, seed: int) -> list[Item]:
    """The seed's QA items (``n_qa`` per family) and trace items (``n_trace``)."""
    fams = cfg.qa_families
    qa = _prompts(sub.corpus, fams, cfg.n_qa * len(fams), 10_000 + seed)
    tr = [trace_example(e) for e in _prompts(sub.corpus, ("relay",), cfg.n_trace, 30_000 + seed)]
    return make_items(sub.tokenizer, qa, "qa") + make_items(sub.tokenizer, tr, "trace")


@dataclass
class Calibration:
    """Offline parts fitted on calibration prompts: static sets, clusters, DejaVu predictors."""

    layers: list[int]
    static: dict[int, torch.Tensor]
    index: Any
    predictors: dict
    acts: list[list[torch.Tensor]]


@torch.no_grad()
def dense_io(model, ids: torch.Tensor, layers) -> tuple[list[torch.Tensor], dict, dict]:
    """One dense forward over ``ids (T,)``: per-layer pre-activations ``(T, d_ff)`` and, for ``layers``, FFN inputs and pre-activations."""
    store: dict = {}
    inputs: dict = {}
    with capture_preactivations(model, store, inputs):
        model(input_ids=ids[None], use_cache=False)
    acts = [torch.cat(store[i]) for i in sorted(store)]
    return acts, {i: torch.cat(inputs[i]) for i in layers}, {i: acts[i] for i in layers}


def calibration_data(sub: Substrate, cfg: Config, seed: int):
    """Dense pre-activations of ``n_calib`` fresh prompts of the test families (seed ``20_000 + seed``).

    Returns ``(layers, acts, xs, ys)``: the sparsified layers, per prompt the per-layer
    pre-activations ``(T, d_ff)``, and per sparsified layer the stacked FFN inputs and pre-activations.
    """
    model, tok = sub.model, sub.tokenizer
    layers = sparse_layer_ids(len(ffn_blocks(model)), cfg.layers)
    fams = tuple(dict.fromkeys((*cfg.qa_families, "relay")))
    acts, xs, ys = [], {}, {}
    for e in _prompts(sub.corpus, fams, cfg.n_calib, 20_000 + seed):
        a, x, y = dense_io(model, torch.tensor(tok(e.text)["input_ids"]), layers)
        acts.append(a)
        for i in layers:
            xs.setdefault(i, []).append(x[i])
            ys.setdefault(i, []).append(y[i])
    return layers, acts, {i: torch.cat(v) for i, v in xs.items()}, {i: torch.cat(v) for i, v in ys.items()}


def calibrate(sub: Substrate, cfg: Config, seed: int) -> Calibration:
    """Fit the baselines' offline parts (static hot sets, clusters, DejaVu) on :func:`calibration_data`."""
    layers, acts, xs, ys = calibration_data(sub, cfg, seed)
    static = static_hot_sets(acts, layers, cfg.sparsity)
    index = fit_similarity_index(acts, layers, cfg.n_clusters, cfg.token_sparsity, cfg.sparsity, seed=seed)
    preds = train_dejavu(xs, ys, rank=cfg.dejavu_rank, steps=cfg.dejavu_steps, seed=seed,
                         max_tokens=512)
    return Calibration(layers, static, index, preds, acts)


def evaluate(sub: Substrate, items: list[Item], cal: Calibration, cfg: Config, seed: int,
             methods: tuple[str, ...] = METHODS, sparsity: float | None = None) -> pd.DataFrame:
    """One row per (method, item): ``correct`` (QA), ``nll``, ``n_decoded``, ``agree`` with dense."""
    sparsity = cfg.sparsity if sparsity is None else sparsity
    model, tok = sub.model, sub.tokenizer
    rng = np.random.default_rng(seed)
    eos = tok.eos_token_id
    pres = [prefill_with_preacts(model, it.prompt) for it in items]  # the same for every method
    dense = [decode_item(model, it, "dense", None, cal.layers, len(it.cont), eos, it.task == "qa", pre)
             for it, pre in zip(items, pres)]
    rows = []
    for m in methods:
        kind, rule = method_rules(m, cal.layers, cfg.token_sparsity, sparsity, rng, cal.static,
                                  cal.index, cal.predictors)
        for it, dn, pre in zip(items, dense, pres):
            d = dn if m == "dense" else decode_item(model, it, kind, rule, cal.layers, len(it.cont),
                                                    eos, it.task == "qa", pre)
            s = score_item(it, d, dn, tok)
            rows.append({"seed": seed, "method": m, "task": it.task, "family": it.family,
                         "correct": s.correct, "nll": s.nll, "n_decoded": s.n_decoded, "agree": s.agree})
    return pd.DataFrame(rows)


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, method): QA exact match, and per task the NLL per decoded token and the agreement."""
    out = []
    for (seed, m), g in rows.groupby(["seed", "method"], sort=False):
        r: dict[str, Any] = {"seed": seed, "method": m}
        qa = g[g.task == "qa"]
        r["em"] = float(qa["correct"].astype(float).mean()) if len(qa) else float("nan")
        for f, gf in qa.groupby("family", sort=False):
            r[f"em {f}"] = float(gf["correct"].astype(float).mean())
        for task, gt in g.groupby("task", sort=False):
            n = gt["n_decoded"].sum()
            r[f"nll {task}"] = float(gt["nll"].sum() / n) if n else float("nan")
            r[f"agree {task}"] = float(gt["agree"].sum() / n) if n else float("nan")
        out.append(r)
    return pd.DataFrame(out)


def run_seed(sub: Substrate, cfg: Config, seed: int, methods: tuple[str, ...] = METHODS) -> dict[str, Any]:
    """Everything for one seed: every method's scores, stability, similarity, predictor recall."""
    set_seed(seed, threads=cfg.threads)
    model, tok = sub.model, sub.tokenizer
    cal = calibrate(sub, cfg, seed)
    items = test_items(sub, cfg, seed)
    rows = evaluate(sub, items, cal, cfg, seed, methods)
    trace = [it for it in items if it.task == "trace"]
    io = [dense_io(model, torch.cat([it.prompt, it.cont]), cal.layers) for it in trace]
    stab = stability([a for a, _, _ in io], [len(it.prompt) for it in trace], cal.layers,
                     cfg.token_sparsity, cfg.sparsity)
    recall = predictor_recall(cal.predictors, {i: torch.cat([x[i] for _, x, _ in io]) for i in cal.layers},
                              {i: torch.cat([y[i] for _, _, y in io]) for i in cal.layers}, cfg.sparsity)
    fam = family_stability(sub, cfg, seed, trace, [a for a, _, _ in io], cal.layers)
    texts = _prompts(sub.corpus, ("text",), cfg.n_topic, 40_000 + seed)
    ids = [tok(e.prompt)["input_ids"] for e in texts]
    tacts = [dense_io(model, torch.tensor(t), cal.layers)[0] for t in ids]
    sim, M, names = similarity(tacts, [e.topic for e in texts], cal.layers, cfg.token_sparsity, cfg.sparsity)
    special = set(tok.all_special_ids)
    control = token_overlap_control(
        core_jaccard_matrix(tacts, cal.layers, cfg.token_sparsity, cfg.sparsity),
        token_jaccard_matrix([[t for t in x if t not in special] for x in ids]), [e.topic for e in texts])
    exact = full_set_mismatches(model, items, cal.layers, tok.eos_token_id)
    active = float(np.mean([float((y[i] > 0).float().mean()) for _, _, y in io for i in cal.layers]))
    return {"rows": rows, "stability": stab, "stability_family": fam, "similarity": sim,
            "topic_control": control, "topic_matrix": (M, names),
            "dejavu_recall": recall, "layers": cal.layers, "active_fraction": active,
            "full_set_mismatches": exact}


def run_experiment(cfg: Config, sub: Substrate, methods: tuple[str, ...] = METHODS) -> dict[str, Any]:
    """:func:`run_seed` over ``cfg.seeds``: the long table of item scores, per-seed summaries and
    observations."""
    seeds = cfg.seeds
    runs = [run_seed(sub, cfg, s, methods) for s in progress(seeds, desc="seeds")]
    rows = pd.concat([r["rows"] for r in runs], ignore_index=True)
    return {"runs": runs, "rows": rows, "summary": summarise(rows),
            "stability": pd.DataFrame([r["stability"] for r in runs], index=seeds),
            "similarity": pd.DataFrame([r["similarity"] for r in runs], index=seeds),
            "stability_family": pd.DataFrame([r["stability_family"]["all"] for r in runs], index=seeds),
            "topic_control": pd.DataFrame([r["topic_control"] for r in runs], index=seeds)}


def family_stability(sub: Substrate, cfg: Config, seed: int, trace: list[Item],
                     trace_acts: list[list[torch.Tensor]], layers: list[int]) -> dict[str, dict[str, float]]:
    """Stability with the "other" continuation drawn from the prompt's own family.

    The trace items (family ``"trace"``, dense pre-activations ``trace_acts``) plus
    ``n_trace`` fresh prompts of each of ``cfg.stab_families`` (seed ``50_000 + seed``),
    whose continuation is the reference answer. Returns ``{"all": ..., family: ...}``,
    each a :func:`stability` dict; ``"all"`` pools the families, pairing within each.
    """
    model, tok = sub.model, sub.tokenizer
    fam_items = make_items(tok, _prompts(sub.corpus, cfg.stab_families, cfg.n_trace * len(cfg.stab_families),
                                         50_000 + seed), "qa") if cfg.stab_families else []
    items = [*trace, *fam_items]
    acts = [*trace_acts, *(dense_io(model, torch.cat([it.prompt, it.cont]), layers)[0] for it in fam_items)]
    groups = [it.family for it in items]
    lens = [len(it.prompt) for it in items]
    out = {"all": stability(acts, lens, layers, cfg.token_sparsity, cfg.sparsity, groups=groups)}
    for f in dict.fromkeys(groups):
        pick = [j for j, g in enumerate(groups) if g == f]
        out[f] = stability([acts[j] for j in pick], [lens[j] for j in pick], layers,
                           cfg.token_sparsity, cfg.sparsity)
    return out


def run_sweep(sub: Substrate, cfg: Config, seed: int,
              methods: tuple[str, ...] = ("SparseInfer", "random", "static hot")) -> pd.DataFrame:
    """Agreement with dense and NLL on the trace prompts for fixed-set methods at every kept fraction in ``cfg.sweep``."""
    set_seed(seed, threads=cfg.threads)
    items = [it for it in test_items(sub, cfg, seed) if it.task == "trace"][:cfg.n_sweep]
    layers, acts, _, _ = calibration_data(sub, cfg, seed)
    out = []
    for g in progress(cfg.sweep, desc="sparsity sweep"):
        cal = Calibration(layers, static_hot_sets(acts, layers, g), None, None, acts)
        s = summarise(evaluate(sub, items, cal, cfg, seed, ("dense", *methods), sparsity=g))
        out.append(s[s.method != "dense"].assign(kept=g))
    return pd.concat(out, ignore_index=True)
