"""The chapter's experiment: per seed, draw fresh texts, encode them once with the frozen LM,
train a Bradley-Terry head, probe, null, and measure every arm."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from minirepro.core import progress, set_seed
from minirepro.core.lm import load_model
from minirepro.core.scale import ScaledConfig
from minirepro.papers.reward_shaping.bt import RewardHead, train_bt
from minirepro.papers.reward_shaping.data import (
    BIASES,
    BUNDLE,
    make_bundles,
    make_preferences,
    split_facts,
)
from minirepro.papers.reward_shaping.features import StateCache
from minirepro.papers.reward_shaping.metrics import BundleStates, probe_accuracy
from minirepro.papers.reward_shaping.shaping import (
    clean_probe,
    diff_of_means_probe,
    gram_schmidt,
    project_out,
)

LOW: tuple[str, ...] = ("length", "position", "hedge")   # the paper's low-complexity biases
FIRST: tuple[str, ...] = ("length", "position")          # the basis before a bias is "added afterwards"
PROBE_MEMBERS: tuple[str, ...] = tuple(m for m in BUNDLE if m not in ("follow_wrong", "verbose_ood"))


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature (see the page's parameters cell)."""

    model_name: str = "smollm2-135m"
    n_train: int = 24
    n_candidates: int = 4
    n_eval: int = 16
    n_probe: int = 8
    probe_sizes: tuple[int, ...] = (2, 4, 8)
    hidden: int = 0
    steps: int = 400
    lr: float = 1e-2
    weight_decay: float = 1e-2
    alpha: float = 1.0
    n_seeds: int = 5
    batch_size: int = 32

    PRESETS: ClassVar = {
        "smoke": {"model_name": "lm-smoke", "n_train": 12, "n_eval": 6, "n_probe": 4,
                  "probe_sizes": (2, 4), "n_seeds": 1, "steps": 100},
        "book": {},
        "full": {"n_train": 200, "n_eval": 100, "n_probe": 40, "probe_sizes": (2, 4, 8, 16, 32, 40),
                 "n_seeds": 10},
    }


@dataclass
class Shaper:
    """Eq. (reward-shaping-eq-shaped): a trained head and a probe basis, reward(h) = head(h - alpha B^T B h)."""

    head: RewardHead
    basis: np.ndarray | None = None
    alpha: float = 1.0

    def __call__(self, h: np.ndarray) -> np.ndarray:
        if self.basis is None:
            return self.head.reward(h)
        return self.head.reward(project_out(h, self.basis, self.alpha).astype(np.float32))


def probes_from(bs: BundleStates, idx: np.ndarray | None = None, clean: bool = True,
                biases: tuple[str, ...] = BIASES) -> dict[str, np.ndarray]:
    """§3: one difference-of-means probe per bias from the bundles ``idx``, cleaned by projecting
    out the correctness probe of the same bundles when ``clean``."""
    corr = diff_of_means_probe(*bs.pair("correctness", idx))
    out = {}
    for b in biases:
        p = diff_of_means_probe(*bs.pair(b, idx))
        out[b] = clean_probe(p, corr) if clean else p
    return out


def basis_of(probes: dict[str, np.ndarray], names: tuple[str, ...]) -> np.ndarray:
    """The Gram-Schmidt basis of the named probes (rows)."""
    return gram_schmidt([probes[n] for n in names])


@dataclass
class Run:
    """Everything the page shows."""

    cfg: Config
    per_seed: pd.DataFrame                 # one row per (seed, arm): every metric
    probe_curve: pd.DataFrame              # one row per (seed, n_probe)
    probe_acc: pd.DataFrame                # one row per seed: held-out pair accuracy of each probe
    curves: list[list[float]]              # BT loss per seed
    shares: pd.DataFrame                   # realised correlations of each seed's training pairs
    n_texts: int = 0
    n_pairs: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    d_model: int = 0
    heads: list[RewardHead] = field(default_factory=list)      # per seed
    probes: list[dict[str, np.ndarray]] = field(default_factory=list)  # per seed, cleaned
    eval_sets: list[BundleStates] = field(default_factory=list)         # per seed
    probe_sets: list[BundleStates] = field(default_factory=list)        # per seed

    def extend(self, other: Run) -> Run:
        """This run with ``other``'s seeds appended (the same config; seconds add up)."""
        if other.cfg != self.cfg:
            raise ValueError("cannot join runs of different configs")
        cat = lambda a, b: pd.concat([a, b], ignore_index=True)  # noqa: E731
        return Run(self.cfg, cat(self.per_seed, other.per_seed), cat(self.probe_curve, other.probe_curve),
                   cat(self.probe_acc, other.probe_acc), self.curves + other.curves,
                   cat(self.shares, other.shares), self.n_texts + other.n_texts, self.n_pairs + other.n_pairs,
                   {k: self.seconds.get(k, 0.0) + other.seconds.get(k, 0.0)
                    for k in set(self.seconds) | set(other.seconds)},
                   self.d_model, self.heads + other.heads, self.probes + other.probes,
                   self.eval_sets + other.eval_sets, self.probe_sets + other.probe_sets)


def load_backbone(cfg: Config):
    """The frozen backbone (the decoder without its LM head) and tokenizer that ``cfg`` names."""
    model, tok = load_model(cfg.model_name)
    return (model.get_decoder() if hasattr(model, "get_decoder") else model.model), tok


def score_arms(cfg: Config, s: int, head: RewardHead, probes: dict[str, np.ndarray],
               raw_probes: dict[str, np.ndarray], ps: BundleStates, es: BundleStates
               ) -> tuple[list[dict], list[dict]]:
    """One seed's rows: every arm's metrics on the evaluation bundles, and the probe-size curve
    (probes from ``n`` random probe bundles for each ``n`` of ``cfg.probe_sizes``)."""
    arms = {"raw": Shaper(head),
            "shaped (low)": Shaper(head, basis_of(probes, LOW), cfg.alpha),
            "uncleaned (low)": Shaper(head, basis_of(raw_probes, LOW), cfg.alpha),
            "shaped (length, position)": Shaper(head, basis_of(probes, FIRST), cfg.alpha),
            "shaped (all)": Shaper(head, basis_of(probes, BIASES), cfg.alpha)}
    rows = [{"seed": s, "arm": arm, **es.score(f)} for arm, f in arms.items()]
    curve_rows = []
    rng = np.random.default_rng([s, 2])
    for n in cfg.probe_sizes:
        if n > cfg.n_probe:
            raise ValueError(f"probe size {n} exceeds the {cfg.n_probe} probe bundles")
        idx = rng.choice(cfg.n_probe, size=n, replace=False)
        m = es.score(Shaper(head, basis_of(probes_from(ps, idx, biases=LOW), LOW), cfg.alpha))
        curve_rows.append({"seed": s, "n_probe": n, "accuracy": m["accuracy"],
                           "low_strength": float(np.mean([m[f"strength/{b}"] for b in LOW]))})
    return rows, curve_rows


def run_experiment(cfg: Config, part: list[int] | None = None, backbone=None) -> Run:
    """Train one RM head per seed (all of ``cfg.seeds``, or ``part`` of them: a notebook may run
    them in several cells) on that seed's fresh pairs, probe, null and measure every arm
    [reconstruction of §4]. ``backbone``: a ``(decoder, tokenizer)`` from :func:`load_backbone`
    to reuse (else it is loaded).

    Raises:
        ValueError: ``part`` is empty or holds a seed that is not one of ``cfg.seeds``.
    """
    seeds = list(cfg.seeds if part is None else part)
    if not seeds:
        raise ValueError("no seeds to run")
    stray = sorted(set(seeds) - set(cfg.seeds))
    if stray:
        raise ValueError(f"seeds {stray} are not the Config's seeds {list(cfg.seeds)}")
    t0 = time.perf_counter()
    set_seed(seeds[0])
    backbone, tok = backbone if backbone is not None else load_backbone(cfg)
    t_load = time.perf_counter() - t0
    t_feat = 0.0
    rows, curve_rows, acc_rows, share_rows, curves, heads = [], [], [], [], [], []
    all_probes, evals, probe_sets = [], [], []
    n_texts = n_pairs = 0
    for s in progress(seeds, desc="seeds"):
        set_seed(s)
        train_f, probe_f, eval_f = split_facts(s)
        pref = make_preferences(cfg.n_train, 3 * s + 1, train_f, cfg.n_candidates)
        pb = make_bundles(cfg.n_probe, 3 * s + 2, probe_f)
        eb = make_bundles(cfg.n_eval, 3 * s + 3, eval_f)
        t1 = time.perf_counter()
        cache = StateCache(backbone, tok, batch_size=cfg.batch_size)
        cache(pref.chosen + pref.rejected + [b[m] for b in pb for m in PROBE_MEMBERS]
              + [b[m] for b in eb for m in BUNDLE])           # one batched pass over the seed's texts
        t_feat += time.perf_counter() - t1
        n_texts += len(cache)
        n_pairs += len(pref.chosen)
        hc, hr = cache(pref.chosen), cache(pref.rejected)
        ps, es = BundleStates(pb, cache, PROBE_MEMBERS), BundleStates(eb, cache)
        fit = train_bt(hc, hr, hidden=cfg.hidden, steps=cfg.steps, lr=cfg.lr,
                       weight_decay=cfg.weight_decay, seed=s, standardize=True)
        curves.append(fit.losses)
        heads.append(fit.head)
        share_rows.append({"seed": s, "pairs": len(pref.chosen), **pref.shares,
                           "train_accuracy": float(np.mean(fit.head.reward(hc) > fit.head.reward(hr)))})
        probes = probes_from(ps)
        all_probes.append(probes)
        raw_probes = probes_from(ps, clean=False, biases=LOW)
        corr = diff_of_means_probe(*ps.pair("correctness"))
        acc_rows.append({"seed": s, **{b: probe_accuracy(probes[b], *es.pair(b)) for b in BIASES},
                         "correctness": probe_accuracy(corr, *es.pair("correctness")),
                         "length_ood": probe_accuracy(probes["length"], *es.pair("length_ood"))})
        arm_rows, c_rows = score_arms(cfg, s, fit.head, probes, raw_probes, ps, es)
        rows += arm_rows
        curve_rows += c_rows
        evals.append(es)
        probe_sets.append(ps)
    secs = {"load": t_load, "features": t_feat, "total": time.perf_counter() - t0}
    return Run(cfg, pd.DataFrame(rows), pd.DataFrame(curve_rows), pd.DataFrame(acc_rows), curves,
               pd.DataFrame(share_rows), n_texts, n_pairs, secs, backbone.config.hidden_size, heads,
               all_probes, evals, probe_sets)
