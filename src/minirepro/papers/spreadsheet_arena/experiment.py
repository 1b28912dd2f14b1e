"""The chapter's experiments, one function per step: pool, votes, ratings, coverage, style, expert."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy.stats import chi2, kendalltau

from minirepro.core import ScaledConfig, progress, set_seed
from minirepro.core.stats import seed_summary
from minirepro.papers.spreadsheet_arena import ratings as R
from minirepro.papers.spreadsheet_arena.expert import expert_score, expert_table, pairwise_agreement
from minirepro.papers.spreadsheet_arena.generators import default_generators
from minirepro.papers.spreadsheet_arena.prompts import CATEGORIES, make_prompts
from minirepro.papers.spreadsheet_arena.voters import (
    VOTER_FEATURES,
    Crowd,
    Misspec,
    Pool,
    VoterModel,
    build_pool,
    expected_scores,
    simulate_battles,
)

ANCHOR = "gen-minimal"


STREAMS = {"coverage": 1, "crowd coverage": 2, "widths": 3, "misspecified": 5}


def seeded(seed: int, stream: int = 0) -> np.random.Generator:
    """``core.set_seed`` without torch (this chapter uses none): seeds Python and NumPy and
    returns ``np.random.default_rng(seed)``, the generator every draw here uses. With
    ``stream`` > 0 (see :data:`STREAMS`), the generator of ``SeedSequence([seed, stream])``: one
    independent stream per use of a seed. Offsets added to the seed (seed + 1000 for the
    coverage arenas) made one base seed's stream another's arena: the replications, whose base
    seeds are 1000 apart, drew the same battles twice."""
    rng = set_seed(seed, seed_torch=False)
    return rng if stream == 0 else np.random.default_rng([seed, stream])


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature: prompts per category, votes, bootstrap draws, repeats, the crowd."""

    n_seeds: int = 5  # simulated arenas (independent vote sets) for the headline numbers
    n_per_category: int = 10
    n_battles: int = 8000
    n_boot: int = 300
    n_reps: int = 50
    n_orders: int = 20
    k_factor: float = 16.0
    n_misspec: int = 40  # arenas per misspecified-voter arm (cheap: enough for the coverage test's power)
    n_voters: int = 40  # misspecified arm: voters sharing an arena's votes
    voter_spread: float = 0.5  # misspecified arm: s.d. of a voter's private taste per generator (logits)
    position_bias: float = 0.5  # misspecified voters: logits for the left-hand workbook
    minority_share: float = 0.3  # misspecified voters: share of votes from style-blind voters
    cycle: float = 0.5  # misspecified voters: logits of the intransitive cycle
    votes_csv: str | None = None  # a `minirepro arena export` CSV of real votes to analyse

    @property
    def misspec_seeds(self) -> list[int]:
        """The misspecified arms' arenas: ``seed .. seed + n_misspec - 1`` (each on its own stream)."""
        return list(range(self.seed, self.seed + self.n_misspec))
    PRESETS: ClassVar = {
        "smoke": {"n_seeds": 3, "n_per_category": 2, "n_battles": 2000, "n_boot": 100, "n_reps": 20,
                  "n_orders": 10, "n_voters": 10, "n_misspec": 5},
        "book": {},
        "full": {"n_per_category": 100, "n_battles": 40000, "n_boot": 1000, "n_reps": 200,
                 "n_orders": 50, "n_misspec": 100},
    }

    @property
    def crowd(self) -> Crowd:
        """The misspecified arm's crowd of repeat voters."""
        return Crowd(self.n_voters, self.voter_spread)


def make_pool(cfg: Config, seed: int) -> Pool:
    """Every stand-in generator's workbook for every prompt, featurised (bytes kept for rendering)."""
    return build_pool(make_prompts(cfg.n_per_category, seed), default_generators(), seed,
                      keep_bytes=True)


def true_ratings(pool: Pool, voters: VoterModel, categories: tuple[str, ...] | None = None,
                 spread: float = 0.0) -> np.ndarray:
    """The estimand: BT Elo ratings of the exact expected win matrix (what infinite votes give).

    ``spread`` > 0: the expectation over the whole population of crowd voters, i.e. what
    infinitely many voters (each casting few votes) would give.
    """
    S = expected_scores(pool, voters, categories, spread)
    a = pool.generators.index(ANCHOR)
    return R.to_elo(R.fit_bt(S, a), a)


def coverage(pool: Pool, voters: VoterModel, cfg: Config, rng: np.random.Generator,
             level: float = 0.95, crowd: Crowd | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Coverage of percentile bootstrap intervals over ``cfg.n_reps`` fresh arenas.

    With ``crowd``, the arenas are voted by a fresh crowd each and the truth is the
    whole voter population's rating (the misspecified arm).

    Returns:
        ``(hits, taus)``: hits (n_reps, K) booleans (the anchor is always covered and is
        excluded by the caller), taus (n_reps,) Kendall tau of fitted vs true ratings.
    """
    truth = true_ratings(pool, voters, spread=crowd.spread if crowd else 0.0)
    a = pool.generators.index(ANCHOR)
    hits, taus = [], []
    for _ in progress(range(cfg.n_reps), desc="coverage" + (" (crowd)" if crowd else "")):
        df = simulate_battles(pool, voters, cfg.n_battles, rng, crowd)
        boot = R.bootstrap_bt(df, pool.generators, cfg.n_boot, rng, a)
        lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2], axis=0)
        hits.append((lo <= truth) & (truth <= hi))
        fit = R.to_elo(R.fit_bt(R.win_matrix(df, pool.generators), a), a)
        taus.append(kendalltau(fit, truth).statistic)
    return np.array(hits), np.array(taus)


def coverage_per_arena(hits: np.ndarray, generators: list[str]) -> np.ndarray:
    """Per fresh arena, the share of non-anchor generators whose interval covers the truth: (n_reps,)."""
    return np.delete(np.asarray(hits, float), generators.index(ANCHOR), axis=1).mean(axis=1)


def interval_widths(runs: list[SeedRun], generators: list[str], n_boot: int,
                    level: float = 0.95) -> pd.DataFrame:
    """95% interval widths (Elo points) of the battle and the prompt-clustered bootstrap.

    Per arena, both bootstraps of its votes (the arena seed's "widths" stream); one row per
    non-anchor generator with the mean width over arenas and the ratio prompt / battle.
    """
    a = generators.index(ANCHOR)
    q = [(1 - level) / 2, (1 + level) / 2]
    rows = []
    for run in runs:
        rng = seeded(run.seed, STREAMS["widths"])
        for kind, fn in (("battle", R.bootstrap_bt), ("prompt", R.bootstrap_bt_clustered)):
            lo, hi = np.quantile(fn(run.votes, generators, n_boot, rng, a), q, axis=0)
            rows += [{"model": m, "seed": run.seed, "kind": kind, "width": hi[k] - lo[k]}
                     for k, m in enumerate(generators) if k != a]
    wide = pd.DataFrame(rows).pivot_table(index="model", columns="kind", values="width",
                                          aggfunc="mean")
    out = wide.rename(columns={"battle": "battle bootstrap", "prompt": "prompt bootstrap"})
    out["ratio"] = out["prompt bootstrap"] / out["battle bootstrap"]
    return out.sort_values("ratio")


def crowd_board(pool: Pool, voters: VoterModel, cfg: Config, seed: int) -> pd.DataFrame:
    """One arena voted by a crowd of repeat voters (``cfg.crowd``): the BT leaderboard frame."""
    rng = seeded(seed)
    votes = simulate_battles(pool, voters, cfg.n_battles, rng, cfg.crowd)
    return R.leaderboard(votes, pool.generators, cfg.n_boot, rng, anchor=ANCHOR).frame()


def order_dependence(df: pd.DataFrame, models: list[str], n_orders: int, k_factor: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Final online-Elo ratings under ``n_orders`` random orders of the same votes: (n_orders, K)."""
    return np.stack([R.online_elo(df, models, k_factor, rng.permutation(len(df)))[-1]
                     for _ in range(n_orders)])


def battle_features(pool: Pool, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Voter features of each vote's two workbooks: two (n, F) arrays."""
    pid = {p.id: i for i, p in enumerate(pool.prompts)}
    gid = {g: i for i, g in enumerate(pool.generators)}
    p = df["prompt_id"].map(pid).to_numpy()
    return (pool.X[p, df["model_a"].map(gid).to_numpy()], pool.X[p, df["model_b"].map(gid).to_numpy()])


@dataclass
class StyleResult:
    """Per-category style-controlled fits and the test that the categories share one gamma."""

    fits: dict[str, R.StyleFit]
    gamma: np.ndarray  # (C, F) fitted
    se: np.ndarray  # (C, F)
    planted: np.ndarray  # (C, F)
    lr_stat: float
    lr_df: int
    lr_p: float

    def frame(self) -> pd.DataFrame:
        rows = [{"category": c, "feature": f, "planted": self.planted[i, j], "fitted": self.gamma[i, j],
                 "se": self.se[i, j]} for i, c in enumerate(self.fits) for j, f in enumerate(VOTER_FEATURES)]
        return pd.DataFrame(rows)


def style_control(pool: Pool, df: pd.DataFrame, voters: VoterModel,
                  categories: tuple[str, ...] = CATEGORIES) -> StyleResult:
    """Feature-controlled Rao-Kupper per category, and a likelihood-ratio test of equal gamma.

    The restricted model keeps per-category strengths (one anchor per category) and
    shares gamma and the tie parameter tau across categories; LR = 2 (sum of per-category
    log-lik - restricted log-lik), chi-square with (C - 1)(F + 1) degrees of freedom: the
    per-category fits' free parameters minus the restricted fit's (counted from the fits).
    """
    fa, fb = battle_features(pool, df)
    a = pool.generators.index(ANCHOR)
    fits = {}
    for c in categories:
        m = (df["category"] == c).to_numpy()
        fits[c] = R.fit_style_control(df[m], fa[m], fb[m], pool.generators, anchor=a)
    k = len(pool.generators)
    joint = df.assign(model_a=df["category"] + ":" + df["model_a"],
                      model_b=df["category"] + ":" + df["model_b"])
    names = [f"{c}:{g}" for c in categories for g in pool.generators]
    keep = joint["category"].isin(categories).to_numpy()
    restricted = R.fit_style_control(joint[keep], fa[keep], fb[keep], names,
                                     anchor=[i * k + a for i in range(len(categories))])
    lr = 2.0 * (sum(f.loglik for f in fits.values()) - restricted.loglik)
    dof = sum(f.n_params for f in fits.values()) - restricted.n_params
    return StyleResult(fits, np.stack([fits[c].gamma for c in categories]),
                       np.stack([fits[c].gamma_se for c in categories]),
                       voters.gamma_matrix(categories), float(lr), dof, float(chi2.sf(lr, dof)))


STYLE_FEATURES = ("style_score", "has_chart", "has_cond_format")  # looks; the rest is substance


def style_free_voters(voters: VoterModel, style: tuple[str, ...] = STYLE_FEATURES) -> VoterModel:
    """The planted voters with their weights on ``style`` features set to 0: what the votes
    would say if only latent quality and substance (formulas, errors) counted."""
    idx = [VOTER_FEATURES.index(f) for f in style]
    gamma = {c: np.where(np.isin(np.arange(len(VOTER_FEATURES)), idx), 0.0, g)
             for c, g in voters.gamma.items()}
    return VoterModel(voters.theta, gamma, voters.tau, voters.base_both_bad,
                      voters.both_bad_if_errors)


def style_controlled_ratings(pool: Pool, votes: pd.DataFrame,
                             style: tuple[str, ...] = STYLE_FEATURES) -> np.ndarray:
    """Eq. (spreadsheetarena-eq-style) pooled over categories, on the ``style`` features only:
    the strengths b on the Elo scale (anchor ``ANCHOR`` at 1000), shape (K,)."""
    fa, fb = battle_features(pool, votes)
    idx = [VOTER_FEATURES.index(f) for f in style]
    a = pool.generators.index(ANCHOR)
    fit = R.fit_style_control(votes, fa[:, idx], fb[:, idx], pool.generators, anchor=a)
    return R.to_elo(fit.b, a)


def _ranks(x: pd.Series) -> pd.Series:
    return x.rank(ascending=False, method="min").astype(int)


def style_board(pool: Pool, voters: VoterModel, runs: list[SeedRun]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The style-controlled leaderboard beside the plain one, and their agreement with the truth.

    Returns:
        ``(board, taus)``: board, one row per generator, of mean plain and style-controlled
        ratings over the arenas, their ranks, the rank change (plain rank - controlled rank;
        positive = moves up) and the rank under the style-free truth; taus, one row per
        arena, Kendall tau of each leaderboard with the style-free truth and the number of
        generators whose rank changes.
    """
    free = pd.Series(true_ratings(pool, style_free_voters(voters)), index=pool.generators)
    plain, ctrl, rows = [], [], []
    for run in runs:
        p = run.board.set_index("model")["rating"].reindex(pool.generators)
        c = pd.Series(style_controlled_ratings(pool, run.votes), index=pool.generators)
        plain.append(p)
        ctrl.append(c)
        rows.append({"seed": run.seed, "tau plain": kendalltau(p, free).statistic,
                     "tau style-controlled": kendalltau(c, free).statistic,
                     "rank changes": int((_ranks(p) != _ranks(c)).sum())})
    p, c = pd.concat(plain, axis=1).mean(axis=1), pd.concat(ctrl, axis=1).mean(axis=1)
    board = pd.DataFrame({"plain rating": p, "plain rank": _ranks(p), "style-controlled rating": c,
                          "style-controlled rank": _ranks(c)})
    board["rank change"] = board["plain rank"] - board["style-controlled rank"]
    board["style-free truth rank"] = _ranks(free)
    return board.sort_values("style-controlled rank"), pd.DataFrame(rows).set_index("seed")


def misspecified_arms(cfg: Config, voters: VoterModel) -> dict[str, Misspec]:
    """[reconstruction] The three misspecified-voter arms of ``cfg`` (one violation each)."""
    return {"position bias": Misspec(position_bias=cfg.position_bias),
            "two voter types": Misspec(minority=style_free_voters(voters),
                                       minority_share=cfg.minority_share),
            "intransitive": Misspec(cycle=cfg.cycle)}


def misspecified_recovery(pool: Pool, voters: VoterModel, cfg: Config, seeds: list[int],
                          truth: dict[str, float]) -> pd.DataFrame:
    """Each misspecified arm, one arena per seed (the seed's "misspecified" stream + the arm's index):
    Kendall tau of the BT leaderboard with the planted voters' ``truth`` and the share of
    non-anchor generators whose 95% battle-bootstrap interval covers it. Long frame."""
    rows = []
    gens = [m for m in pool.generators if m != ANCHOR]
    for i, (arm, spec) in enumerate(misspecified_arms(cfg, voters).items()):
        for s in progress(seeds, desc=arm):
            rng = seeded(s, STREAMS["misspecified"] + i)
            votes = simulate_battles(pool, voters, cfg.n_battles, rng, misspec=spec)
            board = R.leaderboard(votes, pool.generators, cfg.n_boot, rng, anchor=ANCHOR).frame()
            b = board.set_index("model")
            cover = np.mean([b.loc[m, "lower"] <= truth[m] <= b.loc[m, "upper"] for m in gens])
            rows.append({"arm": arm, "seed": s, "tau": ranking_tau(board, truth), "coverage": cover})
    return pd.DataFrame(rows)


@dataclass
class ExpertResult:
    """Finance: arena ratings, the expert table, their rank agreement, and vote-level agreement."""

    table: pd.DataFrame  # one row per generator: rating, expert_score, best_practice, checks
    top_model: str
    top_best_practice: float
    tau: float
    pair_agreement: float


def expert_comparison(pool: Pool, df: pd.DataFrame, category: str = "finance") -> ExpertResult:
    """Arena (BT on ``category`` votes) against the best-practice checker on the same workbooks."""
    cats = [p.category for p in pool.prompts]
    tab = expert_table(pool.features, pool.generators, cats, category)
    sub = df[df["category"] == category]
    a = pool.generators.index(ANCHOR)
    rating = R.to_elo(R.fit_bt(R.win_matrix(sub, pool.generators), a), a)
    tab.insert(1, "arena_rating", [rating[pool.generators.index(m)] for m in tab["model"]])
    tab = tab.sort_values("arena_rating", ascending=False, ignore_index=True)
    pid = {p.id: i for i, p in enumerate(pool.prompts)}
    gid = {g: i for i, g in enumerate(pool.generators)}
    dec = sub[sub["winner"].isin(["model_a", "model_b"])]
    score = {}

    def s(p, g):
        key = (pid[p], gid[g])
        if key not in score:
            score[key] = expert_score(pool.features[key[0]][key[1]])
        return score[key]

    win_a = dec["winner"] == "model_a"
    w = [s(p, ma if wa else mb) for p, ma, mb, wa in zip(dec["prompt_id"], dec["model_a"],
                                                         dec["model_b"], win_a)]
    l_ = [s(p, mb if wa else ma) for p, ma, mb, wa in zip(dec["prompt_id"], dec["model_a"],
                                                          dec["model_b"], win_a)]
    tau = float(kendalltau(tab["arena_rating"], tab["expert_score"]).statistic)
    return ExpertResult(tab, str(tab["model"][0]), float(tab["best_practice"][0]), tau,
                        pairwise_agreement(np.array(w), np.array(l_)))


@dataclass
class SeedRun:
    """Everything one seed's arena gives: votes, leaderboard, online Elo spread, style, expert."""

    seed: int
    votes: pd.DataFrame
    board: pd.DataFrame
    orders: np.ndarray
    style: StyleResult
    expert: ExpertResult


def run_seed(pool: Pool, voters: VoterModel, cfg: Config, seed: int) -> SeedRun:
    """One simulated arena on the fixed pool: votes, BT + bootstrap, online Elo, style, expert."""
    rng = seeded(seed)
    votes = simulate_battles(pool, voters, cfg.n_battles, rng)
    board = R.leaderboard(votes, pool.generators, cfg.n_boot, rng, anchor=ANCHOR).frame()
    orders = order_dependence(votes, pool.generators, cfg.n_orders, cfg.k_factor, rng)
    return SeedRun(seed, votes, board, orders, style_control(pool, votes, voters),
                   expert_comparison(pool, votes))


def run_experiment(cfg: Config, pool: Pool, voters: VoterModel) -> list[SeedRun]:
    """The chapter's experiment: :func:`run_seed`, one independent arena per seed of ``cfg.seeds``."""
    return [run_seed(pool, voters, cfg, s) for s in progress(cfg.seeds, desc="arenas")]


def style_checks(style: StyleResult, big: float = 0.5) -> dict[str, float | bool]:
    """The quantities the style check reads: LR p-value, sign recovery, Wald coverage.

    ``wrong_signs`` counts the planted coefficients with ``|gamma| >= big`` whose fitted
    sign differs; ``signs_ok`` is ``wrong_signs == 0``.
    """
    strong = np.abs(style.planted) >= big
    wrong = int(np.sum(np.sign(style.gamma[strong]) != np.sign(style.planted[strong])))
    cover = float(np.mean(np.abs(style.gamma - style.planted) <= 1.96 * style.se))
    return {"lr_p": style.lr_p, "signs_ok": wrong == 0, "wrong_signs": wrong, "wald_coverage": cover}


SHOWN_FEATURES = ("formula_share", "literal_formula_share", "style_score", "n_charts",
                  "n_cond_formats", "n_sheets", "blue_input_share", "n_errors")


def feature_table(pool: Pool, columns: tuple[str, ...] = SHOWN_FEATURES) -> pd.DataFrame:
    """Mean extracted features per generator over its valid workbooks (rows: generators)."""
    rows = []
    for k, g in enumerate(pool.generators):
        fs = [pool.features[p][k] for p in range(len(pool.prompts)) if pool.features[p][k]]
        rows.append({"model": g, **{c: float(np.mean([f[c] for f in fs])) for c in columns}})
    return pd.DataFrame(rows).set_index("model")


def ranking_tau(board: pd.DataFrame, truth: dict[str, float]) -> float:
    """Kendall tau between a leaderboard's ratings and the true ratings."""
    return float(kendalltau(board["rating"], [truth[m] for m in board["model"]]).statistic)


def rating_table(runs: list[SeedRun], truth: dict[str, float]) -> pd.DataFrame:
    """Per generator: true rating, mean and s.d. over seeds of the fitted rating, mean interval
    width (both via :func:`minirepro.core.stats.seed_summary`), and the online-Elo spread
    (max - min over orders, mean over seeds)."""
    long = pd.DataFrame([{"model": m, "seed": run.seed, "rating": row["rating"],
                          "width": row["upper"] - row["lower"]}
                         for run in runs for m, row in run.board.set_index("model").iterrows()])
    summ = seed_summary(long, "model", ["rating", "width"])
    rows = [{"model": m, "true": truth[m], "fitted (mean)": summ.loc[m, "rating mean"],
             "fitted (sd)": summ.loc[m, "rating std"], "95% interval width": summ.loc[m, "width mean"],
             "online-Elo spread": np.mean([np.ptp(run.orders[:, k]) for run in runs])}
            for k, m in enumerate(truth)]
    return pd.DataFrame(rows).sort_values("true", ascending=False, ignore_index=True)


def mean_style_frame(runs: list[SeedRun]) -> pd.DataFrame:
    """Planted vs fitted gamma averaged over seeds (s.e. averaged too), long format."""
    frames = [run.style.frame().assign(seed=run.seed) for run in runs]
    long = pd.concat(frames, ignore_index=True)
    summ = seed_summary(long, ["category", "feature"], ["fitted", "se"])
    out = frames[0][["category", "feature", "planted"]].copy()
    keys = list(zip(out["category"], out["feature"]))
    out["fitted"] = summ.loc[keys, "fitted mean"].to_numpy()
    out["se"] = summ.loc[keys, "se mean"].to_numpy()
    return out
