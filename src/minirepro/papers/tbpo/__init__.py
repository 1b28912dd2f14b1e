"""TBPO (paper 16): token-level Bregman preference optimisation, in miniature.

- ``mdp``: the exactly solvable token MDP (pi_ref, rewards, pi* by soft Bellman DP,
  exact metrics, Bradley-Terry preference pairs).
- ``losses``: DPO, TDPO, the Bregman family (sequence level), TBPO-Q and TBPO-A.
- ``train``: the tiny GPT-2 policy, its fit to pi_ref, one shared training loop, metrics.
- ``analysis``: final-metric tables, reward at matched KL, comparisons with DPO.
- ``plots``: the chapter's figures.
"""

from minirepro.papers.tbpo.analysis import (
    better_than,
    final_metrics,
    headline,
    matched_kl_rewards,
    reward_at_kl,
    summary,
)
from minirepro.papers.tbpo.losses import (
    MEMBERS,
    bregman_ell,
    bregman_h,
    bregman_scale,
    bregman_sequence_loss,
    dpo_loss,
    population_minimiser,
    sequence_margin,
    tbpo_a_values,
    tbpo_q_values,
    tbpo_token_loss,
    tdpo_loss,
)
from minirepro.papers.tbpo.mdp import (
    TokenMDP,
    exact_metrics,
    make_mdp,
    make_preferences,
    sample_responses,
    sequence_reward,
    soft_bellman,
    state_distribution,
)
from minirepro.papers.tbpo.train import (
    METHODS,
    Experiment,
    Policy,
    TablePolicy,
    TBPOConfig,
    evaluate,
    logistic_vs_dpo,
    run_experiment,
)

__all__ = [
    "MEMBERS", "METHODS", "Experiment", "Policy", "TBPOConfig", "TablePolicy", "TokenMDP",
    "better_than", "bregman_ell", "bregman_h", "bregman_scale", "bregman_sequence_loss", "dpo_loss",
    "evaluate", "exact_metrics", "final_metrics", "headline", "logistic_vs_dpo", "make_mdp", "make_preferences",
    "matched_kl_rewards", "population_minimiser", "reward_at_kl", "run_experiment",
    "sample_responses", "sequence_margin", "sequence_reward", "soft_bellman",
    "state_distribution", "summary", "tbpo_a_values", "tbpo_q_values", "tbpo_token_loss",
    "tdpo_loss",
]
