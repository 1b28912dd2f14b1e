"""Hostile-but-fair input to the CLI, the run machinery and the LM cache (issue 29, items 1-7).

Every bad value is refused with exit status 2 and one line, before anything is
written; interrupts (SIGINT, SIGTERM, SIGHUP) leave no process behind and no folder
that looks finished; run ids are unique; a cache entry that is a plain file is healed.
The chapter used is a toy (``tests/unit/data/sleepy.md``) in a throwaway book.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fixtures import one_line_exit_2

from minirepro.chapters import ChapterError, get
from minirepro.cli import main
from minirepro.core.params import parse_parameters, show
from minirepro.run import make_run_id, run_chapter, stop_process_tree, sweep
from minirepro.run.summary import write_summary
from minirepro.run.sweep import check_metric

DATA = Path(__file__).parent / "data"


@pytest.fixture
def book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway book holding ``notebooks/02-sleepy/sleepy.md``; the working directory is
    a folder beside it (``cwd/``), as for a user running ``minirepro`` elsewhere."""
    root = tmp_path / "book"
    (root / "notebooks" / "02-sleepy").mkdir(parents=True)
    shutil.copy(DATA / "sleepy.md", root / "notebooks" / "02-sleepy" / "sleepy.md")
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("MINIREPRO_ROOT", str(root))
    monkeypatch.delenv("MINIREPRO_SCALE", raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return root


def written(root: Path) -> list[Path]:
    """Everything under the book's runs/ and the working directory's runs/ (where runs go)."""
    return [p for base in {root / "runs", Path.cwd() / "runs"} if base.exists() for p in base.rglob("*")]


def runs(chapter: str = "sleepy") -> Path:
    """Where the runs of ``chapter`` go: runs/ in the current folder (cwd/, beside the book)."""
    return Path.cwd() / "runs" / chapter


exit_2_one_line = one_line_exit_2  # tests/fixtures.py


# ---------------------------------------------------------------- item 1: values out of range


@pytest.mark.parametrize("args,needles", [
    (["-p", "seed", "-1"], ["'seed'", "[0, 4294967295]", "-1"]),
    (["-p", "seed", "9" * 20], ["'seed'", "[0, 4294967295]"]),
    (["-p", "seed", "9" * 5000], ["'seed'", "characters"]),
    (["-p", "seed", "1.5"], ["'seed'", "expects int"]),
    (["-p", "data_seed", "4294967296"], ["'data_seed'", "4294967295"]),
    (["-p", "lr", "nan"], ["'lr'", "finite"]),
    (["-p", "lr", "inf"], ["'lr'", "finite"]),
    (["-p", "lr", "1e999"], ["'lr'", "finite"]),
    (["-p", "lr", "1.5"], ["'lr'", "[0, 1]"]),          # the chapter's own [lo, hi] marker
    (["-p", "n", "0"], ["'n'", "[1, 50]"]),
    (["-p", "n", "[" * 5000], ["'n'", "expects int"]),
    (["--threads", "0"], ["--threads", "[1, 1024]"]),
    (["--threads", "-3"], ["--threads"]),
    (["-p", "data_csv", "../../etc"], ["'data_csv'", "'../../etc'"]),
    (["-p", "data_csv", "/etc"], ["'data_csv'", "not a file"]),
    (["-p", "data_csv", "missing.csv"], ["'data_csv'", "no such file"]),
    (["-p", "x" * 3000, "1"], ["no parameter", "characters"]),
])
def test_bad_values_exit_2_in_one_short_line_with_nothing_written(book, capsys, args, needles):
    err = exit_2_one_line(["run", "sleepy", "--scale", "smoke", *args], capsys)
    for needle in needles:
        assert needle in err, err
    assert len(err) < 400, err  # echoed values are cut
    assert written(book) == []


def test_sweep_refuses_a_bad_value_before_any_run(book, capsys):
    err = exit_2_one_line(["sweep", "sleepy", "--scale", "smoke", "-p", "seed", "0", "-1"], capsys)
    assert "'seed'" in err and written(book) == []
    with pytest.raises(ChapterError, match="'lr' must be a finite"):
        sweep(get("sleepy"), {"lr": [0.5, math.nan]}, scale="smoke")
    with pytest.raises(ChapterError, match="--timeout"):
        sweep(get("sleepy"), {"seed": [0]}, scale="smoke", timeout=math.nan)
    assert written(book) == []


def test_the_api_refuses_what_the_cli_refuses(book):
    for kwargs in ({"params": {"seed": -1}}, {"params": {"seed": 2**64}}, {"params": {"lr": math.inf}},
                   {"threads": 0}, {"threads": True}, {"params": {"data_csv": "nope.csv"}}):
        with pytest.raises(ChapterError):
            run_chapter(get("sleepy"), scale="smoke", **kwargs)
    assert written(book) == []


RANGED = '''import os
scale = os.environ.get("MINIREPRO_SCALE", "book")  # size {smoke, book, full}
seed = 0  # the seed
lr = 0.1  # step size [0, 1]
k = 3  # neighbours [1, inf]
temp = -0.5  # a temperature [-inf, 0.0]
ws: list[float] | None = None  # weights [0, 1e1]
mode = 2  # a mode [1, 3] {1, 2, 3}
note = "a [1, 2] b"  # a string that merely mentions [1, 2]
in_csv: str | None = None  # input table
'''


def test_the_range_marker_in_the_parameters_comment():
    p = parse_parameters(RANGED)
    assert (p["lr"].lo, p["lr"].hi) == (0, 1) and p["lr"].bounds() == (0, 1)
    assert (p["k"].lo, p["k"].hi) == (1, None) and p["k"].bounds() == (1, math.inf)
    assert (p["temp"].lo, p["temp"].hi) == (None, 0.0)
    assert p["ws"].bounds() == (0, 10.0) and p["mode"].choices == ("1", "2", "3")
    assert p["mode"].bounds() == (1, 3) and p["note"].bounds() is None
    assert p["seed"].bounds() == (0, 2**32 - 1)  # every seed, marker or not
    counts = parse_parameters("n_seeds: int | None = None  # seeds\nn_eq = 2  # rows [-5, 5]")
    # a count n_* is at least 1, and a declared range can only narrow that
    assert counts["n_seeds"].bounds() == (1, math.inf) and counts["n_eq"].bounds() == (1, 5)
    for name in ("n_seeds", "n_eq"):
        with pytest.raises(ChapterError, match=repr(name)):
            counts[name].coerce("0")
    assert counts["n_seeds"].coerce("None") is None and counts["n_eq"].coerce("1") == 1
    assert "in [0, 1]" in p["lr"].describe()
    assert p["in_csv"].is_path and not p["note"].is_path
    assert p["lr"].coerce("1") == 1.0 and p["k"].coerce("10000") == 10000
    assert p["ws"].coerce("0.5, 10") == [0.5, 10.0]
    for name, raw in [("lr", "-0.01"), ("k", "0"), ("temp", "0.1"), ("ws", "0.5, 11"),
                      ("ws", "[nan]"), ("temp", "-inf"), ("seed", str(2**32))]:
        with pytest.raises(ChapterError, match=repr(name)):
            p[name].coerce(raw)


def test_a_parameters_cell_with_a_bad_range_is_refused():
    with pytest.raises(ChapterError, match="default of 'lr' is refused"):
        parse_parameters("lr = 2.0  # step [0, 1]")
    with pytest.raises(ChapterError, match="empty"):
        parse_parameters("lr = 0.5  # step [1, 0]")
    assert parse_parameters('name = "a"  # a name [0, 1]')["name"].bounds() is None  # just text
    with pytest.raises(ChapterError, match="'seed'"):
        parse_parameters("seed = -1  # a seed")


def test_show_cuts_long_values():
    assert show("x" * 10**6).endswith("(1000000 characters)") and len(show("x" * 10**6)) < 70
    assert show(10**5000).startswith("<an int of")  # never converted to 5000 digits
    assert show(-1) == "-1" and show("ok") == "'ok'"


# ---------------------------------------------------------------- item 2: path parameters


def test_a_path_parameter_is_resolved_against_the_callers_directory(book, capsys):
    Path("votes.csv").write_text("a,b\n1,2\n3,4\n")
    assert main(["run", "sleepy", "--scale", "smoke", "-p", "data_csv", "votes.csv", "--quiet"]) == 0
    assert "lines = 3" in capsys.readouterr().out
    (run,) = [p for p in runs().iterdir()]
    params = json.loads((run / "params.json").read_text())
    assert params["data_csv"] == str(Path("votes.csv").resolve())
    assert get("sleepy").validate({"data_csv": "votes.csv"}, cwd=Path.cwd()) == {
        "data_csv": str(Path.cwd() / "votes.csv")}


# ---------------------------------------------------------------- item 3: sweep --metric


def test_sweep_metric_is_checked_before_any_run(book, capsys):
    goldens = book / "tests" / "goldens"
    goldens.mkdir(parents=True)
    (goldens / "02-sleepy.results.json").write_text(json.dumps({"metrics": {"lines": 0, "lr": 0.1}}))
    err = exit_2_one_line(["sweep", "sleepy", "--scale", "smoke", "-p", "seed", "0", "1",
                           "--metric", "bogus"], capsys)
    assert "no metric 'bogus'" in err and "lines, lr" in err
    assert written(book) == []
    chapter = get("sleepy")
    check_metric(chapter, "lines")  # in the golden
    check_metric(chapter, "kernel.pids")  # a quoted literal of the notebook
    with pytest.raises(ChapterError, match="characters"):
        check_metric(chapter, "m" * 1000)


def test_a_metric_that_could_not_be_checked_in_advance_falls_back(tmp_path, capsys):
    rows = [{"params": {"seed": s}, "ok": True, "folder": str(tmp_path), "seconds": 1.0,
             "metrics": {"lines": s}, "verdicts": {}} for s in (0, 1)]
    write_summary(tmp_path, rows, ["seed"], metric="bogus")  # used to raise after every run
    assert "'bogus' was not recorded" in capsys.readouterr().err
    assert (tmp_path / "summary.csv").exists() and (tmp_path / "sweep.png").exists()


# ---------------------------------------------------------------- item 4: one line, not a traceback


@pytest.mark.parametrize("make", ["file", "file-parent"])
def test_an_unusable_runs_dir_is_one_line(book, capsys, make):
    Path("afile").write_text("x")
    target = "afile" if make == "file" else "afile/runs"
    err = exit_2_one_line(["run", "sleepy", "--scale", "smoke", "--runs-dir", target], capsys)
    assert "runs folder" in err and "not a folder" in err
    err = exit_2_one_line(["sweep", "sleepy", "-p", "seed", "0", "--runs-dir", target], capsys)
    assert "runs folder" in err
    assert written(book) == [] and Path("afile").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to a read-only folder")
def test_a_read_only_runs_dir_is_one_line(book, capsys):
    Path("ro").mkdir(mode=0o555)
    err = exit_2_one_line(["run", "sleepy", "--scale", "smoke", "--runs-dir", "ro/runs"], capsys)
    assert "not writable" in err


def test_an_unusable_arena_db_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    out = subprocess.run([sys.executable, "-m", "minirepro.cli", "arena", "serve", "--port", "0",
                          "--db", str(tmp_path / "afile" / "votes.sqlite")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_closed_pipe_ends_quietly(book):
    proc = subprocess.Popen([sys.executable, "-m", "minirepro.cli", "list", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # `| head` that has read enough: gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err and err == "", err


def test_ctrl_c_exits_130_and_says_so_in_the_failed_folder(book, capsys, monkeypatch):
    import minirepro.run.folder as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", interrupted)
    try:
        status = main(["run", "sleepy", "--scale", "smoke"])
    except KeyboardInterrupt:  # what used to come out: a traceback
        pytest.fail("KeyboardInterrupt escaped main()")
    assert status == 130
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "interrupted (SIGINT)" in err and "Traceback" not in err
    (folder,) = list(runs().iterdir())
    assert folder.name.endswith("-FAILED") and str(folder) in err
    assert "interrupted (SIGINT, Ctrl-C)" in (folder / "error.txt").read_text()
    assert not (folder / "results.json").exists()


# ---------------------------------------------------------------- item 5: signals stop the whole tree


def processes_of(root: Path) -> list[psutil.Process]:
    """Every live process started for the book at ``root`` (they carry MINIREPRO_ROOT)."""
    out = []
    for p in psutil.process_iter():
        try:
            if (p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE
                    and p.environ().get("MINIREPRO_ROOT") == str(root)):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return out


def _left_after(root: Path, seconds: float) -> list[psutil.Process]:
    """The book's processes still alive ``seconds`` after now, or none as soon as none is.

    A SIGKILLed process is gone only once the scheduler has run it to its exit, which on a
    loaded machine can take longer than a fixed nap (the test slept 0.5 s); a process that
    was not stopped (a kernel or its 600 s sleeper) is still there when the wait ends."""
    deadline = time.monotonic() + seconds
    while (left := processes_of(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_stops_the_kernel_and_its_children_and_marks_the_run_failed(book, sig):
    env = {**os.environ, "MINIREPRO_ROOT": str(book)}
    # the default dispositions, even when the suite itself runs with a signal ignored (nohup
    # ignores SIGHUP, a shell's background job SIGINT; an ignored signal is meant to stay
    # ignored: see run.stop_signals_raise)
    proc = subprocess.Popen([sys.executable, "-m", "minirepro.cli", "run", "sleepy", "--scale",
                             "smoke", "-p", "nap", "600", "--quiet"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in
                                                (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)])
    try:
        deadline = time.monotonic() + 240
        while not list(runs().glob(".incomplete-*/kernel.pids")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the kernel never started"
            time.sleep(0.2)
        (pids,) = list(runs().glob(".incomplete-*/kernel.pids"))
        kernel, child = (int(x) for x in pids.read_text().split())
        assert psutil.pid_exists(kernel) and psutil.pid_exists(child)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert _left_after(book, 30.0) == []
        folders = list(runs().iterdir())
        assert len(folders) == 1 and folders[0].name.endswith("-FAILED"), folders
        assert not (folders[0] / "results.json").exists()
        assert signal.Signals(sig).name in (folders[0] / "error.txt").read_text()
        assert (folders[0] / "sleepy-FAILED.ipynb").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in processes_of(book):  # what the old code orphaned: only ours (this book's root)
            stop_process_tree(p.pid)


def test_sigterm_to_a_parallel_sweep_leaves_no_process_and_marks_its_runs_failed(book):
    env = {**os.environ, "MINIREPRO_ROOT": str(book)}
    proc = subprocess.Popen([sys.executable, "-m", "minirepro.cli", "sweep", "sleepy", "--scale",
                             "smoke", "-p", "seed", "0", "1", "-p", "nap", "600", "-j", "2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while len(list(runs().glob(".incomplete-*/kernel.pids"))) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the kernels never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err, err
        assert _left_after(book, 30.0) == []
        folders = list(runs().iterdir())
        assert len(folders) == 2 and all(f.name.endswith("-FAILED") for f in folders), folders
        for f in folders:
            assert "interrupted (SIGTERM)" in (f / "error.txt").read_text()
            assert not (f / "results.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in processes_of(book):
            stop_process_tree(p.pid)


def test_stop_process_tree_reaches_grandchildren_in_another_session():
    script = ("import subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
              " start_new_session=True)\n"
              "print(c.pid, flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(proc.stdout.readline())
        stop_process_tree(proc.pid)  # reaps its own child (proc) too
        proc.wait(timeout=30)
        time.sleep(0.2)
        for pid in (proc.pid, grandchild):
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------- item 6: unique run ids


def test_run_ids_are_unique_within_a_process():
    ids = [make_run_id({"a": 1}) for _ in range(2000)]
    assert len(set(ids)) == 2000
