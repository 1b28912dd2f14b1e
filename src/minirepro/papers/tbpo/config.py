"""The chapter's config: the testbed's sizes, the policy and the shared training protocol.

:class:`Config` builds what it describes: the testbed (:meth:`Config.make_mdp`), the policy
(:meth:`Config.make_policy`) and the token-level testbed's config
(:meth:`Config.token_testbed`), so no page or step assembles them by hand.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from minirepro.core import ScaledConfig
from minirepro.papers.tbpo.losses import MEMBERS, METHODS
from minirepro.papers.tbpo.mdp import TokenMDP, make_mdp
from minirepro.papers.tbpo.policy import Policy

LABELS: tuple[str, ...] = ("sequence", "token")
TOKEN_METHODS: tuple[str, ...] = ("DPO", "IPO", "SimPO", "TBPO-Q", "TBPO-A")  # the token-level testbed


def check_methods(methods: tuple[str, ...], tbpo_member: str) -> None:
    """Refuse method names outside :data:`~minirepro.papers.tbpo.losses.METHODS` and a Bregman
    member outside :data:`~minirepro.papers.tbpo.losses.MEMBERS` (both settings' configs)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; expected names from {list(METHODS)}")
    if tbpo_member not in MEMBERS:
        raise ValueError(f"tbpo_member must be one of {MEMBERS}, got {tbpo_member!r}")


@dataclass
class Config(ScaledConfig):
    """Sizes of the testbed, the policy and the shared training protocol."""

    n_tokens: int = 6            # V ordinary tokens (+ EOS)
    horizon: int = 6             # T, maximum response length
    beta: float = 1.0            # KL strength of pi* and of every loss
    reward_scale: float = 0.7    # std of the token rewards (BT logit units)
    eos_prob: float = 0.12       # mean pi_ref(EOS | p)
    mdp_seed: int = 0            # the testbed (fixed across training seeds)
    n_pairs: int = 4000          # preference pairs per seed
    hidden: int = 32             # policy width
    layers: int = 1              # transformer blocks
    heads: int = 2               # attention heads
    fit_steps: int = 300         # steps fitting the policy to pi_ref (once)
    steps: int = 150             # preference-optimisation steps per run
    batch_size: int = 64         # pairs per step
    lr: float = 3e-3             # Adam learning rate (all methods)
    tdpo_alpha: float = 0.5      # TDPO's KL weight
    tbpo_member: str = "logistic"  # Bregman member inside TBPO-Q / TBPO-A
    tbpo_lam: float = 1.0        # lam of the BA member (if used)
    eval_every: int = 30         # steps between evaluations (15 before; 30 for the time budget)
    n_eval: int = 256            # rollouts / pi* prefixes per evaluation
    n_seeds: int = 5             # training seeds
    methods: tuple[str, ...] = ("DPO", "TDPO", "TBPO-Q", "TBPO-A")  # KLIEP dropped for time (issue 26)
    labels: str = "sequence"     # preference labels: sequence-level BT on R, or token-level BT on Q*
    simpo_beta: float = 2.0      # SimPO's reward scale (its paper's typical value; not tuned)
    simpo_gamma: float = 1.0     # SimPO's target margin (gamma / beta = 0.5, as in its paper)
    model_name: str | None = None  # LM setting only: a local checkpoint folder used instead of the shipped model

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"n_pairs": 600, "fit_steps": 30, "steps": 10, "eval_every": 5,
                  "n_eval": 64, "n_seeds": 1},
        "book": {},
        "full": {"n_pairs": 16000, "fit_steps": 600, "steps": 600, "eval_every": 30,
                 "n_eval": 1024, "n_seeds": 5, "hidden": 64, "layers": 2},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        check_methods(self.methods, self.tbpo_member)
        if self.labels not in LABELS:
            raise ValueError(f"labels must be one of {LABELS}, got {self.labels!r}")
        for name in ("steps", "batch_size", "eval_every", "fit_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def token_testbed(self) -> Config:
        """The config of the token-level testbed: the same sizes, token-level Bradley-Terry labels
        (on Q*), the methods :data:`TOKEN_METHODS` (IPO and SimPO added, TDPO left out), and an
        evaluation every ``2 * eval_every`` steps (for the time budget)."""
        return dataclasses.replace(self, labels="token", methods=TOKEN_METHODS, eval_every=2 * self.eval_every)

    def make_mdp(self) -> TokenMDP:
        """The testbed this config describes."""
        return make_mdp(self.n_tokens, self.horizon, self.beta, self.reward_scale,
                        self.eos_prob, seed=self.mdp_seed)

    def make_policy(self, state: dict[str, torch.Tensor] | None = None) -> Policy:
        """The policy this config describes, on the testbed's ``V`` and ``T``: freshly initialised
        from torch's global generator (seed it first), then loaded with ``state`` when given."""
        policy = Policy(self.n_tokens, self.horizon, self.hidden, self.layers, self.heads)
        if state is not None:
            policy.load_state_dict(state)
        return policy
