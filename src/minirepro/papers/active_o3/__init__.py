"""Active-o3 (ICML 2026): GRPO for active perception, in miniature."""

from minirepro.papers.active_o3.experiment import Config, run_experiment

# Modules implementing the paper's steps; each public function names its equation
# (tests/unit/test_conventions.py).
METHOD_MODULES = ("grpo", "rewards", "boxes", "policy", "taskmodel")

__all__ = ["METHOD_MODULES", "Config", "run_experiment"]
