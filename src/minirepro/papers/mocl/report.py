"""What the chapter writes from its runs: the claims' setting, its tables and its computed prose.

Nothing here decides a verdict (the rule objects of ``minirepro.claims.rules`` do that in
the notebook); these functions turn the config, the runs and the settled claims into the
tables and sentences the page shows, and compute the few summaries only the prose reads
(mean plasticity, GPM's final fill).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd

from minirepro.papers.mocl.experiment import (
    GPM_FIRST_LAYER_GRID,
    TUNING_GRID,
    TUNING_SEED,
    Config,
    RunResult,
    plasticity,
)

FLAT = 0.005  # ACC: the GPM curve below its pick counts as flat within this much
SAME_BWT = 0.005  # BWT: an ablation "forgets about as much" as MoCL within this much
PerSeed = Mapping[str, np.ndarray]  # {method: a metric over seeds} (experiment.per_seed)


class SettledClaim(Protocol):
    """What the prose reads of a settled claim (``minirepro.claims.results.Claim``)."""

    verdict: str | None
    details: dict[str, Any]


def claim_setting(cfg: Config) -> str:
    """The claims' setting: benchmark, tasks, network, SGD budget and the seeds."""
    return (f"{cfg.benchmark}-digits, {cfg.n_tasks} tasks, MLP 64-100-100-10, SGD lr {cfg.lr}, "
            f"{cfg.epochs} epochs/task, seeds {cfg.seeds}")


def tuning_table(cfg: Config) -> pd.DataFrame:
    """Per method: its tuned knob, the grid tried on the tuning seed, the value this config
    uses, and whether that value lies strictly inside the grid (not on an edge)."""
    rows = []
    for m, (knob, grid) in TUNING_GRID.items():
        used = getattr(cfg, knob)
        rows.append({"method": m, "knob": knob, f"grid (seed {TUNING_SEED})": ", ".join(map(str, grid)),
                     "used here": str(used), "inside the grid": grid[0] != used != grid[-1]})
    return pd.DataFrame(rows).set_index("method")


def curve_below_pick(best_below: float, at_pick: float, flat: float = FLAT) -> str:
    """Whether GPM's ACC falls below the pick, stays flat (within ``flat``) or rises there."""
    if best_below < at_pick - flat:
        return ("The curve is not flat below the pick: it falls, so the pick is not held at an edge "
                "that hides a better value below.")
    if best_below <= at_pick + flat:
        return (f"The curve is flat below the pick (within {flat:g} of ACC): moving the threshold down "
                "would not change GPM's accuracy.")
    return ("A value below the pick does better: GPM ran with a handicap here, which the "
            "acc-best verdict must be read against.")


def gpm_curve_reading(acc: Sequence[float], pick: float,
                      grid: Sequence[float] = GPM_FIRST_LAYER_GRID) -> str:
    """GPM's final ACC on the tuning seed for each first-layer threshold of ``grid`` (``acc`` in
    grid order), the pick's score against the best value below it and the best overall, and
    :func:`curve_below_pick`'s reading."""
    acc_at = dict(zip(grid, acc, strict=True))
    best_below = max((a for a in grid if a < pick), key=acc_at.get)
    return (f"GPM's final ACC on seed {TUNING_SEED} by first-layer threshold: "
            + ", ".join(f"{a:g}: {acc_at[a]:.3f}" for a in grid)
            + f". The pick {pick:g} scores {acc_at[pick]:.3f}; the best value below it, {best_below:g}, "
            f"scores {acc_at[best_below]:.3f} ({acc_at[best_below] - acc_at[pick]:+.3f}), and the best "
            f"of the whole grid is {max(acc_at, key=acc_at.get):g} ({max(acc_at.values()):.3f}). "
            + curve_below_pick(acc_at[best_below], acc_at[pick]))


def paper_table(table: pd.DataFrame) -> pd.DataFrame:
    """This run's ACC (with its 95% interval), BWT and late plasticity per method beside what
    the paper's abstract says of it (a dash where it says nothing), rounded to 3 decimals."""
    proj = "projection: limits plasticity as tasks accumulate"
    paper = {"MoCL": "outperforms SOTA in accuracy and efficiency", "GPM": proj, "SGP": proj}
    side = pd.DataFrame({"ACC": table["ACC mean"],
                         "ACC 95% CI": [f"{lo:.3f} to {hi:.3f}" for lo, hi in zip(table["ACC lo"], table["ACC hi"])],
                         "BWT": table["BWT mean"], "late R(i,i)": table["late plasticity mean"]})
    side["paper's abstract says"] = [paper.get(m, "-") for m in side.index]
    return side.round(3)


def seed_mean(per_seed: PerSeed, method: str) -> float:
    """A method's metric averaged over seeds."""
    return float(per_seed[method].mean())


def mean_plasticity(runs: Sequence[RunResult], methods: Sequence[str]) -> dict[str, float]:
    """Per method, ``R(i, i)`` averaged over tasks and seeds: how well it learns a new task."""
    return {m: float(np.mean([plasticity(r.R).mean() for r in runs if r.method == m])) for m in methods}


def gpm_final_fill(runs: Sequence[RunResult]) -> np.ndarray:
    """GPM's subspace fill of each layer after the last task, averaged over seeds."""
    return np.nanmean([r.fill[-1] for r in runs if r.method == "GPM"], axis=0)


def results_reading(runs: Sequence[RunResult], acc: PerSeed, bwt: PerSeed, late: PerSeed,
                    ablations: SettledClaim, parts: Sequence[str], ratios: np.ndarray,
                    macs: Mapping[str, int]) -> str:
    """The numbers behind the discussion, one line each: BWT, late plasticity and GPM's fill,
    each gate part's paired ACC difference with its interval and verdict, and the cost ratios."""
    lines = ["BWT: " + ", ".join(f"{m} {seed_mean(bwt, m):+.3f}" for m in ("MoCL", "GPM", "SGP", "fine-tuning")),
             f"late R(i,i): MoCL {seed_mean(late, 'MoCL'):.3f}, GPM {seed_mean(late, 'GPM'):.3f}; GPM's fill after the "
             "last task by layer: " + ", ".join(f"{f:.0%}" for f in gpm_final_fill(runs))]
    for m in parts:
        d = ablations.details[m]
        lo, hi = float(d["low"]), float(d["high"])  # infinite with one seed
        lines.append(f"MoCL - {m}: ACC {d['estimate']:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}, "
                     f"{d['verdict']}); BWT {seed_mean(bwt, 'MoCL') - seed_mean(bwt, m):+.3f}, "
                     f"late R(i,i) {seed_mean(late, 'MoCL') - seed_mean(late, m):+.3f}")
    lines.append(f"one task: MoCL takes {ratios.mean():.2f}x GPM's time (mean over seeds); per step "
                 f"{macs['MoCL'] / max(macs['GPM'], 1):.1f}x the multiply-adds")
    return "\n".join(lines)


def ablation_sentence(part: str, d_acc: float, d_bwt: float, matters: bool) -> str:
    """One gate part: above or below full MoCL in ACC, forgetting about as much (within
    ``SAME_BWT``), less or more, and whether by its rule the part earned its place."""
    forgets = "about as much" if abs(d_bwt) < SAME_BWT else ("less" if d_bwt > 0 else "more")
    return (f"*{part}* ends {'above' if d_acc > 0 else 'below'} full MoCL in ACC by {abs(d_acc):.3f} "
            f"and forgets {forgets} (BWT {d_bwt:+.3f}): "
            + ("the full gate's version of this part earns its place, as the paper's design implies."
               if matters else "by the rule, this part of the gate did not earn its place here."))


def ewc_sentence(acc: PerSeed, bwt: PerSeed, learn: Mapping[str, float]) -> str:
    """EWC against fine-tuning: final ACC, forgetting and plasticity, and the cause we found."""
    ft = "fine-tuning"
    gap = seed_mean(acc, "EWC") - seed_mean(acc, ft)
    return (f"*EWC* ends {'above' if gap > 0 else 'below'} fine-tuning in ACC ({seed_mean(acc, 'EWC'):.3f} vs "
            f"{seed_mean(acc, ft):.3f}) while forgetting {'less' if seed_mean(bwt, 'EWC') > seed_mean(bwt, ft) else 'more'} "
            f"(BWT {seed_mean(bwt, 'EWC'):+.3f} vs {seed_mean(bwt, ft):+.3f}); its accuracy on each task right after "
            f"learning it averages {learn['EWC']:.3f} against fine-tuning's {learn[ft]:.3f}. That is the "
            "cause we found for its weak ACC: no defect in the penalty (its proximal step is tested against "
            "the closed form), but intransigence. A diagonal penalty summed over tasks leaves this small "
            "network few free weights, so what EWC saves on old tasks it loses on new ones; on the tuning "
            "seed, raising lambda above the pick cut forgetting and ACC together.")


def tail_sentence(tail: np.ndarray, tail0: np.ndarray, verdict: str | None) -> str:
    """The Hill tail index at initialisation and after the first task, and whether it got heavier."""
    return (f"*The tail.* The Hill tail index of the layers' Fisher spectra is {tail0.mean():.2f} at "
            f"initialisation and {tail.mean():.2f} after the first task (means over layers and seeds): "
            f"{'heavier' if tail.mean() < tail0.mean() else 'not heavier'} after training, and the "
            f"claim `heavy-tail-index` says whether by the 0.25 we required: {verdict}.")


def what_happened(runs: Sequence[RunResult], acc: PerSeed, bwt: PerSeed, late: PerSeed,
                  claims: Mapping[str, SettledClaim], parts: Sequence[str], tail: np.ndarray,
                  tail0: np.ndarray) -> str:
    """What happened, in Markdown paragraphs: each gate part (:func:`ablation_sentence`), late
    plasticity, EWC (:func:`ewc_sentence`), K-FAC Laplace and the tail (:func:`tail_sentence`)."""
    learn = mean_plasticity(runs, ("EWC", "K-FAC Laplace", "fine-tuning"))
    said = [ablation_sentence(m, seed_mean(acc, m) - seed_mean(acc, "MoCL"), seed_mean(bwt, m) - seed_mean(bwt, "MoCL"),
                              claims["gate-ablations"].details[m]["verdict"] == "reproduced") for m in parts]
    said.append(f"*Late plasticity* (accuracy on the second half's tasks right after learning them): MoCL "
                f"{seed_mean(late, 'MoCL'):.3f}, GPM {seed_mean(late, 'GPM'):.3f} (claim `late-plasticity`: "
                f"{claims['late-plasticity'].verdict}).")
    said.append(ewc_sentence(acc, bwt, learn))
    said.append(f"*K-FAC Laplace* learns new tasks at {learn['K-FAC Laplace']:.3f} and ends at ACC "
                f"{seed_mean(acc, 'K-FAC Laplace'):.3f} against MoCL's {seed_mean(acc, 'MoCL'):.3f} "
                f"(claim `kfac-laplace`: {claims['kfac-laplace'].verdict}).")
    said.append(tail_sentence(tail, tail0, claims["heavy-tail-index"].verdict))
    return "\n\n".join(said)


__all__ = ["FLAT", "SAME_BWT", "SettledClaim", "ablation_sentence", "claim_setting", "curve_below_pick",
           "ewc_sentence", "gpm_curve_reading", "gpm_final_fill", "mean_plasticity", "paper_table",
           "results_reading", "seed_mean", "tail_sentence", "tuning_table", "what_happened"]
