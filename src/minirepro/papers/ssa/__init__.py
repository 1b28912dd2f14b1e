"""SSA (ICML 2026): the modality gap, its geometry, and shared-space alignment.

* ``geometry``: the theory's quantities (gap angle, Liang's gap, principal angles,
  effective rank, the shared subspace of App. C.3 and the projection onto it).
* ``losses``: CLIP's symmetric InfoNCE, the gap penalty and the SSA term.
* ``data``: synthetic paired modalities and the digits-caption pair.
* ``model``: the ensemble of rank-bottleneck encoders and its training.
* ``metrics``: retrieval, zero-shot accuracy, one run's measurements, post-hoc arms.
* ``experiment``: the config and the grid of runs; ``claims``: the claims' data;
  ``plots``: the figures.
"""

from minirepro.papers.ssa import plots  # noqa: F401
from minirepro.papers.ssa.claims import (
    CROSS_RUN_COLUMNS,
    cell_seeds,
    correlation_text,
    correlations,
    partial_residuals,
    per_seed,
    result_table,
    summary,
    theorem_table,
    within_cells,
)
from minirepro.papers.ssa.data import Pairs, digit_attributes, digits_pairs, synthetic_pairs
from minirepro.papers.ssa.experiment import ARMS, Config, Experiment, run_experiment
from minirepro.papers.ssa.geometry import (
    SharedSpace,
    check_pairs,
    effective_rank,
    gap_angle,
    isometry_violation,
    liang_gap,
    normalize,
    pair_cosine,
    principal_angles,
    project,
    shared_alignment,
    shared_space,
    subspace_pair,
    translate,
    variance_basis,
)
from minirepro.papers.ssa.losses import gap_penalty, info_nce, project_normalize, ssa_loss
from minirepro.papers.ssa.metrics import measure, post_hoc, recall_at_k, zero_shot_accuracy
from minirepro.papers.ssa.model import (
    ARMS_TRAINED,
    EnsembleEncoder,
    Member,
    TrainedEnsemble,
    build_ensemble,
    shared_bases,
    train_ensemble,
)

__all__ = [
    "ARMS", "ARMS_TRAINED", "CROSS_RUN_COLUMNS", "Config", "correlations", "partial_residuals", "result_table", "within_cells", "cell_seeds", "correlation_text", "per_seed", "summary", "EnsembleEncoder", "Experiment", "Member", "Pairs", "SharedSpace",
    "TrainedEnsemble", "build_ensemble", "check_pairs", "digit_attributes",
    "digits_pairs", "effective_rank", "gap_angle", "gap_penalty", "info_nce", "isometry_violation",
    "liang_gap", "measure", "normalize", "pair_cosine", "plots", "post_hoc", "principal_angles",
    "project", "project_normalize", "recall_at_k", "run_experiment", "shared_alignment",
    "shared_bases", "shared_space", "ssa_loss", "subspace_pair", "synthetic_pairs", "theorem_table",
    "train_ensemble", "translate", "variance_basis", "zero_shot_accuracy",
]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("geometry", "losses", "model")
