"""Attribution-first attack on data attribution in federated learning (paper 18), in miniature."""

from . import plots
from .attack import AttackResult, PCADecoder, craft_batch, target_classes
from .config import Config
from .data import Federation, make_federation, real_batch
from .defences import (
                       clip_flags,
                       cosine_to_others,
                       defence_report,
                       foolsgold_weights,
                       krum_flags,
                       krum_scores,
                       norm_ratio,
)
from .experiment import (
                       ARMS,
                       DEFENCES,
                       EVALUATORS,
                       Results,
                       adversary_flag_rates,
                       adversary_shares,
                       benign_kendall,
                       defence_seed,
                       evaluate,
                       flag_rise,
                       planted_updates,
                       run_defences,
                       run_experiment,
                       run_seed,
)
from .fedavg import accuracy, all_masks, fedavg_coalitions, local_update, per_class_accuracy
from .valuation import MAX_EXACT, banzhaf, exact_shapley, leave_one_out, monte_carlo_shapley, share

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("attack", "fedavg", "valuation", "defences")

__all__ = ["ARMS", "DEFENCES", "EVALUATORS", "MAX_EXACT", "AttackResult", "Config", "Federation", "PCADecoder",
           "Results", "accuracy", "adversary_flag_rates", "adversary_shares", "all_masks", "banzhaf",
           "benign_kendall", "clip_flags", "defence_seed", "flag_rise", "planted_updates", "run_defences", "cosine_to_others", "craft_batch", "defence_report",
           "evaluate", "exact_shapley", "fedavg_coalitions", "foolsgold_weights", "krum_flags", "krum_scores", "leave_one_out",
           "local_update", "make_federation", "monte_carlo_shapley", "norm_ratio", "per_class_accuracy",
           "plots", "real_batch", "run_experiment", "run_seed", "share", "target_classes"]
