"""The integration stage (``make integration``): whole systems run for real (book builds, the
course pack graded by otter, sweeps on a Dask cluster, the replication protocol). Each module
builds what its tests read once (module fixtures) and marks its tests ``integration``.

The fixtures shared with the unit stage (the toy book) come from tests/fixtures.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared fixtures
from fixtures import toy_book  # noqa: E402, F401

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of this folder is marked ``integration`` (a new module need not say so itself)."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
