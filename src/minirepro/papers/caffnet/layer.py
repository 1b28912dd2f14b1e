"""The CAffine layer and the constraint layers it is compared with.

Constraints are ``A(x) y <= b(x)`` with ``m`` rows and ``y`` in ``R^n``; an
equality ``C y = d`` is the pair of rows ``(C; -C)``, ``(d; -d)``. Shapes:

* ``f``, ``w``: ``(B, n)`` network outputs (prediction and null-space branch);
* ``A``: ``(m, n)`` shared by the batch, or ``(B, m, n)`` one matrix per input;
* ``b``: ``(B, m)``.

Everything runs in float64: the layer's feasibility tolerance (1e-10, as in the
paper's code) is far below float32 rounding (~1e-7), so float32 inputs are
refused, or upcast on request, never used as they are.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

TOL = 1e-10
MAX_SUBSETS = 200_000


class InfeasibleConstraintsError(ValueError):
    """Eq. (caffnet-eq-constraints) is unsatisfiable: ``{y : A(x) y <= b(x)}`` is empty."""


# --------------------------------------------------------------------------- checks


def _float64(t: torch.Tensor, name: str, upcast: bool) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype == torch.float64:
        return t
    if upcast and t.dtype.is_floating_point:
        return t.to(torch.float64)
    raise TypeError(
        f"{name} is {t.dtype}; the CAffine layer works in float64 only. Its feasibility "
        f"tolerance ({TOL:g}) is below float32 rounding (~1e-7), so at float32 every "
        "candidate could be rejected and the output silently infeasible. Pass float64 "
        "tensors (.double()) or upcast=True.")


def _check_constraints(A: torch.Tensor, b: torch.Tensor, batch: int | None, upcast: bool):
    A = _float64(A, "A", upcast)
    b = _float64(b, "b", upcast)
    if A.ndim not in (2, 3):
        raise ValueError(f"A must have shape (m, n) or (B, m, n), got {tuple(A.shape)}")
    if b.ndim != 2:
        raise ValueError(f"b must have shape (B, m), got {tuple(b.shape)}")
    m, n = A.shape[-2:]
    if m < 1 or n < 1:
        raise ValueError(f"A needs at least one row and one column, got {tuple(A.shape)}")
    if b.shape[1] != m:
        raise ValueError(f"b has {b.shape[1]} rows but A has m={m}")
    if A.ndim == 3 and A.shape[0] != b.shape[0]:
        raise ValueError(f"A has batch {A.shape[0]} but b has batch {b.shape[0]}")
    if batch is not None and b.shape[0] != batch:
        raise ValueError(f"b has batch {b.shape[0]} but the outputs have batch {batch}")
    if not (torch.isfinite(A).all() and torch.isfinite(b).all()):
        raise ValueError("A and b must be finite (no NaN or inf)")
    return A, b


def _check_output(t: torch.Tensor, name: str, n: int, upcast: bool) -> torch.Tensor:
    t = _float64(t, name, upcast)
    if t.ndim != 2 or t.shape[1] != n:
        raise ValueError(f"{name} must have shape (B, n) with n={n}, got {tuple(t.shape)}")
    bad = ~torch.isfinite(t).all(dim=1)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten().tolist()
        shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
        raise ValueError(
            f"the network output {name} is not finite (NaN or inf) for {len(rows)} of {t.shape[0]} "
            f"inputs (samples {shown}): no candidate can be checked against the constraints. The "
            "network diverged or was given non-finite inputs; the constraints are not at fault.")
    return t


def matvec(A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eq. (caffnet-eq-constraints), left side: ``A y`` for ``A`` (m, n) or (B, m, n), ``y`` (B, n) -> (B, m)."""
    return y @ A.T if A.ndim == 2 else torch.einsum("bmn,bn->bm", A, y)


def violation(y: torch.Tensor, A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. (caffnet-eq-loss): the violation ``ReLU(A y - b)`` of each row, shape (B, m)."""
    return torch.relu(matvec(A, y) - b)


def max_violation(y: torch.Tensor, A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. (caffnet-eq-constraints): largest violation ``max_j ReLU((A y - b)_j)``; (B,)."""
    return violation(y, A, b).amax(dim=1)


def equality_rows(C: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (caffnet-eq-constraints): ``C y = d`` as the two rows ``C y <= d``, ``-C y <= -d``.

    ``C`` is (k, n) or (B, k, n), ``d`` is (B, k); returns ``(A_eq, b_eq)`` with
    2k rows.
    """
    return torch.cat([C, -C], dim=-2), torch.cat([d, -d], dim=-1)


# ------------------------------------------------------------------- the CAffine layer


@functools.lru_cache(maxsize=64)
def _subsets(m: int, n: int) -> torch.Tensor:
    k_max = min(m, n)
    rows = [g + (m,) * (k_max - len(g))
            for k in range(1, k_max + 1) for g in itertools.combinations(range(m), k)]
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), k_max)


def n_subsets(m: int, n: int) -> int:
    """Eq. (caffnet-eq-candidate): ``sum_{k=1}^{min(m,n)} C(m, k)``, the number of subsets ``g``."""
    return sum(math.comb(m, k) for k in range(1, min(m, n) + 1))


def constraint_subsets(m: int, n: int) -> torch.Tensor:
    """Eq. (caffnet-eq-candidate): every row subset ``g`` with ``1 <= |g| <= min(m, n)``, once.

    Returns a (S, k_max) long tensor, ``k_max = min(m, n)``; a subset smaller than
    ``k_max`` is padded with the index ``m``, which names an all-zero row (a zero
    row adds a zero column to the pseudo-inverse and changes nothing else, so all
    subsets share one batched ``pinv``). Cached per ``(m, n)``; treat as read-only.
    """
    if m < 1 or n < 1:
        raise ValueError(f"need m >= 1 and n >= 1, got m={m}, n={n}")
    count = n_subsets(m, n)
    if count > MAX_SUBSETS:
        raise ValueError(f"m={m}, n={n} gives {count} row subsets (more than {MAX_SUBSETS}); "
                         "the enumeration is combinatorial in min(m, n)")
    return _subsets(m, n)


@dataclass(frozen=True)
class Faces:
    """Eq. (caffnet-eq-candidate): ``A_g``, ``A_g^+``, ``I - A_g^+ A_g`` of every subset ``g``.

    The affine pieces of every row subset, computed once for given ``A``.

    ``A_g`` is (..., S, k, n), ``pinv`` = ``A_g^+`` is (..., S, n, k) and ``null``
    = ``I - A_g^+ A_g`` (the projector onto the null space of ``A_g``) is
    (..., S, n, n); the leading batch axis is present when ``A`` is per input.
    """

    subsets: torch.Tensor
    A_g: torch.Tensor
    pinv: torch.Tensor
    null: torch.Tensor

    @property
    def batched(self) -> bool:
        return self.A_g.ndim == 4

    def take(self, rows: torch.Tensor | slice) -> Faces:
        """The faces of a minibatch (``rows`` indexes the batch axis when batched)."""
        if not self.batched:
            return self
        return Faces(self.subsets, self.A_g[rows], self.pinv[rows], self.null[rows])


def compute_faces(A: torch.Tensor, upcast: bool = False) -> Faces:
    """Eq. (caffnet-eq-candidate): gather ``A_g`` for every subset, all pseudo-inverses in one call.

    Args:
        A: (m, n) or (B, m, n) float64.
    """
    A = _float64(A, "A", upcast)
    if A.ndim not in (2, 3):
        raise ValueError(f"A must have shape (m, n) or (B, m, n), got {tuple(A.shape)}")
    m, n = A.shape[-2:]
    subsets = constraint_subsets(m, n)
    A_pad = torch.cat([A, torch.zeros_like(A[..., :1, :])], dim=-2)
    A_g = A_pad[..., subsets, :]                                   # (..., S, k, n)
    pinv = torch.linalg.pinv(A_g)                                  # (..., S, n, k)
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    null = eye - pinv @ A_g                                        # (..., S, n, n)
    return Faces(subsets, A_g, pinv, null)


def candidates(f: torch.Tensor, w: torch.Tensor, b: torch.Tensor, faces: Faces,
               A: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. (caffnet-eq-candidate): all CAffine candidates, ``f`` then ``P_g`` per subset ``g``.

    ``P_g = f - A_g^+ (A_g f - b_g) + (I - A_g^+ A_g) w``: the orthogonal projection
    of ``f`` onto the affine set ``{y : A_g y = b_g}``, moved by ``w`` inside it.
    With a shared ``A`` (m, n), pass it as ``A``: the residuals ``A_g f - b_g`` are
    then gathered from ``A f - b`` instead of recomputed per subset.

    Returns:
        (B, S + 1, n); index 0 is ``f``.
    """
    if faces.batched:
        b_pad = torch.cat([b, torch.zeros_like(b[:, :1])], dim=1)
        r = torch.einsum("bskn,bn->bsk", faces.A_g, f) - b_pad[:, faces.subsets]
        P = (f[:, None] - torch.einsum("bsnk,bsk->bsn", faces.pinv, r)
             + torch.einsum("bsnj,bj->bsn", faces.null, w))
        return torch.cat([f[:, None], P], dim=1)
    if A is None:   # residuals A_g f - b_g subset by subset
        b_pad = torch.cat([b, torch.zeros_like(b[:, :1])], dim=1)
        r = torch.einsum("skn,bn->bsk", faces.A_g, f) - b_pad[:, faces.subsets]
    else:           # gathered from the m residuals A f - b (the padded row gives 0)
        r0 = f @ A.T - b                                                   # (B, m)
        r = torch.cat([r0, torch.zeros_like(r0[:, :1])], dim=1)[:, faces.subsets]  # (B, S, k)
    S, n, k = faces.pinv.shape
    corr = torch.bmm(faces.pinv, r.permute(1, 2, 0)).permute(2, 0, 1)     # (B, S, n)
    move = (w @ faces.null.reshape(S * n, n).T).reshape(-1, S, n)        # (B, S, n)
    return torch.cat([f[:, None], f[:, None] - corr + move], dim=1)


def candidate_at(f: torch.Tensor, w: torch.Tensor, b: torch.Tensor, faces: Faces,
                 index: torch.Tensor) -> torch.Tensor:
    """Eq. (caffnet-eq-candidate): the candidate ``index`` (B,) of each sample, recomputed; (B, n).

    Gradients flow to ``f`` and ``w`` through that candidate only.
    """
    s = (index - 1).clamp(min=0)
    rows = torch.arange(f.shape[0])
    sub = faces.subsets[s]                                                  # (B, k)
    b_pad = torch.cat([b, torch.zeros_like(b[:, :1])], dim=1)
    b_g = b_pad.gather(1, sub)
    if faces.batched:
        A_g, pinv, null = faces.A_g[rows, s], faces.pinv[rows, s], faces.null[rows, s]
    else:
        A_g, pinv, null = faces.A_g[s], faces.pinv[s], faces.null[s]
    r = torch.einsum("bkn,bn->bk", A_g, f) - b_g
    P = f - torch.einsum("bnk,bk->bn", pinv, r) + torch.einsum("bnj,bj->bn", null, w)
    return torch.where((index == 0)[:, None], f, P)


def select_nearest_feasible(f: torch.Tensor, cand: torch.Tensor, A: torch.Tensor,
                            b: torch.Tensor, tol: float = TOL,
                            exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. (caffnet-eq-select): index of the feasible candidate nearest to ``f``; (B,) long.

    A candidate is feasible when ``max_j (A c - b)_j <= tol``. ``exclude`` (B, S+1) bool
    (optional) marks candidates not to choose. Raises ``InfeasibleConstraintsError`` when no
    candidate of some sample is feasible.
    """
    if A.ndim == 2:
        resid = (cand.reshape(-1, cand.shape[-1]) @ A.T).reshape(*cand.shape[:2], -1) - b[:, None]
    else:
        resid = torch.einsum("bmn,bcn->bcm", A, cand) - b[:, None]
    feasible = resid.amax(dim=-1) <= tol                           # (B, S+1)
    if exclude is not None:
        feasible = feasible & ~exclude
    dist = torch.linalg.vector_norm(cand - f[:, None], dim=-1)
    dist = torch.where(feasible, dist, torch.full_like(dist, math.inf))
    none = ~feasible.any(dim=1)
    if bool(none.any()):
        _raise_infeasible(A, b, torch.nonzero(none).flatten().tolist(), tol)
    return dist.argmin(dim=1)


def _returned_feasible(f: torch.Tensor, w: torch.Tensor | None, A: torch.Tensor, b: torch.Tensor,
                       faces: Faces, cand: torch.Tensor, index: torch.Tensor, y: torch.Tensor,
                       tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (caffnet-eq-select), checked on what is returned: ``(y, index)`` with every row of
    ``y`` within ``tol`` of feasible.

    :func:`candidate_at` recomputes the chosen candidate in another order of operations. On an
    ill-conditioned face (large ``||A_g^+||``) the two differ by ~eps ``||A_g^+|| |A_g f - b_g|``,
    which can put the returned point just past ``tol`` (1.26e-10 was seen) although the
    candidate passed. Where rounding pushed it out, the next nearest feasible candidate is taken.
    """
    exclude = None
    for _ in range(cand.shape[1]):
        with torch.no_grad():
            out = max_violation(y, A, b) > tol
        if not bool(out.any()):
            break
        if exclude is None:
            exclude = torch.zeros(cand.shape[:2], dtype=torch.bool, device=cand.device)
        rows = torch.nonzero(out).flatten()
        exclude[rows, index[rows]] = True
        with torch.no_grad():
            index = select_nearest_feasible(f, cand, A, b, tol, exclude=exclude)
        y = candidate_at(f, w, b, faces, index)
    return y, index


def caffine(f: torch.Tensor, w: torch.Tensor | None, A: torch.Tensor, b: torch.Tensor, *,
            faces: Faces | None = None, tol: float = TOL, upcast: bool = False,
            return_index: bool = False):
    """Eqs. (caffnet-eq-candidate, caffnet-eq-select): the CAffine layer; (B, n) -> (B, n).

    A point satisfying ``A(x) y <= b(x)`` for every input.

    Builds the candidates ``{f} U {P_g : 1 <= |g| <= min(m, n)}`` (see
    ``candidates``) and returns the feasible one nearest to ``f``. With ``w = 0``
    this is the Euclidean projection of ``f`` onto the polytope; a learned ``w``
    moves the projections inside their faces. Differentiable in ``f`` and ``w``
    (the choice of candidate is piecewise constant).

    Args:
        f: (B, n) prediction branch. w: (B, n) null-space branch, or None for w = 0.
        A: (m, n) or (B, m, n). b: (B, m). All float64 (see ``upcast``).
        faces: ``compute_faces(A)`` computed once (for example for a whole training
            set); computed here when None.
        tol: feasibility tolerance on ``A c - b``.
        upcast: cast float32 inputs to float64 instead of refusing them.
        return_index: also return the chosen candidate's index (0 is ``f``,
            ``1 + s`` is subset ``faces.subsets[s]``).

    Returns:
        ``y`` (B, n) float64, or ``(y, index)``.

    Raises:
        TypeError: an input is not float64 (and ``upcast`` is False).
        InfeasibleConstraintsError: the feasible set is empty for some input.
    """
    A, b = _check_constraints(A, b, None, upcast)
    n = A.shape[-1]
    f = _check_output(f, "f", n, upcast)
    w = torch.zeros_like(f) if w is None else _check_output(w, "w", n, upcast)
    if f.shape[0] != b.shape[0] or w.shape[0] != f.shape[0]:
        raise ValueError(f"batch sizes differ: f {f.shape[0]}, w {w.shape[0]}, b {b.shape[0]}")
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    if faces is None:
        faces = compute_faces(A)
    elif faces.subsets.shape != constraint_subsets(*A.shape[-2:]).shape or \
            (faces.batched and faces.A_g.shape[0] != f.shape[0]):
        raise ValueError("faces were computed for constraints of another shape or batch")
    with torch.no_grad():  # choose the candidate; gradients flow through it alone
        cand = candidates(f, w, b, faces, A if A.ndim == 2 else None)
        index = select_nearest_feasible(f, cand, A, b, tol)
    y = candidate_at(f, w, b, faces, index)
    y, index = _returned_feasible(f, w, A, b, faces, cand, index, y, tol)
    return (y, index) if return_index else y


# ---------------------------------------------------------------------- feasibility LP


def lp_feasible_point(A: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """Eq. (caffnet-eq-constraints): a point of ``{y : A y <= b}`` (HiGHS LP), or None if empty."""
    from scipy.optimize import linprog

    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    res = linprog(np.zeros(A.shape[1]), A_ub=A, b_ub=b, bounds=[(None, None)] * A.shape[1],
                  method="highs")
    if res.status == 2:
        return None
    if res.status != 0:
        raise RuntimeError(f"feasibility LP did not finish: {res.message}")
    return res.x


def _raise_infeasible(A: torch.Tensor, b: torch.Tensor, rows: list[int], tol: float):
    empty = []
    for i in rows:
        Ai = (A if A.ndim == 2 else A[i]).detach().cpu().numpy()
        if lp_feasible_point(Ai, b[i].detach().cpu().numpy()) is None:
            empty.append(i)
    shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
    if empty:
        raise InfeasibleConstraintsError(
            f"A(x) y <= b(x) has no solution for {len(empty)} of {b.shape[0]} inputs "
            f"(samples {shown}; a scipy LP confirms the set is empty). CAffNet can only "
            "guarantee constraints that some y satisfies: check how A(x), b(x) are built.")
    raise InfeasibleConstraintsError(
        f"no CAffine candidate met the tolerance {tol:g} for samples {shown}, although an LP "
        "finds the set nonempty: the constraints are ill-conditioned at this scale; rescale "
        "the rows of A(x), b(x) or raise tol.")


# ------------------------------------------------------------------------ baselines


def hardnet_aff(f: torch.Tensor, A: torch.Tensor, bl: torch.Tensor, bu: torch.Tensor,
                upcast: bool = False) -> torch.Tensor:
    """Eq. (caffnet-eq-hardnet): HardNet-Aff, ``y = f + A^+ (ReLU(b_l - A f) - ReLU(A f - b_u))``.

    Exact when ``A`` (m, n) has full row rank ``m <= n`` (then ``A A^+ = I``); with
    ``m > n`` the least-squares correction need not satisfy every row.

    Args:
        f: (B, n). A: (m, n) or (B, m, n). bl, bu: (B, m); use ``-inf``/``inf`` for
            one-sided rows.
    """
    A = _float64(A, "A", upcast)
    f = _float64(f, "f", upcast)
    bl = _float64(bl, "bl", upcast)
    bu = _float64(bu, "bu", upcast)
    if bl.shape != bu.shape or bl.shape[1] != A.shape[-2]:
        raise ValueError(f"bl {tuple(bl.shape)} and bu {tuple(bu.shape)} must be (B, m) "
                         f"with m={A.shape[-2]}")
    if bool((bl > bu).any()):
        raise InfeasibleConstraintsError("HardNet-Aff needs bl <= bu on every row")
    Af = matvec(A, f)
    corr = torch.relu(bl - Af) - torch.relu(Af - bu)
    pinv = torch.linalg.pinv(A)
    return f + (corr @ pinv.T if A.ndim == 2 else torch.einsum("bnm,bm->bn", pinv, corr))


def _ldp_projection(f: np.ndarray, A: np.ndarray, b: np.ndarray):
    """Project one point by least-distance programming (Lawson-Hanson, via NNLS).

    Returns ``(y, active)``: the projection and the rows with a positive
    multiplier, or ``(None, None)`` when the set is empty.
    """
    from scipy.optimize import nnls

    n = f.shape[0]
    # min ||z|| s.t. G z >= h with G = -A, h = A f - b;  y = f + z.
    E = np.vstack([-A.T, (A @ f - b)[None]])
    F = np.zeros(n + 1)
    F[n] = 1.0
    u, _ = nnls(E, F, maxiter=50 * (A.shape[0] + n))
    r = E @ u - F
    if abs(r[n]) < 1e-14:   # r_{n+1} = -||r||^2: zero residual means no feasible point
        return None, None
    return f - r[:n] / r[n], u > 0


def _hildreth(f: np.ndarray, A: np.ndarray, b: np.ndarray, sweeps: int) -> np.ndarray:
    """Hildreth's dual coordinate ascent for the projection, batched: multipliers (B, m).

    Each step maximises the dual over one multiplier ``lambda_j >= 0`` with
    ``y = f - A' lambda``; it converges to the projection, and its positive
    multipliers guess the active set.
    """
    lam = np.zeros(b.shape)
    y = f.copy()
    shared = A.ndim == 2
    norms = (A * A).sum(axis=-1)
    norms = np.where(norms > 0, norms, 1.0)
    for _ in range(sweeps):
        for j in range(b.shape[1]):
            a = A[j] if shared else A[:, j]
            Aa = y @ a if shared else np.einsum("bn,bn->b", a, y)
            nrm = norms[j] if shared else norms[:, j]
            new = np.maximum(0.0, lam[:, j] + (Aa - b[:, j]) / nrm)
            step = new - lam[:, j]
            y -= step[:, None] * a
            lam[:, j] = new
    return lam


def _equality_pairs(A: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that form equality pairs ``(a, beta)``, ``(-a, -beta)``, per sample (B, m).

    Returns ``(keep, drop)``: ``keep`` marks the first row of each pair (its
    multiplier may take either sign), ``drop`` the second (redundant on the face).
    """
    Ab = A if A.ndim == 3 else A.expand(b.shape[0], *A.shape)
    anti = ((Ab[:, :, None] + Ab[:, None]).abs().amax(dim=-1) == 0) & (b[:, :, None] + b[:, None] == 0)
    later = torch.ones(b.shape[1], b.shape[1], dtype=torch.bool).triu(1)
    pairs = anti & later
    return pairs.any(dim=2), pairs.any(dim=1)


def _polish(f: torch.Tensor, A: torch.Tensor, b: torch.Tensor, active: torch.Tensor, tol: float):
    """Project ``f`` onto the faces ``{A_S y = b_S}`` of guessed active sets and check KKT.

    Returns ``(y, null, ok)``: the face projections (B, n), the projectors
    ``I - A_S^+ A_S`` (B, n, n), and which samples satisfy the projection's KKT
    conditions (feasible; ``f - y = A_S' mu`` with ``mu >= 0`` except on equality
    rows), so that ``y`` is exactly the Euclidean projection there.
    """
    keep, drop = _equality_pairs(A, b)
    active = (active | keep) & ~drop
    mask = active.to(f.dtype)
    A_S = (A if A.ndim == 3 else A.expand(f.shape[0], *A.shape)) * mask[..., None]
    pinv = torch.linalg.pinv(A_S)                                          # (B, n, m)
    y = f - torch.einsum("bnm,bm->bn", pinv, matvec(A_S, f) - b * mask)
    mu = torch.einsum("bnm,bn->bm", pinv, f - y)                           # multipliers
    resid = torch.linalg.vector_norm(torch.einsum("bmn,bm->bn", A_S, mu) - (f - y), dim=1)
    scale = 1.0 + torch.linalg.vector_norm(f - y, dim=1)
    mu_min = torch.where(keep, torch.zeros_like(mu), mu).amin(dim=1)
    ok = ((matvec(A, y) - b).amax(dim=1) <= tol) & (mu_min >= -1e-9 * scale) \
        & (resid <= 1e-9 * scale)
    null = torch.eye(f.shape[1], dtype=f.dtype) - pinv @ A_S
    return y, null, ok


def project_polytope(f: torch.Tensor, A: torch.Tensor, b: torch.Tensor, tol: float = TOL,
                     upcast: bool = False, sweeps: int = 10) -> torch.Tensor:
    """Eq. (caffnet-eq-projection): the fixed orthogonal projection ``argmin_{A y <= b} ||y - f||``.

    Closed form for n = 1 (clip to the interval). For n > 1: ``sweeps`` rounds of
    Hildreth's method guess the active set ``S``, the projection onto the face
    ``{A_S y = b_S}`` is checked against the KKT conditions, and any sample that
    fails is solved exactly as a least-distance programme by NNLS (Lawson and
    Hanson). Differentiable in ``f`` with the exact Jacobian ``I - A_S^+ A_S``
    (not in ``A`` or ``b``).

    Args:
        f: (B, n). A: (m, n) or (B, m, n). b: (B, m). float64.

    Raises:
        InfeasibleConstraintsError: the set is empty for some input.
    """
    A, b = _check_constraints(A, b, f.shape[0] if f.ndim == 2 else None, upcast)
    f = _check_output(f, "f", A.shape[-1], upcast)
    if A.shape[-1] == 1:
        a = A[..., 0] if A.ndim == 3 else A[:, 0].expand_as(b)     # (B, m)
        ratio = b / torch.where(a == 0, torch.ones_like(a), a)
        inf = torch.full_like(b, math.inf)
        lo = torch.where(a < 0, ratio, -inf).amax(dim=1)
        hi = torch.where(a > 0, ratio, inf).amin(dim=1)
        zero_bad = ((a == 0) & (b < 0)).any(dim=1)
        bad = (lo > hi + tol) | zero_bad
        if bool(bad.any()):
            _raise_infeasible(A, b, torch.nonzero(bad).flatten().tolist(), tol)
        return torch.minimum(torch.maximum(f, lo[:, None]), hi[:, None])
    fd = f.detach()
    fn, An, bn = fd.cpu().numpy(), A.detach().cpu().numpy(), b.detach().cpu().numpy()
    # 1. guess the active set (Hildreth), 2. solve on that face and check KKT,
    # 3. samples that fail the check: exact least-distance programme (NNLS), re-polished.
    lam = _hildreth(fn, An, bn, sweeps)
    y0, null, ok = _polish(fd, A, b, torch.as_tensor(lam > 0), tol)
    redo = torch.nonzero(~ok).flatten().tolist()
    if redo:
        active, bad = torch.zeros(len(redo), b.shape[1], dtype=torch.bool), []
        for r, i in enumerate(redo):
            y, act = _ldp_projection(fn[i], An if An.ndim == 2 else An[i], bn[i])
            if y is None:
                bad.append(i)
            else:
                active[r] = torch.as_tensor(act)
        if bad:
            _raise_infeasible(A, b, bad, tol)
        sub = torch.as_tensor(redo)
        y_r, null_r, _ = _polish(fd[sub], A if A.ndim == 2 else A[sub], b[sub], active, tol)
        y0, null = y0.clone(), null.clone()
        y0[sub], null[sub] = y_r, null_r
    return y0 + torch.einsum("bij,bj->bi", null, f - fd)
