"""What the chapter writes from its runs: claim settings, recorded metrics and computed prose.

Nothing here decides a verdict (the rule objects of ``minirepro.claims.rules`` do that in
the notebook); these functions turn the config, the summaries and the settled claims into
the metrics the chapter records and the sentences and tables its page shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import pandas as pd

from minirepro.core.stats import sig
from minirepro.papers.caffnet.experiment import A_OF_X, M_LE_N, UNICYCLE, Config
from minirepro.papers.caffnet.models import W_METHODS

ZERO_W = W_METHODS[1]  # "CAffNet (w zero-init)": w's last layer starts at zero
Metric = tuple[float, dict[str, float]]  # a value and the tolerances of record_metric


class SettledClaim(Protocol):
    """What the prose reads of a settled claim (``minirepro.claims.results.Claim``)."""

    id: str
    paper_value: str
    measured: str | None
    verdict: str | None
    details: dict[str, Any]


def claim_setting(cfg: Config, scale: str) -> str:
    """The setting of the main claims: scale, networks, seeds and the sizes of the 1-D, QP and DC3 runs."""
    return (f"{scale} scale; MLPs {cfg.hidden}; seeds {cfg.seeds}; 1-D: {cfg.pwc_train} points, "
            f"{cfg.pwc_steps} steps; QP/DC3: n={cfg.opt_n}, {cfg.opt_ineq} ineq + {cfg.opt_eq} eq, "
            f"{cfg.opt_train} train / {cfg.opt_test} test, {cfg.opt_steps} steps")


def other_setting(cfg: Config, scale: str) -> str:
    """The setting of the claims of the paper's other settings (m <= n, A(x), the unicycle)."""
    return (f"{scale} scale; seeds {cfg.seeds}; {M_LE_N}: {cfg.opt_n - cfg.opt_eq} ineq + {cfg.opt_eq} eq "
            f"in n={cfg.opt_n}; {A_OF_X}: G(x) = G + x1 G1, DC3 sizes; {UNICYCLE}: {cfg.cbf_train} states, "
            f"{cfg.cbf_steps} steps, {cfg.cbf_rollouts} rollouts of {cfg.cbf_horizon} x {cfg.cbf_dt} s")


def collision_totals(roll: pd.DataFrame) -> pd.Series:
    """Colliding rollouts per method, summed over seeds (methods in the rollouts' order)."""
    return roll.groupby("method", sort=False).collisions.sum()


def summary_metrics(summary: pd.DataFrame, exact: float) -> dict[str, Metric]:
    """Each (scenario, method)'s mean error and mean largest violation over seeds, with the
    tolerances a re-run must meet: float64 training drifts in its last bits, far inside
    ``rtol=1e-3``; a violation at rounding level is compared to ``exact``."""
    out: dict[str, Metric] = {}
    for _, row in summary.iterrows():
        out[f"{row.scenario}/{row.method}/error"] = (float(row["error mean"]), {"rtol": 1e-3, "atol": 1e-6})
        out[f"{row.scenario}/{row.method}/max_violation"] = (float(row["max_violation mean"]),
                                                             {"rtol": 1e-3, "atol": exact})
    return out


def recorded_metrics(summary: pd.DataFrame, control: float, summary_other: pd.DataFrame,
                     roll: pd.DataFrame, exact: float) -> dict[str, Metric]:
    """Every metric the chapter records, in the order it records them: the main scenarios'
    :func:`summary_metrics`, HardNet-Aff's violation on random ``m <= n`` sets, the added
    scenarios' summary metrics, and the colliding rollouts per method (whole rollouts, ``atol=1``)."""
    out = summary_metrics(summary, exact)
    out["hardnet_control_max_violation"] = (control, {"atol": exact})
    out.update(summary_metrics(summary_other, exact))
    for m, k in collision_totals(roll).items():
        out[f"{UNICYCLE}/{m}/colliding rollouts"] = (float(k), {"atol": 1})
    return out


def paper_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The paper's 1-D figures (Table 2) beside this run's mean MSE and largest violation."""
    paper = pd.DataFrame({"paper (1-D, Table 2)": {"CAffNet": "MSE 0.0012, 0 violations",
                                                   "soft penalty": "MSE 0.0045, violations > 0"}})
    here = summary[summary.scenario == "piecewise"].set_index("method")
    paper["here (1-D)"] = [f"MSE {sig(here.loc[m, 'error mean'], 2)}, max viol. "
                           f"{sig(here.loc[m, 'max_violation mean'], 2)}" for m in paper.index]
    return paper


def tie_line(scenario: str, details: Mapping[str, Any], margin: float) -> str:
    """One scenario's on-par comparison of CAffNet with the projection, from its rule's details."""
    d = details
    return (f"- *{scenario}*: CAffNet's gap minus the projection's is {sig(d['estimate'])} objective "
            f"units (90% CI {sig(d['low'])} to {sig(d['high'])}, margin +-{sig(margin)}); "
            f"CAffNet is {sig(-d['power_estimate'])} below the untrained network's gap. "
            f"On par: **{d['verdict']}**.")


def qp_room(details: Mapping[str, Any], margin: float) -> str:
    """How much room the projection left above the cvxpy optimum, or that no bound was used."""
    if "room" not in details:
        return "no bound was used"
    return (f"the projection's gap leaves {sig(details['room'])} of room above the cvxpy optimum, "
            f"against a minimum effect of {sig(margin)}")


def projection_reading(tie: SettledClaim, beyond: SettledClaim, beyond_qp: SettledClaim,
                       scenarios: Sequence[str], margin: float) -> str:
    """The on-par lines of every optimisation scenario, then the beyond-the-projection verdicts
    on the last (DC3) and the first (QP) of ``scenarios``, as a Markdown list."""
    lines = [tie_line(s, tie.details[s], margin) for s in scenarios]
    lines.append(f"- *beyond the projection*: on {scenarios[-1]} **{beyond.verdict}** ({beyond.measured}); "
                 f"on the {scenarios[0]} **{beyond_qp.verdict}**: {qp_room(beyond_qp.details, margin)}.")
    return "\n".join(lines)


def claims_markdown(claims: Iterable[SettledClaim]) -> str:
    """A Markdown table of claims: id, the paper's value, this run's measurement and verdict."""
    rows = [f"| {c.id} | {c.paper_value} | {c.measured} | **{c.verdict}** |" for c in claims]
    return "| claim | paper | here | verdict |\n|---|---|---|---|\n" + "\n".join(rows)


def init_lines(err: Mapping[str, pd.DataFrame], tie: SettledClaim, tie0: SettledClaim,
               scenarios: Sequence[str]) -> list[str]:
    """Per optimisation scenario, the mean gap of both initialisations of w and of the
    projection, and the on-par verdict of each initialisation."""
    def gap(s: str, m: str) -> str:
        return sig(err[s][m].mean())

    return [f"- *Both initialisations of w, {s}* (mean gap over seeds): random "
            f"{gap(s, 'CAffNet')}, zero {gap(s, ZERO_W)}, fixed projection "
            f"{gap(s, 'fixed projection')} objective units; on par: random "
            f"**{tie.details[s]['verdict']}**, zero **{tie0.details[s]['verdict']}**." for s in scenarios]


def unicycle_error_line(err_uni: pd.DataFrame) -> str:
    """The unicycle's mean error of the projection and both initialisations of w, and whether
    both learned w end farther from the nominal control than the projection."""
    mse = {m: err_uni[m].mean() for m in ("fixed projection", "CAffNet", ZERO_W)}
    worse = all(mse[m] > mse["fixed projection"] for m in ("CAffNet", ZERO_W))
    return (f"- *Unicycle, error* (mean squared distance to the nominal control): projection "
            f"{sig(mse['fixed projection'])}, random-init w {sig(mse['CAffNet'])}, zero-init w "
            f"{sig(mse[ZERO_W])}; " + ("with either init the learned w ends farther from the target "
            "than the projection." if worse else "the learned w does not end farther from the target "
            "with both inits."))


def timing_line(times_m: pd.DataFrame, cross: int | None, n: int) -> str:
    """Where CAffNet's layer becomes the slower one (or that it never does), and the time ratio
    at the largest ``m`` measured (``qplayer.layer_times`` and ``qplayer.crossover``)."""
    big = times_m.iloc[-1]
    where = (f"CAffNet's layer is the slower one from m = {cross} rows on "
             f"({int(times_m.set_index('m').loc[cross, 'subsets'])} subsets)" if cross is not None else
             f"CAffNet's layer stays the faster one up to m = {int(big.m)}")
    return (f"- *Timing* (this machine, n = {n}): " + where +
            f"; at m = {int(big.m)} it takes {sig(big['CAffNet / cvxpylayers'], 2)} times the QP layer's time.")


def other_settings_reading(cfg: Config, err: Mapping[str, pd.DataFrame], err_other: Mapping[str, pd.DataFrame],
                           claims: Mapping[str, SettledClaim], roll: pd.DataFrame, times_m: pd.DataFrame,
                           cross: int | None, scenarios: Sequence[str]) -> str:
    """The other settings in sentences, as a Markdown list: both initialisations of w against the
    projection (:func:`init_lines`), the beyond-the-projection verdicts, the unicycle's error and
    collisions, and the timing. ``claims`` holds the settled claims ``tie`` and ``beyond`` (the
    main comparison) and ``tie0``, ``beyond0``, ``ax_beyond`` (the other settings)."""
    c = claims
    lines = init_lines(err, c["tie"], c["tie0"], scenarios)
    lines.append(f"- *Beyond the projection on {scenarios[-1]}*: random w **{c['beyond'].verdict}**, "
                 f"zero-initialised w **{c['beyond0'].verdict}**; with A(x) (random w) "
                 f"**{c['ax_beyond'].verdict}** ({c['ax_beyond'].measured}).")
    lines.append(unicycle_error_line(err_other[UNICYCLE]))
    lines.append(f"- *Unicycle*: colliding rollouts over {len(cfg.seeds)} seeds x {cfg.cbf_rollouts}: "
                 + ", ".join(f"{m} {int(k)}" for m, k in collision_totals(roll).items()) + ".")
    lines.append(timing_line(times_m, cross, cfg.timing_n))
    return "\n".join(lines)


__all__ = ["Metric", "SettledClaim", "ZERO_W", "claim_setting", "claims_markdown", "collision_totals",
           "init_lines", "other_setting", "other_settings_reading", "paper_table", "projection_reading",
           "qp_room", "recorded_metrics", "summary_metrics", "tie_line", "timing_line",
           "unicycle_error_line"]
