"""Simulated voters with planted, category-dependent preferences over workbook features.

A voter comparing workbook A (from generator m_A) with workbook B (m_B) on a
prompt of category c sees utilities

    u = theta_m + gamma_c . x(workbook),

where ``x`` are features *extracted from the files* (:data:`VOTER_FEATURES`),
``theta_m`` is a planted latent quality of the generator that no feature
measures, and ``gamma_c`` is the category's planted taste. The vote follows the
Rao-Kupper tie model with threshold ``tau`` on d = u_A - u_B:

    P(A) = sigmoid(d - tau),  P(B) = sigmoid(-d - tau),  P(tie) = 1 - P(A) - P(B).

Before that, the pair is called "both bad" with probability
``base_both_bad + both_bad_if_errors * [A and B both show errors]``, a gate that
depends on the features only, so dropping both-bad votes leaves the Rao-Kupper
likelihood of the rest unbiased.

A :class:`Crowd` is the *misspecified* arm [reconstruction of a realistic arena, not
in the paper]: ``n_voters`` voters cast the votes between them, and each voter adds
a private taste ``o_v[m] ~ N(0, spread^2)`` to every generator's utility. Bradley-Terry
then treats clustered votes as independent and ignores the voters' disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from minirepro.core import progress
from minirepro.papers.spreadsheet_arena.features import DEFAULT_LIMITS, Limits, safe_features
from minirepro.papers.spreadsheet_arena.generators import WorkbookGenerator
from minirepro.papers.spreadsheet_arena.prompts import CATEGORIES, Prompt

VOTER_FEATURES: tuple[str, ...] = ("formula_share", "style_score", "has_chart", "has_cond_format",
                                   "has_error")
OUTCOMES: tuple[str, ...] = ("model_a", "model_b", "tie", "both_bad")


def voter_features(f: dict[str, float]) -> np.ndarray:
    """The (F,) vector a voter reacts to, from an :func:`extract_features` dict, each in [0, 1]."""
    return np.array([f["formula_share"], f["style_score"], float(f["n_charts"] > 0),
                     float(f["n_cond_formats"] > 0), float(f["n_errors"] > 0)])


@dataclass(frozen=True)
class VoterModel:
    """Planted voter preferences: ``theta[generator]`` and ``gamma[category]`` (F,), logit units."""

    theta: dict[str, float]
    gamma: dict[str, np.ndarray] = field(hash=False)
    tau: float = 0.4
    base_both_bad: float = 0.03
    both_bad_if_errors: float = 0.5

    def __post_init__(self) -> None:
        if self.tau < 0 or not 0 <= self.base_both_bad <= 1 or not 0 <= self.both_bad_if_errors <= 1 \
                or self.base_both_bad + self.both_bad_if_errors > 1:
            raise ValueError("need tau >= 0 and both-bad probabilities in [0, 1] summing to <= 1")
        for c, g in self.gamma.items():
            if np.shape(g) != (len(VOTER_FEATURES),):
                raise ValueError(f"gamma[{c!r}] must have shape ({len(VOTER_FEATURES)},), got {np.shape(g)}")

    def gamma_matrix(self, categories: tuple[str, ...] = CATEGORIES) -> np.ndarray:
        """Planted coefficients as a (C, F) array in ``categories`` order."""
        return np.stack([np.asarray(self.gamma[c], float) for c in categories])


def default_voters() -> VoterModel:
    """The planted preferences of this chapter (fixed before any experiment was run).

    Looks (``style_score``) matter in every category, more than formulas except in
    finance; charts matter most for budgets, conditional formats for trackers;
    visible errors always hurt. The latent qualities are small next to the features.
    """
    gamma = {"finance": np.array([1.0, 1.2, 0.4, 0.0, -1.5]),
             "budget": np.array([0.3, 1.0, 1.2, 0.5, -1.0]),
             "tracker": np.array([0.0, 0.8, 0.3, 1.5, -0.8]),
             "table": np.array([0.2, 1.5, 0.0, 0.4, -1.0])}
    theta = {"gen-formulaic": 0.3, "gen-stylish": 0.0, "gen-balanced": 0.2, "gen-minimal": 0.0,
             "gen-analyst": 0.4, "gen-sloppy": -0.2}
    return VoterModel(theta, gamma)


@dataclass(frozen=True)
class Crowd:
    """Repeat voters with private tastes: the misspecified arm (see the module docstring).

    ``n_voters`` share the votes equally (up to one); voter ``v``'s utility for a
    workbook of generator ``m`` is the planted one plus ``o_v[m] ~ N(0, spread^2)``
    (logit units), drawn once per voter.
    """

    n_voters: int
    spread: float

    def __post_init__(self) -> None:
        if self.n_voters < 1 or not (self.spread >= 0 and np.isfinite(self.spread)):
            raise ValueError(f"need n_voters >= 1 and a finite spread >= 0, got {self.n_voters}, "
                             f"{self.spread}")


@dataclass(frozen=True)
class Misspec:
    """[reconstruction] Voters who break Bradley-Terry's assumptions (issue 26), one arm each.

    ``position_bias``: logits added to the left-hand workbook (``model_a``) in every vote.
    ``minority`` and ``minority_share``: that share of the votes comes from a second voter
    type with its own preferences. ``cycle``: logits by which generator ``k`` (in pool order)
    beats generator ``k + 1`` (mod K) beyond their utilities, a cycle no rating can express.
    """

    position_bias: float = 0.0
    minority: VoterModel | None = None
    minority_share: float = 0.0
    cycle: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.minority_share <= 1 or (self.minority_share > 0 and self.minority is None):
            raise ValueError("minority_share must be in [0, 1], and > 0 only with a minority type")
        if not (np.isfinite(self.position_bias) and np.isfinite(self.cycle)):
            raise ValueError("position_bias and cycle must be finite")


def cycle_matrix(k: int) -> np.ndarray:
    """(K, K) antisymmetric: +1 where column = row + 1 (mod K), -1 where row = column + 1."""
    C = np.zeros((k, k))
    i = np.arange(k)
    C[i, (i + 1) % k] += 1.0
    C[(i + 1) % k, i] -= 1.0
    return C


def _misspecify(d: np.ndarray, pool: Pool, spec: Misspec, p: np.ndarray, a: np.ndarray,
                b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The utility gaps ``d`` (n,) of the battles (p, a, b) as the misspecified voters see them."""
    if spec.minority is not None and spec.minority_share > 0:
        u2 = _utilities(pool, spec.minority)
        d = np.where(rng.random(len(d)) < spec.minority_share, u2[p, a] - u2[p, b], d)
    return d + spec.position_bias + spec.cycle * cycle_matrix(len(pool.generators))[a, b]


def outcome_probs(d: np.ndarray, tau: float) -> np.ndarray:
    """Rao-Kupper ``[P(A), P(B), P(tie)]`` for utility gaps ``d``: shape ``d.shape + (3,)``."""
    d = np.asarray(d, float)
    pa = 1.0 / (1.0 + np.exp(-(d - tau)))
    pb = 1.0 / (1.0 + np.exp(d + tau))
    return np.stack([pa, pb, np.clip(1.0 - pa - pb, 0.0, 1.0)], axis=-1)


@dataclass
class Pool:
    """Every generator's workbook for every prompt, with extracted voter features.

    ``X[p, k]`` is the (F,) feature vector of generator ``k``'s workbook for prompt ``p``;
    ``ok[p, k]`` is False where the workbook failed extraction (it never enters a battle).
    """

    prompts: list[Prompt]
    generators: list[str]
    X: np.ndarray
    ok: np.ndarray
    features: list[list[dict | None]]
    failures: list[str]
    data: dict[tuple[int, int], bytes]


def build_pool(prompts: list[Prompt], generators: list[WorkbookGenerator], seed: int = 0,
               limits: Limits = DEFAULT_LIMITS, keep_bytes: bool = False) -> Pool:
    """Generate and featurise ``len(prompts) x len(generators)`` workbooks (a failed file is skipped)."""
    if not prompts or not generators:
        raise ValueError("build_pool needs at least one prompt and one generator")
    n, k = len(prompts), len(generators)
    X = np.zeros((n, k, len(VOTER_FEATURES)))
    ok = np.zeros((n, k), bool)
    feats: list[list[dict | None]] = [[None] * k for _ in range(n)]
    failures, data = [], {}
    for p in progress(range(n), desc="workbooks"):
        for j, g in enumerate(generators):
            try:
                blob = g.generate(prompts[p], seed)
            except Exception as exc:  # noqa: BLE001 - a plugged-in model may fail in any way
                failures.append(f"{g.name} on {prompts[p].id}: generation failed ({exc})")
                continue
            f, why = safe_features(blob, limits)
            if f is None:
                failures.append(f"{g.name} on {prompts[p].id}: {why}")
                continue
            feats[p][j], X[p, j], ok[p, j] = f, voter_features(f), True
            if keep_bytes:
                data[(p, j)] = blob
    return Pool(list(prompts), [g.name for g in generators], X, ok, feats, failures, data)


def _utilities(pool: Pool, voters: VoterModel) -> np.ndarray:
    theta = np.array([voters.theta.get(g, 0.0) for g in pool.generators])
    G = np.stack([voters.gamma[p.category] for p in pool.prompts])  # (P, F)
    return theta[None, :] + np.einsum("pkf,pf->pk", pool.X, G)


def _both_bad_prob(pool: Pool, voters: VoterModel) -> np.ndarray:
    err = pool.X[..., VOTER_FEATURES.index("has_error")]  # (P, K)
    return voters.base_both_bad + voters.both_bad_if_errors * err[:, :, None] * err[:, None, :]


def simulate_battles(pool: Pool, voters: VoterModel, n_battles: int,
                     rng: np.random.Generator, crowd: Crowd | None = None,
                     misspec: Misspec | None = None) -> pd.DataFrame:
    """``n_battles`` votes: a uniform prompt, a uniform pair of distinct generators, random sides.

    With ``crowd``, the votes are split among ``crowd.n_voters`` voters, each with a
    private taste per generator (the misspecified arm), and a ``voter`` column is added.
    With ``misspec``, the voters also have a position bias, a second type or a cycle
    (:class:`Misspec`); without it the random stream is the same as before it existed.

    Returns:
        A frame with columns ``prompt_id, category, model_a, model_b, winner`` (``winner`` in
        :data:`OUTCOMES`), the format ``minirepro arena export`` writes.
    """
    if n_battles < 1:
        raise ValueError(f"n_battles must be positive, got {n_battles}")
    valid = [(p, i, j) for p in range(len(pool.prompts)) for i in range(len(pool.generators))
             for j in range(len(pool.generators)) if i != j and pool.ok[p, i] and pool.ok[p, j]]
    if not valid:
        raise ValueError("no prompt has two valid workbooks: nothing to battle")
    pick = np.asarray(valid)[rng.integers(len(valid), size=n_battles)]
    p, a, b = pick[:, 0], pick[:, 1], pick[:, 2]
    u = _utilities(pool, voters)
    d = u[p, a] - u[p, b]
    if crowd is not None:
        taste = crowd.spread * rng.standard_normal((crowd.n_voters, len(pool.generators)))
        voter = rng.permutation(n_battles) % crowd.n_voters
        d = d + taste[voter, a] - taste[voter, b]
    if misspec is not None:
        d = _misspecify(d, pool, misspec, p, a, b, rng)
    probs = outcome_probs(d, voters.tau)
    bb = _both_bad_prob(pool, voters)[p, a, b]
    r = rng.random(n_battles)
    out = np.where(r < probs[:, 0], 0, np.where(r < probs[:, 0] + probs[:, 1], 1, 2))
    out = np.where(rng.random(n_battles) < bb, 3, out)
    names = np.asarray(pool.generators)
    df = pd.DataFrame({"prompt_id": [pool.prompts[i].id for i in p],
                       "category": [pool.prompts[i].category for i in p],
                       "model_a": names[a], "model_b": names[b],
                       "winner": np.asarray(OUTCOMES)[out]})
    if crowd is not None:
        df["voter"] = voter
    return df


def expected_scores(pool: Pool, voters: VoterModel, categories: tuple[str, ...] | None = None,
                    spread: float = 0.0, nodes: int = 40) -> np.ndarray:
    """Exact expected win matrix of the battle process: ``S[i, j]`` = E[score of i vs j] per battle.

    Ties and both-bad count half (the convention of :func:`ratings.win_matrix`); the
    average is over prompts (restricted to ``categories`` if given) where both are valid.
    With ``spread`` > 0 it is the expectation over the whole population of crowd voters
    (:class:`Crowd`): the taste gap ``o[i] - o[j] ~ N(0, 2 spread^2)`` is integrated out
    by Gauss-Hermite quadrature with ``nodes`` points.
    """
    keep = np.array([categories is None or q.category in categories for q in pool.prompts])
    u = _utilities(pool, voters)
    d = u[:, :, None] - u[:, None, :]
    if spread > 0:
        z, w = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-z^2 / 2)
        w = w / w.sum()
        gap = np.sqrt(2.0) * spread * z
        pr = np.tensordot(w, outcome_probs(d[None] + gap[:, None, None, None], voters.tau), axes=1)
    else:
        pr = outcome_probs(d, voters.tau)  # (P, K, K, 3)
    bb = _both_bad_prob(pool, voters)
    s = (1 - bb) * (pr[..., 0] + 0.5 * pr[..., 2]) + 0.5 * bb
    valid = (pool.ok[:, :, None] & pool.ok[:, None, :]) & keep[:, None, None]
    return (s * valid).sum(0) / np.maximum(valid.sum(0), 1)
