"""Ground truth without experts: two independent oracles for the cause of a move.

* :func:`interventional_oracle` re-solves the MPC once per candidate cause with
  that cause removed (a bound relaxed to +-inf over the whole horizon, a
  forecast set to its nominal profile) and names the cause whose removal
  changes the first move ``u_0`` most (range-scaled 2-norm). Its deltas are
  large exactly where multipliers are large, so it can favour KKT evidence.
* :func:`design_oracle` is the scenario's designed cause: which event was
  placed inside the horizon of the explained move. It never looks at the
  controller, so it cannot mirror KKT evidence (but a designed event may not be
  what actually moved the controller).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minirepro.papers.hca.mpc import NMPC, MPCInfeasibleError, MPCProblem, MPCSolution
from minirepro.papers.hca.plants import Event, Plant


def remove_cause(plant: Plant, problem: MPCProblem, cause: int, d_nominal: np.ndarray) -> MPCProblem:
    """A copy of ``problem`` with cause ``cause`` removed.

    ``d_nominal`` is the nominal disturbance over the horizon, ``(N, n_d)``.
    """
    if not 0 <= cause < len(plant.causes):
        raise ValueError(f"cause index {cause} out of range for {len(plant.causes)} causes")
    c = plant.causes[cause]
    pr = problem.copy()
    if c.kind == "upper":
        pr.x_upper[:, c.index] = np.inf
    elif c.kind == "lower":
        pr.x_lower[:, c.index] = -np.inf
    else:
        pr.d[:, c.index] = d_nominal[:, c.index]
    return pr


@dataclass
class OracleResult:
    """The oracle's label and the range-scaled change of u_0 per removed cause."""

    label: int
    deltas: np.ndarray  # (n_causes,)


def interventional_oracle(mpc: NMPC, problem: MPCProblem, sol: MPCSolution,
                          d_nominal: np.ndarray, fallback: NMPC | None = None) -> OracleResult:
    """Re-solve with each cause removed; the label is the largest ``|delta u_0|``.

    ``sol`` is the solution of ``problem`` (the explained move); re-solves start
    from it. Removing a forecast can make the hard problem infeasible (a warm
    forecast was what made a raised lower bound reachable); such a re-solve uses
    the soft-constrained ``fallback`` if given, and raises
    :class:`MPCInfeasibleError` otherwise.
    """
    plant = mpc.plant
    rng_u = plant.u_max - plant.u_min
    deltas = np.zeros(len(plant.causes))
    for i in range(len(plant.causes)):
        alt_pr = remove_cause(plant, problem, i, d_nominal)
        try:
            alt = mpc.solve(alt_pr, init=sol)
        except MPCInfeasibleError:
            if fallback is None:
                raise
            alt = fallback.solve(alt_pr, warm=False)
        deltas[i] = float(np.linalg.norm((alt.u[0] - sol.u[0]) / rng_u))
    return OracleResult(label=int(np.argmax(deltas)), deltas=deltas)


def design_oracle(event: Event) -> int:
    """The designed cause of the explained move (the event inside its horizon)."""
    return int(event.cause)
