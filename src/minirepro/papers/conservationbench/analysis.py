"""The paper's analysis of a benchmark run, on a long table of answers from any models.

The answers table has one row per (model, trial) with columns ``model, prop, pair,
conserving, truth, selection, n_frames, template, probe, pred`` (``probe`` is
``"video"``, ``"blank"`` or ``"text"``; ``pred`` is an answer word or ``"FAIL"``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from minirepro.papers.conservationbench.generator import ANSWERS

PAIR_KEYS = ["model", "prop", "pair", "selection", "n_frames", "template"]
PROBE_FRAMES, PROBE_SELECTION = 7, "uniform"  # the paper's vision-removal condition


def chance_levels(n_options: int = 3) -> dict[str, float]:
    """§4 (chance): an item is right with probability ``1/k`` under uniform guessing; a
    strict pair (both items right, guessed independently) with ``1/k**2``."""
    if n_options < 2:
        raise ValueError(f"a question needs at least 2 options, got {n_options}")
    return {"item": 1 / n_options, "strict pair": 1 / n_options ** 2}


def _check(ans: pd.DataFrame) -> pd.DataFrame:
    need = {"model", "prop", "pair", "conserving", "truth", "selection", "n_frames", "template",
            "probe", "pred"}
    missing = need - set(ans.columns)
    if missing:
        raise ValueError(f"the answers table lacks columns {sorted(missing)}")
    if len(ans) == 0:
        raise ValueError("the answers table is empty")
    return ans


def _correct(d: pd.DataFrame) -> pd.Series:
    return pd.Series(d["pred"].astype(str).to_numpy() == d["truth"].astype(str).to_numpy(), index=d.index)


def accuracy_table(ans: pd.DataFrame) -> pd.DataFrame:
    """Eq. (conservationbench-eq-acc), §4 (Tabs. 5-6): per model, accuracy on conserving items (C),
    on controls (NC), their mean, strict paired accuracy (a pair counts when both its items are
    right under the same condition) and the FAIL rate, over the ``video`` probe. Fractions in [0, 1]."""
    v = _check(ans)
    v = v[v["probe"] == "video"].assign(ok=lambda d: _correct(d), fail=lambda d: d["pred"] == "FAIL")
    if len(v) == 0:
        raise ValueError("no answers on the video probe")
    by = v.groupby(["model", "conserving"], observed=True)["ok"].mean().unstack("conserving")
    out = pd.DataFrame({"C": by.get(True), "NC": by.get(False)})
    out["mean"] = out[["C", "NC"]].mean(axis=1, skipna=False)
    pairs = v.groupby(PAIR_KEYS, observed=True).agg(ok=("ok", "all"), n=("ok", "size"))
    pairs = pairs[pairs["n"] == 2]
    out["strict"] = pairs.groupby("model", observed=True)["ok"].mean()
    out["FAIL"] = v.groupby("model", observed=True)["fail"].mean()
    out["n"] = v.groupby("model", observed=True).size()
    return out


def accuracy_by(ans: pd.DataFrame, column: str) -> pd.DataFrame:
    """§4: item accuracy per model and value of ``column`` (e.g. ``n_frames``, ``prop``), video probe."""
    v = _check(ans)
    v = v[v["probe"] == "video"]
    return _correct(v).groupby([v["model"], v[column]], observed=True).mean().unstack(column)


def cross_model_correlation(table: pd.DataFrame) -> tuple[float, float]:
    """§4: Pearson r (and its two-sided p) between C and NC accuracy across models.

    Needs at least 3 models; a constant column gives ``nan``.
    """
    t = table.dropna(subset=["C", "NC"])
    if len(t) < 3:
        raise ValueError(f"a cross-model correlation needs at least 3 models, got {len(t)}")
    if t["C"].std() == 0 or t["NC"].std() == 0:
        return math.nan, math.nan
    r, p = stats.pearsonr(t["C"], t["NC"])
    return float(r), float(p)


def frame_count_anova(ans: pd.DataFrame) -> dict[str, float]:
    """Eq. (conservationbench-eq-anova), §4 (frame count): repeated-measures ANOVA of accuracy over
    frame counts, models as subjects (statsmodels ``AnovaRM``). Returns F, its degrees of freedom
    and p."""
    from statsmodels.stats.anova import AnovaRM

    acc = accuracy_by(ans, "n_frames").stack().rename("acc").reset_index()
    acc["model"] = acc["model"].astype(str)
    if acc["model"].nunique() < 2 or acc["n_frames"].nunique() < 2:
        raise ValueError("a repeated-measures ANOVA needs at least 2 models and 2 frame counts")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = AnovaRM(acc, depvar="acc", subject="model", within=["n_frames"]).fit()
    row = res.anova_table.iloc[0]
    return {"F": float(row["F Value"]), "df1": float(row["Num DF"]), "df2": float(row["Den DF"]),
            "p": float(row["Pr > F"])}


def frame_count_pairs(ans: pd.DataFrame) -> pd.DataFrame:
    """§4: paired t tests between every two frame counts across models, Bonferroni-corrected."""
    acc = accuracy_by(ans, "n_frames")
    cols = list(acc.columns)
    rows = []
    k = len(cols) * (len(cols) - 1) // 2
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            t, p = stats.ttest_rel(acc[b], acc[a])
            rows.append({"frames": f"{b} vs {a}", "difference": float((acc[b] - acc[a]).mean()),
                         "t": float(t), "p (Bonferroni)": float(min(1.0, p * k))})
    return pd.DataFrame(rows)


def _probe_join(ans: pd.DataFrame, probe: str) -> pd.DataFrame:
    v = _check(ans)
    keys = ["model", "prop", "pair", "conserving", "template"]
    base = v[(v["probe"] == "video") & (v["n_frames"] == PROBE_FRAMES)
             & (v["selection"] == PROBE_SELECTION)][keys + ["pred"]]
    pr = v[v["probe"] == probe][keys + ["pred"]]
    if len(pr) == 0:
        raise ValueError(f"no answers on the {probe!r} probe")
    return base.merge(pr, on=keys, suffixes=("_video", "_probe"))


def transitions(ans: pd.DataFrame, probe: str) -> pd.DataFrame:
    """§4 (vision removal): P(answer under ``probe`` | answer with the video), pooled over
    models; rows are the video answers, columns the probe answers (a row is NaN when no
    video answer of that kind occurred). Conditional rates, not accuracies. The video answers are those of the 7-frame uniform condition."""
    j = _probe_join(ans, probe)
    labels = [*ANSWERS, "FAIL"]
    counts = pd.crosstab(pd.Categorical(j["pred_video"].astype(str), labels),
                         pd.Categorical(j["pred_probe"].astype(str), labels), dropna=False)
    tab = counts.div(counts.sum(axis=1).replace(0, np.nan), axis=0)  # no such video answer: NaN
    tab.index.name, tab.columns.name = "with video", f"{probe} probe"
    return tab


def same_share(ans: pd.DataFrame, probe: str) -> pd.Series:
    """§4 (vision removal): per model, the share of "same" among its answers under ``probe`` (1/3 if unbiased)."""
    v = _check(ans)
    pr = v[v["probe"] == probe]
    if len(pr) == 0:
        raise ValueError(f"no answers on the {probe!r} probe")
    return (pr["pred"] == "same").groupby(pr["model"], observed=True).mean()
