"""Mechanistic reward shaping (ICML 2026, "One Bias After Another"): measuring and removing
reward-model biases by projecting bias directions out of the reward head's input.

* ``data``: templated quiz preferences in real text with planted shortcuts, matched bundles.
* ``features``: the reward head's input h (the frozen LM's last real token's final state).
* ``bt``: Bradley-Terry reward heads.
* ``shaping``: difference-of-means probes, cleaning, Gram-Schmidt, projection.
* ``metrics``: bias and quality metrics of a reward function.
* ``experiment``: the chapter's config and run; ``plots``: its figures.
"""

from minirepro.papers.reward_shaping import plots  # noqa: E402
from minirepro.papers.reward_shaping.bt import BTFit, RewardHead, bt_loss, train_bt
from minirepro.papers.reward_shaping.data import (
    BIASES,
    BUNDLE,
    CONTRASTS,
    PLANTED,
    PLANTED_SIGN,
    Fact,
    Question,
    Response,
    contrast_pairs,
    fact_bank,
    features,
    make_bundles,
    make_preferences,
    make_question,
    split_facts,
    utility,
)
from minirepro.papers.reward_shaping.experiment import (
    LOW,
    Config,
    Run,
    Shaper,
    load_backbone,
    probes_from,
    run_experiment,
)
from minirepro.papers.reward_shaping.features import StateCache, last_token_states
from minirepro.papers.reward_shaping.metrics import BundleStates, preference_rate, probe_accuracy
from minirepro.papers.reward_shaping.shaping import (
    clean_probe,
    diff_of_means_probe,
    gram_schmidt,
    project_out,
)

__all__ = ["BIASES", "BUNDLE", "CONTRASTS", "LOW", "PLANTED", "PLANTED_SIGN", "plots", "BTFit",
           "BundleStates", "Config", "Fact", "Question", "Response", "RewardHead", "Run", "Shaper",
           "StateCache", "bt_loss", "clean_probe", "contrast_pairs", "diff_of_means_probe",
           "fact_bank", "features", "gram_schmidt", "last_token_states", "load_backbone", "make_bundles",
           "make_preferences", "make_question", "preference_rate", "probe_accuracy", "probes_from",
           "project_out", "run_experiment", "split_facts", "train_bt", "utility"]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("features", "bt", "shaping")
