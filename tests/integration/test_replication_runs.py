"""Protocol v3 end to end on a toy book (the integration stage): the recorded run, three
replications and the pilot are run for real (``minirepro claims --update/--robustness/--pilot``)
and stored with every claim's per-unit data; the pooled verdict is the rule decided on all
their units together; power comes from the pilot; the ledger shows units, power,
replications and fragile marks. Pooling from records alone, the policy and the by-unit plan
are unit tests (tests/unit/test_replication.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from minirepro.chapters import get
from minirepro.claims import ledger, plan, tables
from minirepro.claims.ledger import pilot_path, replications_path
from minirepro.claims.power import power
from minirepro.claims.rules import Threshold
from minirepro.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _book(toy_book: Path) -> None:
    (toy_book / "book" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "papers.yml", toy_book / "book" / "papers.yml")


def test_update_replications_and_pilot_pool_every_unit(toy_book, capsys):
    _book(toy_book)
    ch = get("toy")
    assert main(["claims", "--update", "toy"]) == 0  # book scale: n = 5 draws
    assert main(["claims", "--robustness", "3", "--only", "toy", "--scale", "book", "-j", "2"]) == 0
    assert main(["claims", "--pilot", "--only", "toy"]) == 0
    reps = json.loads(replications_path(ch.slug, toy_book).read_text())
    assert reps["values"] == [0, 1000, 2000] and reps["param"] == "seed" and reps["failed"] == 0
    pilot = json.loads(pilot_path(ch.slug, toy_book).read_text())
    assert pilot["value"] == plan.PILOT_OFFSET

    # read every run independently from its folder: the recorded run is seed 0, as is replication 0
    runs = {}
    for p in (toy_book / "runs" / "toy").glob("*/results.json"):
        r = json.loads(p.read_text())
        runs[r["params"]["seed"]] = r
    x = {s: next(c for c in r["claims"] if c["id"] == "mean-above")["data"]["values"] for s, r in runs.items()}
    pooled_units = np.concatenate([x[0], x[1000], x[2000]])  # seed 0 counted once
    rule = Threshold("a draw", -1.0, direction="above", over="interval", min_effect=0.5)
    expect = rule.decide(values=pooled_units)

    e = ledger.entry("toy")
    c = next(c for c in e["claims"] if c["id"] == "mean-above")
    assert c["n_units"] == 15 and c["pooled_runs"] == 3 and c["unit"] == "draw"
    p = power(rule, {"values": x[plan.PILOT_OFFSET]}, 15)
    assert c["power"]["value"] == pytest.approx(p.value)
    # v3.1: a decided interval stays decided; only an inconclusive one is gated by power
    inconclusive = expect.details["conclusive"] is False
    gated = "not testable at this scale" if (inconclusive and p.value < 0.8) else expect.verdict
    assert c["verdict"] == gated
    assert sum(c["replications"].values()) == 3 and c["k"] == 3
    own = [next(cc for cc in runs[s]["claims"] if cc["id"] == "mean-above")["verdict"] for s in (0, 1000, 2000)]
    assert sorted(own) == sorted(v for v, n in c["replications_as_run"].items() for _ in range(n))
    again = [rule.decide(values=x[s]) for s in (0, 1000, 2000)]
    again = ["not testable at this scale" if (o.details["conclusive"] is False
                                              and power(rule, {"values": x[plan.PILOT_OFFSET]}, 5).value < 0.8)
             else o.verdict for o in again]
    assert sorted(again) == sorted(v for v, n in c["replications"].items() for _ in range(n))
    assert c["fragile"] == (sum(v not in (c["verdict"], "not testable at this scale") for v in again) > 1)
    row = next(r for r in tables.rows() if r["id"] == "mean-above")
    assert {"n_units", "unit", "power", "replications", "fragile"} <= set(row)
    assert json.loads(tables.markdown(fmt="json"))[1]["n_units"] == 15
    assert "claims of the papers" in tables.summary_text()

