"""The chapter's experiment: train the stand-in families, run the benchmark, analyse it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from minirepro.core import ScaledConfig, progress
from minirepro.papers.conservationbench import analysis
from minirepro.papers.conservationbench.conditions import (
    FRAME_COUNTS,
    PERMUTATIONS,
    SELECTIONS,
    TEMPLATES,
    trial_table,
)
from minirepro.papers.conservationbench.generator import (
    ANSWERS,
    PROPERTIES,
    Video,
    generate,
    measured_answer,
)
from minirepro.papers.conservationbench.models import (
    StandIn,
    StandInSpec,
    encode,
    frame_features,
    noisy_log_features,
    null_family,
    planted_family,
)

FAMILIES = ("planted", "null")


@dataclass
class Config(ScaledConfig):
    """Sizes of the benchmark and of the stand-ins' training."""

    n_pairs: int = 48  # pairs per property in the test benchmark (the paper's 48)
    n_train_pairs: int = 12  # pairs per property in the stand-ins' training benchmark
    n_train: int = 3000  # training trials per stand-in model
    n_models: int = 8  # models per family
    n_seeds: int = 5  # seeds (benchmark + training + perception noise)
    seed: int = 0  # first seed
    counts: tuple[int, ...] = FRAME_COUNTS
    PRESETS: ClassVar = {"smoke": {"n_pairs": 6, "n_train_pairs": 6, "n_train": 1500, "n_seeds": 3},
                         "book": {}, "full": {"n_seeds": 10, "n_train": 6000}}


@dataclass
class SeedRun:
    """One seed's benchmark and answers."""

    seed: int
    videos: list[Video] = field(repr=False)
    answers: pd.DataFrame = field(repr=False)


def _train_set(videos: list[Video], trials: pd.DataFrame, feats: np.ndarray, spec: StandInSpec,
               n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    cons = np.flatnonzero(trials["conserving"].to_numpy())
    ctrl = np.flatnonzero(~trials["conserving"].to_numpy())
    n_same = int(round(spec.p_same * n))
    idx = np.concatenate([rng.choice(cons, n_same), rng.choice(ctrl, n - n_same)])
    sub = trials.iloc[idx]
    x, y = [], []
    for (_, k), g in sub.groupby(["selection", "n_frames"]):
        fr = np.array(g["frames"].tolist())
        f = feats[g["video"].to_numpy()[:, None], fr]
        noisy = noisy_log_features(f, spec.sigma, rng)
        x.append(encode(noisy, np.full(len(g), k), g["prop"].tolist(), spec.temporal))
        y.append(g["truth"].to_numpy())
    return np.concatenate(x), np.concatenate(y)


def train_family(specs: list[StandInSpec], cfg: Config, seed: int) -> list[StandIn]:
    """Train each stand-in on its own mixture of a training benchmark (seed ``seed + 1000``)."""
    videos = generate(cfg.n_train_pairs, seed + 1000)
    trials = trial_table(videos, cfg.counts, SELECTIONS, ("direct",))
    feats = frame_features(np.stack([v.frames for v in videos]))
    out = []
    for i, spec in enumerate(specs):
        rng = np.random.default_rng([seed, 7, i])
        x, y = _train_set(videos, trials, feats, spec, cfg.n_train, rng)
        out.append(StandIn(spec, seed).fit(x, y))
    return out


def answer_standins(models: list[StandIn], trials: pd.DataFrame, feats: np.ndarray,
                    seed: int) -> pd.DataFrame:
    """Every model's answers on every trial, plus the blank-image and text-only probes.

    The probes use the paper's 7-frame uniform condition: the blank probe shows 7 white
    frames, the text-only probe no frame at all.
    """
    keep = ["prop", "pair", "conserving", "truth", "selection", "n_frames", "template"]
    probe_rows = trials[(trials["n_frames"] == analysis.PROBE_FRAMES)
                        & (trials["selection"] == analysis.PROBE_SELECTION)]
    groups = list(trials.groupby(["selection", "n_frames"], sort=False, observed=True))
    order = np.concatenate([g.index.to_numpy() for _, g in groups])
    base = pd.concat([trials.loc[order, keep].assign(probe="video"),
                      probe_rows[keep].assign(probe="blank"), probe_rows[keep].assign(probe="text")],
                     ignore_index=True)
    logf = np.log1p(feats).astype(np.float32)

    def prepared(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        onehot = np.zeros((len(g), len(PROPERTIES)), dtype=np.float32)
        onehot[np.arange(len(g)), [PROPERTIES.index(p) for p in g["prop"]]] = 1.0
        return onehot, np.array([PERMUTATIONS.index(o) for o in g["order"]])

    ready = [(k, logf[g["video"].to_numpy()[:, None], np.array(g["frames"].tolist())], *prepared(g))
             for (_, k), g in groups]
    p_onehot, p_orders = prepared(probe_rows)
    blank = np.zeros((len(probe_rows), analysis.PROBE_FRAMES, feats.shape[-1]), dtype=np.float32)
    preds = []
    for mi, m in enumerate(models):
        for gi, (k, f, onehot, orders) in enumerate(ready):
            rng = np.random.default_rng([seed, 11, mi, gi])
            preds.append(m.decide(f, np.full(len(f), k), onehot, orders, rng, logged=True))
        rng = np.random.default_rng([seed, 13, mi])
        preds.append(m.decide(blank, np.full(len(probe_rows), analysis.PROBE_FRAMES), p_onehot, p_orders,
                              rng, logged=True))
        preds.append(m.text_only(p_orders))
    out = {}
    for c in base.columns:  # one copy of the trial columns per model, as categorical codes
        col = base[c].astype("category")
        out[c] = pd.Categorical.from_codes(np.tile(col.cat.codes.to_numpy(), len(models)),
                                           col.cat.categories)
    out["model"] = pd.Categorical.from_codes(np.repeat(np.arange(len(models)), len(base)),
                                             [m.name for m in models])
    out["pred"] = pd.Categorical(np.concatenate(preds), categories=[*ANSWERS, "FAIL"])
    df = pd.DataFrame(out)
    for c in ("pair", "n_frames"):
        df[c] = df[c].astype(int)
    df["conserving"] = df["conserving"].astype(bool)
    return df


def baselines(trials: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The always-"same" baseline and uniform guessing, on every trial (video probe)."""
    keep = ["prop", "pair", "conserving", "truth", "selection", "n_frames", "template"]
    rng = np.random.default_rng([seed, 17])
    guess = np.array(ANSWERS)[rng.integers(0, 3, len(trials))]
    return pd.concat([trials[keep].assign(model="always same", probe="video", pred="same"),
                      trials[keep].assign(model="random guess", probe="video", pred=guess)],
                     ignore_index=True)


def summarise_family(ans: pd.DataFrame) -> dict[str, float]:
    """The family-level numbers the claims use (means over the family's models)."""
    table = analysis.accuracy_table(ans)
    r, p = analysis.cross_model_correlation(table)
    by_n = analysis.accuracy_by(ans, "n_frames").mean()
    anova = analysis.frame_count_anova(ans)
    return {"C": table["C"].mean(), "NC": table["NC"].mean(), "strict": table["strict"].mean(),
            "r": r, "r_p": p, "acc_3": by_n.loc[min(by_n.index)], "acc_16": by_n.loc[max(by_n.index)],
            "anova_F": anova["F"], "anova_p": anova["p"],
            "text_same": analysis.same_share(ans, "text").mean(),
            "blank_same": analysis.same_share(ans, "blank").mean()}


def run_seed(cfg: Config, seed: int) -> SeedRun:
    """One seed: a fresh benchmark, both families trained and answering it (one BLAS thread)."""
    with threadpool_limits(1):
        return _run_seed(cfg, seed)


def _run_seed(cfg: Config, seed: int) -> SeedRun:
    videos = generate(cfg.n_pairs, seed)
    trials = trial_table(videos, cfg.counts, SELECTIONS, TEMPLATES)
    feats = frame_features(np.stack([v.frames for v in videos]))
    specs = planted_family(cfg.n_models) + null_family(cfg.n_models)
    models = train_family(specs, cfg, seed)
    return SeedRun(seed, videos, answer_standins(models, trials, feats, seed))


def family_of(model: str) -> str:
    return model.split("-")[0]


@dataclass
class Experiment:
    """What the chapter analyses: family-level numbers per seed, per-model tables, one full run."""

    families: pd.DataFrame  # one row per (seed, family): the numbers the claims use
    models: pd.DataFrame  # one row per (seed, model): C, NC, mean, strict, FAIL, family
    by_frames: pd.DataFrame  # accuracy per (seed, model, n_frames)
    first: SeedRun  # the first seed's benchmark and answers


def run_experiment(cfg: Config) -> Experiment:
    """§4 on the stand-ins: every seed's benchmark, both families, the analysis per family."""
    fam_rows, model_rows, frame_rows, first = [], [], [], None
    for seed in progress(range(cfg.seed, cfg.seed + cfg.n_seeds), desc="seeds"):
        run = run_seed(cfg, seed)
        names = np.array(run.answers["model"].cat.categories)
        fam = pd.Series([family_of(n) for n in names], index=names)[run.answers["model"]].to_numpy()
        mismatches = sum(measured_answer(v) != v.answer for v in run.videos)
        for f in FAMILIES:
            sub = run.answers[fam == f]
            fam_rows.append({"seed": seed, "family": f, **summarise_family(sub),
                             "label_mismatches": mismatches})
            model_rows.append(analysis.accuracy_table(sub).reset_index().assign(seed=seed, family=f))
            acc = analysis.accuracy_by(sub, "n_frames").stack().rename("acc").reset_index()
            frame_rows.append(acc.assign(seed=seed, family=f))
        if first is None:
            first = run
    return Experiment(pd.DataFrame(fam_rows), pd.concat(model_rows, ignore_index=True),
                      pd.concat(frame_rows, ignore_index=True), first)
