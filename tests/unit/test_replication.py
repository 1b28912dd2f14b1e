"""Protocol v3 on a toy book, from records: pooling replications and marking a claim fragile,
the replication policy, the by-unit plan. The whole protocol run for real (the recorded run,
replications, pilot, pooled ledger) is the integration stage's:
tests/integration/test_replication_runs.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from minirepro.chapters import get
from minirepro.claims import ledger, plan
from minirepro.claims.ledger import replications_path
from minirepro.claims.rules import Threshold
from minirepro.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _book(toy_book: Path) -> None:
    (toy_book / "book" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "papers.yml", toy_book / "book" / "papers.yml")


def test_repool_reads_records_only_and_marks_fragile(toy_book):
    """A claim three of whose five replications contradict the pooled verdict is fragile."""
    _book(toy_book)
    ch = get("toy")
    sha = ledger.notebook_sha(ch)
    rule = Threshold("a draw", -1.0, direction="above", over="interval", min_effect=0.5)
    claim = {"id": "mean-above", "statement": "s", "paper_value": "-", "rule": rule.sentence(),
             "kind": "paper", "unit": "draw", "spec": rule.spec(),
             "data": {"values": [0.0, 0.1, -0.1, 0.2, 0.05]}, "verdict": "reproduced", "measured": "m"}
    entry = {"chapter": "toy", "slug": ch.slug, "title": "Toy", "scale": "book", "notebook_sha": sha,
             "params": {"seed": 0}, "claims": [claim]}
    ledger.claims_path(ch, toy_book).write_text(json.dumps(entry))
    # three replications whose own data contradict (every draw near -1.3, below the bound), two
    # that agree; fragile is decided on each replication's data under the pooled rule, whatever
    # verdict the run recorded (the first says "not reproduced" although its data reproduce)
    centre = {0: 0.05, 1000: -1.3, 2000: -1.3, 3000: -1.3, 4000: 3.0}
    runs = [{"value": v, "ok": True, "claims": {"mean-above": {
        "verdict": "not reproduced" if v in (0, 1000, 2000) else "reproduced",
        "data": {"values": list(np.linspace(-0.02, 0.02, 5) + centre[v])}}}} for v in (0, 1000, 2000, 3000, 4000)]
    replications_path(ch.slug, toy_book).parent.mkdir(parents=True)
    replications_path(ch.slug, toy_book).write_text(json.dumps(
        {"param": "seed", "k": 5, "values": [0, 1000, 2000, 3000, 4000], "notebook_sha": sha, "runs": runs}))
    assert main(["claims", "--pool", "--only", "toy"]) == 0
    c = ledger.entry("toy")["claims"][0]
    assert c["n_units"] == 25 and c["verdict"] == "reproduced" and c["fragile"]
    assert c["replications"] == {"reproduced": 2, "not reproduced": 3}  # decided again, same rule
    assert c["replications_as_run"] == {"not reproduced": 3, "reproduced": 2}
    assert c["power"] is None or c["power"]["value"] is None  # no pilot: no power, and no gate
    # a stale replication record is not pooled
    data = json.loads(replications_path(ch.slug, toy_book).read_text())
    data["notebook_sha"] = "other"
    replications_path(ch.slug, toy_book).write_text(json.dumps(data))
    main(["claims", "--pool", "--only", "toy"])
    c = ledger.entry("toy")["claims"][0]
    assert c["n_units"] == 5 and c["k"] == 0 and not c["fragile"]


def test_the_policy_varies_another_parameter_or_marks_a_chapter_fixed(toy_book):
    _book(toy_book)
    assert plan.policy("toy") == {"param": "seed", "k": plan.K}
    assert plan.planned_runs("toy") == plan.K
    policy = toy_book / plan.POLICY_FILE
    policy.write_text("toy:\n  fixed: trained once\n  short: fixed seeds\n")
    assert plan.planned_runs("toy") == 1
    from minirepro.run import replicate
    with pytest.raises(ValueError, match="not re-seeded"):
        replicate.replicate(get("toy"), 2, scale="smoke")
    policy.write_text("toy:\n  param: nope\n")
    with pytest.raises(ValueError, match="no `nope` parameter"):
        replicate.replicate(get("toy"), 2, scale="smoke")
    policy.write_text("toy:\n  param: seed\n  fixed: both\n")
    with pytest.raises(ValueError, match="exactly one"):
        plan.policy("toy")


def test_the_books_policy_names_real_chapters_and_parameters():
    from minirepro.chapters import discover

    table = __import__("yaml").safe_load((ROOT / plan.POLICY_FILE).read_text())
    names = {c.name: c for c in discover(ROOT)}
    for name in table:
        assert name in names, f"{name} in the replication plan is not a chapter"
        p = plan.policy(name, ROOT)
        if "param" in p:
            assert p["param"] in names[name].parameters


def test_a_by_unit_plan_counts_each_model_seed_once(toy_book):
    """Replications that re-draw the test data of the same model seeds: each seed is one unit,
    the mean over its draws (not 5 x 6 'independent' units)."""
    from minirepro.claims.pool import concat, mean_by_unit

    runs = [{"values": [1.0, 2.0, 3.0]}, {"values": [3.0, 4.0, 5.0]}]
    assert mean_by_unit(runs) == {"values": [2.0, 3.0, 4.0]}
    assert concat(runs) == {"values": [1.0, 2.0, 3.0, 3.0, 4.0, 5.0]}
    with pytest.raises(ValueError, match="different numbers of units"):
        mean_by_unit([{"values": [1.0]}, {"values": [1.0, 2.0]}])
    _book(toy_book)
    (toy_book / plan.POLICY_FILE).write_text("toy:\n  param: seed\n  pool: by-unit\n")
    assert plan.planned_runs("toy") == 1
