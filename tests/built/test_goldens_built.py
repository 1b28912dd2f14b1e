"""The smoke book's executions against the goldens (`make goldens-built`, after `make smoke`).

The smoke build executes every chapter natively; here each executed notebook is compared with
its golden as nbval would compare a re-execution (checked cells, sanitized), and the build's
results record with the golden record (metrics within their tolerances, verdicts exactly), so
the native kernel set executes each chapter once. The portable kernel set re-executes the
goldens under nbval (`make goldens-portable`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minirepro import goldens
from minirepro.chapters import discover

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [c.slug for c in discover(ROOT)]


@pytest.fixture(scope="module")
def problems() -> dict[str, list[str]]:
    return goldens.compare_built(ROOT)


@pytest.mark.parametrize("slug", CHAPTERS)
def test_the_smoke_build_reproduces_the_golden(problems, slug):
    assert not problems[slug], (f"{slug}: the smoke build differs from its golden (re-make with "
                                f"`minirepro goldens {slug[3:]}` if intended):\n  " + "\n  ".join(problems[slug]))
