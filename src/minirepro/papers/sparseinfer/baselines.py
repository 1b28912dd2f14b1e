"""The neuron selectors SparseInfer is compared with, all at the same budget ``k``.

* the similarity-guided variant (offline KMeans over core sets, online cluster choice),
* a random subset per prompt,
* static "hot" neurons fixed for every prompt (PowerInfer-like),
* a per-token oracle (the true top-``k`` activations by magnitude at every token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans

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

    "Active" at a token means among that token's ``k`` largest ``|h|`` (a SiLU has no
    exact zeros, so the ReLU notion ``h > 0`` would make every neuron active).

    Args:
        calib: for each calibration prompt, its per-layer hidden activations ``(T, d_ff)``.

    Returns:
        ``{layer: (k,) sorted indices}`` of the highest frequency of being in a token's
        top ``k`` over all calibration tokens (ties broken by the mean ``|h|``, then the index).
    """
    if not calib:
        raise ValueError("static_hot_sets needs calibration prompts")
    out = {}
    for i in layers:
        h = torch.cat([p[i] for p in calib]).abs()
        k = budget(h.shape[1], sparsity)
        freq = topk_mask(h, k).double().sum(0).numpy()
        mass = h.double().mean(0).numpy()
        order = np.lexsort((np.arange(h.shape[1]), -mass, -freq))
        out[i] = torch.as_tensor(np.sort(order[:k]), dtype=torch.long)
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
        """Online: the cluster of a prompt from its hidden activations ``(T, d_ff)`` at ``layer``."""
        s = core_neurons(a_layer, self.token_sparsity, self.sparsity)
        x = set_mask(s, a_layer.shape[1]).double().numpy()[None]
        return int(self.kmeans.predict(x)[0])

    def sets_for(self, acts: list[torch.Tensor]) -> dict[int, torch.Tensor]:
        """The neuron sets for a prompt with per-layer hidden activations ``acts``."""
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
    """[reconstruction] per-token oracle baseline: at each token the ``k`` largest ``|h|``."""
    def select(_i: int, h: torch.Tensor) -> torch.Tensor:
        return topk_mask(h.abs(), budget(h.shape[-1], sparsity))
    return select
