"""Nonlinear MPC with casadi + IPOPT, and the KKT multipliers of every constraint.

The optimal control problem over a horizon of ``N`` steps (single shooting: the
decision variables are the inputs, the states are expressions of them):

$$ \\min_{u_0..u_{N-1}} \\sum_{k=0}^{N-1} \\ell(x_{k+1}, u_k, u_k - u_{k-1})
   \\quad\\text{s.t.}\\quad x_{k+1} = f(x_k, u_k, \\hat d_k),\\;
   \\underline x_{k+1} \\le x_{k+1} \\le \\overline x_{k+1},\\;
   \\underline u \\le u_k \\le \\overline u. $$

casadi's multipliers have one sign per constraint row: ``lam_g > 0`` when the
upper side is active, ``< 0`` when the lower side is. :class:`MPCSolution` splits
them into non-negative multipliers of each side, so for every bound ``b``
$\\partial J^*/\\partial \\overline b = -\\lambda^{up}$ and
$\\partial J^*/\\partial \\underline b = +\\lambda^{lo}$ (tested against finite
differences). ``sens_d`` is $\\partial J^*/\\partial \\hat d_k$, the multiplier of
the (implicit) constraint "disturbance = forecast".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import casadi as ca
import numpy as np

from minirepro.papers.hca.plants import Plant

_OK = {"Solve_Succeeded", "Solved_To_Acceptable_Level"}


class MPCInfeasibleError(RuntimeError):
    """Eq. (hca-eq-nmpc) unsolved: IPOPT found no feasible input sequence (or failed).

    No move, so nothing to explain.
    """


@dataclass
class MPCProblem:
    """Eq. (hca-eq-nmpc)'s data: initial state, previous input, forecasts and bounds.

    Shapes: ``x0`` ``(n_x,)``, ``u_prev`` ``(n_u,)``, ``d`` ``(N, n_d)`` (forecast for
    steps 0..N-1), ``x_lower``/``x_upper`` ``(N, n_x)`` (bounds on x_1..x_N).
    """

    x0: np.ndarray
    u_prev: np.ndarray
    d: np.ndarray
    x_lower: np.ndarray
    x_upper: np.ndarray

    def copy(self) -> MPCProblem:
        return MPCProblem(self.x0.copy(), self.u_prev.copy(), self.d.copy(),
                          self.x_lower.copy(), self.x_upper.copy())


@dataclass
class MPCSolution:
    """Eqs. (hca-eq-nmpc, hca-eq-kkt): an optimal plan of the NMPC and its multipliers.

    Shapes: ``u`` ``(N, n_u)``; ``x`` ``(N+1, n_x)`` (x_0..x_N); ``lam_x_upper``,
    ``lam_x_lower`` ``(N, n_x)`` (>= 0, row k is the bound on x_{k+1});
    ``lam_u_upper``, ``lam_u_lower`` ``(N, n_u)`` (>= 0); ``sens_d`` ``(N, n_d)``.
    """

    u: np.ndarray
    x: np.ndarray
    cost: float
    lam_x_upper: np.ndarray
    lam_x_lower: np.ndarray
    lam_u_upper: np.ndarray
    lam_u_lower: np.ndarray
    sens_d: np.ndarray
    status: str
    iterations: int
    raw: tuple = field(default=(), repr=False)  # (w, lam_x, lam_g) for warm starts


class NMPC:
    """Eq. (hca-eq-nmpc): a reusable NMPC for ``plant``, horizon ``N`` (IPOPT, warm-started).

    ``solve(problem)`` returns an :class:`MPCSolution` or raises
    :class:`MPCInfeasibleError`. With ``warm=True`` each solve starts from the
    previous plan shifted one step, with its multipliers. With ``soft=rho`` the
    state bounds are softened by slacks ``e >= 0`` paid ``rho (e + e^2)`` (an
    exact penalty: the same solution and multipliers as the hard problem while
    those multipliers stay below ``rho``); a closed loop falls back to it when
    the hard problem is infeasible.
    """

    def __init__(self, plant: Plant, N: int = 8, tol: float = 1e-8, max_iter: int = 200,
                 soft: float | None = None):
        if not isinstance(N, (int, np.integer)) or N < 1:
            raise ValueError(f"horizon N must be a positive integer, got {N!r}")
        if soft is not None and not soft > 0:
            raise ValueError(f"soft (the penalty per unit of bound violation) must be > 0, got {soft!r}")
        self.plant, self.N, self.soft = plant, int(N), soft
        nx, nu, nd = plant.n_x, plant.n_u, plant.n_d
        n_e = self.N * nx if soft else 0
        w_all = ca.SX.sym("w", self.N * nu + n_e)
        w = w_all[:self.N * nu]
        e = w_all[self.N * nu:]
        p = ca.SX.sym("p", nx + nu + self.N * nd)
        x = p[:nx]
        u_prev = p[nx:nx + nu]
        cost = 0
        g = []
        for k in range(self.N):
            uk = w[k * nu:(k + 1) * nu]
            dk = p[nx + nu + k * nd: nx + nu + (k + 1) * nd]
            x = plant.f(x, uk, dk)
            cost = cost + plant.stage_cost(x, uk, uk - u_prev)
            u_prev = uk
            g.append(x)
        if soft:  # x - e <= upper and x + e >= lower, with slack e >= 0 paid for (exact penalty)
            xs_all = ca.vertcat(*g)
            g = [xs_all - e, xs_all + e]
            cost = cost + soft * ca.sum1(e) + soft * ca.sumsqr(e)
        opts = {"ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes",
                "ipopt.tol": tol, "ipopt.max_iter": max_iter,
                "ipopt.warm_start_init_point": "yes", "ipopt.warm_start_bound_push": 1e-6,
                "ipopt.warm_start_mult_bound_push": 1e-6, "ipopt.mu_init": 1e-3}
        self._cold_opts = dict(opts, **{"ipopt.warm_start_init_point": "no", "ipopt.mu_init": 0.1})
        nlp = {"x": w_all, "p": p, "f": cost, "g": ca.vertcat(*g)}
        self._solver = ca.nlpsol("nmpc", "ipopt", nlp, opts)
        self._cold = ca.nlpsol("nmpc_cold", "ipopt", nlp, self._cold_opts)
        self._lbx = np.concatenate([np.tile(plant.u_min, self.N), np.zeros(n_e)])
        self._ubx = np.concatenate([np.tile(plant.u_max, self.N), np.full(n_e, np.inf)])
        self._last = None
        self.n_solves = 0

    def _cold_x0(self, pr: MPCProblem) -> np.ndarray:
        pl = self.plant
        u0 = np.tile(np.clip(pr.u_prev, pl.u_min, pl.u_max), self.N)
        return np.concatenate([u0, np.zeros(len(self._lbx) - len(u0))])

    def reset(self) -> None:
        """Forget the warm start."""
        self._last = None

    def _check(self, pr: MPCProblem) -> None:
        pl, N = self.plant, self.N
        shapes = {"x0": (pr.x0, (pl.n_x,)), "u_prev": (pr.u_prev, (pl.n_u,)), "d": (pr.d, (N, pl.n_d)),
                  "x_lower": (pr.x_lower, (N, pl.n_x)), "x_upper": (pr.x_upper, (N, pl.n_x))}
        for name, (arr, shape) in shapes.items():
            if np.shape(arr) != shape:
                raise ValueError(f"MPCProblem.{name} must have shape {shape}, got {np.shape(arr)}")
        if np.any(np.asarray(pr.x_lower) > np.asarray(pr.x_upper)):
            raise MPCInfeasibleError(f"{pl.name}: a state lower bound exceeds its upper bound")

    def solve(self, pr: MPCProblem, warm: bool = True, shift: bool = True,
              init: MPCSolution | None = None, retry: bool = True) -> MPCSolution:
        """Solve one MPC problem; raise :class:`MPCInfeasibleError` if IPOPT fails.

        ``warm``: start from the previous solve's plan (shifted one step if ``shift``);
        ``init``: start from this solution instead (unshifted), e.g. for re-solves of
        a perturbed copy of one problem; ``retry``: after a failed warm start, try
        once more from a cold start before raising.
        """
        self._check(pr)
        if init is not None:
            self._last, warm, shift = init.raw, True, False
        p = np.concatenate([pr.x0, pr.u_prev, np.asarray(pr.d).ravel()])
        lbg, ubg = self._g_bounds(pr)
        if self.soft:
            shift = False
        args = {"p": p, "lbx": self._lbx, "ubx": self._ubx, "lbg": lbg, "ubg": ubg}
        solver = self._start(pr, args, warm, shift)
        res, stats, status = self._run(pr, solver, args, retry)
        return self._solution(pr, res, stats, status)

    def _g_bounds(self, pr: MPCProblem) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the constraints g: the state bounds (soft form: x - e <= upper, x + e >= lower)."""
        lo, hi = np.asarray(pr.x_lower, float).ravel(), np.asarray(pr.x_upper, float).ravel()
        if self.soft:
            inf = np.full_like(lo, np.inf)
            return np.concatenate([-inf, lo]), np.concatenate([hi, inf])
        return lo, hi

    def _start(self, pr: MPCProblem, args: dict, warm: bool, shift: bool):
        """The solver to call, with its start put in ``args``: the last plan (warm) or a cold start."""
        if warm and self._last is not None:
            w0, lx0, lg0 = self._last
            if shift:
                nu, nx = self.plant.n_u, self.plant.n_x
                w0 = np.concatenate([w0[nu:], w0[-nu:]])
                lx0 = np.concatenate([lx0[nu:], lx0[-nu:]])
                lg0 = np.concatenate([lg0[nx:], lg0[-nx:]])
            args.update(x0=w0, lam_x0=lx0, lam_g0=lg0)
            return self._solver
        args["x0"] = self._cold_x0(pr)
        return self._cold

    def _run(self, pr: MPCProblem, solver, args: dict, retry: bool) -> tuple[dict, dict, str]:
        """Call IPOPT (once more cold after a failed warm start if ``retry``); raise if it fails."""
        res = solver(**args)
        self.n_solves += 1
        stats = solver.stats()
        status = stats["return_status"]
        if status not in _OK and retry and solver is self._solver:  # retry cold before giving up
            solver = self._cold
            args = {k: v for k, v in args.items() if k not in ("lam_x0", "lam_g0")}
            args["x0"] = self._cold_x0(pr)
            res = solver(**args)
            self.n_solves += 1
            stats = solver.stats()
            status = stats["return_status"]
        if status not in _OK:
            raise MPCInfeasibleError(
                f"{self.plant.name} MPC has no solution (IPOPT: {status}); "
                f"x0={np.round(pr.x0, 3).tolist()}, "
                f"tightest state bounds lower={np.round(np.max(pr.x_lower, 0), 3).tolist()} "
                f"upper={np.round(np.min(pr.x_upper, 0), 3).tolist()}: no move is explained")
        return res, stats, status

    def _solution(self, pr: MPCProblem, res: dict, stats: dict, status: str) -> MPCSolution:
        """The plan, its state trajectory and the multipliers, from IPOPT's result (kept to warm-start)."""
        pl, N = self.plant, self.N
        w_all = np.asarray(res["x"]).ravel()
        lam_g_all = np.asarray(res["lam_g"]).ravel()
        n = N * pl.n_x
        if self.soft:
            lam_up = np.maximum(lam_g_all[:n], 0.0).reshape(N, pl.n_x)
            lam_lo = np.maximum(-lam_g_all[n:], 0.0).reshape(N, pl.n_x)
        else:
            lam_up = np.maximum(lam_g_all, 0.0).reshape(N, pl.n_x)
            lam_lo = np.maximum(-lam_g_all, 0.0).reshape(N, pl.n_x)
        lam_x = np.asarray(res["lam_x"]).ravel()[:N * pl.n_u].reshape(N, pl.n_u)
        lam_p = np.asarray(res["lam_p"]).ravel()
        self._last = (w_all, np.asarray(res["lam_x"]).ravel(), lam_g_all)
        u = w_all[:N * pl.n_u].reshape(N, pl.n_u)
        xs = [np.asarray(pr.x0, float)]
        for k in range(N):
            xs.append(np.asarray(ca.DM(pl.f(xs[-1], u[k], pr.d[k]))).ravel())
        return MPCSolution(
            u=u, x=np.array(xs), cost=float(res["f"]),
            lam_x_upper=lam_up, lam_x_lower=lam_lo,
            lam_u_upper=np.maximum(lam_x, 0.0), lam_u_lower=np.maximum(-lam_x, 0.0),
            sens_d=-lam_p[pl.n_x + pl.n_u:].reshape(N, pl.n_d),
            status=status, iterations=int(stats.get("iter_count", -1)), raw=self._last)
