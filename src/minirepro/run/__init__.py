"""What runs chapters: a run's checked request (:mod:`.request`), one run (:mod:`.folder`), its notebook (:mod:`.notebook`), its
processes (:mod:`.process`), sweeps (:mod:`.sweep`) locally or on Dask (:mod:`.cluster`),
and their summaries (:mod:`.summary`)."""

from minirepro.run.folder import Run, RunFailed, make_run_id, run_chapter
from minirepro.run.notebook import (
           CELL_TIMEOUT,
           CELL_TIMEOUTS,
           cell_timeout,
           execute,
           failure_line,
           to_ipynb,
)
from minirepro.run.process import Interrupted, stop_process_tree, stop_signals_raise
from minirepro.run.sweep import expand_grid, sweep

__all__ = ["CELL_TIMEOUT", "CELL_TIMEOUTS", "Interrupted", "Run", "RunFailed", "cell_timeout",
           "execute", "expand_grid", "failure_line", "make_run_id", "run_chapter",
           "stop_process_tree", "stop_signals_raise", "sweep", "to_ipynb"]
