"""TBPO (paper 16): token-level Bregman preference optimisation, in miniature.

- ``mdp``: the exactly solvable token MDP (pi_ref, rewards, pi* by soft Bellman DP,
  exact metrics, Bradley-Terry preference pairs).
- ``losses``: DPO, TDPO, the Bregman family (sequence level), TBPO-Q and TBPO-A, and the
  dispatch ``method_loss`` from a method's name (``METHODS``) to its loss.
- ``config``: ``Config``, which builds the testbed, the policy and the token-level testbed's config.
- ``policy``: the tiny GPT-2 policy, log pi_ref, per-token statistics, the fit to pi_ref.
- ``evaluation``: a policy's metrics on fixed evaluation inputs; the exact rows of pi_ref and pi*.
- ``train``: one shared training loop (a run of one method).
- ``experiment``: ``run_experiment`` (every method on every seed) and the logistic-is-DPO check.
- ``analysis``: per-seed final metrics, reward at matched KL, oscillation, pairing by seed
  (the chapter's rule objects decide the verdicts).
- ``lm_setting``: the second setting on the shipped substrate LM (``load_substrate``).
- ``report``: the tables and sentences the page prints, computed from the results.
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
from minirepro.papers.tbpo.config import Config
from minirepro.papers.tbpo.evaluation import evaluate
from minirepro.papers.tbpo.experiment import Experiment, logistic_vs_dpo, run_experiment
from minirepro.papers.tbpo.losses import (
    MEMBERS,
    METHODS,
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
    n_responses,
    sample_responses,
    sequence_reward,
    soft_bellman,
    state_distribution,
    token_q_values,
)
from minirepro.papers.tbpo.policy import Policy, TablePolicy

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("losses",)

__all__ = [
    "MEMBERS", "METHODS", "Config", "Experiment", "Policy", "TablePolicy", "TokenMDP",
    "bregman_ell", "bregman_h", "bregman_scale", "bregman_sequence_loss", "dpo_loss",
    "evaluate", "exact_metrics", "final_metrics", "generic_bregman_ell", "headline", "ipo_loss", "make_token_preferences", "exact_frontier", "frontier_shortfall", "simpo_loss",
    "token_q_values", "logistic_vs_dpo",
    "make_mdp", "make_preferences", "matched_kappa", "n_responses", "oscillation", "paired", "per_seed",
    "population_minimiser", "reward_at_kl", "run_experiment", "sample_responses", "sequence_margin",
    "sequence_reward", "soft_bellman", "state_distribution", "tbpo_a_values", "tbpo_q_values",
    "tbpo_token_loss", "tdpo_loss",
]
