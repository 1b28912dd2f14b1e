"""Checks that the labs' autograder tests call (``labs/<chapter>.yml``).

They recompute a reference from the package or check an invariant at grading time;
none holds an answer typed in. Each raises ``AssertionError`` on a wrong answer; the
grade report shows the question's hint, never this module's messages.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

FORMAT_ONLY = "format only: the answer is graded later"


def inside_submission(run_folder: Any) -> Path | None:
    """``run_folder`` as a path inside the submission (the working folder, where the
    notebook runs when it is graded), or ``None``: an absolute path elsewhere, a path that
    climbs out (``../``), or a link leading out are all refused, since the grader sees only
    what was handed in."""
    if not isinstance(run_folder, str | Path) or not str(run_folder).strip():
        return None
    here = Path.cwd().resolve()
    try:
        path = (here / Path(run_folder).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    return path if path != here and path.is_relative_to(here) else None


def run_results(run_folder: Any, chapter: str) -> dict | None:
    """The ``results.json`` of a finished ``minirepro run`` of ``chapter`` in ``run_folder``
    (a path inside the submission: :func:`inside_submission`), or ``None`` when there is none."""
    folder = inside_submission(run_folder)
    if folder is None or folder.name.endswith("-FAILED"):
        return None
    path = folder / "results.json"
    if not path.is_file():
        return None
    try:
        res = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return res if isinstance(res, dict) and res.get("chapter") == chapter else None


def _defaults(chapter: str) -> dict | None:
    """The chapter's parameter defaults, from the installed book (``None`` if not found)."""
    try:
        from minirepro import chapters

        return {k: p.default for k, p in chapters.get(chapter).parameters.items()}
    except Exception:  # noqa: BLE001 - no book here: fall back to what the run says was given
        return None


def extra_parameters(res: dict, chapter: str, params: dict) -> list[str]:
    """The parameters a recorded run set beyond those the exercise names (and its scale):
    those whose value differs from the chapter's default (``-p opt_steps 1``)."""
    ran = res.get("params") or {}
    defaults = _defaults(chapter)
    if defaults is None:
        return sorted(k for k in (res.get("given") or {}) if k not in params and k != "scale")
    return sorted(k for k, v in ran.items() if k not in params and k != "scale"
                  and k in defaults and not close(v, defaults[k]))


def check_run(run_folder: Any, chapter: str, params: dict, scale: str | None,
              metrics: list[str]) -> None:
    """The recorded run is of ``chapter`` with ``params`` at ``scale`` and no other
    parameter changed, lies inside the submission, has the named metrics as finite
    numbers, and settled every claim it declared."""
    res = run_results(run_folder, chapter)
    assert res is not None, "no finished run inside the submission"
    ran = res.get("params") or {}
    for key, want in params.items():
        assert key in ran and close(ran[key], want), f"parameter {key}"
    assert not extra_parameters(res, chapter, params), "parameters the exercise does not ask for"
    if scale is not None:
        assert ran.get("scale") == scale, "scale"
    got = res.get("metrics") or {}
    for name in metrics:
        value = got.get(name)
        assert isinstance(value, int | float) and math.isfinite(value), f"metric {name}"
    claims = res.get("claims") or []
    assert claims, "no claims"
    for claim in claims:
        assert claim.get("verdict"), "a claim without a verdict"


def close(a: Any, b: Any, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    """``a == b``, with a tolerance for floats; lists and tuples elementwise."""
    if isinstance(b, list | tuple):
        return isinstance(a, list | tuple) and len(a) == len(b) and all(
            close(x, y, rel, abs_) for x, y in zip(a, b))
    if isinstance(b, bool) or isinstance(a, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(b, int | float) and isinstance(a, int | float):
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)
    return a == b


def is_number(x: Any) -> bool:
    """A finite real number (a Python or NumPy scalar), not a bool."""
    try:
        import numpy as np

        if isinstance(x, np.generic):
            x = x.item()
    except ImportError:  # pragma: no cover
        pass
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def is_int(x: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(x, int) and not isinstance(x, bool)


def latest_run(chapter: str, runs: str | Path = "runs") -> str | None:
    """The newest finished run folder of ``chapter`` under ``runs`` (relative path), if any."""
    folders = [p for p in Path(runs, chapter).glob("*") if (p / "results.json").is_file()
               and not p.name.endswith("-FAILED")]
    if not folders:
        return None
    return str(max(folders, key=lambda p: (p / "results.json").stat().st_mtime))


def hand_in_files() -> list[str]:
    """What ``grader.export`` zips besides the notebook: the records (``results.json``,
    ``params.json``) of the runs in the ``runs/`` folder beside it, which the run questions
    read; not the runs' executed notebooks and figures, which would only make the zip big."""
    return sorted(p.as_posix() for p in Path("runs").glob("**/*.json") if "-FAILED" not in p.parent.name
                  and not any(part.startswith(".") for part in p.parts))


def format_only_checks() -> None:
    """Make ``grader.check`` say so when a question's public tests check only the answer's
    form: "q: format only: the answer is graded later", not otter's "All test cases
    passed!", which reads as if the answer were right. (A public test is format-only
    when its success message is :data:`FORMAT_ONLY`; the hidden tests carry the points.)

    Patches the display of otter's ``TestFile`` in this kernel only; the grade is not
    touched. Called by the lab's set-up cell.
    """
    from otter.test_files.abstract_test import TestFile

    if getattr(TestFile, "_minirepro_format_only", False):
        return
    summary, html = TestFile.summary, TestFile._repr_html_

    def format_only(self, public_only: bool = True) -> bool:
        results = [r for r in self.test_case_results if not (public_only and r.test_case.hidden)]
        return bool(results) and all(r.passed and r.test_case.success_message == FORMAT_ONLY
                                     for r in results)

    def new_summary(self, public_only: bool = False) -> str:
        if format_only(self, public_only):
            return f"{self.name}: {FORMAT_ONLY} (the form of your answer is right)"
        return summary(self, public_only)

    def new_html(self) -> str:
        if format_only(self, False):
            return (f"<p><strong><code>{self.name}</code></strong>: {FORMAT_ONLY} "
                    "(the form of your answer is right)</p>")
        return html(self)

    TestFile.summary = new_summary
    TestFile._repr_html_ = new_html
    TestFile._minirepro_format_only = True
