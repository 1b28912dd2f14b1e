"""The command line as a new user meets it (issue 47, items 11-16).

- 11: README's papermill recipe, run literally (its console block) on a fast chapter at
  smoke scale, leaves nothing beside the chapter's source; a stray ``.ipynb`` beside a
  chapter's ``.md`` stops the book build with one line;
- 12: ``python -m minirepro``;
- 13: an unreachable ``--scheduler`` is one line, exit 2, in a few seconds;
- 14: a progress line per finished run on a terminal (none in a pipe), a compact summary
  of the headline metric per grid point, and ``sweep.png`` of the chapter's headline
  metric (``results.record_metric(..., headline=True)``);
- 15: ``minirepro claims`` in a terminal prints the summary, not the table;
- 16: ``-p NAME`` given twice is refused; ``list`` shows each range once, as enforced
  (an infinite end is open: ``inf`` is refused).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from fixtures import one_line_exit_2

from minirepro.chapters import ChapterError, discover, get
from minirepro.cli import main
from minirepro.core.params import parse_parameters
from minirepro.run import sweep
from minirepro.run.cluster import CONNECT_TIMEOUT, connect_timeout
from minirepro.run.progress import SweepProgress, enabled, run_line
from minirepro.run.summary import compact_summary, headline_metric

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "unit" / "data"
BIN = Path(sys.executable).parent


def _pty(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> tuple[str, int]:
    """Run ``argv`` on a pseudo-terminal (120 columns): what a user at a terminal sees."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal with a size, as a real one has
        try:
            fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return out.decode("utf-8", "replace"), os.waitstatus_to_exitcode(status)


_one_line_exit_2 = one_line_exit_2  # tests/fixtures.py


# ---------------------------------------------------------------- 11: the papermill recipe


def _readme_recipe() -> list[str]:
    """The commands of README.md's papermill recipe: the console block after the line that
    names plain papermill."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Plain papermill works too.*?```console\n(.*?)```", text, flags=re.S)
    assert m, "README.md has no papermill recipe (a console block after 'Plain papermill works too')"
    return [ln for ln in m.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_readmes_papermill_recipe_runs_as_written_and_leaves_no_stray_notebook():
    lines = _readme_recipe()
    assert any(ln.startswith("jupytext ") for ln in lines) and any("papermill " in ln for ln in lines)
    chapter_dir = ROOT / "notebooks" / "07-caffnet"
    before = set(chapter_dir.iterdir())
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "TQDM_DISABLE": "1"}
    env.pop("MINIREPRO_ROOT", None)
    script = "set -euo pipefail\n" + "\n".join(lines) + '\necho "OUT=$out"\n'
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(re.search(r"^OUT=(.*)$", proc.stdout, flags=re.M).group(1))
    try:
        executed = [p for p in out.glob("*.ipynb") if p.name != "caffnet.ipynb"]
        assert executed, f"no executed notebook in {out}"
        nb = json.loads(executed[0].read_text())
        assert nb["metadata"]["papermill"]["parameters"].get("scale") == "smoke"
        assert not any(o.get("output_type") == "error" for c in nb["cells"] for o in c.get("outputs", []))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert set(chapter_dir.iterdir()) == before, "the recipe wrote beside the chapter's source"


def test_a_stray_notebook_beside_a_chapter_stops_the_build_in_one_line(tmp_path, monkeypatch, capsys):
    from minirepro.book import check_sources

    root = tmp_path / "book"
    (root / "notebooks" / "01-toy").mkdir(parents=True)
    shutil.copy(DATA / "toy.md", root / "notebooks" / "01-toy" / "toy.md")
    (root / "_toc.yml").write_text("format: jb-book\nroot: notebooks/01-toy/toy\n")
    (root / "_config.yml").write_text("title: t\n")
    check_sources(root)  # one source a page: fine
    (root / "notebooks" / "01-toy" / "toy.ipynb").write_text("{}")
    with pytest.raises(ValueError, match=r"notebooks/01-toy/toy\.ipynb.*beside.*toy\.md"):
        check_sources(root)
    monkeypatch.setenv("MINIREPRO_ROOT", str(root))
    err = _one_line_exit_2(["book", "--scale", "smoke"], capsys)
    assert "toy.ipynb" in err and not (root / "_build").exists()


# ---------------------------------------------------------------- 12: python -m minirepro


def test_python_dash_m_minirepro():
    ok = subprocess.run([sys.executable, "-m", "minirepro", "list"], capture_output=True, text=True,
                        cwd=ROOT, timeout=120)
    assert ok.returncode == 0 and "caffnet  (07-caffnet)" in ok.stdout, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "minirepro", "run", "nope"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown chapter 'nope'" in bad.stderr


# ---------------------------------------------------------------- 13: an unreachable scheduler


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1", "tcp://no-such-host.invalid:8786"])
def test_an_unreachable_scheduler_is_one_line_exit_2_within_seconds(toy_book, capsys, address):
    pytest.importorskip("distributed")
    t0 = time.perf_counter()
    err = _one_line_exit_2(["sweep", "toy", "--scale", "smoke", "-p", "seed", "0", "1",
                            "--scheduler", address], capsys)
    seconds = time.perf_counter() - t0
    assert f"cannot reach the Dask scheduler at {address}" in err, err
    # refused or unresolvable fails at once, by the code's own report: the probe's message
    # ("at ADDRESS: why"), not the client's after retrying until its connect timeout ("within 5s")
    assert f"cannot reach the Dask scheduler at {address}: " in err and " within " not in err, err
    # and a hang guard against dask's 30 s default. The first call in a process imports the
    # sweep's modules (about 1 s of CPU): beside a CPU hog at load 6-9 on 2 cores it took
    # 4.2-4.8 s (10 s was close), a warm call 0.04-0.07 s
    assert seconds < 20, f"took {seconds:.1f} s"
    assert not (toy_book / "runs").exists()


def test_the_connect_timeout_is_short_and_dasks_setting_wins(monkeypatch):
    monkeypatch.delenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", raising=False)
    assert connect_timeout() == CONNECT_TIMEOUT == "5s"
    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", "30s")
    assert connect_timeout() == "30s"


# ---------------------------------------------------------------- 14: progress and summaries


def _headline_toy(book: Path) -> None:
    """The toy chapter, naming its second metric (``n``) its headline."""
    md = book / "notebooks" / "01-toy" / "toy.md"
    text = md.read_text()
    assert 'results.record_metric("n", n)' in text
    md.write_text(text.replace('results.record_metric("n", n)', 'results.record_metric("n", n, headline=True)'))


def test_a_sweep_on_a_terminal_prints_a_line_per_run_then_a_compact_summary(toy_book):
    _headline_toy(toy_book)
    env = {**os.environ, "MINIREPRO_ROOT": str(toy_book)}
    env.pop("TQDM_DISABLE", None)
    argv = [str(BIN / "minirepro"), "sweep", "toy", "--scale", "smoke", "-p", "n", "2", "4",
            "-p", "seed", "0", "1", "-j", "2"]
    out, rc = _pty(argv, toy_book, env)
    assert rc == 0, out
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", out) if ln.strip()]
    done = [ln for ln in lines if re.match(r"\[\d/4\] ", ln)]
    assert len(done) == 4 and all(": ok in " in ln and ", n = " in ln for ln in done), lines
    assert any("it/s" in ln or "run/s" in ln or "s/run" in ln for ln in lines)  # the bar itself
    summary = out[out.index("sweep of toy"):].replace("\r", "")
    body = summary.splitlines()
    assert body[1].startswith("headline: n (the chapter's headline metric)"), summary
    points = [ln for ln in body if ln.startswith("  n=")]
    assert [ln.split()[0] for ln in points] == ["n=2", "n=4"], summary
    assert "2 ± 0" in points[0] and "(2 runs)" in points[0] and "verdicts: " in points[0]
    assert not any(ln.lstrip().startswith("|") for ln in body)  # no markdown table
    assert all(len(ln) <= 120 for ln in body if not ln.startswith("every run:"))
    # in a pipe: no bar, no per-run line, the same summary (one run is enough to show it)
    proc = subprocess.run(argv[:5] + ["-p", "n", "2", "-p", "seed", "0", "-j", "2"], cwd=toy_book,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "[1/1]" not in proc.stderr + proc.stdout and "\r" not in proc.stderr
    assert proc.stdout.startswith("sweep of toy: 1 run(s), 1 finished")
    assert "headline: n (the chapter's headline metric)" in proc.stdout


def test_sweep_png_plots_the_chapters_headline_metric(toy_book, monkeypatch):
    import minirepro.run.summary as summary

    _headline_toy(toy_book)
    plotted = []
    real = summary._plot_sweep
    monkeypatch.setattr(summary, "_plot_sweep", lambda df, swept, col, path: plotted.append(col)
                        or real(df, swept, col, path))
    folder = sweep(get("toy"), {"seed": [0, 1]}, scale="smoke")
    assert plotted == ["metric:n"]  # not "stat", the first metric recorded
    assert (folder / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    rows = json.loads((folder / "summary.json").read_text())
    assert {r["headline"] for r in rows} == {"n"}
    for run in rows:
        assert json.loads((Path(run["folder"]) / "results.json").read_text())["headline"] == "n"
    plotted.clear()
    sweep(get("toy"), {"seed": [0]}, scale="smoke", metric="stat")  # --metric still wins (one run suffices)
    assert plotted == ["metric:stat"]


def test_headline_choice_and_compact_summary_without_a_headline():
    rows = [{"params": {"seed": s, "lr": lr}, "ok": True, "seconds": 1.0, "folder": "f",
             "metrics": {"base": 1.0, "ours": lr + s, "name": "x"}, "verdicts": {"c": "reproduced"}}
            for lr in (0.1, 0.2) for s in (0, 1, 2)]
    rows.append({"params": {"seed": 3, "lr": 0.2}, "ok": False, "seconds": None, "folder": "g",
                 "metrics": {}, "verdicts": {}})
    assert headline_metric(rows) == ("base", "the chapter's first metric: it names no headline")
    assert headline_metric([{**r, "headline": "ours"} for r in rows])[0] == "ours"
    text = compact_summary(rows, ["lr", "seed"], "ours", "test", seconds=3.0, chapter="x")
    lines = text.splitlines()
    assert lines[0] == "sweep of x: 7 run(s), 6 finished, 1 FAILED, 3.0 s"
    # mean 1.1, t interval half-width t(0.975, 2) * 1 / sqrt(3) = 2.484
    assert "lr=0.1" in lines[2] and "1.1 ± 2.5" in lines[2] and "(3 runs)" in lines[2]
    assert "1 FAILED" in lines[3] and "verdicts: 3 reproduced" in lines[3]


def test_progress_is_off_in_a_pipe_and_says_each_finished_run(capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert enabled() is False  # pytest's captured stderr is not a terminal
    row = {"params": {"seed": 0, "method": "gpm"}, "ok": True, "seconds": 12.34,
           "metrics": {"acc": 0.8123, "x": 1}, "headline": "acc"}
    assert run_line(row) == "seed=0 method=gpm: ok in 12.3 s, acc = 0.8123"
    assert run_line({**row, "ok": False, "folder": "runs/x-FAILED"}) == "seed=0 method=gpm: FAILED (runs/x-FAILED)"
    bar = SweepProgress(2, "toy", show=True)
    bar.done(row)
    bar.close()
    assert "[1/2] seed=0 method=gpm: ok in 12.3 s, acc = 0.8123" in capsys.readouterr().err
    quiet = SweepProgress(2, "toy")  # auto: off when not a terminal
    quiet.done(row)
    quiet.close()
    assert capsys.readouterr().err == ""


def test_a_second_headline_is_refused():
    from minirepro.claims import results

    results.reset("x")
    results.record_metric("a", 1.0, headline=True)
    results.record_metric("a", 2.0, headline=True)  # the same one again is fine
    with pytest.raises(ValueError, match="already 'a'"):
        results.record_metric("b", 1.0, headline=True)
    assert results._STATE.as_json()["headline"] == "a"
    results.reset()
    assert "headline" not in results._STATE.as_json()


# ---------------------------------------------------------------- 15: the ledger in a terminal


def test_claims_in_a_terminal_prints_the_summary_and_the_table_with_all():
    env = dict(os.environ)
    env.pop("MINIREPRO_ROOT", None)
    out, rc = _pty([str(BIN / "minirepro"), "claims"], ROOT, env)
    lines = [ln for ln in out.replace("\r", "").splitlines() if ln.strip()]
    assert rc == 0 and 2 <= len(lines) <= 30, out
    assert "claims of the papers:" in lines[0] and "--all" in out
    assert max(map(len, lines)) <= 160 and not any(ln.startswith("|") for ln in lines)
    table, rc = _pty([str(BIN / "minirepro"), "claims", "--all"], ROOT, env)
    assert rc == 0 and sum(ln.startswith("|") for ln in table.replace("\r", "").splitlines()) > 50


# ---------------------------------------------------------------- 16: -p twice; ranges in `list`


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_parameter_given_twice_is_refused(toy_book, capsys, command):
    err = _one_line_exit_2([command, "toy", "--scale", "smoke", "-p", "n", "3", "-p", "n", "4"], capsys)
    assert "-p n is given twice" in err
    assert not (toy_book / "runs").exists()


def test_list_shows_each_range_once_and_as_enforced(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    num = r"(?:-?inf|[-+]?[\d.]+(?:e[-+]?\d+)?)"
    marker = re.compile(rf"[\[(]\s*{num}\s*,\s*{num}\s*[\])]")
    blocks: dict[str, list[str]] = {}
    for ln in out.splitlines():
        if ln and not ln.startswith(" ") and "  (" in ln:
            current = blocks.setdefault(ln.split()[0], [])
        elif ln.startswith("    "):
            current.append(ln)
    ranged = 0
    for chapter in discover():
        for p in chapter.parameters.values():
            line = next(ln for ln in blocks[chapter.name] if ln.strip().startswith(f"{p.name} ("))
            assert p.describe() in line, line
            prose = line.split(p.describe(), 1)[1].strip()
            assert prose == p.help  # the comment without its markers ...
            assert not marker.search(prose[-20:]) and not re.search(r"\{[^{}]+\}\s*$", prose), line
            shown = p.describe()  # ... which the enforced range and choices, shown once, replace
            assert len(marker.findall(shown)) <= 1 and shown.count("{") <= 1, line
            assert "inf]" not in shown and "[-inf" not in shown, f"an infinite end shown closed: {line}"
            ranged += bool(marker.search(shown))
    assert ranged > 19  # the check has something to look at
    # every parameter with an infinite upper end refuses inf, as the open end says
    refused = 0
    for chapter in discover():
        for p in chapter.parameters.values():
            b = p.bounds()
            if p.type == "float" and b is not None and math.isinf(b[1]):
                assert p.describe().count("inf)") == 1
                with pytest.raises(ChapterError, match="finite"):
                    p.coerce("inf")
                refused += 1
    assert refused >= 3


def test_range_text_and_help_of_one_parameter():
    p = parse_parameters('import os\nscale = os.environ.get("MINIREPRO_SCALE", "book")  # size {smoke, book}\n'
                         "pen = 0.5  # the penalty [0, inf]\nmode = 2  # a mode [1, 3] {1, 2, 3}\n"
                         "n_k: int | None = None  # how many\n")
    assert p["pen"].describe() == "pen (float in [0, inf)) = 0.5" and p["pen"].help == "the penalty"
    assert p["mode"].help == "a mode" and p["mode"].describe() == "mode (int one of {1, 2, 3} in [1, 3]) = 2"
    assert p["n_k"].describe() == "n_k (int | None in [1, inf)) = None" and p["n_k"].help == "how many"
    assert p["scale"].help == "size"


def test_list_json_gives_ranges_as_json(capsys):
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)  # strict JSON: no Infinity
    ranges = [q["range"] for c in listed for q in c["parameters"].values() if q["range"]]
    assert ranges and all(len(r) == 2 for r in ranges) and any(r[1] is None for r in ranges)
