"""Sweeps on a Dask scheduler: a bad scheduler address is refused before any cluster starts.

Sweeps on a real ``LocalCluster`` (folders come back, failures and dead workers are reported)
are the integration stage's: tests/integration/test_sweep_dask_cluster.py."""

from __future__ import annotations

import pytest

from minirepro.chapters import get
from minirepro.run import sweep

distributed = pytest.importorskip("distributed", reason="the cluster extra (dask[distributed])")


def test_bad_scheduler_is_refused(toy_book):
    from minirepro.chapters import ChapterError

    with pytest.raises(ChapterError, match="tcp://HOST:PORT or local:N"):
        sweep(get("toy"), {"n": [3]}, scheduler="http://x")
    with pytest.raises(ChapterError, match="N >= 1"):
        sweep(get("toy"), {"n": [3]}, scheduler="local:0")
