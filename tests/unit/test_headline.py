"""Each paper's headline metric (``headline`` in ``book/papers.yml``): every chapter names one it
records, and the run and sweep summaries use it when a run names none of its own."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml

from minirepro.chapters import discover, get
from minirepro.run.summary import declared_headline, headline_metric, write_summary

ROOT = Path(__file__).resolve().parents[2]


def test_every_chapter_names_a_headline_among_its_recorded_metrics():
    listed = {int(p["number"]): p for p in yaml.safe_load((ROOT / "book" / "papers.yml").read_text())}
    chapters = discover(ROOT)
    assert len(chapters) == 19
    wrong = []
    for ch in chapters:
        headline = listed[ch.number].get("headline")
        record = ROOT / "book" / "claims" / f"{ch.slug}.json"
        metrics = json.loads(record.read_text())["metrics"] if record.is_file() else {}
        if not headline:
            wrong.append(f"{ch.slug}: no headline in book/papers.yml")
        elif headline not in metrics:
            wrong.append(f"{ch.slug}: headline {headline!r} is not among the metrics of "
                         f"book/claims/{ch.slug}.json")
        elif not isinstance(metrics[headline], (int, float)) or isinstance(metrics[headline], bool):
            wrong.append(f"{ch.slug}: headline {headline!r} is not a number ({metrics[headline]!r})")
        assert declared_headline(ch, ROOT) == headline
    assert not wrong, "\n".join(wrong)


def _row(metrics, headline=None):
    return {"ok": True, "params": {"seed": 0}, "metrics": metrics, "headline": headline,
            "verdicts": {}, "seconds": 1.0, "folder": "x"}


def test_the_summary_takes_metric_then_the_runs_headline_then_the_papers_then_the_first(tmp_path):
    caffnet = get("caffnet", ROOT)
    declared = declared_headline(caffnet, ROOT)
    metrics = {"first": 1.0, "other": 2.0, declared: 0.5}
    assert headline_metric([_row(metrics)], "other", chapter=caffnet) == ("other", "--metric")
    assert headline_metric([_row(metrics, "other")], chapter=caffnet)[0] == "other"
    got, why = headline_metric([_row(metrics)], chapter=caffnet)
    assert got == declared and "papers.yml" in why
    # a run that did not record the declared metric (another scale): the first one, said so
    got, why = headline_metric([_row({"first": 1.0})], chapter=caffnet)
    assert got == "first" and "first metric" in why
    # no chapter (or one the book does not know): as before
    unknown = dataclasses.replace(caffnet, number=99)  # a chapter book/papers.yml does not list
    assert headline_metric([_row(metrics)])[0] == "first"
    assert headline_metric([_row(metrics)], chapter=unknown)[0] == "first"
    assert declared_headline(unknown, ROOT) is None
    assert declared_headline(caffnet, tmp_path) is None  # no book here


def test_a_sweep_summary_reports_the_declared_headline(tmp_path):
    caffnet = get("caffnet", ROOT)
    declared = declared_headline(caffnet, ROOT)
    rows = [{**_row({"first": float(s), declared: 0.1 * s}), "params": {"seed": s}} for s in range(3)]
    text = write_summary(tmp_path, rows, ["seed"], chapter=caffnet)
    assert f"headline: {declared} (the paper's headline metric (book/papers.yml))" in text
    assert (tmp_path / "sweep.png").is_file()
