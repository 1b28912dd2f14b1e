"""The three scenarios: a 1-D piecewise target, a parametric convex QP, the DC3 problem.

Each scenario gives, for inputs ``x`` of shape (B, d):

* ``constraints(x)`` -> ``(A, b)``: ``A(x) y <= b(x)`` for the CAffine layer, the
  fixed projection and the penalty (equalities as row pairs);
* ``hardnet_constraints(x)`` -> ``(A_h, bl, bu)``: the same set as
  ``bl <= A_h y <= bu``, the form HardNet-Aff takes (an equality is one row);
* ``task_loss(y, x, target)``: the training objective before the penalty;
* ``error(y, x, target)``: the per-sample error on test data (squared error, or
  the objective gap to the reference solver).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

# ----------------------------------------------------------------- 1-D piecewise target


def pwc_target(x: torch.Tensor) -> torch.Tensor:
    """The piecewise target of the paper's 1-D scenario (four regions of [-2, 2]).

    Args: x (B, 1). Returns (B, 1).
    """
    s = torch.sin(math.pi * (x + 1) / 2)
    safe = torch.where(x == 0, torch.ones_like(x), x)
    return torch.where(x <= -1, -5 * s - 2,
           torch.where(x <= 0, torch.full_like(x, -2.0),
           torch.where(x <= 1, 2 - 9 * (x - 2 / 3) ** 2, 3 / safe ** 2 - 2)))


def pwc_bounds(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two input-dependent intervals ``bl_i(x) <= y <= bu_i(x)``, i = 1, 2.

    Reconstructed from the paper's public code (same formulas). On (-1, 0] the
    first interval is the single point y = -2: an equality. Returns
    ``(bl, bu)``, each (B, 2).
    """
    s = torch.sin(math.pi * (x + 1) / 2)
    safe = torch.where(x == 0, torch.ones_like(x), x)
    one = torch.ones_like(x)
    regions = [x <= -1, (x > -1) & (x <= 0), (x > 0) & (x <= 1), x > 1]
    lows = [(5 * s ** 2 - 3, 5 * s ** 8 - 2), (-2 * one, -3 * one),
            ((4 - 9 * (x - 2 / 3) ** 2) * x - 2.5, (5 - 4 * (x - 1 / 6) ** 2) * x - 2.5),
            (3 / safe ** 3 - 2.5, 1.5 / safe ** 3 - 1.5 - 5 / 18)]
    highs = [(-3 * s + 0.2, -3 * s ** 3 + 1), (-2 * one, 2 * one),
             (3 - 4 * (x - 0.5) ** 2, 3 - 4 * (x - 0.8) ** 2), (2 * one, 2.5 * one)]
    bl = torch.zeros(x.shape[0], 2, dtype=x.dtype)
    bu = torch.zeros(x.shape[0], 2, dtype=x.dtype)
    for r, lo, hi in zip(regions, lows, highs):
        bl = torch.where(r, torch.cat(lo, dim=1), bl)
        bu = torch.where(r, torch.cat(hi, dim=1), bu)
    return bl, bu


@dataclass
class PiecewiseScenario:
    """1-D regression ``y = target(x)`` with two input-dependent intervals (m = 4 > n = 1)."""

    name: str = "piecewise"
    supervised: bool = True
    n: int = 1
    x_dim: int = 1
    x_range: tuple[float, float] = (-2.0, 2.0)

    def sample_x(self, count: int, rng: np.random.Generator) -> torch.Tensor:
        """Uniform inputs on ``x_range``, (count, 1)."""
        return torch.as_tensor(rng.uniform(*self.x_range, size=(count, 1)), dtype=torch.float64)

    def grid_x(self, count: int) -> torch.Tensor:
        """Evenly spaced inputs on ``x_range``, (count, 1)."""
        return torch.linspace(*self.x_range, count, dtype=torch.float64)[:, None]

    def target(self, x: torch.Tensor) -> torch.Tensor:
        return pwc_target(x)

    def hardnet_constraints(self, x):
        bl, bu = pwc_bounds(x)
        return torch.ones(2, 1, dtype=x.dtype), bl, bu

    def constraints(self, x):
        bl, bu = pwc_bounds(x)
        A = torch.tensor([[-1.0], [-1.0], [1.0], [1.0]], dtype=x.dtype)
        return A, torch.cat([-bl, bu], dim=1)

    def task_loss(self, y, x, target):
        """Mean squared error over the sample axis: (..., B, 1) -> (...)."""
        return ((y - target) ** 2).sum(dim=-1).mean(dim=-1)

    def error(self, y, x, target):
        """Squared error per sample, (B,)."""
        return ((y - target) ** 2).sum(dim=-1)


# ------------------------------------------------------------- DC3-style optimisation


@dataclass
class OptimisationScenario:
    """DC3-style parametric problem: ``min_y 1/2 y'Qy + p'g(y)  s.t.  Gy <= h, Cy = x``.

    ``g(y) = y`` (``convex=True``: a convex QP solved exactly with cvxpy) or
    ``g(y) = sin(y)`` (the nonconvex DC3 problem, solved locally with IPOPT via
    casadi, as the paper's reference solver). Following DC3, ``Q = diag(U[0,1])``,
    ``p ~ U[0,1]``, ``G, C ~ N(0, 1)`` and ``h = sum_j |G C^+|_{ij}``, which makes
    ``y = C^+ x`` feasible for every ``x`` in ``[-1, 1]^{n_eq}``.

    ``varying=True`` [reconstruction] makes the inequality matrix input-dependent,
    ``G(x) = G + x_1 G_1`` with ``G_1 ~ N(0, 1)`` and ``h = sum_j |G C^+|_{ij} +
    sum_j |G_1 C^+|_{ij}``, which keeps ``y = C^+ x`` feasible for every ``x``; then
    ``A(x)`` is (B, m, n), one matrix per input. ``label`` overrides the name.
    """

    n: int = 4
    n_ineq: int = 4
    n_eq: int = 2
    convex: bool = True
    problem_seed: int = 0
    varying: bool = False
    label: str = ""
    name: str = field(init=False)
    supervised: bool = False  # trained on the objective; y* is needed only for testing

    def __post_init__(self):
        if min(self.n, self.n_ineq, self.n_eq) < 1 or self.n_eq >= self.n:
            raise ValueError(f"need n > n_eq >= 1 and n_ineq >= 1, got n={self.n}, "
                             f"n_eq={self.n_eq}, n_ineq={self.n_ineq}")
        self.name = "convex QP" if self.convex else "nonconvex (DC3)"
        rng = np.random.default_rng(self.problem_seed)
        self.Q = np.diag(rng.random(self.n))
        self.p = rng.random(self.n)
        self.G = rng.normal(size=(self.n_ineq, self.n))
        self.C = rng.normal(size=(self.n_eq, self.n))
        self.h = np.abs(self.G @ np.linalg.pinv(self.C)).sum(axis=1)
        self.G1 = np.zeros_like(self.G)
        if self.varying:  # drawn after the fixed instance, which stays the same
            self.G1 = rng.normal(size=(self.n_ineq, self.n))
            self.h = self.h + np.abs(self.G1 @ np.linalg.pinv(self.C)).sum(axis=1)
        if self.label:
            self.name = self.label
        self.x_dim = self.n_eq
        self._t = {k: torch.as_tensor(getattr(self, k)) for k in ("Q", "p", "G", "G1", "C", "h")}

    @property
    def m(self) -> int:
        """Rows of ``A y <= b``: the inequalities and two per equality."""
        return self.n_ineq + 2 * self.n_eq

    def sample_x(self, count: int, rng: np.random.Generator) -> torch.Tensor:
        return torch.as_tensor(rng.uniform(-1, 1, size=(count, self.n_eq)), dtype=torch.float64)

    def G_of(self, x: torch.Tensor) -> torch.Tensor:
        """The inequality matrix: ``G`` (n_ineq, n), or ``G + x_1 G_1`` (B, n_ineq, n) if varying."""
        t = self._t
        if not self.varying:
            return t["G"]
        return t["G"] + x[:, :1, None] * t["G1"]

    def _rows(self, x, *blocks):
        G = self.G_of(x)
        if G.ndim == 2:
            return torch.cat([G, *blocks], dim=0)
        return torch.cat([G, *(blk.expand(x.shape[0], -1, -1) for blk in blocks)], dim=1)

    def constraints(self, x):
        t = self._t
        A = self._rows(x, t["C"], -t["C"])
        b = torch.cat([t["h"].expand(x.shape[0], -1), x, -x], dim=1)
        return A, b

    def hardnet_constraints(self, x):
        t = self._t
        A = self._rows(x, t["C"])
        inf = torch.full((x.shape[0], self.n_ineq), math.inf, dtype=x.dtype)
        return A, torch.cat([-inf, x], dim=1), torch.cat([t["h"].expand(x.shape[0], -1), x], dim=1)

    def objective(self, y: torch.Tensor) -> torch.Tensor:
        """``1/2 y'Qy + p'g(y)`` per sample: (..., n) -> (...)."""
        t = self._t
        g = y if self.convex else torch.sin(y)
        return 0.5 * ((y @ t["Q"]) * y).sum(dim=-1) + g @ t["p"]

    def task_loss(self, y, x, target):
        """Mean objective over the sample axis (self-supervised, as DC3): (..., B, n) -> (...)."""
        return self.objective(y).mean(dim=-1)

    def error(self, y, x, target):
        """Optimality gap ``obj(y) - obj(y*)`` per sample, (B,); ``target`` holds y*."""
        return self.objective(y) - self.objective(target)

    def target(self, x: torch.Tensor) -> torch.Tensor:
        """The reference solution y*(x) (B, n): cvxpy for the QP, IPOPT otherwise."""
        return solve_qp_cvxpy(self, x) if self.convex else solve_ipopt(self, x)


def solve_qp_cvxpy(sc: OptimisationScenario, x: torch.Tensor) -> torch.Tensor:
    """Exact QP solutions with cvxpy (Clarabel) for inputs x (T, n_eq): (T, n).

    The T problems are independent, so they are stacked into one separable QP
    and solved in a single call.
    """
    import cvxpy as cp

    xn = x.detach().cpu().numpy()
    Y = cp.Variable((xn.shape[0], sc.n))
    q = np.sqrt(np.diag(sc.Q))
    obj = 0.5 * cp.sum_squares(Y @ np.diag(q)) + cp.sum(Y @ sc.p)
    if sc.varying:  # G(x) differs per sample: one block of rows each
        Gx = sc.G_of(x).detach().cpu().numpy()
        ineq = [Gx[i] @ Y[i] <= sc.h for i in range(len(xn))]
    else:
        ineq = [Y @ sc.G.T <= sc.h[None]]
    prob = cp.Problem(cp.Minimize(obj), [*ineq, Y @ sc.C.T == xn])
    prob.solve(solver=cp.CLARABEL)
    if prob.status != cp.OPTIMAL:
        raise RuntimeError(f"cvxpy returned {prob.status}")
    return torch.as_tensor(Y.value, dtype=torch.float64)


def solve_ipopt(sc: OptimisationScenario, x: torch.Tensor) -> torch.Tensor:
    """Local solutions of the nonconvex problem with IPOPT (casadi), started at C^+ x."""
    import casadi as ca

    y = ca.MX.sym("y", sc.n)
    xp = ca.MX.sym("x", sc.n_eq)
    g = y if sc.convex else ca.sin(y)
    obj = 0.5 * ca.dot(y, ca.mtimes(ca.DM(sc.Q), y)) + ca.dot(ca.DM(sc.p), g)
    G = ca.DM(sc.G) + xp[0] * ca.DM(sc.G1)  # G1 = 0 unless the scenario varies with x
    cons = ca.vertcat(ca.mtimes(G, y) - ca.DM(sc.h), ca.mtimes(ca.DM(sc.C), y) - xp)
    solver = ca.nlpsol("dc3", "ipopt", {"x": y, "p": xp, "f": obj, "g": cons},
                       {"ipopt.print_level": 0, "print_time": 0, "ipopt.sb": "yes",
                        "ipopt.tol": 1e-10, "ipopt.constr_viol_tol": 1e-10})
    lbg = np.r_[-np.inf * np.ones(sc.n_ineq), np.zeros(sc.n_eq)]
    ubg = np.zeros(sc.n_ineq + sc.n_eq)
    Cp = np.linalg.pinv(sc.C)
    out = []
    for xi in x.detach().cpu().numpy():
        res = solver(x0=Cp @ xi, p=xi, lbg=lbg, ubg=ubg)
        if not solver.stats()["success"]:
            raise RuntimeError(f"IPOPT failed for x={xi}: {solver.stats()['return_status']}")
        out.append(np.asarray(res["x"]).ravel())
    return torch.as_tensor(np.array(out), dtype=torch.float64)


# ------------------------------------------------------------- unicycle with CBF rows


@dataclass
class UnicycleScenario:
    """Unicycle control with control-barrier (CBF) rows: ``u = (v, omega)``, n = 2 [reconstruction].

    The state ``x = (p_1, p_2, theta)`` is the *look-ahead point* ``p`` a distance
    ``l`` ahead of the wheel axle, and the heading. Its dynamics are affine in ``u``:
    ``dp/dt = J(theta) u`` with ``J = [[cos, -l sin], [sin, l cos]]``, ``dtheta/dt = omega``.
    For a circular obstacle ``(o_i, r_i)``, ``h_i = |p - o_i|^2 - r_i^2`` and the CBF
    condition ``dh_i/dt >= -alpha h_i`` is the row ``-2 (p - o_i)' J u <= alpha h_i``;
    four rows bound ``|v| <= v_max``, ``|omega| <= omega_max``. So ``A(x)`` (B, m, n)
    depends on the input, with ``m = n_obstacles + 4 > n = 2``. With Euler steps
    of ``p`` and ``alpha dt <= 1``, any feasible ``u`` keeps ``h_i >= 0``:
    ``h' = h + dt dh/dt + dt^2 |J u|^2 >= (1 - alpha dt) h``.

    The network imitates a nominal go-to-goal controller that ignores the obstacles
    (the task loss is the squared error to it); the constraints must make it safe.
    """

    name: str = "unicycle CBF"
    supervised: bool = True
    n: int = 2
    x_dim: int = 3
    obstacles: tuple[tuple[float, float, float], ...] = (
        (0.0, 0.1, 0.7), (-1.2, -0.9, 0.5), (1.3, 0.9, 0.5))
    goal: tuple[float, float] = (3.0, 0.0)
    lookahead: float = 0.2
    alpha: float = 4.0
    v_max: float = 1.5
    omega_max: float = 3.0
    gain: float = 1.0
    box: tuple[float, float, float, float] = (-3.5, 3.5, -2.0, 2.0)

    @property
    def m(self) -> int:
        return len(self.obstacles) + 4

    def _obs(self, dtype=torch.float64):
        return torch.tensor(self.obstacles, dtype=dtype)

    def barrier(self, x: torch.Tensor) -> torch.Tensor:
        """``h_i(p) = |p - o_i|^2 - r_i^2`` per obstacle, (B, n_obstacles); < 0 is a collision."""
        o = self._obs(x.dtype)
        d = x[:, None, :2] - o[None, :, :2]
        return (d ** 2).sum(-1) - o[:, 2] ** 2

    def jac(self, x: torch.Tensor) -> torch.Tensor:
        """``J(theta)`` (B, 2, 2): ``dp/dt = J u``."""
        c, s, l_ = torch.cos(x[:, 2]), torch.sin(x[:, 2]), self.lookahead
        return torch.stack([torch.stack([c, -l_ * s], -1), torch.stack([s, l_ * c], -1)], -2)

    def sample_x(self, count: int, rng: np.random.Generator) -> torch.Tensor:
        """Uniform states in the box with ``theta`` in [-pi, pi], outside every obstacle."""
        out = np.zeros((0, 3))
        while len(out) < count:
            x0, x1, y0, y1 = self.box
            z = np.c_[rng.uniform(x0, x1, 2 * count), rng.uniform(y0, y1, 2 * count),
                      rng.uniform(-math.pi, math.pi, 2 * count)]
            ok = (self.barrier(torch.as_tensor(z)) > 0).all(dim=1).numpy()
            out = np.r_[out, z[ok]]
        return torch.as_tensor(out[:count], dtype=torch.float64)

    def target(self, x: torch.Tensor) -> torch.Tensor:
        """The nominal controller: ``J^{-1}`` of a proportional pull of ``p`` to the goal,
        clipped to the actuator limits, (B, 2). It ignores the obstacles."""
        pull = self.gain * (torch.tensor(self.goal, dtype=x.dtype) - x[:, :2])
        u = torch.linalg.solve(self.jac(x), pull)
        lim = torch.tensor([self.v_max, self.omega_max], dtype=x.dtype)
        return torch.maximum(torch.minimum(u, lim), -lim)

    def constraints(self, x):
        o = self._obs(x.dtype)
        J = self.jac(x)
        A_obs = -2 * torch.einsum("bik,bkn->bin", x[:, None, :2] - o[None, :, :2], J)
        eye = torch.eye(2, dtype=x.dtype).expand(x.shape[0], 2, 2)
        A = torch.cat([A_obs, eye, -eye], dim=1)
        lim = torch.tensor([self.v_max, self.omega_max], dtype=x.dtype).expand(x.shape[0], 2)
        return A, torch.cat([self.alpha * self.barrier(x), lim, lim], dim=1)

    def hardnet_constraints(self, x):
        A, b = self.constraints(x)
        k = len(self.obstacles)
        lim = b[:, k:k + 2]
        inf = torch.full_like(b[:, :k], math.inf)
        return A[:, :k + 2], torch.cat([-inf, -lim], dim=1), torch.cat([b[:, :k], lim], dim=1)

    def task_loss(self, y, x, target):
        """Mean squared error to the nominal controller: (..., B, 2) -> (...)."""
        return ((y - target) ** 2).sum(dim=-1).mean(dim=-1)

    def error(self, y, x, target):
        """Squared error to the nominal controller per sample, (B,)."""
        return ((y - target) ** 2).sum(dim=-1)

    def step(self, x: torch.Tensor, u: torch.Tensor, dt: float) -> torch.Tensor:
        """One Euler step of ``(p, theta)`` under ``u``: (B, 3) -> (B, 3)."""
        dp = torch.einsum("bij,bj->bi", self.jac(x), u)
        return torch.cat([x[:, :2] + dt * dp, x[:, 2:] + dt * u[:, 1:]], dim=1)

    def starts(self, count: int, rng: np.random.Generator) -> torch.Tensor:
        """Rollout starts on the left edge, heading right, (count, 3)."""
        y = rng.uniform(-1.5, 1.5, count)
        th = rng.uniform(-0.3, 0.3, count)
        return torch.as_tensor(np.c_[np.full(count, self.box[0] + 0.5), y, th], dtype=torch.float64)
