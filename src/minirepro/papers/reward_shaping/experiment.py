"""The chapter's experiment: train the RM, measure its biases, shape it, measure again."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from transformers.utils import logging as hf_logging

from minirepro.core import progress, set_seed
from minirepro.core.lm import load_substrate, reward_model
from minirepro.core.scale import ScaledConfig
from minirepro.papers.reward_shaping.bt import RewardHead, train_bt
from minirepro.papers.reward_shaping.data import (
    BIASES,
    contrast_pairs,
    make_preferences,
    make_question,
    random_response,
)
from minirepro.papers.reward_shaping.features import StateCache
from minirepro.papers.reward_shaping.metrics import EvalSet, build_eval_texts
from minirepro.papers.reward_shaping.shaping import (
    clean_probe,
    diff_of_means_probe,
    gram_schmidt,
    project_out,
)

LOW: tuple[str, ...] = ("length", "position", "hedge")   # the paper's low-complexity biases
DATA_SEED, PROBE_SEED, EVAL_SEED, BON_SEED = 1000, 2000, 3000, 4000


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature (see the page's parameters cell)."""

    substrate: str = "book"
    model_name: str | None = None
    n_pool: int = 1200
    n_train: int = 1000
    n_eval: int = 100
    n_probe: int = 64
    probe_sizes: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128)
    hidden: int = 0
    steps: int = 500
    lr: float = 3e-3
    weight_decay: float = 1e-2
    alpha: float = 1.0
    n_seeds: int = 5
    bon_prompts: int = 40
    bon_n: int = 8
    bon_temperature: float = 1.0

    PRESETS: ClassVar = {
        "smoke": {"substrate": "smoke", "n_pool": 120, "n_train": 100, "n_eval": 12, "n_probe": 16,
                  "probe_sizes": (4, 16), "n_seeds": 1, "bon_prompts": 6, "bon_n": 4},
        "book": {},
        "full": {"n_pool": 4000, "n_train": 3000, "n_eval": 400, "probe_sizes": (2, 4, 8, 16, 32, 64, 128, 256),
                 "n_seeds": 10, "bon_prompts": 200, "bon_n": 16},
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


@dataclass
class ProbePool:
    """States of contrast pairs for every bias and for correctness, drawn once; each seed's
    probes use a random subset of the pairs (questions disjoint from training and evaluation)."""

    pairs: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def build(cls, cache: StateCache, n: int, seed: int) -> ProbePool:
        names = ("correctness",) + BIASES
        return cls({b: (cache(a), cache(c)) for i, b in enumerate(names)
                    for a, c in [contrast_pairs(b, n, seed + i)]})

    def directions(self, n: int, rng: np.random.Generator, clean: bool = True,
                   biases: tuple[str, ...] = BIASES) -> dict[str, np.ndarray]:
        """§3: one difference-of-means probe per bias from ``n`` random pairs of the pool,
        cleaned by projecting out the correctness probe (its own ``n`` pairs) when ``clean``."""
        def probe(name: str) -> np.ndarray:
            a, b = self.pairs[name]
            if not 1 <= n <= len(a):
                raise ValueError(f"n={n} probe pairs requested; the pool holds {len(a)}")
            idx = rng.choice(len(a), size=n, replace=False)
            return diff_of_means_probe(a[idx], b[idx])
        corr = probe("correctness")
        return {b: clean_probe(probe(b), corr) if clean else probe(b) for b in biases}


@dataclass
class Run:
    """Everything the page shows."""

    cfg: Config
    per_seed: pd.DataFrame                 # one row per (seed, arm): every metric
    probe_curve: pd.DataFrame              # one row per (seed, n_probe)
    bon: pd.DataFrame                      # one row per (seed, arm)
    curves: list[list[float]]              # BT loss per seed
    shares: dict[str, float]               # realised correlations of the training pool
    n_states: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    d_model: int = 0
    heads: list[RewardHead] = field(default_factory=list)      # per seed
    probes: list[dict[str, np.ndarray]] = field(default_factory=list)  # per seed, cleaned
    eval_set: EvalSet | None = None
    probe_pool: ProbePool | None = None


def basis_of(probes: dict[str, np.ndarray], names: tuple[str, ...]) -> np.ndarray:
    """The Gram-Schmidt basis of the named probes (rows)."""
    return gram_schmidt([probes[n] for n in names])


def bon_candidates(sub, n_prompts: int, n: int, temperature: float, seed: int):
    """[reconstruction] Best-of-n candidates: the substrate LM samples the answer among the
    four options (its next-token distribution after ``text : <sentence> topic ?``); the
    surface form (fillers, hedge, style, markers) is drawn at random (a stand-in: the LM
    never wrote fillers). Returns texts ``(n_prompts, n)``, filler counts and correctness."""
    rng = np.random.default_rng(seed)
    tok, lm = sub.tokenizer, sub.model
    texts, fills, correct = [], [], []
    for _ in range(n_prompts):
        q = make_question(rng)
        ids = tok(f"text : {q.sentence} topic ?", return_tensors="pt")
        with torch.no_grad():
            logits = lm(**ids).logits[0, -1].double()
        opt_ids = [tok(" " + o)["input_ids"][-1] if tok(" " + o)["input_ids"][0] != tok.bos_token_id
                   else tok(" " + o)["input_ids"][1] for o in q.options]
        p = torch.softmax(logits[opt_ids] / temperature, 0).numpy()
        row_t, row_f, row_c = [], [], []
        for _ in range(n):
            o = q.options[int(rng.choice(4, p=p / p.sum()))]
            r = random_response(rng, q, option=o, verbose=bool(rng.random() < 0.5))
            row_t.append(r.text(q))
            row_f.append(r.n_fill)
            row_c.append(o == q.topic)
        texts.append(row_t)
        fills.append(row_f)
        correct.append(row_c)
    return texts, np.array(fills, float), np.array(correct, float)


def best_of_n(reward, states: np.ndarray, fills: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """Pick the top-reward candidate per prompt: its filler count, the drift (pick minus the
    candidates' mean filler count) and the pick's accuracy."""
    r = reward(states.reshape(-1, states.shape[-1])).reshape(fills.shape)
    k = np.argmax(r, axis=1)
    pick_f = fills[np.arange(len(k)), k]
    return {"pick_fill": float(pick_f.mean()), "drift": float((pick_f - fills.mean(1)).mean()),
            "pick_accuracy": float(correct[np.arange(len(k)), k].mean())}


def run_experiment(cfg: Config) -> Run:
    """Train one RM per seed of ``cfg.seeds``, probe, shape and measure every arm
    [reconstruction of §4]."""
    seeds = cfg.seeds
    t0 = time.perf_counter()
    set_seed(seeds[0])
    sub = load_substrate(cfg.substrate, model_name=cfg.model_name)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()   # the report that the new score head is untrained (it is meant to be)
    try:
        rm = reward_model(cfg.model_name or sub.path)
    finally:
        hf_logging.set_verbosity(level)
    cache = StateCache(rm.model, sub.tokenizer)
    pool = make_preferences(cfg.n_pool, DATA_SEED)
    hc, hr = cache(pool.chosen), cache(pool.rejected)
    ev = EvalSet(build_eval_texts(cfg.n_eval, EVAL_SEED), cache)
    pool_p = ProbePool.build(cache, max((cfg.n_probe,) + tuple(cfg.probe_sizes)), PROBE_SEED)
    bon_t, bon_f, bon_c = bon_candidates(sub, cfg.bon_prompts, cfg.bon_n, cfg.bon_temperature, BON_SEED)
    bon_h = np.stack([cache(row) for row in bon_t])
    t_feat = time.perf_counter() - t0
    rows, curve_rows, bon_rows, curves, heads, all_probes = [], [], [], [], [], []
    for s in progress(seeds, desc="seeds"):
        set_seed(s)
        rng = np.random.default_rng(s)
        idx = rng.choice(cfg.n_pool, size=cfg.n_train, replace=False)
        fit = train_bt(hc[idx], hr[idx], hidden=cfg.hidden, steps=cfg.steps, lr=cfg.lr,
                       weight_decay=cfg.weight_decay, seed=s)
        curves.append(fit.losses)
        heads.append(fit.head)
        probes = pool_p.directions(cfg.n_probe, np.random.default_rng([s, 1]))
        all_probes.append(probes)
        raw_probes = pool_p.directions(cfg.n_probe, np.random.default_rng([s, 1]), clean=False, biases=LOW)
        arms = {"raw": Shaper(fit.head),
                "shaped (low)": Shaper(fit.head, basis_of(probes, LOW), cfg.alpha),
                "uncleaned (low)": Shaper(fit.head, basis_of(raw_probes, LOW), cfg.alpha),
                "shaped (low + style)": Shaper(fit.head, basis_of(probes, LOW + ("style",)), cfg.alpha),
                "shaped (all)": Shaper(fit.head, basis_of(probes, BIASES), cfg.alpha)}
        for arm, f in arms.items():
            rows.append({"seed": s, "arm": arm, **ev.score(f)})
        for arm in ("raw", "shaped (low)"):
            bon_rows.append({"seed": s, "arm": arm, **best_of_n(arms[arm], bon_h, bon_f, bon_c)})
        for n in cfg.probe_sizes:
            pr = pool_p.directions(n, np.random.default_rng([s, 2, n]), biases=LOW)
            m = ev.score(Shaper(fit.head, basis_of(pr, LOW), cfg.alpha))
            curve_rows.append({"seed": s, "n_probe": n, "rb_accuracy": m["rb_accuracy"],
                               "low_strength": float(np.mean([m[f"strength/{b}"] for b in LOW]))})
    secs = {"features": t_feat, "total": time.perf_counter() - t0}
    return Run(cfg, pd.DataFrame(rows), pd.DataFrame(curve_rows), pd.DataFrame(bon_rows), curves,
               pool.shares, len(cache), secs, rm.config.hidden_size, heads, all_probes, ev, pool_p)
