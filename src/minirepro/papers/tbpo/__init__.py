"""TBPO (paper 16): token-level Bregman preference optimisation, in miniature.

- ``mdp``: the exactly solvable token MDP (pi_ref, rewards, pi* by soft Bellman DP,
  exact metrics, Bradley-Terry preference pairs).
- ``losses``: DPO, TDPO, the Bregman family (sequence level), TBPO-Q and TBPO-A.
- ``train``: the tiny GPT-2 policy, its fit to pi_ref, one shared training loop, metrics.
- ``analysis``: per-seed final metrics, reward at matched KL, oscillation, pairing by seed
  (the chapter's rule objects decide the verdicts).
- ``lm_setting``: the second setting on the shipped substrate LM (``load_substrate``).
- ``plots``: the chapter's figures.
"""

from minirepro.papers.tbpo.analysis import (
    final_metrics,
    frontier_shortfall,
    headline,
    matched_kappa,
    oscillation,
    paired,
    per_seed,
    reward_at_kl,
)
from minirepro.papers.tbpo.losses import (
    MEMBERS,
    bregman_ell,
    bregman_h,
    bregman_scale,
    bregman_sequence_loss,
    dpo_loss,
    generic_bregman_ell,
    ipo_loss,
    population_minimiser,
    sequence_margin,
    simpo_loss,
    tbpo_a_values,
    tbpo_q_values,
    tbpo_token_loss,
    tdpo_loss,
)
from minirepro.papers.tbpo.mdp import (
    TokenMDP,
    exact_frontier,
    exact_metrics,
    make_mdp,
    make_preferences,
    make_token_preferences,
    sample_responses,
    sequence_reward,
    soft_bellman,
    state_distribution,
    token_q_values,
)
from minirepro.papers.tbpo.train import (
    METHODS,
    Config,
    Experiment,
    Policy,
    TablePolicy,
    TBPOConfig,
    evaluate,
    logistic_vs_dpo,
    run_experiment,
)

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("losses",)

__all__ = [
    "MEMBERS", "METHODS", "Config", "Experiment", "Policy", "TBPOConfig", "TablePolicy", "TokenMDP",
    "bregman_ell", "bregman_h", "bregman_scale", "bregman_sequence_loss", "dpo_loss",
    "evaluate", "exact_metrics", "final_metrics", "generic_bregman_ell", "headline", "ipo_loss", "make_token_preferences", "exact_frontier", "frontier_shortfall", "simpo_loss",
    "token_q_values", "logistic_vs_dpo",
    "make_mdp", "make_preferences", "matched_kappa", "oscillation", "paired", "per_seed",
    "population_minimiser", "reward_at_kl", "run_experiment", "sample_responses", "sequence_margin",
    "sequence_reward", "soft_bellman", "state_distribution", "tbpo_a_values", "tbpo_q_values",
    "tbpo_token_loss", "tdpo_loss",
]
