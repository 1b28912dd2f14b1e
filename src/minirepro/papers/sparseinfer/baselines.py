"""The neuron selectors SparseInfer is compared with, all at the same budget ``k``.

* the similarity-guided variant (offline KMeans over core sets, online cluster choice),
* a random subset per prompt,
* static "hot" neurons fixed for every prompt (PowerInfer-like),
* a per-token oracle (the true top-``k`` pre-activations at every token),
* a per-token learned low-rank predictor of active neurons (DejaVu-like).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans
from torch import nn

from minirepro.papers.sparseinfer.neurons import core_neurons, set_mask, topk_mask


def budget(d_ff: int, sparsity: float) -> int:
    """Eq. (sparseinfer-eq-core), its budget: ``k = floor(gamma * d_ff)`` neurons (at least 1)."""
    if not 0 < sparsity <= 1:
        raise ValueError(f"sparsity (kept fraction) must be in (0, 1], got {sparsity}")
    return max(1, int(sparsity * d_ff))


def random_sets(rng: np.random.Generator, d_ff: int, layers: Sequence[int], sparsity: float) -> dict[int, torch.Tensor]:
    """[reconstruction] Baseline: a uniformly random ``k``-subset of neurons per layer."""
    k = budget(d_ff, sparsity)
    return {i: torch.as_tensor(np.sort(rng.choice(d_ff, size=k, replace=False))) for i in layers}


def static_hot_sets(calib: Sequence[list[torch.Tensor]], layers: Sequence[int], sparsity: float) -> dict[int, torch.Tensor]:
    """[reconstruction] PowerInfer-like hot neurons: per layer, the ``k`` neurons most often active offline.

    Args:
        calib: for each calibration prompt, its per-layer pre-activations ``(T, d_ff)``.

    Returns:
        ``{layer: (k,) sorted indices}`` of the highest activation frequency
        ``P(a_j > 0)`` over all calibration tokens (ties broken by mean ``a_j``).
    """
    if not calib:
        raise ValueError("static_hot_sets needs calibration prompts")
    out = {}
    for i in layers:
        a = torch.cat([p[i] for p in calib])
        freq = (a > 0).double().mean(0)
        mean = a.double().mean(0)
        key = freq + (mean - mean.min()) / (1.0 + float(mean.max() - mean.min())) * 1e-3
        out[i] = torch.sort(torch.topk(key, budget(a.shape[1], sparsity)).indices).values
    return out


@dataclass
class SimilarityIndex:
    """Eq. (sparseinfer-eq-similar): the similarity-guided variant's clusters and neuron sets.

    Attributes:
        kmeans: fitted on the multi-hot core sets ``(n_prompts, d_ff)`` at ``layer``.
        layer: the layer whose core sets are clustered.
        sets: ``sets[c][i]`` the ``k`` neurons of cluster ``c`` at layer ``i``.
        token_sparsity, sparsity: the selection parameters used.
    """

    kmeans: KMeans
    layer: int
    sets: list[dict[int, torch.Tensor]]
    token_sparsity: float
    sparsity: float

    def assign(self, a_layer: torch.Tensor) -> int:
        """Online: the cluster of a prompt from its pre-activations ``(T, d_ff)`` at ``layer``."""
        s = core_neurons(a_layer, self.token_sparsity, self.sparsity)
        x = set_mask(s, a_layer.shape[1]).double().numpy()[None]
        return int(self.kmeans.predict(x)[0])

    def sets_for(self, acts: list[torch.Tensor]) -> dict[int, torch.Tensor]:
        """The neuron sets for a prompt with per-layer pre-activations ``acts``."""
        return self.sets[self.assign(acts[self.layer])]


def fit_similarity_index(calib: Sequence[list[torch.Tensor]], layers: Sequence[int], n_clusters: int,
                         token_sparsity: float, sparsity: float, layer: int | None = None,
                         seed: int = 0) -> SimilarityIndex:
    """Eq. (sparseinfer-eq-similar), offline: KMeans over core sets, one neuron set per cluster.

    Cluster calibration prompts by their core sets (KMeans); one neuron set per cluster.

    Offline: the multi-hot core set of every calibration prompt at ``layer``
    (default: the middle sparsified layer) is clustered with KMeans. Each
    cluster's set at layer ``i`` is the ``k`` neurons that appear most often in
    its members' core sets at layer ``i``.
    """
    if len(calib) < n_clusters:
        raise ValueError(f"need at least n_clusters={n_clusters} calibration prompts, got {len(calib)}")
    layers = list(layers)
    layer = layers[len(layers) // 2] if layer is None else layer
    d_ff = calib[0][layer].shape[1]
    cores = [{i: core_neurons(p[i], token_sparsity, sparsity) for i in layers} for p in calib]
    x = np.stack([set_mask(c[layer], d_ff).numpy() for c in cores]).astype(np.float64)
    km = KMeans(n_clusters=n_clusters, n_init=4, random_state=seed).fit(x)
    k = budget(d_ff, sparsity)
    sets = []
    for c in range(n_clusters):
        members = [cores[j] for j in np.flatnonzero(km.labels_ == c)]
        per_layer = {}
        for i in layers:
            freq = torch.zeros(d_ff, dtype=torch.float64)
            for m in members:
                freq[m[i]] += 1
            per_layer[i] = torch.sort(torch.topk(freq + torch.arange(d_ff, 0, -1) * 1e-9, k).indices).values
        sets.append(per_layer)
    return SimilarityIndex(km, layer, sets, token_sparsity, sparsity)


def oracle_selector(sparsity: float):
    """[reconstruction] per-token oracle baseline: each token's ``k`` largest pre-activations."""
    def select(_i: int, _x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return topk_mask(a, budget(a.shape[1], sparsity))
    return select


class LowRankPredictor(nn.Module):
    """[reconstruction] DejaVu-style predictor of firing neurons: ``s(x) = B (A x) + c``, rank r.

    Shapes: ``x (N, d_model) -> scores (N, d_ff)`` (logits of ``P(a_j > 0)``).
    """

    def __init__(self, d_model: int, d_ff: int, rank: int) -> None:
        super().__init__()
        self.A = nn.Linear(d_model, rank, bias=False)
        self.B = nn.Linear(rank, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.B(self.A(x))


def train_dejavu(inputs: dict[int, torch.Tensor], acts: dict[int, torch.Tensor], rank: int = 16,
                 steps: int = 150, lr: float = 1e-2, seed: int = 0,
                 max_tokens: int | None = None) -> dict[int, LowRankPredictor]:
    """[reconstruction] DejaVu-like: fit one low-rank predictor per layer on calibration tokens (binary cross-entropy).

    Args:
        inputs: ``{layer: (N, d_model)}`` FFN inputs of the calibration tokens.
        acts: ``{layer: (N, d_ff)}`` their pre-activations; the target is ``a > 0``.
        max_tokens: train on a seeded random subset of at most this many tokens (``None``: all).
    """
    preds = {}
    for i in sorted(inputs):
        torch.manual_seed(seed + i)
        x, y = inputs[i].float(), (acts[i] > 0).float()
        if x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise ValueError(f"layer {i}: inputs and activations must have the same non-zero N")
        if max_tokens is not None and x.shape[0] > max_tokens:
            keep = torch.randperm(x.shape[0])[:max_tokens]
            x, y = x[keep], y[keep]
        p = LowRankPredictor(x.shape[1], y.shape[1], rank)
        opt = torch.optim.Adam(p.parameters(), lr=lr)
        with torch.enable_grad():
            for _ in range(steps):
                loss = nn.functional.binary_cross_entropy_with_logits(p(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        preds[i] = p.eval()
    return preds


def dejavu_selector(predictors: dict[int, LowRankPredictor], sparsity: float):
    """[reconstruction] DejaVu-like baseline, per token: the ``k`` highest predicted scores."""
    @torch.no_grad()
    def select(i: int, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return topk_mask(predictors[i](x), budget(a.shape[1], sparsity))
    return select


@torch.no_grad()
def predictor_recall(predictors: dict[int, LowRankPredictor], inputs: dict[int, torch.Tensor],
                     acts: dict[int, torch.Tensor], sparsity: float) -> float:
    """[reconstruction] DejaVu predictor recall: share of each token's true top-k it predicts."""
    vals = []
    for i, p in predictors.items():
        k = budget(acts[i].shape[1], sparsity)
        hit = topk_mask(p(inputs[i]), k) & topk_mask(acts[i], k)
        vals.append(float(hit.sum(1).double().mean()) / k)
    return float(np.mean(vals))
