"""The `minirepro` command: exit status 2 and one line for bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minirepro.cli import main


@pytest.mark.parametrize("argv,needle", [
    (["run", "nope"], "chapters: toy"),
    (["run", "toy", "-p", "no_such", "1"], "its parameters: scale, seed"),
    (["run", "toy", "-p", "n", "x"], "expects int"),
    (["run", "toy", "-p", "method", "median"], "must be one of mean, max"),
    (["run", "toy", "-p", "n", "1", "2"], "use `minirepro sweep`"),
    (["run", "toy", "--scale", "huge"], "invalid choice"),
    (["sweep", "toy", "-p", "seed", "a", "b"], "expects int"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(toy_book, capsys, argv, needle):
    with pytest.raises(SystemExit) as info:
        sys.exit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (toy_book / "runs").exists()


def test_list_and_run(toy_book, capsys):
    assert main(["list"]) == 0
    assert "n (int) = 5" in capsys.readouterr().out
    assert main(["run", "toy", "--scale", "smoke", "-p", "n", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "finished toy" in out and "verdicts: " in out and "stat = " in out
    assert len(out.splitlines()) <= 6 and "|" not in out  # a short summary, not a table
    assert main(["run", "toy", "--scale", "smoke", "-p", "fail", "true"]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "minirepro.cli", "run", "nope"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "unknown chapter 'nope'" in out.stderr


def test_arena_parses_its_own_options(capsys):
    assert main(["arena", "--help"]) == 0
    assert "serve" in capsys.readouterr().out
    assert main(["arena", "serve", "--port", "notaport"]) == 2
    assert "invalid int value" in capsys.readouterr().err
