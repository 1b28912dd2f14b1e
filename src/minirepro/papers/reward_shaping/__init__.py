"""Mechanistic reward shaping (ICML 2026, "One Bias After Another"): measuring and removing
reward-model biases by projecting bias directions out of the reward head's input.

* ``data``: synthetic quiz preferences with planted biases, contrast pairs.
* ``features``: the reward head's input h (last real token's final state).
* ``bt``: Bradley-Terry reward heads.
* ``shaping``: difference-of-means probes, cleaning, Gram-Schmidt, projection.
* ``metrics``: bias and quality metrics of a reward function.
* ``experiment``: the chapter's config and run; ``plots``: its figures.
"""

from minirepro.papers.reward_shaping import plots  # noqa: E402
from minirepro.papers.reward_shaping.bt import BTFit, RewardHead, bt_loss, train_bt
from minirepro.papers.reward_shaping.data import (
    BIASES,
    PLANTED,
    PLANTED_SIGN,
    Question,
    Response,
    contrast_pairs,
    features,
    make_preferences,
    make_question,
    utility,
)
from minirepro.papers.reward_shaping.experiment import LOW, Config, Run, Shaper, run_experiment
from minirepro.papers.reward_shaping.features import StateCache, last_token_states
from minirepro.papers.reward_shaping.metrics import EvalSet, build_eval_texts, preference_rate
from minirepro.papers.reward_shaping.shaping import (
    clean_probe,
    diff_of_means_probe,
    gram_schmidt,
    project_out,
)

__all__ = ["BIASES", "LOW", "PLANTED", "PLANTED_SIGN", "plots", "BTFit", "Config", "EvalSet", "Question", "Response",
           "RewardHead", "Run", "Shaper", "StateCache", "build_eval_texts", "bt_loss",
           "clean_probe", "contrast_pairs", "diff_of_means_probe", "features", "gram_schmidt",
           "last_token_states", "make_preferences", "make_question", "preference_rate",
           "project_out", "run_experiment", "train_bt", "utility"]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("features", "bt", "shaping")
