"""``minirepro claims --robustness K``: verdict counts over K base seeds, shown in the ledger."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minirepro import ledger
from minirepro.chapters import get
from minirepro.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_robustness_counts_the_runs_verdicts_and_the_ledger_shows_them(toy_book, capsys):
    (toy_book / "book" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "papers.yml", toy_book / "book" / "papers.yml")
    ch = get("toy")
    entry = {"chapter": "toy", "slug": "01-toy", "title": "Toy", "scale": "smoke",
             "notebook_sha": ledger.notebook_sha(ch),
             "claims": [{"id": "positive", "statement": "s", "paper_value": "-", "measured": "m",
                         "verdict": "reproduced", "rule": "r"}]}
    ledger.claims_path(ch, toy_book).write_text(json.dumps(entry))
    assert ledger.rows()[0]["robustness"] == ""  # not run yet
    assert main(["claims", "--robustness", "3", "--only", "toy", "--scale", "smoke", "-j", "2"]) == 0
    rob = json.loads(ledger.robustness_path(ch, toy_book).read_text())
    assert rob["k"] == 3 and rob["seeds"] == [0, 1000, 2000] and rob["failed"] == 0
    counts = rob["claims"]["positive"]
    assert sum(counts.values()) == 3
    # the counts are those of the runs themselves, read independently from their folders
    runs = [json.loads(p.read_text()) for p in (toy_book / "runs" / "toy").glob("*/results.json")]
    seen = {}
    for r in runs:
        if r["params"]["seed"] in rob["seeds"]:
            v = r["claims"][0]["verdict"]
            seen[v] = seen.get(v, 0) + 1
    assert seen == counts
    text = ledger.robustness_text(ledger.load()[0], "positive")
    top = max(counts, key=counts.get)
    assert text.startswith(f"{counts[top]}/3 {top}")
    assert "/3 " in ledger.markdown() and "/3 " in ledger.page_markdown(toy_book)
    assert json.loads(ledger.markdown(fmt="json"))[0]["robustness"] == text


def test_the_policy_varies_another_parameter_or_marks_a_chapter_fixed(toy_book):
    (toy_book / "book" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "papers.yml", toy_book / "book" / "papers.yml")
    ch = get("toy")
    assert ledger.robustness_policy("toy") == {"param": "seed"}  # no policy file: seed
    policy = toy_book / ledger.POLICY_FILE
    policy.write_text("toy:\n  fixed: trained once\n  short: fixed seeds\n")
    entry = {"chapter": "toy", "slug": "01-toy", "title": "Toy", "scale": "smoke",
             "notebook_sha": ledger.notebook_sha(ch),
             "claims": [{"id": "positive", "statement": "s", "paper_value": "-", "measured": "m",
                         "verdict": "reproduced", "rule": "r"}]}
    ledger.claims_path(ch, toy_book).write_text(json.dumps(entry))
    assert ledger.rows()[0]["robustness"] == "not re-seeded: fixed seeds"
    with pytest.raises(ValueError, match="not re-seeded"):
        ledger.robustness("toy", 2, scale="smoke")
    policy.write_text("toy:\n  param: nope\n")
    with pytest.raises(ValueError, match="no `nope` parameter"):
        ledger.robustness("toy", 2, scale="smoke")
    policy.write_text("toy:\n  param: seed\n  fixed: both\n")
    with pytest.raises(ValueError, match="exactly one"):
        ledger.robustness_policy("toy")


def test_the_books_policy_names_real_chapters_and_parameters():
    from minirepro.chapters import discover

    table = __import__("yaml").safe_load((ROOT / ledger.POLICY_FILE).read_text())
    names = {c.name: c for c in discover(ROOT)}
    for name in table:
        assert name in names, f"{name} in the robustness policy is not a chapter"
        p = ledger.robustness_policy(name, ROOT)
        if "param" in p:
            assert p["param"] in names[name].parameters
