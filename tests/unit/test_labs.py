"""Course labs (minirepro.labs), the units: every chapter's lab spec and its exercises, bad
specs and bad input refused, the checks the lab's tests call, no hint giving an answer away.

The course pack built by ``minirepro lab --all`` and graded by the real otter-grader (one
pack and one class folder, shared by their tests) is the integration stage's:
tests/integration/test_labs_pack.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from minirepro import labs
from minirepro.chapters import get, repo_root
from minirepro.labs import checks as lab_checks
from minirepro.labs import sample

ROOT = repo_root()
CLI = [sys.executable, "-m", "minirepro.cli"]
REGISTERED = labs.registered_chapters(ROOT)


def _cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1", **(env or {})})


def _lines(text: str, min_len: int) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if len(ln.strip()) >= min_len}


# ------------------------------------------------------------------ specs
def test_every_registered_chapter_has_a_lab_spec():
    assert len(REGISTERED) >= 17
    missing = [n for n in REGISTERED if not (ROOT / "labs" / f"{n}.yml").is_file()]
    assert not missing, f"chapters in _toc.yml without labs/<chapter>.yml: {missing}"
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        assert spec.questions, name
        assert all(q.hidden for q in spec.questions), name


def test_specs_ask_for_runs_where_the_chapter_does():
    """Every chapter has a graded question that checks a recorded run's results.json."""
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        assert any("check_run" in t["test"] for q in spec.questions for t in q.hidden), name


def test_exercise_parser_finds_every_exercise_and_solution():
    for name in REGISTERED:
        chapter = get(name, ROOT)
        exercises = labs.chapter_exercises(chapter)
        text = chapter.path.read_text(encoding="utf-8")
        assert len(exercises) == text.count("{exercise}") >= 2, name
        assert all(ex.label and ex.prompt and ex.solution for ex in exercises), name


def test_bad_specs_are_refused(tmp_path):
    root = tmp_path / "book"
    shutil.copytree(ROOT / "notebooks" / "07-caffnet", root / "notebooks" / "07-caffnet")
    (root / "_toc.yml").write_text("root: x\nchapters:\n  - file: notebooks/07-caffnet/caffnet\n")
    (root / "labs").mkdir()
    with pytest.raises(labs.LabError, match="no lab spec"):
        labs.load_spec("caffnet", root)
    good = yaml.safe_load((ROOT / "labs" / "caffnet.yml").read_text())
    bad_cases = {
        "unknown keys": {**good, "solutions": 1},
        "exercise must be one of": {**good, "questions": [{**good["questions"][0], "exercise": "nope"}]},
        "at least one hidden test": {**good, "questions": [{**good["questions"][0], "hidden": []}]},
        "needs `scaffold`": {**good, "questions": [{**good["questions"][0], "scaffold": ""}]},
        "chapter must be": {**good, "chapter": "ssa"},
        "has no parameter 'opt_inq'": {**good, "questions": [
            {**good["questions"][1], "run": {"params": {"opt_inq": 8}}}]},
    }
    for message, raw in bad_cases.items():
        (root / "labs" / "caffnet.yml").write_text(yaml.safe_dump(raw))
        with pytest.raises(labs.LabError, match=message):
            labs.load_spec("caffnet", root)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("args, expect", [
    (["lab", "nosuch"], "unknown chapter 'nosuch'; chapters: "),
    (["lab"], "give one chapter or --all"),
    (["lab", "caffnet", "--all"], "give one chapter or --all"),
    (["lab", "grade", "nosuch", "x.ipynb"], "unknown chapter 'nosuch'; chapters: "),
    (["lab", "grade", "caffnet", "missing.ipynb"], "no such submission: missing.ipynb"),
    (["lab", "grade", "caffnet"], "usage: minirepro lab grade CHAPTER SUBMISSION"),
    (["lab", "grade", "caffnet", "."], "no such autograder zip"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, args, expect):
    from minirepro.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIREPRO_ROOT", str(ROOT))
    extra = ["--autograder", str(tmp_path / "none.zip")] if args[-1] == "." else []
    out = tmp_path / "out"
    assert main([*args, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expect in err and err.count("\n") == 1, err
    assert not out.exists() and not (ROOT / "_build" / "labs" / "grades" / "nosuch").exists()


def test_a_registered_chapter_without_a_spec_stops_lab_all(tmp_path):
    root = tmp_path / "book"
    shutil.copytree(ROOT / "notebooks" / "07-caffnet", root / "notebooks" / "07-caffnet")
    shutil.copytree(ROOT / "notebooks" / "09-ssa", root / "notebooks" / "09-ssa")
    (root / "_toc.yml").write_text("chapters:\n  - file: notebooks/07-caffnet/caffnet\n"
                                   "  - file: notebooks/09-ssa/ssa\n")
    (root / "labs").mkdir()
    shutil.copy(ROOT / "labs" / "caffnet.yml", root / "labs")
    proc = _cli("lab", "--all", cwd=root, env={"MINIREPRO_ROOT": str(root)})
    assert proc.returncode == 2 and "chapter 'ssa' has no lab spec labs/ssa.yml" in proc.stderr
    assert not (root / "_build").exists()


# ------------------------------------------------------------------ the checks the tests call
def test_check_run_reads_the_recorded_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the submission: a run folder is looked for inside it
    d = tmp_path / "runs" / "caffnet" / "r1"
    d.mkdir(parents=True)
    res = {"chapter": "caffnet", "params": {"scale": "smoke", "opt_ineq": 8},
           "metrics": {"m": 0.5}, "claims": [{"id": "c", "verdict": "reproduced"}]}
    (d / "results.json").write_text(json.dumps(res))
    lab_checks.check_run(str(d), "caffnet", {"opt_ineq": 8}, "smoke", ["m"])
    assert lab_checks.latest_run("caffnet", tmp_path / "runs") == str(d)
    for params, scale, metrics in (({"opt_ineq": 6}, "smoke", ["m"]), ({"opt_ineq": 8}, "book", ["m"]),
                                   ({"opt_ineq": 8}, "smoke", ["absent"]), ({"other": 1}, None, [])):
        with pytest.raises(AssertionError):
            lab_checks.check_run(str(d), "caffnet", params, scale, metrics)
    assert lab_checks.run_results(str(d), "ssa") is None  # a run of another chapter
    assert lab_checks.run_results(None, "caffnet") is None
    failed = d.with_name("r2-FAILED")
    shutil.copytree(d, failed)
    assert lab_checks.run_results(str(failed), "caffnet") is None
    res["claims"] = [{"id": "c", "verdict": None}]
    (d / "results.json").write_text(json.dumps(res))
    with pytest.raises(AssertionError):
        lab_checks.check_run(str(d), "caffnet", {}, None, [])


def test_value_checks():
    import numpy as np

    assert lab_checks.is_int(3) and lab_checks.is_int(np.int64(3))
    assert not lab_checks.is_int(True) and not lab_checks.is_int(3.0) and not lab_checks.is_int(...)
    assert lab_checks.is_number(np.float32(0.5)) and not lab_checks.is_number(float("nan"))
    assert not lab_checks.is_number(...) and not lab_checks.is_number("1")
    assert lab_checks.close([1, 2.0], (1, 2.0 + 1e-12)) and not lab_checks.close(1, 1.1)
    assert lab_checks.close(True, True) and not lab_checks.close(0, False)


def test_the_guides_sample_report_is_current():
    """book/lab-report.txt (made by `python -m minirepro.labs.sample`) shows a pass and a fail,
    with hints that are the current spec's."""
    text = (ROOT / sample.SAMPLE_REPORT).read_text()
    spec = labs.load_spec(sample.SAMPLE_CHAPTER, ROOT)
    hints = {t["hint"] for q in spec.questions for t in q.public + q.hidden}
    shown = [ln.split("hint: ", 1)[1] for ln in text.splitlines() if "hint: " in ln]
    assert shown and set(shown) <= hints
    assert "passed" in text and "FAILED" in text
    for q in spec.questions:
        assert q.name in text
        for ln in _lines(q.solution, 12):
            assert ln not in text


# ------------------------------------------------------------------ no hint gives the answer away
_ANSWERS = r'''
import json, re, sys
from minirepro import labs
def names(scaffold):
    return [m.group(1) for m in re.finditer(r"^\s*([A-Za-z_]\w*)\s*=\s*(?:\.\.\.|\{)", scaffold, flags=re.M)]
def plain(v):
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, dict):
        return [plain(x) for x in v.values()]
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v
out = {}
for chapter in sys.argv[1:]:
    spec = labs.load_spec(chapter)
    env = {"scale": spec.scale, "seed": 0, **spec.params}
    exec("from minirepro.labs import checks as lab_checks\n" + spec.setup, env)
    for q in spec.questions:
        if any("check_run" in t["test"] for t in q.hidden):
            continue
        exec(q.solution, env)
        out[f"{chapter}/{q.name}"] = {n: plain(env[n]) for n in names(q.scaffold)}
print(json.dumps(out))
'''
NUMBER_WORDS = {0: "zero", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
                8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}


def _flatten(v) -> list[float]:
    if isinstance(v, list):
        return [x for item in v for x in _flatten(item)]
    return [float(v)] if isinstance(v, (int, float)) and not isinstance(v, bool) else []


def _spellings(x: float) -> tuple[set[str], set[str]]:
    """How a hint could state ``x``: as digits (several roundings) and, for a small whole
    number, as a word. A single digit is only looked for as a word (a hint's "M = 0" or
    "10 x 10" is a definition, not the answer)."""
    digits, words = set(), set()
    if abs(x - round(x)) < 1e-6:
        n = int(round(x))
        if abs(n) >= 10:
            digits.add(str(n))
        if n in NUMBER_WORDS:
            words.add(NUMBER_WORDS[n])
    else:
        for k in (2, 3, 4, 5, 6):
            digits.add(f"{x:.{k}g}")
        for d in (1, 2, 3, 4):
            digits.add(f"{x:.{d}f}")
        digits = {t for t in digits if len(t.lstrip("-").replace("0", "").replace(".", "")) >= 2}
    return digits, words


def test_no_hint_contains_the_answers_value():
    """Every graded question's reference answer, computed by its solution, appears in none of
    its lab's hints (as digits at several roundings, or as a number word)."""
    proc = subprocess.run([sys.executable, "-c", _ANSWERS, *REGISTERED], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TQDM_DISABLE": "1"}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(answers) >= 15
    checked = 0
    for key, values in answers.items():
        chapter = key.split("/")[0]
        spec = labs.load_spec(chapter, ROOT)
        hints = [t["hint"] for q in spec.questions for t in q.public + q.hidden]
        for name, value in values.items():
            for x in _flatten(value):
                digits, words = _spellings(x)
                for hint in hints:
                    for t in digits:
                        assert not re.search(rf"(?<![\w.]){re.escape(t)}(?![\w]|\.\d)", hint), \
                            f"{key}: the hint {hint!r} states {name} = {t}"
                    for w in words:
                        assert not re.search(rf"\b{w}\b", hint, flags=re.I), \
                            f"{key}: the hint {hint!r} states {name} = {w}"
                checked += 1
    assert checked >= 25
    # the check can fail: the hint this issue found ("... an answer of 793 ...") is caught
    digits, _ = _spellings(793.0)
    assert any(re.search(rf"(?<![\w.]){re.escape(t)}(?![\w]|\.\d)", "the answer is 793 subsets") for t in digits)


# ------------------------------------------------------------------ the run check (issue 47, item 5)
def test_the_run_check_refuses_runs_outside_the_submission_and_extra_parameters(tmp_path, monkeypatch):
    sub = tmp_path / "submission"
    d = sub / "runs" / "caffnet" / "r1"
    d.mkdir(parents=True)
    defaults = {k: p.default for k, p in get("caffnet", ROOT).parameters.items()}
    res = {"chapter": "caffnet", "params": {**defaults, "scale": "smoke", "opt_ineq": 8},
           "metrics": {"m": 0.5}, "claims": [{"id": "c", "verdict": "reproduced"}]}
    (d / "results.json").write_text(json.dumps(res))
    outside = tmp_path / "elsewhere" / "r2"
    shutil.copytree(d, outside)
    monkeypatch.chdir(sub)
    lab_checks.check_run("runs/caffnet/r1", "caffnet", {"opt_ineq": 8}, "smoke", ["m"])
    lab_checks.check_run(str(d), "caffnet", {"opt_ineq": 8}, "smoke", ["m"])  # absolute, but inside
    for bad in (str(outside), "../elsewhere/r2", "runs/../../elsewhere/r2", "", "."):
        assert lab_checks.run_results(bad, "caffnet") is None, bad
        with pytest.raises(AssertionError):
            lab_checks.check_run(bad, "caffnet", {"opt_ineq": 8}, "smoke", ["m"])
    (sub / "link").symlink_to(outside)  # a link that leads out of the submission
    assert lab_checks.run_results("link", "caffnet") is None
    # an extra parameter: -p opt_steps 1
    res["params"]["opt_steps"] = 1
    (d / "results.json").write_text(json.dumps(res))
    assert lab_checks.extra_parameters(res, "caffnet", {"opt_ineq": 8}) == ["opt_steps"]
    with pytest.raises(AssertionError, match="parameters the exercise does not ask for"):
        lab_checks.check_run("runs/caffnet/r1", "caffnet", {"opt_ineq": 8}, "smoke", ["m"])
    # a parameter given at its default value is no change; without the book, `given` decides
    res["params"]["opt_steps"] = defaults["opt_steps"]
    assert lab_checks.extra_parameters(res, "caffnet", {"opt_ineq": 8}) == []
    assert lab_checks.extra_parameters({**res, "given": {"opt_ineq": 8, "seed": 3, "scale": "smoke"}},
                                       "no-such-chapter", {"opt_ineq": 8}) == ["seed"]


def test_a_run_lands_where_the_labs_grader_looks(toy_book, tmp_path, monkeypatch):
    """`minirepro run` in a lab's folder (outside the book) writes runs/ there, and
    lab_checks.latest_run, run from that folder as the notebook is, finds it."""
    from minirepro.cli import main

    lab = tmp_path.parent / f"{tmp_path.name}-lab" / "student" / "toy"
    lab.mkdir(parents=True)
    monkeypatch.chdir(lab)
    assert main(["run", "toy", "--scale", "smoke", "--quiet"]) == 0
    found = lab_checks.latest_run("toy")
    assert found is not None and (lab / found / "results.json").is_file()
    assert not (toy_book / "runs").exists()
    res = json.loads((lab / found / "results.json").read_text())
    assert res["given"] == {"scale": "smoke"}
    assert lab_checks.run_results(found, "toy") == res
