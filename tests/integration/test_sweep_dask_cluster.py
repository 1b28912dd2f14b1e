"""Sweeps on a real Dask ``LocalCluster`` (the integration stage): folders come back, failures
and dead workers are reported. Each test starts its own cluster (one of them kills a worker).
A refused scheduler address is a unit test (tests/unit/test_sweep_dask.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from minirepro.chapters import get
from minirepro.run import sweep

pytestmark = pytest.mark.integration

distributed = pytest.importorskip("distributed", reason="the cluster extra (dask[distributed])")


@pytest.fixture
def cluster(toy_book):
    """Two worker processes on 127.0.0.1 (started after MINIREPRO_ROOT points at the toy book)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as c:
        yield c


def _rows(folder):
    return json.loads((folder / "summary.json").read_text())


def test_a_failing_member_does_not_stop_the_others_and_every_folder_comes_back(toy_book, cluster, tmp_path):
    runs = tmp_path / "elsewhere"  # the submitting side's own folder, not the workers'
    folder = sweep(get("toy"), {"fail": [False, True]}, scale="smoke", runs_dir=runs,
                   scheduler=cluster.scheduler_address, timeout=600)
    rows = _rows(folder)
    assert len(rows) == 2
    for r in rows:
        local = runs / "toy" / os.path.basename(r["folder"])
        assert r["folder"] == str(local) and local.is_dir(), r
        if r["params"]["fail"]:
            assert not r["ok"] and local.name.endswith("-FAILED")
            assert (local / "toy-FAILED.ipynb").exists() and "failing on purpose" in (local / "error.txt").read_text()
        else:
            assert r["ok"] and json.loads((local / "results.json").read_text())["params"]["fail"] is False
            assert r["metrics"]["n"] == 5 and r["verdicts"]["positive"]
    assert "FAILED" in (folder / "summary.md").read_text()


def test_a_worker_killed_mid_sweep_loses_no_run(toy_book, cluster, tmp_path):
    import psutil
    from distributed import Client

    killed = []

    def kill_a_busy_worker():
        with Client(cluster.scheduler_address) as client:
            deadline = time.time() + 120
            while time.time() < deadline and not killed:
                busy = [w for w, tasks in client.processing().items() if tasks]
                if busy:
                    time.sleep(1.0)  # the run has started: its papermill is going
                    pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                    proc = psutil.Process(pid)
                    tree = proc.children(recursive=True)
                    for p in [proc, *tree]:
                        try:
                            p.send_signal(signal.SIGKILL)
                        except psutil.NoSuchProcess:
                            pass
                    killed.append(pid)
                time.sleep(0.2)

    t = threading.Thread(target=kill_a_busy_worker)
    t.start()
    folder = sweep(get("toy"), {"n": [3, 4]}, scale="smoke", runs_dir=tmp_path / "r",
                   scheduler=cluster.scheduler_address, timeout=600)
    t.join()
    assert killed, "no worker was killed: the test did not test anything"
    rows = _rows(folder)
    assert sorted(r["params"]["n"] for r in rows) == [3, 4]  # none lost
    for r in rows:
        assert os.path.isdir(r["folder"])
        # the killed run was re-scheduled and finished, or it is reported FAILED with the reason
        assert r["ok"] or "lost on the cluster" in r["error"]


def test_local_n_starts_its_own_cluster(toy_book, tmp_path):
    folder = sweep(get("toy"), {"n": [3]}, scale="smoke", runs_dir=tmp_path / "r", scheduler="local:1",
                   timeout=600)
    (row,) = _rows(folder)
    assert row["ok"] and (tmp_path / "r" / "toy").is_dir()

