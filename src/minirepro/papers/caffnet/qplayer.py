"""The differentiable-QP rival of the CAffine layer: a projection layer built with cvxpylayers.

``cvxpylayers`` (Agrawal et al., 2019) differentiates a convex programme through its
solution map (diffcp). Here the programme is the Euclidean projection onto
``{y : A y <= b}``, the same map as CAffNet with ``w = 0``, so the two layers can be
timed on equal terms as the number of rows ``m`` grows.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pandas as pd
import torch

from minirepro.papers.caffnet.layer import caffine, compute_faces, n_subsets


@functools.lru_cache(maxsize=32)
def projection_qp_layer(m: int, n: int):
    """Eq. (caffnet-eq-projection) as a ``CvxpyLayer``: ``(f, A, b) -> argmin_{A y <= b} ||y - f||``.

    ``f`` (B, n), ``A`` (B, m, n), ``b`` (B, m); differentiable in all three.
    """
    import cvxpy as cp
    from cvxpylayers.torch import CvxpyLayer

    y, f = cp.Variable(n), cp.Parameter(n)
    A, b = cp.Parameter((m, n)), cp.Parameter(m)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(y - f)), [A @ y <= b])
    return CvxpyLayer(prob, parameters=[f, A, b], variables=[y])


def random_problems(m: int, n: int, batch: int, seed: int):
    """Random ``(f, A, b)`` with a point inside (a bounded-slack polytope around ``y0``)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(batch, m, n))
    y0 = rng.normal(size=(batch, n))
    b = np.einsum("bmn,bn->bm", A, y0) + rng.uniform(0.1, 1.0, size=(batch, m))
    f = rng.normal(scale=3.0, size=(batch, n))
    return tuple(torch.as_tensor(t) for t in (f, A, b))


def _caffnet_pass(f, A, b):
    fg = f.clone().requires_grad_(True)
    y = caffine(fg, None, A, b, faces=compute_faces(A))
    y.sum().backward()
    return y.detach()


def _qp_pass(qp, f, A, b):
    fg = f.clone().requires_grad_(True)
    (y,) = qp(fg, A, b, solver_args={"eps": 1e-10})
    y.sum().backward()
    return y.detach()


def layer_times(ms: tuple[int, ...], n: int, batch: int, repeats: int = 3,
                seed: int = 0) -> pd.DataFrame:
    """Median wall seconds of a forward and backward pass through each layer [book's measurement].

    For each ``m`` in ``ms``: CAffNet (faces recomputed per call, as for an input-dependent
    ``A(x)``; ``w = 0``) and the cvxpylayers projection, on the same ``batch`` random
    problems, interleaved; also the largest difference between their outputs.
    """
    rows = []
    for m in ms:
        f, A, b = random_problems(m, n, batch, seed + m)
        qp = projection_qp_layer(m, n)

        run_caffnet = functools.partial(_caffnet_pass, f, A, b)
        run_qp = functools.partial(_qp_pass, qp, f, A, b)
        gap = (run_caffnet() - run_qp()).abs().max().item()   # also the warm-up
        t = {"CAffNet": [], "cvxpylayers": []}
        for _ in range(repeats):
            for name, fn in (("CAffNet", run_caffnet), ("cvxpylayers", run_qp)):
                t0 = time.perf_counter()
                fn()
                t[name].append(time.perf_counter() - t0)
        rows.append({"m": m, "subsets": n_subsets(m, n),
                     "CAffNet s": float(np.median(t["CAffNet"])),
                     "cvxpylayers s": float(np.median(t["cvxpylayers"])), "max |difference|": gap})
    out = pd.DataFrame(rows)
    out["CAffNet / cvxpylayers"] = out["CAffNet s"] / out["cvxpylayers s"]
    return out


def crossover(times: pd.DataFrame) -> int | None:
    """The smallest ``m`` from which CAffNet is slower than cvxpylayers at every larger
    measured ``m`` (None if it never is)."""
    slower = (times["CAffNet / cvxpylayers"] > 1).to_numpy()
    for i in range(len(slower)):
        if slower[i:].all():
            return int(times["m"].iloc[i])
    return None
