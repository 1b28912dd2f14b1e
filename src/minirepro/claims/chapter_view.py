"""What a chapter's page shows of its claims, from its kernel: the claims table beside the
book's pooled verdicts, one line of power per paper claim, the verdict lines a golden
checks, and the chapter's recorded scale trends.

It reads the claims this process declared (:mod:`minirepro.claims.record`) and the chapter's
stored records (:mod:`minirepro.claims.ledger`); the notebooks call it through
:mod:`minirepro.claims.results`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minirepro.claims import ledger
from minirepro.claims.power import Power, power
from minirepro.claims.record import chapter, claims
from minirepro.claims.trend import direction, series, slope


def power_lines() -> str:
    """One line per declared paper claim: its power at its planned n, from the chapter's stored
    pilot (``"merge-beats-prune: power 0.91 at n = 25 (weakest part ...)"``)."""
    pilot = ledger.current_pilot(chapter())
    lines = []
    for c in claims():
        if c.kind != "paper" or c._rule is None:
            continue
        n = c.planned_n or 0
        if pilot is None:
            p = Power(None, n, why="no current pilot record (minirepro claims --pilot)")
        else:
            p = power(c._rule, (pilot.get("claims") or {}).get(c.id), n)
        lines.append(f"{c.id}: {p.describe()}")
    return "\n".join(lines)


def show_trends() -> None:
    """Show the chapter's recorded scale trends (``minirepro claims --trend``), under a heading:
    each claim's effect against size with its interval, the paper's value and the slope's
    interval. Shows nothing when no trend is recorded for this notebook's code."""
    entry = ledger.current_entry(chapter())
    rec = (entry or {}).get("trend")
    if not rec or not rec.get("current"):
        return
    keys = [k for k, pts in (rec.get("claims") or {}).items() if pts]
    if not keys:
        return
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    display(Markdown(
        f"**Scale trends.** Each claim's effect measured at {len(rec.get('values', []))} sizes of "
        f"`{rec.get('param')}` (recorded once by `minirepro claims --trend`, {rec.get('date')}), with "
        "its 95% interval, the paper's value where it gives one, and the slope's interval: a slope "
        "whose interval excludes 0 in the paper's direction says the miniature is too small; a flat "
        "or opposite one says it is not a matter of size."))
    fig, axes = plt.subplots(len(keys), 1, figsize=(6.2, 3.0 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        trend_figure(rec, key, ax)
    fig.tight_layout()
    display(fig)
    plt.close(fig)


def trend_figure(record: Mapping[str, Any], key: str, ax=None):
    """Effect against size with each point's interval, the paper's value as a reference line,
    and the slope's interval in the title; returns the axes."""
    import matplotlib.pyplot as plt

    pts = series(record, key)
    spec = (record.get("spec") or {})
    paper = (spec.get("claims") or {}).get(key)
    log = bool(spec.get("log", True))
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2))
    xs = [p["value"] for p in pts]
    ys = [p["estimate"] for p in pts]
    err = [[p["estimate"] - p["low"] for p in pts], [p["high"] - p["estimate"] for p in pts]]
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label="measured here (95% interval)")
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    if paper is not None:
        ax.axhline(float(paper), color="C3", linestyle="--", linewidth=1.2, label=f"the paper ({paper:g})")
    if log:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(str(record.get("param")))
    ax.set_ylabel("effect")
    title = key
    if len(pts) >= 3:
        iv = slope(pts, log=log)
        per = "per doubling" if log else f"per unit of {record.get('param')}"
        title += (f"\nslope {iv.estimate:.3g} {per} [{iv.low:.3g}, {iv.high:.3g}]: "
                  f"{direction(iv, paper, ys[-1])}")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="best")
    return ax


def claims_table(kind: str | None = None):
    """The claims as a pandas DataFrame, for display on the page (``kind`` filters).

    Its HTML (the rendered page) shows, beside this run's verdict, the book's verdict: the
    stored record's, pooled over the recorded run and every replication, with its units,
    power and the replications' own verdicts (when the record is current)."""
    from minirepro.claims.frame import COLUMNS, FullTable

    stored = {c["id"]: c for c in (ledger.current_entry(chapter()) or {}).get("claims", [])}
    rows = [{"claim": c.statement if c.kind == "paper" else f"(check) {c.statement}",
             "paper": c.paper_value, "measured here": c.measured or "(pending)",
             "verdict": c.verdict or "(pending)", "rule": c.rule + (f" [flag: {c.flag}]" if c.flag else ""),
             "id": c.id, "book": stored.get(c.id)}
            for c in claims() if kind is None or c.kind == kind]
    return FullTable(rows, columns=COLUMNS)


def verdict_lines() -> str:
    """One line per claim, ``id: verdict``: the text a golden's checked cell prints.

    Claims declared ``machine_dependent`` are left out; checks of the miniature are
    marked ``(check)``.
    """
    return "\n".join(f"{c.id}{' (check)' if c.kind == 'check' else ''}: {c.verdict or '(pending)'}"
                     for c in claims() if not c.machine_dependent)


__all__ = ["claims_table", "power_lines", "show_trends", "trend_figure", "verdict_lines"]
