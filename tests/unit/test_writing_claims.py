"""The page "Writing a claim" (``book/writing-claims.md``) documents exactly the words the code takes.

Each heading of the page that names a function or class in backticks (``### `Better` ``) is
followed by a table whose first column holds one documented word per row, in backticks. Every
such word must be a parameter of that function or class (a misspelled or removed parameter
fails), and every parameter must be documented; the words of ``settle`` are the data keywords
of every rule's ``decide`` and ``settle``'s own ``note``. The worked example runs and prints
what the page says it prints.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from minirepro.claims import results, rules
from minirepro.claims.record import Claim

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "book" / "writing-claims.md"
RULES = (rules.Better, rules.Equivalent, rules.NonInferior, rules.Threshold, rules.Correlation,
         rules.AllOf, rules.Given)
DOCUMENTED = {f.__name__: f for f in (results.declare_seeds, results.record_metric, results.declare_claim,
                                      results.power_lines, results.claims_table, results.verdict_lines,
                                      results.show_trends, *RULES)}
HEADING = re.compile(r"^#+ `(\w+)(?:\(\))?`\s*$")
ROW = re.compile(r"^\| `(\w+)` \|")


def _sections() -> dict[str, list[str]]:
    """Heading name -> the words in the first column of its table (for backticked headings)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            m = HEADING.match(line)
            current = m.group(1) if m else None
            if current is not None:
                out[current] = []
        elif current is not None and (m := ROW.match(line)):
            out[current].append(m.group(1))
    return out


def _params(fn) -> set[str]:
    """The named parameters of ``fn`` (for a class, of its constructor), ``self``, ``*args`` and
    ``**kwargs`` left out."""
    sig = inspect.signature(fn)
    return {n for n, p in sig.parameters.items() if n != "self"
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _settle_words() -> set[str]:
    """What ``claim.settle`` takes: its own keywords and the data keywords of every rule's ``decide``."""
    words = _params(Claim.settle) - {"measured", "verdict"}  # refused: no chapter writes its verdict
    for rule in RULES:
        words |= _params(rule.decide)
    return words


SECTIONS = _sections()


def test_the_page_documents_every_declaration_and_rule():
    missing = sorted((set(DOCUMENTED) | {"settle"}) - set(SECTIONS))
    assert not missing, f"{PAGE.name} has no section for {missing}"
    unknown = sorted(set(SECTIONS) - set(DOCUMENTED) - {"settle"})
    assert not unknown, f"{PAGE.name} documents names the code does not have: {unknown}"


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_documented_word_is_exactly_a_parameter(name):
    words, params = SECTIONS.get(name, []), _params(DOCUMENTED[name])
    assert len(words) == len(set(words)), f"{name}: a word documented twice: {words}"
    assert not set(words) - params, f"{name}: documented but not a parameter: {sorted(set(words) - params)}"
    assert not params - set(words), f"{name}: parameters not documented: {sorted(params - set(words))}"


def test_every_parameter_of_declare_claim_is_documented():
    params = list(inspect.signature(results.declare_claim).parameters)
    assert params and set(params) <= set(SECTIONS["declare_claim"])


def test_the_settle_words_are_the_data_the_rules_take():
    words = set(SECTIONS["settle"])
    assert words == _settle_words(), (f"not taken: {sorted(words - _settle_words())}; "
                                      f"not documented: {sorted(_settle_words() - words)}")


def test_the_worked_example_runs_and_prints_what_the_page_says(monkeypatch, tmp_path, capsys):
    text = PAGE.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"It prints\n\n```text\n(.*?)```", text, re.S).group(1)
    monkeypatch.delenv("MINIREPRO_RESULTS", raising=False)
    monkeypatch.delenv("MINIREPRO_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(code, str(PAGE), "exec"), {})
    finally:
        results.reset()
    assert capsys.readouterr().out == shown
