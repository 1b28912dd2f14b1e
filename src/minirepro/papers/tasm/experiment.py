"""The chapter's config and the comparison: every compressor at every kept fraction, on
held-out episodes in both formats, one evaluation seed at a time."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, compare_times, progress, set_seed
from minirepro.papers.tasm.compress import (
    budget,
    check_ratio,
    gather,
    h2o_select,
    random_select,
    snapkv_query_select,
    snapkv_select,
    tome_merge,
)
from minirepro.papers.tasm.data import FORMATS, make_episodes, shuffle_labels
from minirepro.papers.tasm.model import ICLTransformer, Prefill
from minirepro.papers.tasm.spread import SPREAD_FORMAT
from minirepro.papers.tasm.tasm import DELTA, Gate, tasm_compress

EVAL_SEED = 1_000  # evaluation episodes use seeds EVAL_SEED + seed (training used 100_000+)
METHODS = ("random", "H2O", "SnapKV", "ToMe", "TASM (prune)", "TASM (static core)", "TASM",
           "TASM (random gate)", "SnapKV (sees query)")
GATED = ("TASM", "TASM (random gate)")  # the methods that read the Latent Bank through a gate
NOT_COMPARABLE = ("SnapKV (sees query)",)  # compresses after seeing the query


@dataclass
class Config(ScaledConfig):
    """The miniature's sizes and TASM's knobs."""

    n_seeds: int = 5  # evaluation seeds (each draws its own held-out episodes)
    n_episodes: int = 640  # episodes per seed and format (the unit is a seed: enough episodes for power)
    n_way: int = 5  # classes per episode (the artifact was trained with 5)
    k_shot: int = 1  # demonstrations per class (the artifact was trained with 1)
    ratios: tuple = (0.1, 0.2, 0.3, 0.5)  # kept fractions of the demonstration cache
    formats: tuple = ("image-first",)  # episode formats evaluated (the artifact learned image-first)
    gamma: float = 0.5  # weight of the value-norm term in s_task
    bank_mult: float = 2.0  # Latent Bank size as a multiple of the Core size
    retrieve_frac: float = 0.25  # bank tokens fetched when the gate opens, as a fraction of the Core
    delta: float | None = None  # gate threshold on the JS divergence (None: calibrated, see calibrate_delta)
    gate_rate: float = 0.5  # the share of steps the calibrated gate opens on the tuning episodes
    tuning_seed: int = 500_000  # the episodes delta is calibrated on (never reported)
    timing_repeats: int = 15  # repeats of the latency measurement
    PRESETS: ClassVar = {"smoke": {"n_seeds": 1, "n_episodes": 60, "ratios": (0.1, 0.2),
                                   "timing_repeats": 5},
                         "book": {}, "full": {"n_seeds": 10, "n_episodes": 1000,
                                             "ratios": (0.05, 0.1, 0.2, 0.3, 0.5, 0.75)}}

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ratios = tuple(check_ratio(r) for r in self.ratios)
        if not self.formats or any(f not in FORMATS for f in self.formats):
            raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {self.formats}")
        if self.n_way < 2 or self.k_shot < 1:
            raise ValueError("need n_way >= 2 and k_shot >= 1 (an empty demonstration set is refused)")
        if not 0.0 < self.gate_rate < 1.0:
            raise ValueError(f"gate_rate must be in (0, 1), got {self.gate_rate}")
        if self.delta is not None and not self.delta >= 0.0:
            raise ValueError(f"delta must be a number >= 0 or None (calibrate), got {self.delta}")


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float((logits.argmax(-1) == labels).float().mean())


def compress_all(model: ICLTransformer, pre: Prefill, query_attn: list[torch.Tensor], ratio: float,
                 cfg: Config, seed: int, methods: tuple[str, ...] = METHODS) -> dict[str, dict]:
    """Each of ``methods``' compressed cache at kept fraction ``ratio``: name -> {"cache", "bank",
    "gate", "kept"} (``kept``: per-layer indices of the kept originals, for the figure). The gated
    methods need ``cfg.delta`` (calibrated beforehand, :func:`calibrate_delta`)."""
    T = pre.is_label.numel()
    B = pre.kv[0].k.shape[0]
    b = budget(T, ratio)
    gen = torch.Generator().manual_seed(seed * 1000 + int(ratio * 1000))
    out: dict[str, dict] = {}
    sel = {"random": lambda: [random_select(B, T, b, gen) for _ in pre.kv],
           "H2O": lambda: [h2o_select(a, b) for a in pre.attn],
           "SnapKV": lambda: [snapkv_select(a, b) for a in pre.attn],
           "SnapKV (sees query)": lambda: [snapkv_query_select(qa, b) for qa in query_attn]}
    for name, pick in sel.items():
        if name in methods:
            idx = pick()
            out[name] = {"cache": [gather(kv, i) for kv, i in zip(pre.kv, idx)], "kept": idx}
    if "ToMe" in methods:
        out["ToMe"] = {"cache": [tome_merge(kv, b) for kv in pre.kv], "kept": None}
    bank_size = min(T - b, math.ceil(cfg.bank_mult * b))
    full = tasm_compress(pre, b, bank_size, cfg.gamma)
    if "TASM (prune)" in methods:
        pruned = tasm_compress(pre, b, 0, cfg.gamma, merge=False)
        out["TASM (prune)"] = {"cache": pruned.core, "kept": pruned.core_idx}
    if "TASM (static core)" in methods:
        out["TASM (static core)"] = {"cache": full.core, "kept": full.core_idx, "merged": full.merged_frac}
    for name in GATED:
        if name not in methods:
            continue
        if cfg.delta is None:
            raise ValueError("the gated methods need cfg.delta: calibrate it first (calibrate_delta)")
        shuffle = torch.Generator().manual_seed(seed * 1000 + int(ratio * 1000) + 1) if name != "TASM" else None
        gate = Gate(top_m=max(1, math.ceil(cfg.retrieve_frac * b)), delta=cfg.delta, shuffle=shuffle)
        out[name] = {"cache": full.core, "bank": full.bank if bank_size > 0 else None, "gate": gate,
                     "kept": full.core_idx, "bank_size": bank_size}
    return out


def calibrate_delta(model: ICLTransformer, cfg: Config, ratio: float) -> dict:
    """Eq. (tasm-eq-gate), its threshold [reconstruction]: ``delta`` set on the tuning episodes
    (``cfg.tuning_seed``, never reported) to the ``1 - cfg.gate_rate`` quantile of the gate's
    Jensen-Shannon divergences at kept fraction ``ratio`` (image-first), so that the gate opens on
    about ``cfg.gate_rate`` of the (episode, query token, layer) steps there. The paper's
    ``delta = 0.002`` is a number for a large model's attention; in the miniature every divergence
    exceeds it. Returns ``{"delta", "rate", "quantiles", "rate_at_paper_delta"}`` (quantiles 0.1, 0.5,
    0.9 of the divergences; the share of steps the paper's delta would open)."""
    fmt = "image-first"
    ep = make_episodes(cfg.n_episodes, cfg.n_way, cfg.k_shot, EVAL_SEED + cfg.tuning_seed, "test")
    pre = model.prefill(ep.demo_patches, ep.demo_labels, fmt)
    b = budget(pre.is_label.numel(), ratio)
    bank_size = min(pre.is_label.numel() - b, math.ceil(cfg.bank_mult * b))
    full = tasm_compress(pre, b, bank_size, cfg.gamma)
    gate = Gate(top_m=max(1, math.ceil(cfg.retrieve_frac * b)), delta=0.0, log=[])
    model.answer(ep.query_patches, full.core, fmt, full.bank, gate)
    js = torch.cat(gate.log).double()
    delta = float(torch.quantile(js, 1.0 - cfg.gate_rate))
    q = [float(x) for x in torch.quantile(js, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))]
    return {"delta": delta, "rate": float((js > delta).double().mean()), "quantiles": q,
            "rate_at_paper_delta": float((js > DELTA).double().mean())}


def _row(base: dict, ratio: float, name: str, c: dict, logits: torch.Tensor, labels: torch.Tensor,
         info: dict) -> dict:
    opened = float(np.mean(info["open"])) if info["open"] else 0.0
    b = c["cache"][0].k.shape[2]
    return {**base, "ratio": ratio, "method": name, "accuracy": accuracy(logits, labels),
            "gpu_slots": b + opened * (c["gate"].top_m if "gate" in c else 0),
            "bank_slots": c.get("bank_size", 0), "gate_open": opened}


def run_seed(model: ICLTransformer, cfg: Config, seed: int,
             methods: tuple[str, ...] = METHODS) -> tuple[pd.DataFrame, dict]:
    """One evaluation seed: accuracy of every (format, kept fraction, method), plus the full
    context and shuffled-label controls. Returns the long table and, for the figures, the
    first episode's kept indices per method at each ratio (image-first)."""
    set_seed(seed)
    ep = make_episodes(cfg.n_episodes, cfg.n_way, cfg.k_shot, EVAL_SEED + seed, "test")
    shuf = shuffle_labels(ep, EVAL_SEED + seed)
    rows, kept = [], {}
    for fmt in cfg.formats:
        pre = model.prefill(ep.demo_patches, ep.demo_labels, fmt)
        T = pre.is_label.numel()
        logits, info = model.answer(ep.query_patches, pre.kv, fmt)
        base = {"seed": seed, "format": fmt}
        rows.append({**base, "ratio": 1.0, "method": "full context", "accuracy": accuracy(logits, ep.query_label),
                     "gpu_slots": T, "bank_slots": 0, "gate_open": 0.0})
        pre_s = model.prefill(shuf.demo_patches, shuf.demo_labels, fmt)
        rows.append({**base, "ratio": 1.0, "method": "shuffled labels",
                     "accuracy": accuracy(model.answer(ep.query_patches, pre_s.kv, fmt)[0], ep.query_label),
                     "gpu_slots": T, "bank_slots": 0, "gate_open": 0.0})
        for r in cfg.ratios:
            comp = compress_all(model, pre, info["attn"], r, cfg, seed, methods)
            for name, c in comp.items():
                lg, inf = model.answer(ep.query_patches, c["cache"], fmt, c.get("bank"), c.get("gate"))
                rows.append(_row(base, r, name, c, lg, ep.query_label, inf))
                if fmt == "image-first" and c["kept"] is not None:
                    kept[(r, name)] = [k[0].tolist() for k in c["kept"]]
    return pd.DataFrame(rows), kept


def run_experiment(cfg: Config, model: ICLTransformer) -> tuple[pd.DataFrame, dict]:
    """§4 in miniature: every method at every kept fraction, for every evaluation seed of
    ``cfg.seeds`` (the gated methods at ``cfg.delta``, which must be set). Returns the long table
    (one row per seed, format, ratio, method) and the first seed's kept indices for the figure."""
    tables, kept = [], {}
    for s in progress(cfg.seeds, desc="seeds"):
        t, k = run_seed(model, cfg, s)
        tables.append(t)
        kept = kept or k
    return pd.concat(tables, ignore_index=True), kept


SPREAD = "spread"  # the table's format name for the spread variant (label-first, local encoder)


SPREAD_METHODS = ("random", "H2O", "SnapKV", "ToMe", "TASM (prune)", "TASM (static core)")


def run_spread(cfg: Config, model: ICLTransformer) -> pd.DataFrame:
    """The spread variant (:mod:`minirepro.papers.tasm.spread`): the same comparison without the
    gated methods (the gate is calibrated for the ordinary learner), on the same held-out episodes
    per seed of ``cfg.seeds``, in the label-first format with the spread learner ``model``.
    Returns the long table with ``format == SPREAD``."""
    vcfg = replace(cfg, formats=(SPREAD_FORMAT,))
    tables = [run_seed(model, vcfg, s, SPREAD_METHODS)[0] for s in progress(cfg.seeds, desc="seeds (spread)")]
    return pd.concat(tables, ignore_index=True).assign(format=SPREAD)


def per_seed(table: pd.DataFrame, fmt: str, ratio: float, method: str) -> np.ndarray:
    """Accuracy per seed (sorted by seed) of one (format, ratio, method)."""
    sel = table[(table["format"] == fmt) & (table.method == method)
                & np.isclose(table.ratio, ratio if method not in ("full context", "shuffled labels") else 1.0)]
    return sel.sort_values("seed").accuracy.to_numpy()


def latency(model: ICLTransformer, cfg: Config, ratio: float, seed: int = 0) -> dict:
    """Median seconds of answering 64 queries with the full cache, TASM's static Core and TASM
    with the gate (compression done beforehand, offline), interleaved; with the cache sizes."""
    ep = make_episodes(64, cfg.n_way, cfg.k_shot, EVAL_SEED + 10_000 + seed, "test")
    fmt = "image-first"
    pre = model.prefill(ep.demo_patches, ep.demo_labels, fmt)
    comp = compress_all(model, pre, [a[:, :1] for a in pre.attn], ratio, cfg, seed, ("TASM",))
    c = comp["TASM"]
    fns = {"full context": lambda: model.answer(ep.query_patches, pre.kv, fmt),
           "TASM (static core)": lambda: model.answer(ep.query_patches, c["cache"], fmt),
           "TASM": lambda: model.answer(ep.query_patches, c["cache"], fmt, c["bank"], c["gate"])}
    t = compare_times(fns, repeats=cfg.timing_repeats, warmup=2)
    return {"medians": t.medians, "speedups": t.speedups,
            "slots": {"full context": pre.is_label.numel(), "TASM": c["cache"][0].k.shape[2]}}
