"""minirepro.chapters: discovery, the parameters cell, validation of values."""

from __future__ import annotations

import re

import pytest

from minirepro.chapters import ChapterError, discover, get
from minirepro.core.params import parse_parameters

CELL = '''import os
scale = os.environ.get("MINIREPRO_SCALE", "book")  # size {smoke, book, full}
seed = 0  # the seed
lr = 0.1  # step size
names = ["a", "b"]  # which ones
method = "x"  # the method {x, y}
flag = False  # a switch
n: int | None = None  # optional count
'''


def test_parse_parameters_types_comments_choices():
    p = parse_parameters(CELL)
    assert list(p) == ["scale", "seed", "lr", "names", "method", "flag", "n"]
    assert p["seed"].type == "int" and p["seed"].comment == "the seed"
    assert p["lr"].type == "float" and p["names"].type == "list[str]"
    assert p["method"].choices == ("x", "y")
    assert p["scale"].choices == ("smoke", "book", "full")
    assert p["n"].type == "int" and p["n"].optional


@pytest.mark.parametrize("name,raw,value", [
    ("seed", "3", 3), ("lr", "1e-3", 1e-3), ("lr", 2, 2.0), ("flag", "true", True),
    ("flag", "0", False), ("names", "a,b,c", ["a", "b", "c"]), ("names", ["q"], ["q"]),
    ("n", "None", None), ("n", "4", 4), ("method", "y", "y")])
def test_coerce_accepts_good_values(name, raw, value):
    assert parse_parameters(CELL)[name].coerce(raw) == value


@pytest.mark.parametrize("name,raw", [("seed", "x"), ("seed", 1.5), ("seed", True), ("lr", "fast"),
                                      ("flag", "maybe"), ("method", "z"), ("scale", "huge"),
                                      ("seed", None)])
def test_coerce_refuses_bad_values(name, raw):
    with pytest.raises(ChapterError):
        parse_parameters(CELL)[name].coerce(raw)


def test_parse_refuses_non_literals_and_untyped_none():
    with pytest.raises(ChapterError, match="literal"):
        parse_parameters("x = f(3)  # no")
    with pytest.raises(ChapterError, match="annotation"):
        parse_parameters("x = None  # no type")
    with pytest.raises(ChapterError, match="not valid Python"):
        parse_parameters("x = (")


def test_discover_and_get(toy_book):
    chapters = discover()
    assert [c.name for c in chapters] == ["toy"]
    assert get("01-toy").name == "toy" and get("toy").title == "A toy chapter"
    with pytest.raises(ChapterError, match="chapters: toy"):
        get("nope")
    assert get("toy").validate({"n": "3"}) == {"n": 3}
    with pytest.raises(ChapterError, match="no parameter 'm'"):
        get("toy").validate({"m": 1})


def test_the_books_chapters_parse():
    chapters = discover()  # the real book: every chapter's parameters cell parses
    for ch in chapters:
        assert "scale" in ch.parameters and "seed" in ch.parameters, ch.name
        for p in ch.parameters.values():
            assert p.comment, f"{ch.name}: parameter {p.name} has no comment"


RANGED = '''rho = 0.5  # a share (0, 1]
steps = 10  # steps [1, inf]
lam = 1.0  # strength [0, 2)
angles = [10.0]  # degrees [0, 90]
n_items: int | None = None  # a count (no marker: at least 1)
note = "x"  # text ending like a range [1, 2]
'''


@pytest.mark.parametrize("name,raw", [("rho", "0.5"), ("rho", "1"), ("steps", "1"), ("lam", "0"),
                                      ("lam", "1.999"), ("angles", "0,90"), ("n_items", "1"),
                                      ("note", "anything")])
def test_declared_ranges_accept_values_inside(name, raw):
    parse_parameters(RANGED)[name].coerce(raw)


@pytest.mark.parametrize("name,raw,shown", [("rho", "0", "(0, 1]"), ("rho", "1.01", "(0, 1]"),
                                            ("steps", "0", "[1, inf)"), ("lam", "2", "[0, 2)"),
                                            ("lam", "-0.1", "[0, 2)"), ("angles", "45,91", "[0, 90]"),
                                            ("n_items", "0", "[1, inf)")])
def test_declared_ranges_refuse_values_outside_with_the_range(name, raw, shown):
    with pytest.raises(ChapterError, match=re.escape(shown)):
        parse_parameters(RANGED)[name].coerce(raw)


def test_an_empty_range_is_refused():
    with pytest.raises(ChapterError, match="empty"):
        parse_parameters("x = 1.0  # oops (1, 1]")
