"""CAffNet (ICML 2026): a trainable constraint-affine layer for hard affine constraints.

* ``layer``: the CAffine layer (``caffine``, ``compute_faces``, ``constraint_subsets``),
  the baselines' output layers (``hardnet_aff``, ``project_polytope``) and
  feasibility helpers (``max_violation``, ``lp_feasible_point``).
* ``scenarios``: the 1-D piecewise target, the convex QP and the DC3 problem,
  with their reference solvers (cvxpy, IPOPT).
* ``models``: the networks of every method, training and test metrics.
* ``qplayer``: the cvxpylayers projection layer the CAffine layer is timed against.
* ``experiment``: the chapter's config and the runs over seeds (the verdicts are
  decided by the rule objects of ``minirepro.claims.rules`` in the notebook).
* ``report``: the claims' settings, the recorded metrics and the page's computed prose.
"""

from minirepro.papers.caffnet import plots, qplayer, report  # noqa: E402
from minirepro.papers.caffnet.experiment import (
    A_OF_X,
    M_LE_N,
    UNICYCLE,
    Config,
    ScenarioRun,
    build_data,
    build_scenario,
    hardnet_control,
    inference_times,
    per_seed,
    results_table,
    rollouts,
    run_experiment,
    run_scenario,
    start_errors,
    summarise,
)
from minirepro.papers.caffnet.layer import (
    TOL,
    Faces,
    InfeasibleConstraintsError,
    caffine,
    candidates,
    compute_faces,
    constraint_subsets,
    equality_rows,
    hardnet_aff,
    lp_feasible_point,
    max_violation,
    n_subsets,
    project_polytope,
    select_nearest_feasible,
    violation,
)
from minirepro.papers.caffnet.models import (
    HARD_METHODS,
    METHODS,
    W_METHODS,
    Constraints,
    Data,
    EnsembleMLP,
    TrainedMethods,
    evaluate,
    make_data,
    output_layer,
    predict,
    train_methods,
)
from minirepro.papers.caffnet.scenarios import (
    OptimisationScenario,
    PiecewiseScenario,
    UnicycleScenario,
    pwc_bounds,
    pwc_target,
    solve_ipopt,
    solve_qp_cvxpy,
)

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("layer", "models")

__all__ = [
    "A_OF_X",
    "M_LE_N",
    "UNICYCLE",
    "UnicycleScenario",
    "W_METHODS",
    "rollouts",
    "Config",
    "Constraints",
    "Data",
    "EnsembleMLP",
    "Faces",
    "HARD_METHODS",
    "InfeasibleConstraintsError",
    "METHODS",
    "OptimisationScenario",
    "PiecewiseScenario",
    "ScenarioRun",
    "TOL",
    "TrainedMethods",
    "build_data",
    "build_scenario",
    "caffine",
    "candidates",
    "compute_faces",
    "constraint_subsets",
    "equality_rows",
    "evaluate",
    "hardnet_aff",
    "hardnet_control",
    "inference_times",
    "lp_feasible_point",
    "make_data",
    "max_violation",
    "n_subsets",
    "output_layer",
    "per_seed",
    "results_table",
    "predict",
    "project_polytope",
    "pwc_bounds",
    "pwc_target",
    "run_experiment",
    "run_scenario",
    "select_nearest_feasible",
    "solve_ipopt",
    "solve_qp_cvxpy",
    "start_errors",
    "summarise",
    "train_methods",
    "violation",
    "plots",
    "qplayer",
    "report",
]
