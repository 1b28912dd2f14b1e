"""Corpus: every family's answer against a brute-force solver, chance levels, determinism."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import minirepro
from minirepro.core.lm.corpus import (
    COPY_WORDS,
    FACTS,
    FAMILIES,
    CorpusConfig,
    Example,
    build_corpus,
    by_family,
    chance_levels,
    check_answer,
    family_schedule,
    generate_split,
    score_answers,
    solve,
)
from minirepro.core.lm.prose import PROSE_SHA256, load_prose

CFG = CorpusConfig(n_train=600, n_val=200, n_test=1000)
CORPUS = build_corpus(CFG)


def test_every_family_is_present_in_equal_shares():
    counts = Counter(e.family for e in CORPUS.test)
    assert set(counts) == set(FAMILIES)
    assert set(counts.values()) == {len(CORPUS.test) // len(FAMILIES)}


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_answers_match_a_brute_force_solver(split):
    for e in CORPUS.split(split):
        assert solve(e) == e.answer, e.text


def test_facts_are_context_free_and_copy_answers_are_only_in_the_context():
    seen: dict[str, set[str]] = {}
    for e in by_family(CORPUS.train + CORPUS.test)["facts"]:
        seen.setdefault(e.prompt.split()[-2], set()).add(e.answer)
        assert e.answer == FACTS[e.prompt.split()[-2]]
    assert all(len(v) == 1 for v in seen.values())
    contexts = {e.prompt.split("fact :")[0] for e in by_family(CORPUS.train)["facts"]}
    assert len(contexts) > 10  # the same key is asked after different unrelated contexts
    for e in by_family(CORPUS.test)["copy"]:
        ctx = e.prompt.split(";")[0].split()[2:]
        assert e.answer in " ".join(ctx) and all(w in COPY_WORDS for w in e.answer.split())
        assert not set(e.answer.split()) & set(FACTS)


def test_multi_token_answers_and_relay_roles():
    fams = by_family(CORPUS.test)
    assert {len(e.answer.split()) for e in fams["multi"]} == {2, 3}
    assert {len(e.answer.split()) for e in fams["copy"]} == {3}
    for e in fams["relay"]:
        a, b = e.prompt.split(" agent ")[0], e.prompt.split(" done . ")[1]
        assert a.startswith("agent ") and b.startswith("agent ") and a.split()[1] != b.split()[1]
    assert {e.topic for e in fams["relay"]} == {"step", "final", "plus"}
    letters = Counter(e.answer for e in fams["mcq"])
    assert set(letters) == {"a", "b", "c", "d"} and min(letters.values()) > 10


def test_prose_comes_from_the_shipped_text_and_splits_do_not_share_paragraphs():
    import hashlib

    from minirepro.core.lm.prose import PROSE_FILE
    assert hashlib.sha256(PROSE_FILE.read_bytes()).hexdigest() == PROSE_SHA256
    assert len(load_prose()) > 2000
    sp = CORPUS.prose_split
    assert not set(sp["train"]) & set(sp["test"]) and not set(sp["train"]) & set(sp["val"])
    train_prompts = {e.prompt for e in CORPUS.train if e.family == "prose"}
    assert not train_prompts & {e.prompt for e in CORPUS.test if e.family == "prose"}


def test_chance_levels_match_uniform_guessing():
    rng = np.random.default_rng(0)
    chance = chance_levels(CORPUS, "test")
    pools = {"arith": list("0123456789"), "recall": list("0123456789"), "trace": list("0123456789"),
             "relay": list("0123456789"), "text": list(CFG.topic_names), "mcq": list("abcd"),
             "facts": sorted(set(FACTS.values()))}
    ex = [e for e in CORPUS.test if e.family in pools]
    hits = Counter()
    reps = 40
    for _ in range(reps):
        for e in ex:
            hits[e.family] += check_answer(e, pools[e.family][int(rng.integers(len(pools[e.family])))])
    n = Counter(e.family for e in ex)
    for f in pools:
        est = hits[f] / (reps * n[f])
        assert abs(est - chance[f]) < 4 * np.sqrt(chance[f] * (1 - chance[f]) / (reps * n[f])), f
    assert chance["copy"] < 1e-6 and 0 < chance["multi"] < 0.01 and 0 <= chance["prose"] < 0.2


def test_scorer():
    e = Example("multi", "keys a 3 b 7 ; get b a =", "7 3", "multi")
    assert check_answer(e, " 7 3 keys")
    assert not check_answer(e, " 7 4") and not check_answer(e, "73")
    p = Example("prose", "This module provides a", "function", "prose")
    assert check_answer(p, " function.") and not check_answer(p, " functions")
    s = score_answers([e, p], ["7 3", "nope"])
    assert s == {"multi": 1.0, "prose": 0.0, "all": 0.5}
    with pytest.raises(ValueError, match="outputs"):
        score_answers([e], [])
    with pytest.raises(ValueError, match="at least one"):
        score_answers([], [])


def test_family_schedule_is_turns_for_equal_weights_and_proportional_otherwise():
    assert family_schedule(7, [1, 1, 1]) == [0, 1, 2, 0, 1, 2, 0]
    w = np.array([6.0, 3.0, 1.0])
    sched = family_schedule(1000, w)
    for k in (10, 97, 500, 1000):  # every prefix is within one line of its share
        counts = np.bincount(sched[:k], minlength=3)
        assert np.all(np.abs(counts - k * w / w.sum()) <= 1.0)


def test_train_weights_change_the_train_split_only():
    w = (4.0,) + (1.0,) * (len(FAMILIES) - 1)
    cfg = CorpusConfig(n_train=1300, n_val=200, n_test=200, train_weights=w)
    c = build_corpus(cfg)
    counts = Counter(e.family for e in c.train)
    assert counts["arith"] == 400 and all(counts[f] == 100 for f in FAMILIES[1:])
    assert c.fingerprint(("val", "test")) == build_corpus(
        CorpusConfig(n_train=1300, n_val=200, n_test=200)).fingerprint(("val", "test"))
    assert all(solve(e) == e.answer for e in c.train if e.family != "prose")
    same = generate_split(cfg, 200, 5, c, "test")  # chapters' fresh items take turns too
    assert Counter(e.family for e in same)["arith"] == 20


def test_bad_input():
    with pytest.raises(ValueError, match="train_weights"):
        CorpusConfig(families=("arith", "recall"), train_weights=(1.0,))
    with pytest.raises(ValueError, match="train_weights"):
        CorpusConfig(families=("arith", "recall"), train_weights=(1.0, -1.0))
    with pytest.raises(ValueError, match="train_weights"):
        CorpusConfig(families=("arith", "recall"), train_weights=(0.0, 0.0))
    CorpusConfig(families=("arith", "recall"), train_weights=(1.0, 0.0))  # a family may rest
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        CorpusConfig(families=("arith", "nope"))
    with pytest.raises(ValueError, match="relay_steps"):
        CorpusConfig(relay_steps=(5, 2))
    with pytest.raises(ValueError, match="split"):
        CORPUS.split("dev")
    with pytest.raises(ValueError, match="unknown family"):
        solve(Example("nope", "x", "y"))


_FP = ("from minirepro.core.lm.corpus import CorpusConfig, build_corpus;"
       "print(build_corpus(CorpusConfig(n_train=600, n_val=200, n_test=1000)).fingerprint())")


def test_fingerprint_is_identical_across_builds_and_processes():
    again = build_corpus(CorpusConfig(n_train=600, n_val=200, n_test=1000))
    assert again.fingerprint() == CORPUS.fingerprint()
    out = subprocess.run([sys.executable, "-c", _FP], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin",
                              # the child imports the package this test imported
                              "PYTHONPATH": str(Path(minirepro.__file__).parents[1])},
                         timeout=300)
    assert out.stdout.strip() == CORPUS.fingerprint()
    other = build_corpus(CorpusConfig(n_train=600, n_val=200, n_test=1000, seed=7))
    assert other.fingerprint() != CORPUS.fingerprint()
