"""Readers v3: the command line's small items.

- 1: a smoke-scale run or sweep says its verdicts are a smoke check (n seeds) and that
  the book's verdicts are on the ledger (`minirepro claims`);
- 2: papermill's false "Unable to parse line" (an ``=`` in a parameter's comment) is not
  printed, and the run's ``papermill.log`` holds papermill's log;
- 3: ``params.json`` holds the values the run used (a ``None`` parameter: its preset's),
  and each run folder has a ``README.md`` whose command re-runs it;
- 5: an untouched answer cell is graded "not attempted", not with a wrong answer's hint;
- 6: ``minirepro lab`` writes ``_build/labs`` in the current folder;
- 7: "did you mean", ``-p NAME=VALUE``, a ``--runs-dir`` whose parent is missing, and an
  arena ``--db`` that cannot be opened: one line each, exit 2, nothing written;
- 8: ``minirepro artifacts verify`` passes on a fresh clone (an empty cache).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from fixtures import one_line_exit_2

from minirepro.cli import main
from minirepro.run.summary import compact_summary

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"

# A chapter with a config: n_seeds is None in the parameters cell and its preset's at run
# time (3 at smoke, 5 at book); the comment holds an "=" (x <= 9), as caffnet's opt_ineq does.
SEEDED = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A seeded chapter

```{code-cell} ipython3
:tags: [parameters]
import os
scale = os.environ.get("MINIREPRO_SCALE", "book")  # size preset {smoke, book, full}
seed = 0  # the base seed
n_seeds: int | None = None  # seeds, x <= 9 (None: preset) [1, 9]
```

```{code-cell} ipython3
import dataclasses
from typing import ClassVar

import numpy as np

from minirepro.claims import results
from minirepro.claims.rules import Threshold
from minirepro.core.scale import ScaledConfig


@dataclasses.dataclass
class Config(ScaledConfig):
    n_seeds: int = 5
    PRESETS: ClassVar = {"smoke": {"n_seeds": 3}, "book": {}, "full": {"n_seeds": 9}}


results.reset("seeded")
cfg = Config.from_params(globals())
results.declare_seeds(cfg.seeds)
values = [float(np.random.default_rng(s).normal(1.0, 0.1)) for s in cfg.seeds]
claim = results.declare_claim("positive", "the draws are positive", "-", n_seeds=len(cfg.seeds),
                              rule=Threshold("a draw", 0.0, direction="above"))
results.record_metric("mean", float(np.mean(values)), atol=1e-9, headline=True)
claim.settle(values=values)
```
'''


@pytest.fixture
def seeded(toy_book: Path) -> Path:
    """The toy book with a second chapter, ``seeded`` (a config with presets)."""
    (toy_book / "notebooks" / "02-seeded").mkdir()
    (toy_book / "notebooks" / "02-seeded" / "seeded.md").write_text(SEEDED)
    return toy_book


_one_line_exit_2 = one_line_exit_2  # tests/fixtures.py


# ---------------------------------------------------------------- items 1, 2, 3: a smoke run


def test_a_smoke_run_says_so_records_what_it_used_and_how_to_run_it_again(seeded, capsys):
    assert main(["run", "seeded", "--scale", "smoke", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert ("  smoke check (n = 3 seeds): these are not the book's verdicts; see `minirepro claims`"
            in out.splitlines()), out
    (folder,) = (seeded / "runs" / "seeded").iterdir()
    # 3: the preset's value, not null; results.json keeps what was given apart
    params = json.loads((folder / "params.json").read_text())
    assert params == {"scale": "smoke", "seed": 0, "n_seeds": 3}
    res = json.loads((folder / "results.json").read_text())
    assert res["params"]["n_seeds"] is None and res["resolved"]["n_seeds"] == 3
    assert res["given"] == {"scale": "smoke"}
    assert not list(folder.glob(".kernel-*"))
    # 2: papermill's log is written, names the final folder, and lacks the false warning
    log = (folder / "papermill.log").read_text()
    assert "Executing notebook with kernel" in log and ".incomplete-" not in log, log
    assert "Unable to parse" not in log and "Unable to parse" not in out
    # 3: the README names every file and gives the command; that command re-runs it
    readme = (folder / "README.md").read_text()
    for name in ("seeded.ipynb", "params.json", "results.json", "papermill.log"):
        assert f"`{name}`" in readme
    command = readme.split("```console\n")[1].split("\n```")[0]
    argv = shlex.split(command)
    assert argv[:3] == ["minirepro", "run", "seeded"] and "--scale" in argv, command
    assert main([*argv[1:], "--quiet"]) == 0
    again = [p for p in (seeded / "runs" / "seeded").iterdir() if p != folder]
    assert len(again) == 1
    assert json.loads((again[0] / "results.json").read_text())["metrics"] == res["metrics"]


def test_papermill_itself_would_warn_on_that_parameters_cell(caplog):
    """What the runner drops is real: papermill's parser warns on the line with an '='
    in its comment (so the test above can fail)."""
    from papermill.translators import PythonTranslator

    cell = nbformat.v4.new_code_cell(SEEDED.split(":tags: [parameters]\n")[1].split("```")[0])
    with caplog.at_level(logging.WARNING, logger="papermill.translators"):
        PythonTranslator.inspect(cell)
    assert any("Unable to parse line 4" in r.getMessage() for r in caplog.records)


def test_only_papermills_parse_warning_is_dropped():
    from minirepro.run.papermill_main import DropParseWarning

    drop = DropParseWarning()
    rec = lambda msg: logging.LogRecord("papermill.translators", logging.WARNING, "", 0, msg, None, None)  # noqa: E731
    assert not drop.filter(rec("Unable to parse line 5 'opt_ineq: int | None = None'."))
    assert drop.filter(rec("Passed unknown parameter: x")) and drop.filter(rec("Black is not installed"))


def test_a_smoke_sweep_says_so(seeded, capsys):
    assert main(["sweep", "seeded", "-p", "seed", "1", "--scale", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "smoke check (n = 3 seeds): these are not the book's verdicts; see `minirepro claims`" in out


def test_the_caveat_is_for_smoke_runs_only():
    row = {"params": {"seed": 0}, "ok": True, "metrics": {"m": 1.0}, "verdicts": {"c": "reproduced"},
           "scale": "smoke", "n_seeds": 3}
    two = compact_summary([row, {**row, "params": {"seed": 1}}], ["seed"], "m", "why")
    assert two.splitlines()[-1] == ("smoke check (n = 3 seeds per run): these are not the book's "
                                    "verdicts; see `minirepro claims`")
    assert "smoke check" not in compact_summary([{**row, "scale": "book"}], ["seed"], "m", "why")
    mixed = compact_summary([row, {**row, "n_seeds": 5}], ["seed"], "m", "why")
    assert mixed.splitlines()[-1].startswith("smoke check: these are not")


# ---------------------------------------------------------------- item 5: not attempted


def test_an_untouched_answer_cell_is_not_attempted(tmp_path, monkeypatch):
    from minirepro import labs
    from minirepro.labs.grade import NOT_ATTEMPTED, unchanged_scaffolds

    monkeypatch.chdir(tmp_path)
    chapter = "spreadsheetarena"  # graded end to end without torch
    built = labs.build_lab(chapter, tmp_path / "pack", ROOT)
    spec = labs.load_spec(chapter, ROOT)
    scaffolds = {q.name: q.scaffold for q in spec.questions}
    student = built["student"] / f"{chapter}.ipynb"
    assert unchanged_scaffolds(student, scaffolds) == set(scaffolds)
    nb = nbformat.read(student, as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace("elo_gap = ...", "elo_gap = 200.0")
    tried = tmp_path / "tried.ipynb"
    nbformat.write(nb, tried)
    assert unchanged_scaffolds(tried, scaffolds) == set(scaffolds) - {"elo_gap"}

    klass = tmp_path / "class"
    klass.mkdir()
    shutil.copy(student, klass / "dave.ipynb")  # nothing answered
    shutil.copy(tried, klass / "erin.ipynb")  # a wrong answer
    grades = labs.grade(chapter, klass, out=tmp_path / "grades", root=ROOT, jobs=1)
    report = labs.report(chapter, grades)
    dave = report.split("\ndave:")[1].split("\nerin:")[0]
    erin = report.split("\nerin:")[1]
    assert "not attempted" in dave and "FAILED" not in dave and "hint:" not in dave, report
    assert "elo_gap disagrees" in erin and "FAILED" in erin, report
    assert "elo_gap              not attempted" not in erin
    js = json.loads(labs.write_json_summary(grades))
    assert js[0]["questions"]["elo_gap"]["attempted"] is False
    assert js[0]["questions"]["elo_gap"]["hints"] == [NOT_ATTEMPTED]
    assert js[1]["questions"]["elo_gap"]["attempted"] is True


# ---------------------------------------------------------------- item 6: lab writes here


def test_lab_writes_into_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIREPRO_ROOT", str(ROOT))
    before = (ROOT / "_build" / "labs" / "student" / "caffnet").stat().st_mtime_ns \
        if (ROOT / "_build" / "labs" / "student" / "caffnet").exists() else None
    assert main(["lab", "caffnet"]) == 0
    assert (tmp_path / "_build" / "labs" / "student" / "caffnet" / "caffnet.ipynb").is_file()
    assert (tmp_path / "_build" / "labs" / "autograder" / "caffnet" / "autograder.zip").is_file()
    after = (ROOT / "_build" / "labs" / "student" / "caffnet").stat().st_mtime_ns \
        if (ROOT / "_build" / "labs" / "student" / "caffnet").exists() else None
    assert before == after
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["lab", "--help"])
    assert "_build/labs in the current folder" in " ".join(capsys.readouterr().out.split())
    assert "`minirepro lab` writes\ninto the current folder" in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------- item 7: bad input


def test_a_near_miss_chapter_name_gets_did_you_mean(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIREPRO_ROOT", str(ROOT))
    for argv in (["run", "cafnet"], ["sweep", "cafnet", "-p", "seed", "0"], ["list", "cafnet"]):
        err = _one_line_exit_2(argv, capsys)
        assert "unknown chapter 'cafnet' (did you mean 'caffnet'?); chapters: " in err, err
    err = _one_line_exit_2(["run", "zzzz"], capsys)
    assert "did you mean" not in err and "chapters: " in err
    err = _one_line_exit_2(["run", "caffnet", "-p", "opt_inq", "8"], capsys)
    assert "no parameter 'opt_inq' (did you mean 'opt_ineq'?)" in err, err
    assert list(tmp_path.iterdir()) == []


def test_p_name_equals_value_hints_at_the_space(toy_book, capsys):
    err = _one_line_exit_2(["run", "toy", "-p", "seed=3"], capsys)
    assert "-p NAME VALUE" in err and "-p seed 3" in err and "parameters: " in err, err
    err = _one_line_exit_2(["sweep", "toy", "-p", "n=3", "4"], capsys)
    assert "-p n 3 4" in err, err
    assert not (toy_book / "runs").exists()


def test_a_runs_dir_whose_parent_is_missing_is_refused(toy_book, capsys):
    import tempfile

    # a short path: the message shortens a long value (pytest's tmp_path can pass 80 characters)
    short = Path(tempfile.mkdtemp(prefix="rd", dir="/tmp"))
    target = short / "nonexistent" / "x"
    for argv in (["run", "toy", "--scale", "smoke", "--runs-dir", str(target)],
                 ["sweep", "toy", "-p", "seed", "0", "--runs-dir", str(target)]):
        err = _one_line_exit_2(argv, capsys)
        assert "runs folder" in err and "does not exist" in err and str(target.parent) in err, err
    assert not target.parent.exists() and not (toy_book / "runs").exists()
    short.rmdir()


@pytest.mark.parametrize("argv", [["serve", "--port", "0", "--db", "/dev/null/x"],
                                  ["export", "--db=/dev/null/x"],
                                  ["leaderboard", "--db", "/dev/null/x/votes.sqlite"]])
def test_an_arena_db_that_cannot_be_opened_is_named(argv, capsys):
    err = _one_line_exit_2(["arena", *argv], capsys)
    assert "the votes database '/dev/null/x" in err and "cannot be opened" in err, err
    assert "'/dev/null' is not a folder" in err


# ---------------------------------------------------------------- item 8: artifacts verify


def test_artifacts_verify_passes_on_a_fresh_clone(tmp_path):
    """An empty cache (a fresh clone's): every committed artifact verifies, SmolLM2's
    converted copy is made on first use, and the optional GPU ones are not counted."""
    env = {**os.environ, "MINIREPRO_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src")}
    env.pop("MINIREPRO_ROOT", None)
    proc = subprocess.run([sys.executable, "-m", "minirepro.cli", "artifacts", "verify"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all fine" in proc.stdout and proc.stderr == ""
