"""The golden check's second half: metrics compared within their declared tolerances.

nbval re-executes each ``NN-slug.ipynb`` and compares its ``# NBVAL_CHECK_OUTPUT`` cells
as text. Before a notebook's kernel starts, this plugin points ``MINIREPRO_RESULTS`` at a
fresh file, so the kernel records its metrics and claims there; after the notebook's
last cell, one more test item, ``<notebook>::results``, compares that record with the
stored ``NN-slug.results.json`` (:func:`minirepro.goldens.compare`): numbers within the
tolerance declared beside them in the chapter, verdicts exactly.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

import nbval.kernel

from minirepro import goldens
from minirepro.kernels import IPCKernelManager

# nbval's kernels on private Unix sockets: with `-n 2`, two kernels starting at once
# over TCP can race for a port (see minirepro.kernels).
nbval.kernel.KernelManager = IPCKernelManager

_FRESH = Path(tempfile.mkdtemp(prefix="minirepro-golden-results-"))


def _fresh_path(nbfile) -> Path:
    return _FRESH / f"{Path(str(nbfile.fspath)).stem}.{os.getpid()}.json"


class GoldenResults(pytest.Item):
    """Compare the kernel's fresh results record with the stored golden record."""

    def runtest(self) -> None:
        nb_path = Path(str(self.parent.fspath))
        stored_path = goldens.results_path(nb_path)
        if not stored_path.is_file():
            raise AssertionError(f"no {stored_path.name}: run `minirepro goldens {nb_path.stem[3:]}`")
        fresh_path = _fresh_path(self.parent)
        if not fresh_path.is_file():
            raise AssertionError(f"the re-executed {nb_path.name} recorded no results "
                                 f"(expected {fresh_path})")
        problems = goldens.compare(goldens.load(stored_path), goldens.load(fresh_path))
        if problems:
            raise AssertionError(f"{nb_path.name} differs from its golden record "
                                 f"(re-make with `minirepro goldens {nb_path.stem[3:]}` if the change "
                                 "is intended):\n  " + "\n  ".join(problems))

    def reportinfo(self):
        return self.path, 0, f"{self.parent.name}::results"


def pytest_collection_modifyitems(session, config, items):
    """After each notebook's last cell, add its ``::results`` item."""
    out, last_parent = [], None
    for item in items:
        parent = item.parent
        if last_parent is not None and parent is not last_parent and _is_nb(last_parent):
            out.append(GoldenResults.from_parent(last_parent, name="results"))
        out.append(item)
        last_parent = parent
    if last_parent is not None and _is_nb(last_parent):
        out.append(GoldenResults.from_parent(last_parent, name="results"))
    items[:] = out


def _is_nb(node) -> bool:
    return str(getattr(node, "fspath", "")).endswith(".ipynb")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Point the kernel at a fresh results file before nbval starts it for a notebook."""
    parent = item.parent
    if _is_nb(parent) and getattr(parent, "kernel", None) is None:
        path = _fresh_path(parent)
        path.unlink(missing_ok=True)
        os.environ["MINIREPRO_RESULTS"] = str(path)
