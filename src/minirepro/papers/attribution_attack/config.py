"""The chapter's configuration and its scale presets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from minirepro.core import ScaledConfig


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature: data, FedAvg, attack, evaluators and seeds.

    Counts are samples; ``lr`` is the local gradient-descent step on the softmax
    model; the ``lam_*`` weights are the attack objective's penalties (fixed a priori to 1).
    """

    seed: int = 0
    n_seeds: int = 5
    n_benign: int = 5
    per_class: int = 30
    rare_per_class: int = 4
    rounds: int = 30
    local_steps: int = 5
    lr: float = 2.0
    weight_decay: float = 1e-3
    n_val: int = 300
    proxy_per_class: int = 5
    n_synthetic: int = 20
    latent_dim: int = 16
    attack_steps: int = 100
    attack_lr: float = 0.05
    lam_util: float = 1.0
    lam_cos: float = 1.0
    lam_norm: float = 1.0
    mc_permutations: int = 60
    clip_factor: float = 2.0
    fg_threshold: float = 0.5
    krum_f: int = 1
    n_defence_seeds: int = 25  # seeds of the defence study (grand coalition only: cheap)

    @property
    def defence_seeds(self) -> list[int]:
        """The defence study's seeds: ``seed .. seed + n_defence_seeds - 1``."""
        return list(range(self.seed, self.seed + self.n_defence_seeds))

    PRESETS: ClassVar = {
        "smoke": {"n_seeds": 1, "rounds": 10, "attack_steps": 40, "mc_permutations": 30, "n_defence_seeds": 4},
        "book": {},
        "full": {"n_seeds": 10, "rounds": 60, "attack_steps": 200, "mc_permutations": 200, "n_defence_seeds": 30},
    }
