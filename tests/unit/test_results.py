"""minirepro.claims.results: claims are declared with a rule before they are settled."""

from __future__ import annotations

import json

import pytest

from minirepro.claims import results
from minirepro.claims.rules import Threshold


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    results.reset()
    monkeypatch.setenv("MINIREPRO_RESULTS", str(tmp_path / "r.json"))
    yield
    results.reset()


def test_declare_then_settle_is_written_at_once(tmp_path):
    c = results.declare_claim("c1", "x beats y", "0.5 vs 0.3", Threshold("x", 0.3, direction="above"))
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["claims"][0]["verdict"] is None  # declared before the run
    assert on_disk["claims"][0]["rule"] == Threshold("x", 0.3, direction="above").sentence()
    c.settle(values=[0.51234])
    results.record_metric("x", 0.5)
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["claims"][0]["verdict"] == "reproduced"
    assert "0.512" in on_disk["claims"][0]["measured"]
    assert on_disk["metrics"] == {"x": 0.5}
    assert "c1: reproduced" in results.verdict_lines()
    assert list(results.claims_table().columns) == ["claim", "paper", "measured here", "verdict", "rule", "id", "book"]


def test_a_claim_is_settled_once_and_only_by_its_rule():
    c = results.declare_claim("c2", "s", "-", Threshold("x", 1.0))
    with pytest.raises(TypeError, match="rule object"):
        c.settle(1, "reproduced")  # a verdict by hand is refused
    with pytest.raises(TypeError, match="rule object"):
        c.settle(verdict="partly")
    c.settle(values=[2.0])
    assert c.verdict == "not reproduced"
    with pytest.raises(RuntimeError, match="already settled"):
        c.settle(values=[0.5])


@pytest.mark.parametrize("rule", ["reproduced if x > y", " ", None, 0.05])
def test_a_claim_needs_a_rule_object_not_a_sentence(rule):
    with pytest.raises(TypeError, match="rule object"):
        results.declare_claim("c3", "s", "-", rule)


def test_claim_ids_are_words():
    with pytest.raises(ValueError, match="word"):
        results.declare_claim("two words", "s", "-", Threshold("x", 1.0))


def test_metrics_take_numpy_scalars_and_refuse_objects():
    import numpy as np

    results.record_metric("a", np.float64(1.5))
    results.record_metric("b", float("nan"))
    assert results.metrics() == {"a": 1.5, "b": "nan"}
    with pytest.raises(TypeError):
        results.record_metric("c", [1, 2])
