"""minirepro.results: claims are declared with a rule before they are settled."""

from __future__ import annotations

import json

import pytest

from minirepro import results


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    results.reset()
    monkeypatch.setenv("MINIREPRO_RESULTS", str(tmp_path / "r.json"))
    yield
    results.reset()


def test_declare_then_settle_is_written_at_once(tmp_path):
    c = results.declare_claim("c1", "x beats y", "0.5 vs 0.3", "reproduced if x > y")
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["claims"][0]["verdict"] is None  # declared before the run
    c.settle(0.51234, results.decide(True))
    results.record_metric("x", 0.5)
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["claims"][0]["verdict"] == "reproduced"
    assert on_disk["claims"][0]["measured"] == "0.5123"
    assert on_disk["metrics"] == {"x": 0.5}
    assert "c1: reproduced" in results.verdict_lines()
    assert list(results.claims_table().columns) == ["claim", "paper", "measured here", "verdict", "rule"]


def test_a_claim_is_settled_once_and_with_a_known_verdict():
    c = results.declare_claim("c2", "s", "-", "rule")
    with pytest.raises(ValueError, match="not one of"):
        c.settle(1, "mostly")
    c.settle(1, "partly")
    with pytest.raises(RuntimeError, match="already settled"):
        c.settle(1, "reproduced")


def test_rules_are_required_and_ids_are_words():
    with pytest.raises(ValueError, match="rule"):
        results.declare_claim("c3", "s", "-", " ")
    with pytest.raises(ValueError, match="word"):
        results.declare_claim("two words", "s", "-", "r")


@pytest.mark.parametrize("args,word", [((True,), "reproduced"), ((False, True), "partly"),
                                       ((False,), "not reproduced"),
                                       ((True, True, False), "not testable at this scale")])
def test_decide(args, word):
    assert results.decide(*args) == word


def test_metrics_take_numpy_scalars_and_refuse_objects():
    import numpy as np

    results.record_metric("a", np.float64(1.5))
    results.record_metric("b", float("nan"))
    assert results.metrics() == {"a": 1.5, "b": "nan"}
    with pytest.raises(TypeError):
        results.record_metric("c", [1, 2])
