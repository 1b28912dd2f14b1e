"""The chapter's computed tables and sentences: what the page prints, from the results alone."""

from __future__ import annotations

from typing import Any

import pandas as pd

from minirepro.papers.tbpo.analysis import final_metrics
from minirepro.papers.tbpo.experiment import Experiment

FINAL_COLUMNS = ("state_kl", "reward", "kl_ref", "entropy", "distinct3")


def mean_std_table(table: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``"mean ± std"`` (3 decimals) of each of ``columns`` per method, from a
    :func:`~minirepro.papers.tbpo.analysis.headline` table (its ``"<c> mean"`` and ``"<c> std"``)."""
    return pd.DataFrame({c: [f"{table.loc[m, c + ' mean']:.3f} ± {table.loc[m, c + ' std']:.3f}"
                             for m in table.index] for c in columns}, index=table.index)


def comparison_table(ex: Experiment) -> pd.DataFrame:
    """Seed means of the final metrics per method, then the exact reference and optimum rows,
    each with the objective ``E[R] - beta KL(pi || pi_ref)`` that pi* maximises."""
    fin = final_metrics(ex.evals).groupby("method", sort=False)[list(FINAL_COLUMNS)].mean()
    fin["objective"] = fin["reward"] - ex.cfg.beta * fin["kl_ref"]
    ref_opt = ex.exact.set_index("method")
    ref_opt["objective"] = ref_opt["reward"] - ex.cfg.beta * ref_opt["kl_ref"]
    return pd.concat([fin, ref_opt[fin.columns]])


def distance_sentence(table: pd.DataFrame, methods: tuple[str, ...] = ("DPO", "TBPO-Q", "TBPO-A")) -> str:
    """How far each method's final policy moved from the reference, against the optimum's own KL,
    and whether both TBPO variants end closer to the reference than DPO
    (``table``: :func:`comparison_table`)."""
    far = {m: table.loc[m, "kl_ref"] for m in methods}
    closer = max(far["TBPO-Q"], far["TBPO-A"]) < far["DPO"]
    return ("final KL to the reference (nats): " + ", ".join(f"{m} {v:.2f}" for m, v in far.items())
            + f"; the optimum: {table.loc['optimum', 'kl_ref']:.2f}. The TBPO variants end "
            + ("closer to" if closer else "no closer to") + " the reference than DPO.")


def verdict_sentence(claim: Any) -> str:
    """A settled claim's verdict in one sentence (Markdown): each part's verdict and mean
    improvement with its interval (an interval end that is text, ``"nan"`` with one seed, is
    printed as it is), or the claim's measured value when no part has an estimate."""
    def f(x: Any) -> str:
        return f"{x:+.3f}" if isinstance(x, (int, float)) else str(x)

    inner = "; ".join(f"{k}: {v['verdict']}, mean improvement {f(v['estimate'])} [{f(v['low'])}, {f(v['high'])}]"
                      for k, v in claim.details.items() if isinstance(v, dict) and "estimate" in v)
    return f"**{claim.id}**: {claim.verdict} ({inner or claim.measured})."
