"""A sweep's summary: the table of every run (csv, md, json), a compact text summary of the
headline metric per grid point, and a plot of it.

The headline metric is ``--metric`` when given, else the one the chapter names with
``results.record_metric(name, value, headline=True)`` (recorded in each run's
``results.json`` as ``headline``), else the paper's ``headline`` in ``book/papers.yml``
(:func:`declared_headline`, when the run recorded it), else the first metric the chapter
records; the summary says which it is.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from minirepro.chapters import Chapter, repo_root
from minirepro.claims.rules import VERDICTS
from minirepro.core.params import is_seed_name, show

SHORT_VERDICT = {"not testable at this scale": "not testable"}


def declared_headline(chapter: Chapter, root: Path | None = None) -> str | None:
    """The headline metric ``book/papers.yml`` names for the chapter's paper (its ``headline``),
    or ``None``: none named, or no book here (a student's copy of a chapter)."""
    import yaml

    try:
        listed = yaml.safe_load(((root or repo_root()) / "book" / "papers.yml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = next((p.get("headline") for p in listed or [] if int(p.get("number", -1)) == chapter.number), None)
    return str(found) if found else None


def headline_metric(rows: list[dict[str, Any]], metric: str | None = None,
                    chapter: Chapter | None = None) -> tuple[str | None, str]:
    """``(metric, why)``: the metric a sweep summarises and plots, and where it comes from:
    ``metric`` (``--metric``), else the headline a run recorded, else the chapter's declared one
    (``book/papers.yml``), else the first metric recorded."""
    numeric = _numeric_metrics(rows)
    if metric is not None:
        if metric in numeric:
            return metric, "--metric"
        print(f"minirepro: metric {show(metric)} was not recorded (recorded: "
              f"{', '.join(numeric[:10]) or '(none)'}); summarising the chapter's headline instead",
              file=sys.stderr)
    named = [r.get("headline") for r in rows if r.get("ok") and r.get("headline")]
    if named and named[0] in numeric:
        return named[0], "the chapter's headline metric"
    declared = declared_headline(chapter) if chapter is not None else None
    if declared in numeric:
        return declared, "the paper's headline metric (book/papers.yml)"
    if numeric:
        return numeric[0], "the chapter's first metric: it names no headline"
    return None, "no numeric metric was recorded"


def _numeric_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """Metric names with a number in some finished run, in the order first recorded."""
    out: dict[str, None] = {}
    for r in rows:
        for k, v in (r.get("metrics") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(k, None)
    return list(out)


def write_summary(folder: Path, rows: list[dict[str, Any]], swept: list[str],
                  metric: str | None = None, seconds: float | None = None,
                  chapter: Chapter | None = None) -> str:
    """Write the sweep table (``summary.csv``, ``.md``, ``.json``), the compact summary
    (``summary.txt``, returned) and a plot of the headline metric (``sweep.png``)."""
    import pandas as pd

    records = []
    for row in rows:
        rec = {**row["params"], "status": "ok" if row["ok"] else "FAILED",
               "seconds": row["seconds"], **{f"metric:{k}": v for k, v in row["metrics"].items()},
               **{f"claim:{k}": v for k, v in row["verdicts"].items()}, "folder": row["folder"]}
        records.append(rec)
    df = pd.DataFrame(records)
    df.to_csv(folder / "summary.csv", index=False)
    (folder / "summary.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    shown = df.drop(columns=["folder"]).rename(columns=lambda c: c.split(":", 1)[-1])
    (folder / "summary.md").write_text(_markdown_table(shown) + "\n")
    col, why = headline_metric(rows, metric, chapter=chapter)
    plotted = False
    if col is not None and f"metric:{col}" in df.columns:
        plotted = _plot_sweep(df[df.status == "ok"], swept, f"metric:{col}", folder / "sweep.png")
    text = compact_summary(rows, swept, col, why, seconds=seconds,
                           chapter=chapter.name if chapter is not None else "")
    text += (f"\nevery run: {folder}/ (summary.md, .csv, .json"
             + (", sweep.png)" if plotted else ")"))
    (folder / "summary.txt").write_text(text + "\n", encoding="utf-8")
    return text


def _grid_points(rows: list[dict[str, Any]], swept: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Rows grouped by the swept parameters other than seeds (seeds are replicates)."""
    from minirepro.run.progress import grid_label

    keys = [k for k in swept if not is_seed_name(k)]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        label = grid_label({k: r["params"].get(k) for k in keys}) if keys else "all runs"
        groups.setdefault(label, []).append(r)
    return list(groups.items())


def _mean_interval(values: list[float]) -> str:
    """``mean ± half-width`` of the 95% t interval (``mean`` alone for one value)."""
    from minirepro.core.stats import sig, t_interval

    finite = [float(v) for v in values if math.isfinite(float(v))]
    if not finite:
        return "-"
    iv = t_interval(finite)
    if len(finite) < 2:
        return sig(iv.estimate, 4)
    return f"{sig(iv.estimate, 4)} ± {sig((iv.high - iv.low) / 2, 2)}"


def verdict_counts(rows: list[dict[str, Any]]) -> str:
    """``"9 reproduced, 3 partly"``: every claim of every finished run, by verdict."""
    counts = {v: 0 for v in VERDICTS}
    other = 0
    for r in rows:
        for v in (r.get("verdicts") or {}).values():
            if v in counts:
                counts[v] += 1
            else:
                other += 1
    parts = [f"{n} {SHORT_VERDICT.get(v, v)}" for v, n in counts.items() if n]
    if other:
        parts.append(f"{other} pending")
    return ", ".join(parts) or "no claims"


def smoke_caveat(scale: str | None, n_seeds: int | None, per_run: bool = False) -> str | None:
    """At smoke scale, the line that says a run's verdicts are a smoke check and where the
    book's verdicts are (the ledger); ``None`` at any other scale. ``n_seeds``: the seeds
    a run reports on (``None``: not declared, or not the same in every run of a sweep)."""
    if scale != "smoke":
        return None
    n = (f" (n = {n_seeds} seed{'s' if n_seeds != 1 else ''}{' per run' if per_run else ''})"
         if n_seeds else "")
    return f"smoke check{n}: these are not the book's verdicts; see `minirepro claims`"


def compact_summary(rows: list[dict[str, Any]], swept: list[str], metric: str | None, why: str,
                    seconds: float | None = None, chapter: str = "") -> str:
    """A few short lines: the runs, then per grid point the headline metric's mean ± the
    half-width of its 95% t interval over seeds, and the verdict counts."""
    ok = [r for r in rows if r.get("ok")]
    failed = len(rows) - len(ok)
    head = (f"sweep{' of ' + chapter if chapter else ''}: {len(rows)} run(s), {len(ok)} finished"
            + (f", {failed} FAILED" if failed else "")
            + (f", {seconds:.1f} s" if seconds is not None else ""))
    lines = [head]
    if metric is not None:
        lines.append(f"headline: {metric} ({why}); mean ± 95% t interval")
    else:
        lines.append(f"headline: none ({why})")
    points = _grid_points(rows, swept)
    width = min(48, max(len(label) for label, _ in points))
    for label, group in points:
        done = [r for r in group if r.get("ok")]
        values = [r["metrics"][metric] for r in done if metric is not None
                  and isinstance(r["metrics"].get(metric), (int, float))
                  and not isinstance(r["metrics"].get(metric), bool)]
        stat = _mean_interval(values) if values else "-"
        n = f"{len(values)} run{'s' if len(values) != 1 else ''}"
        bad = len(group) - len(done)
        lines.append(f"  {label:<{width}}  {stat:>18}  ({n}{f', {bad} FAILED' if bad else ''})"
                     f"  verdicts: {verdict_counts(done)}")
    smoke = [r for r in ok if r.get("scale") == "smoke"]
    if smoke:
        seeds = {r.get("n_seeds") for r in smoke}
        per_run = seeds.pop() if len(seeds) == 1 else None
        lines.append(smoke_caveat("smoke", per_run, per_run=len(smoke) > 1))
    return "\n".join(lines)


def _markdown_table(df) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join("" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
                                       for v in r.tolist()) + " |")
    return "\n".join(lines)


def _plot_sweep(df, swept: list[str], col: str, path: Path) -> bool:
    """Plot ``col`` against the first swept parameter that is not a seed; True if drawn."""
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from minirepro.core.plotting import use_style

    if df.empty or not swept or col not in df.columns:
        return False
    df = df[pd.to_numeric(df[col], errors="coerce").notna()].copy()
    if df.empty:
        return False
    df[col] = df[col].astype(float)
    use_style()
    x = next((p for p in swept if p != "seed"), swept[0])
    hue = [p for p in swept if p not in (x, "seed")]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    groups = df.groupby(hue) if hue else [("all", df)]
    for key, sub in groups:
        stats = sub.groupby(x)[col].agg(["mean", "std", "count"]).reset_index()
        label = ", ".join(f"{h}={k}" for h, k in zip(hue, key if isinstance(key, tuple) else (key,))) or col[7:]
        categorical = x == "seed" or not pd.api.types.is_numeric_dtype(stats[x])
        xs = stats[x].astype(str) if categorical else stats[x]
        ax.errorbar(xs, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3,
                    linestyle="none" if categorical else "-", label=label)
    if x == "seed" and len(df) > 1:  # seeds are replicates: show their mean and spread
        mean, std = df[col].mean(), df[col].std()
        ax.axhline(mean, color="0.3", linestyle="--", linewidth=1, label=f"mean {mean:.4g} (std {std:.2g})")
    ax.set_xlabel(x)
    ax.set_ylabel(col[7:])
    ax.set_title(f"{col[7:]} against {x}" + (" (mean and std over seeds)" if "seed" in swept and x != "seed" else ""))
    ax.legend()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True
