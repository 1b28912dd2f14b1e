"""Metrics of the QINCo protocol, decode timing, and the sequential-depth bound."""

from __future__ import annotations

import numpy as np
import torch

from minirepro.papers.rq_moe.rq import check_vectors


def mse(x: np.ndarray, x_hat: np.ndarray) -> float:
    """Per-vector sum of squared errors, averaged over vectors: ``mean_i ||x_i - x_hat_i||^2``."""
    check_vectors(x, what="x")
    check_vectors(x_hat, x.shape[1], what="x_hat")
    if len(x) != len(x_hat):
        raise ValueError(f"x and x_hat hold {len(x)} and {len(x_hat)} vectors")
    diff = np.asarray(x, dtype=np.float64) - np.asarray(x_hat, dtype=np.float64)
    return float((diff ** 2).sum(1).mean())


def true_neighbours(queries: np.ndarray, database: np.ndarray) -> np.ndarray:
    """Index (nq,) of each query's exact nearest neighbour in the raw database (``IndexFlatL2``)."""
    import faiss

    check_vectors(database, what="database")
    check_vectors(queries, database.shape[1], what="queries")
    index = faiss.IndexFlatL2(database.shape[1])
    index.add(np.ascontiguousarray(database, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), 1)[1][:, 0]


def recall_at(queries: np.ndarray, decoded: np.ndarray, gt: np.ndarray,
              ks: tuple[int, ...] = (1, 10)) -> dict[int, float]:
    """R@k: the fraction of queries whose true neighbour ``gt`` ranks within the first k.

    The search is exhaustive over the *decoded* database, with the raw query
    (asymmetric distance), as in the QINCo evaluation.
    """
    import faiss

    check_vectors(decoded, what="decoded")
    check_vectors(queries, decoded.shape[1], what="queries")
    if len(gt) != len(queries):
        raise ValueError(f"gt has {len(gt)} entries for {len(queries)} queries")
    if min(ks) < 1 or max(ks) > len(decoded):
        raise ValueError(f"every k must be in [1, {len(decoded)}], got {ks}")
    index = faiss.IndexFlatL2(decoded.shape[1])
    index.add(np.ascontiguousarray(decoded, dtype=np.float32))
    ranked = index.search(np.ascontiguousarray(queries, dtype=np.float32), max(ks))[1]
    return {k: float((ranked[:, :k] == gt[:, None]).any(1).mean()) for k in ks}


def sequential_depth(method: str, M: int, n_layers: int) -> int:
    """Matrix products that must run one after another to decode one batch.

    A step network is one input projection then ``n_layers`` residual blocks of two
    products each, i.e. ``1 + 2 n_layers`` dependent products (RQ-MoE's gate runs
    beside its experts). QINCo chains the ``M - 1`` step networks, since step m reads
    ``x_hat_{m-1}``; RQ-MoE evaluates all steps at once after a cumulative sum of
    table look-ups, so its depth does not grow with M.
    """
    if M < 2 or n_layers < 1:
        raise ValueError(f"need M >= 2 and n_layers >= 1, got M={M}, n_layers={n_layers}")
    per_step = 1 + 2 * n_layers
    if method == "QINCo":
        return (M - 1) * per_step
    if method == "RQ-MoE":
        return per_step
    raise ValueError(f"unknown method {method!r}; expected 'QINCo' or 'RQ-MoE'")


def late_drop(losses: list[float] | np.ndarray) -> float:
    """[reconstruction] How much the loss still fell at the end of training (a convergence check).

    ``(mean of the 9th tenth - mean of the last tenth) / mean of the last tenth`` of the
    loss sequence (at least 10 entries); near 0 once the curve has flattened.
    """
    v = np.asarray(losses, dtype=np.float64)
    if v.ndim != 1 or len(v) < 10:
        raise ValueError(f"need a 1-D sequence of at least 10 losses, got shape {v.shape}")
    tenth = len(v) // 10
    last, before = v[len(v) - tenth:].mean(), v[len(v) - 2 * tenth:len(v) - tenth].mean()
    return float((before - last) / last)


def decode_macs(method: str, d: int, M: int, *, n_experts: int = 4, hidden: int = 16,
                n_layers: int = 1, gate_hidden: int | None = None) -> int:
    """Multiply-adds in matrix products to decode one vector, from the architecture.

    Both networks spend, per step m = 1..M-1, ``2 d^2`` on the input projection
    (QINCo: ``[c ; x_hat] W``; RQ-MoE: ``c W^c + I W^I``). QINCo then runs ``n_layers``
    blocks d -> hidden -> d (``2 d H`` each). RQ-MoE runs the gate (``d G + G N``) and
    its ``N`` experts: with one block each, fused as ``d N H + N H d``; otherwise expert
    by expert (``N L 2 d H``) plus the gate-weighted sum (``N d``). RQ-MoE's instructions
    are one product with a lower-triangular (M-1) x (M-1) matrix: ``(M-1)^2 d`` more.
    Table look-ups, biases and element-wise work are not counted.
    """
    if M < 2 or min(d, n_experts, hidden, n_layers) < 1:
        raise ValueError(f"need M >= 2 and positive sizes, got d={d}, M={M}, "
                         f"N={n_experts}, H={hidden}, L={n_layers}")
    S, N, H, L, G = M - 1, n_experts, hidden, n_layers, gate_hidden or hidden
    if method == "QINCo":
        return S * (2 * d * d + L * 2 * d * H)
    if method == "RQ-MoE":
        experts = 2 * d * N * H if L == 1 else N * L * 2 * d * H + N * d
        return S * (2 * d * d + d * G + G * N + experts) + S * S * d
    raise ValueError(f"unknown method {method!r}; expected 'QINCo' or 'RQ-MoE'")


def model_decode_macs(model: torch.nn.Module) -> int:
    """``decode_macs`` for a built RQ-MoE or QINCo (reads its sizes)."""
    name = type(model).__name__
    if name == "QINCo":
        return decode_macs("QINCo", model.d, model.M, hidden=model.hidden, n_layers=model.n_layers)
    return decode_macs("RQ-MoE", model.d, model.M, n_experts=model.n_experts, hidden=model.hidden,
                       n_layers=model.n_layers, gate_hidden=model.G1.shape[-1])


def perturb_(model: torch.nn.Module, scale: float = 0.1, seed: int = 0) -> torch.nn.Module:
    """Add small Gaussian noise to every parameter, in place (timing models that are not RQ)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model
