"""Plants for the HCA chapter: a greenhouse, a one-zone building (HVAC) and a CSTR.

Each plant has nonlinear discrete-time dynamics ``x+ = f(x, u, d)`` (explicit
Euler of an ODE, step ``dt`` hours), box bounds on the inputs, time-varying
bounds on the states, forecast disturbances, and a stage cost. The same Python
function ``f`` works on floats/NumPy arrays and on casadi symbols, so the MPC
and the simulator share one model.

A plant also lists its *candidate causes*: the things an operator may blame
for a control move. A cause is a state bound (``kind="upper"``/``"lower"``) or
a disturbance forecast (``kind="forecast"``). Scenario *events* switch one cause
on for a few steps (a bound tightened, a forecast deviating from nominal), so
the designed cause of each explained move is known (see :func:`make_schedule`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import casadi as ca
import numpy as np

STEPS_PER_DAY = 96  # 15-minute steps


@dataclass(frozen=True)
class Cause:
    """A candidate cause of a control move.

    Attributes:
        name: short label shown in tables ("T upper bound", "solar forecast").
        kind: ``"upper"`` or ``"lower"`` (a state bound) or ``"forecast"``.
        index: the state index (bounds) or disturbance index (forecasts).
        event: the event's size: the bound's new value (bounds) or the
            deviation added to the nominal forecast (forecasts).
        scale: a physical scale used to weigh its KKT multiplier (state units
            for bounds; unused for forecasts, whose deviation is the scale).
        feature_range: range of the LIME knob for this cause: a shift of the
            bound (state units) or a factor on the forecast deviation.
    """

    name: str
    kind: str
    index: int
    event: float
    scale: float = 1.0
    feature_range: tuple[float, float] = (-1.0, 1.0)


@dataclass(frozen=True)
class Plant:
    """A controlled plant: model, bounds, cost, nominal disturbances and causes.

    Shapes: ``x`` is ``(n_x,)``, ``u`` is ``(n_u,)``, ``d`` is ``(n_d,)``.
    Units are in ``state_units`` / ``input_units`` / ``dist_units``.
    """

    name: str
    state_names: tuple[str, ...]
    state_units: tuple[str, ...]
    input_names: tuple[str, ...]
    input_units: tuple[str, ...]
    dist_names: tuple[str, ...]
    dist_units: tuple[str, ...]
    dt: float
    f: Callable
    stage_cost: Callable
    u_min: np.ndarray
    u_max: np.ndarray
    x_lower: np.ndarray  # default state lower bounds, (n_x,), -inf for none
    x_upper: np.ndarray  # default state upper bounds, (n_x,), +inf for none
    x_init: np.ndarray
    u_init: np.ndarray
    nominal: Callable  # t (steps, array) -> (len(t), n_d) nominal disturbance
    causes: tuple[Cause, ...]
    noise_std: np.ndarray  # process noise per state, per step
    physical_x_range: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    forecast_scale: np.ndarray | None = None  # scale of forecast errors per disturbance (None: mean |nominal|)

    @property
    def n_x(self) -> int:
        return len(self.state_names)

    @property
    def n_u(self) -> int:
        return len(self.input_names)

    @property
    def n_d(self) -> int:
        return len(self.dist_names)

    @property
    def cause_names(self) -> list[str]:
        return [c.name for c in self.causes]

    def step(self, x: np.ndarray, u: np.ndarray, d: np.ndarray,
             rng: np.random.Generator | None = None) -> np.ndarray:
        """One plant step ``x+ = f(x, u, d) + w`` with Gaussian process noise ``w``."""
        x = np.asarray(x, float)
        if x.shape != (self.n_x,):
            raise ValueError(f"{self.name}: state must have shape ({self.n_x},), got {x.shape}")
        nxt = np.asarray(ca.DM(self.f(x, np.asarray(u, float), np.asarray(d, float)))).ravel()
        if rng is not None:
            nxt = nxt + rng.normal(0.0, self.noise_std)
        return nxt


# ---------------------------------------------------------------- greenhouse
def _gh_f(x, u, d):
    """Greenhouse: air temperature T (degC) and relative humidity H (%).

    dT/dt = 6 S + 8 q - (0.3 + 3 v)(T - T_out)          (ventilation is bilinear)
    dH/dt = 2 + 40 S (1 - H/100) - (0.1 + 0.6 v)(H - 55) (transpiration, venting)
    """
    T, H = x[0], x[1]
    q, v = u[0], u[1]
    S, To = d[0], d[1]
    dT = 6.0 * S + 8.0 * q - (0.3 + 3.0 * v) * (T - To)
    dH = 2.0 + 40.0 * S * (1.0 - H / 100.0) - (0.1 + 0.6 * v) * (H - 55.0)
    return ca.vertcat(T + 0.25 * dT, H + 0.25 * dH)


def _gh_cost(x, u, du):
    """Stage cost: track 21 degC, pay heating energy and vent wear, smooth moves."""
    return ((x[0] - 21.0) ** 2 + 3.0 * u[0] + 0.5 * u[1] ** 2
            + 4.0 * (du[0] ** 2 + du[1] ** 2))


def _gh_nominal(t):
    """Nominal weather: solar (kW/m2) and outdoor temperature (degC), diurnal."""
    t = np.asarray(t, float)
    phase = 2 * np.pi * (t % STEPS_PER_DAY) / STEPS_PER_DAY
    solar = np.clip(0.05 + 0.3 * np.maximum(0.0, -np.cos(phase)), 0, None)
    t_out = 14.0 - 4.0 * np.cos(phase)
    return np.stack([solar, t_out], axis=-1)


def greenhouse() -> Plant:
    """The greenhouse plant (states T, H; inputs heating, vent; weather disturbances)."""
    return Plant(
        name="greenhouse",
        state_names=("T", "H"), state_units=("degC", "%RH"),
        input_names=("heating", "vent"), input_units=("-", "-"),
        dist_names=("solar", "T_out"), dist_units=("kW/m2", "degC"),
        dt=0.25, f=_gh_f, stage_cost=_gh_cost,
        u_min=np.array([0.0, 0.0]), u_max=np.array([1.0, 1.0]),
        x_lower=np.array([15.0, -np.inf]), x_upper=np.array([28.0, 88.0]),
        x_init=np.array([21.0, 75.0]), u_init=np.array([0.3, 0.1]),
        nominal=_gh_nominal,
        causes=(
            Cause("T upper bound", "upper", 0, event=19.5, scale=1.0, feature_range=(-2.0, 2.0)),
            Cause("T lower bound", "lower", 0, event=22.5, scale=1.0, feature_range=(-2.0, 2.0)),
            Cause("H upper bound", "upper", 1, event=74.0, scale=5.0, feature_range=(-5.0, 5.0)),
            Cause("solar forecast", "forecast", 0, event=0.45, feature_range=(0.0, 1.5)),
            Cause("T_out forecast", "forecast", 1, event=-8.0, feature_range=(0.0, 1.5)),
        ),
        noise_std=np.array([0.05, 0.3]),
        physical_x_range=np.array([[15.0, 28.0], [55.0, 88.0]]),
    )


# ---------------------------------------------------------------- building HVAC
def _hvac_f(x, u, d):
    """One-zone building: zone temperature Tz (degC), CO2 c (100 ppm).

    dTz/dt = 4 m (Ts - Tz) + 2 occ + 0.2 (T_out - Tz)   (air flow x supply temp: bilinear)
    dc/dt  = 6 occ - 3 m (c - 4.2)                     (CO2 from people, flushed by air)
    """
    Tz, c = x[0], x[1]
    m, Ts = u[0], u[1]
    occ, To = d[0], d[1]
    dT = 4.0 * m * (Ts - Tz) + 2.0 * occ + 0.2 * (To - Tz)
    dc = 6.0 * occ - 3.0 * m * (c - 4.2)
    return ca.vertcat(Tz + 0.25 * dT, c + 0.25 * dc)


def _hvac_cost(x, u, du):
    """Stage cost: track 22 degC, fan power ~ m^3, thermal power ~ m (Ts - 20)^2, smooth."""
    return ((x[0] - 22.0) ** 2 + 2.0 * u[0] ** 3 + 0.05 * u[0] * (u[1] - 20.0) ** 2
            + 2.0 * du[0] ** 2 + 0.02 * du[1] ** 2)


def _hvac_nominal(t):
    """Nominal occupancy (0..1, office hours) and outdoor temperature (degC)."""
    t = np.asarray(t, float)
    phase = 2 * np.pi * (t % STEPS_PER_DAY) / STEPS_PER_DAY
    occ = 0.15 + 0.35 * np.maximum(0.0, -np.cos(phase))
    t_out = 10.0 - 4.0 * np.cos(phase)
    return np.stack([occ, t_out], axis=-1)


def building_hvac() -> Plant:
    """The one-zone building (states Tz, CO2; inputs air flow, supply temperature)."""
    return Plant(
        name="hvac",
        state_names=("Tz", "CO2"), state_units=("degC", "100 ppm"),
        input_names=("airflow", "T_supply"), input_units=("-", "degC"),
        dist_names=("occupancy", "T_out"), dist_units=("-", "degC"),
        dt=0.25, f=_hvac_f, stage_cost=_hvac_cost,
        u_min=np.array([0.1, 14.0]), u_max=np.array([1.0, 32.0]),
        x_lower=np.array([19.0, -np.inf]), x_upper=np.array([26.0, 10.0]),
        x_init=np.array([22.0, 6.0]), u_init=np.array([0.3, 22.0]),
        nominal=_hvac_nominal,
        causes=(
            Cause("Tz upper bound", "upper", 0, event=21.0, scale=1.0, feature_range=(-2.0, 2.0)),
            Cause("Tz lower bound", "lower", 0, event=23.0, scale=1.0, feature_range=(-2.0, 2.0)),
            Cause("CO2 upper bound", "upper", 1, event=6.5, scale=1.0, feature_range=(-1.5, 1.5)),
            Cause("occupancy forecast", "forecast", 0, event=0.6, feature_range=(0.0, 1.5)),
            Cause("T_out forecast", "forecast", 1, event=-10.0, feature_range=(0.0, 1.5)),
        ),
        noise_std=np.array([0.05, 0.05]),
        physical_x_range=np.array([[19.0, 26.0], [4.2, 10.0]]),
    )


# ---------------------------------------------------------------- chemical process: CSTR
# The textbook exothermic CSTR, A -> B, first order (the reactor of Seborg et al., Process Dynamics
# and Control, also Hedengren's APMonitor benchmark): V = 100 L, rho = 1000 g/L, Cp = 0.239 J/(g K),
# -dH = 5e4 J/mol, E/R = 8750 K, k0 = 7.2e10, UA = 5e4 J/K per time unit. Time runs in hours
# here instead of minutes (every rate divided by 60: a large, slow reactor), which leaves every
# steady state unchanged: at q = 100 L/h, Tc = 300 K, C_Af = 1 mol/L, T_f = 350 K it is
# T = 324.5 K, C_A = 0.877 mol/L (the tests check it).
CSTR = {"V": 100.0, "rho_cp": 1000.0 * 0.239, "dH": 5.0e4, "E_R": 8750.0, "k0": 7.2e10, "UA": 5.0e4}
_CSTR_SUBSTEPS = 1  # RK4 substeps per 15-minute step (one is stable below the 360 K rate cap)


def _cstr_rhs(x, u, d):
    """dT/dt (K/h) and dC_A/dt (mol/(L h)) of the CSTR; x = (T, C_A), u = (Tc, q), d = (C_Af, T_f)."""
    T, conc = x[0], x[1]
    tc, q = u[0], u[1]
    caf, tf = d[0], d[1]
    p = CSTR
    T_rate = ca.fmin(ca.fmax(T, 250.0), 360.0)  # the rate law is used inside 250-360 K (keeps RK4 stable)
    r = p["k0"] * ca.exp(-p["E_R"] / T_rate) * conc
    dT = q / p["V"] * (tf - T) + p["dH"] / p["rho_cp"] * r + p["UA"] / (p["V"] * p["rho_cp"]) * (tc - T)
    dca = q / p["V"] * (caf - conc) - r
    return dT, dca


def _cstr_f(x, u, d):
    """CSTR: reactor temperature T (K) and concentration C_A (mol/L); RK4 over one 15-minute step.

    dT/dt   = q/V (T_f - T) + (-dH)/(rho Cp) k0 e^{-E/RT} C_A + UA/(V rho Cp) (T_c - T)
    dC_A/dt = q/V (C_Af - C_A) - k0 e^{-E/RT} C_A          (flow x concentration: bilinear)
    """
    h = 0.25 / _CSTR_SUBSTEPS
    T, c = x[0], x[1]
    for _ in range(_CSTR_SUBSTEPS):
        k1 = _cstr_rhs((T, c), u, d)
        k2 = _cstr_rhs((T + h / 2 * k1[0], c + h / 2 * k1[1]), u, d)
        k3 = _cstr_rhs((T + h / 2 * k2[0], c + h / 2 * k2[1]), u, d)
        k4 = _cstr_rhs((T + h * k3[0], c + h * k3[1]), u, d)
        T = T + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        c = c + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return ca.vertcat(T, c)


def _cstr_cost(x, u, du):
    """Stage cost: track 325 K and 0.87 mol/L, pay coolant and throughput away from nominal, smooth."""
    return ((x[0] - 325.0) ** 2 + 400.0 * (x[1] - 0.87) ** 2 + 0.02 * (u[0] - 300.0) ** 2
            + 0.002 * (u[1] - 100.0) ** 2 + 0.5 * du[0] ** 2 + 0.02 * du[1] ** 2)


def _cstr_nominal(t):
    """Nominal feed: concentration C_Af (mol/L) and temperature T_f (K), with a daily swing."""
    t = np.asarray(t, float)
    phase = 2 * np.pi * (t % STEPS_PER_DAY) / STEPS_PER_DAY
    return np.stack([1.0 + 0.03 * np.sin(phase), 350.0 - 3.0 * np.cos(phase)], axis=-1)


def cstr() -> Plant:
    """The exothermic CSTR (states T, C_A; inputs coolant temperature, feed flow; feed disturbances)."""
    return Plant(
        name="cstr",
        state_names=("T", "CA"), state_units=("K", "mol/L"),
        input_names=("T_coolant", "feed"), input_units=("K", "L/h"),
        dist_names=("CA_feed", "T_feed"), dist_units=("mol/L", "K"),
        dt=0.25, f=_cstr_f, stage_cost=_cstr_cost,
        u_min=np.array([280.0, 85.0]), u_max=np.array([303.0, 115.0]),
        x_lower=np.array([310.0, -np.inf]), x_upper=np.array([340.0, 0.95]),
        x_init=np.array([324.5, 0.877]), u_init=np.array([300.0, 100.0]),
        nominal=_cstr_nominal,
        causes=(
            Cause("T upper bound", "upper", 0, event=321.5, scale=1.0, feature_range=(-3.0, 3.0)),
            Cause("T lower bound", "lower", 0, event=327.5, scale=1.0, feature_range=(-3.0, 3.0)),
            Cause("CA upper bound", "upper", 1, event=0.855, scale=0.02, feature_range=(-0.03, 0.03)),
            Cause("CA_feed forecast", "forecast", 0, event=0.06, feature_range=(0.0, 1.5)),
            Cause("T_feed forecast", "forecast", 1, event=-10.0, feature_range=(0.0, 1.5)),
        ),
        noise_std=np.array([0.1, 0.002]),
        physical_x_range=np.array([[310.0, 340.0], [0.6, 0.95]]),
        forecast_scale=np.array([0.3, 20.0]),  # absolute temperatures: errors of a kelvin, not of 5% of 350 K
    )


PLANTS: dict[str, Callable[[], Plant]] = {"greenhouse": greenhouse, "hvac": building_hvac, "cstr": cstr}


def get_plant(name: str) -> Plant:
    """The plant called ``name`` (one of ``PLANTS``)."""
    if name not in PLANTS:
        raise ValueError(f"unknown plant {name!r}; expected one of {', '.join(PLANTS)}")
    return PLANTS[name]()


# ---------------------------------------------------------------- scenarios
@dataclass
class Event:
    """One designed event: cause ``cause`` is switched on over steps [onset, onset+length)."""

    cause: int
    onset: int
    length: int
    t_explain: int  # the explained move: a few steps before onset (anticipation)
    day: int
    distractor: int = -1  # the weaker overlapping cause (-1: none)


@dataclass
class Schedule:
    """Disturbances and bounds over ``n_steps + horizon`` steps.

    Arrays: ``d_nominal``, ``d_forecast`` and ``d_actual`` are ``(T, n_d)``;
    ``x_lower`` and ``x_upper`` are ``(T, n_x)``.
    """

    d_nominal: np.ndarray
    d_forecast: np.ndarray
    d_actual: np.ndarray
    x_lower: np.ndarray
    x_upper: np.ndarray
    events: list[Event]
    n_steps: int


def apply_event(plant: Plant, cause: int, lo: np.ndarray, hi: np.ndarray, dev: np.ndarray,
                sl: slice, size: float = 1.0) -> None:
    """Switch cause ``cause`` on over the time slice ``sl`` (in place), at fraction ``size``.

    A bound moves ``size`` of the way from its default to the event value; a
    forecast gets ``size * event`` added to ``dev``.
    """
    c = plant.causes[cause]
    if c.kind == "upper":
        target = plant.x_upper[c.index] + size * (c.event - plant.x_upper[c.index])
        hi[sl, c.index] = np.minimum(hi[sl, c.index], target)
    elif c.kind == "lower":
        target = plant.x_lower[c.index] + size * (c.event - plant.x_lower[c.index])
        lo[sl, c.index] = np.maximum(lo[sl, c.index], target)
    elif c.kind == "forecast":
        dev[sl, c.index] += size * c.event
    else:  # pragma: no cover - Cause kinds are fixed
        raise ValueError(f"unknown cause kind {c.kind!r}")


def make_schedule(plant: Plant, n_days: int, events_per_day: int, horizon: int,
                  rng: np.random.Generator, forecast_noise: float = 0.05,
                  distractor: float = 0.5) -> Schedule:
    """Design a balanced scenario: ``n_days`` days, ``events_per_day`` events each.

    Event causes cycle through a fresh random permutation of the plant's causes,
    so every cause appears equally often (up to one cycle). Each event lasts 3-4
    steps; the explained move is 1-3 steps before its onset, when the event is
    already inside the MPC horizon. With ``distractor > 0`` a second, weaker
    event (a different cause, at fraction ``distractor`` of its size, starting
    within 2 steps of the main one) overlaps each event, so that more than one
    cause is active when the move is made. Forecasts equal the actual
    disturbance plus AR(1) noise of relative size ``forecast_noise``.
    """
    if not 0.0 <= distractor < 1.0:
        raise ValueError(f"distractor must be in [0, 1) (a fraction of the main event), got {distractor}")
    if n_days < 1 or events_per_day < 1:
        raise ValueError(f"need n_days >= 1 and events_per_day >= 1, got {n_days}, {events_per_day}")
    gap = STEPS_PER_DAY // events_per_day
    if gap < horizon + 6:
        raise ValueError(f"{events_per_day} events a day leave {gap} steps between events; "
                         f"need at least horizon + 6 = {horizon + 6}")
    n_steps = n_days * STEPS_PER_DAY
    total = n_steps + horizon + 1
    t = np.arange(total)
    d_nom = plant.nominal(t)
    lo = np.tile(plant.x_lower, (total, 1)).astype(float)
    hi = np.tile(plant.x_upper, (total, 1)).astype(float)
    dev = np.zeros_like(d_nom)
    n_events = n_days * events_per_day
    order: list[int] = []
    while len(order) < n_events:
        order.extend(rng.permutation(len(plant.causes)).tolist())
    events = []
    for e in range(n_events):
        start = e * gap + gap // 2
        onset = int(start + rng.integers(0, gap // 4))
        length = int(rng.integers(3, 5))
        lead = int(rng.integers(1, 4))
        cause = order[e]
        apply_event(plant, cause, lo, hi, dev, slice(onset, onset + length))
        other = int(rng.choice([c for c in range(len(plant.causes)) if c != cause]))
        d_on = onset + int(rng.integers(-2, 3))
        if distractor > 0:
            apply_event(plant, other, lo, hi, dev, slice(d_on, d_on + length), size=distractor)
        events.append(Event(cause=cause, onset=onset, length=length,
                            t_explain=onset - lead, day=onset // STEPS_PER_DAY,
                            distractor=other if distractor > 0 else -1))
    scale = plant.forecast_scale if plant.forecast_scale is not None else np.abs(d_nom).mean(axis=0) + 1e-9
    noise = np.zeros_like(d_nom)
    for k in range(1, total):
        noise[k] = 0.8 * noise[k - 1] + rng.normal(0.0, forecast_noise * 0.6, plant.n_d) * scale
    d_actual = d_nom + dev
    if plant.name == "greenhouse":
        d_actual[:, 0] = np.clip(d_actual[:, 0], 0.0, None)
    d_forecast = d_actual + noise
    if plant.name == "greenhouse":
        d_forecast[:, 0] = np.clip(d_forecast[:, 0], 0.0, None)
    return Schedule(d_nominal=d_nom, d_forecast=d_forecast, d_actual=d_actual,
                    x_lower=lo, x_upper=hi, events=events, n_steps=n_steps)
