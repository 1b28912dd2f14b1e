"""The token-level MDP testbed: a bigram reference policy, a token reward, and pi* by DP.

A response is a sequence of at most ``T`` tokens from ``V`` ordinary tokens plus an
end token ``EOS = V``. The state at step ``t`` is ``s_t = (t, previous token)``; at
``t = 0`` the previous token is the prompt ``x`` (one of the ``V`` tokens). Emitting
``EOS`` ends the response; a response that has not ended after ``T`` tokens is cut.

The reward of a response is the sum of token rewards ``r(t, prev, a)``; it is in
Bradley-Terry logit units: ``P(y1 > y2 | x) = sigmoid(R(y1) - R(y2))``. The KL-regularised
optimum with strength ``beta``,

    pi* = argmax_pi  E_pi[R] - beta KL(pi || pi_ref),

is, token by token, ``beta log pi*(a|s)/pi_ref(a|s) = Q*(s, a) - V*(s)`` with the soft
Bellman recursion (``V*(T, .) = 0``)

    Q*(t, p, a) = r(t, p, a) + [a != EOS] V*(t + 1, a)
    V*(t, p)    = beta log sum_a pi_ref(a | p) exp(Q*(t, p, a) / beta).

Policies here are *tables* ``(T, V, V + 1)``: ``pi[t, p, a]``. The neural policy is
evaluated on sampled prefixes instead (see ``evaluation.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp


@dataclass(frozen=True)
class TokenMDP:
    """A finite-horizon token MDP with deterministic transitions.

    Attributes:
        pi_ref: ``(V, V + 1)`` reference policy ``pi_ref(a | prev)`` (a stationary bigram).
        reward: ``(T, V, V + 1)`` token rewards ``r(t, prev, a)`` in BT logit units.
        prompt_probs: ``(V,)`` distribution of the prompt token ``x``.
        beta: KL-regularisation strength (the same beta the losses use).
    """

    pi_ref: np.ndarray
    reward: np.ndarray
    prompt_probs: np.ndarray
    beta: float

    def __post_init__(self) -> None:
        V = self.pi_ref.shape[0]
        if self.pi_ref.ndim != 2 or self.pi_ref.shape[1] != V + 1:
            raise ValueError(f"pi_ref must have shape (V, V + 1), got {self.pi_ref.shape}")
        if self.reward.ndim != 3 or self.reward.shape[1:] != (V, V + 1):
            raise ValueError(f"reward must have shape (T, {V}, {V + 1}), got {self.reward.shape}")
        if self.prompt_probs.shape != (V,):
            raise ValueError(f"prompt_probs must have shape ({V},), got {self.prompt_probs.shape}")
        if np.any(self.pi_ref <= 0) or not np.allclose(self.pi_ref.sum(1), 1.0):
            raise ValueError("pi_ref rows must be strictly positive and sum to 1")
        if not np.isclose(self.prompt_probs.sum(), 1.0) or np.any(self.prompt_probs < 0):
            raise ValueError("prompt_probs must be a probability vector")
        if not (self.beta > 0):
            raise ValueError(f"beta must be positive, got {self.beta}")

    @property
    def n_tokens(self) -> int:
        """``V``, the number of ordinary tokens."""
        return self.pi_ref.shape[0]

    @property
    def eos(self) -> int:
        """The end token's id, ``V``."""
        return self.pi_ref.shape[0]

    @property
    def horizon(self) -> int:
        """``T``, the maximum response length."""
        return self.reward.shape[0]

    def ref_table(self) -> np.ndarray:
        """The reference policy as a ``(T, V, V + 1)`` table."""
        return np.broadcast_to(self.pi_ref, (self.horizon, *self.pi_ref.shape)).copy()


def make_mdp(n_tokens: int = 6, horizon: int = 6, beta: float = 1.0, reward_scale: float = 0.7,
             eos_prob: float = 0.12, concentration: float = 1.0, seed: int = 0) -> TokenMDP:
    """A random testbed: Dirichlet bigram ``pi_ref``, Gaussian bigram token rewards.

    ``pi_ref(EOS | p)`` is ``eos_prob`` times a per-token factor in [0.5, 1.5], so responses
    have unequal lengths. Rewards ``r(p, a) ~ N(0, reward_scale^2)`` do not depend on ``t``
    (the optimum still does, through the horizon).
    """
    if n_tokens < 2 or horizon < 1:
        raise ValueError(f"need n_tokens >= 2 and horizon >= 1, got {n_tokens}, {horizon}")
    if not 0 < eos_prob < 1:
        raise ValueError(f"eos_prob must be in (0, 1), got {eos_prob}")
    rng = np.random.default_rng(seed)
    V = n_tokens
    body = rng.dirichlet(np.full(V, concentration), size=V)
    body = np.clip(body, 1e-3, None)
    body /= body.sum(1, keepdims=True)
    p_eos = eos_prob * rng.uniform(0.5, 1.5, size=V)
    pi_ref = np.concatenate([body * (1 - p_eos)[:, None], p_eos[:, None]], axis=1)
    r = rng.normal(0.0, reward_scale, size=(V, V + 1))
    reward = np.broadcast_to(r, (horizon, V, V + 1)).copy()
    return TokenMDP(pi_ref=pi_ref, reward=reward, prompt_probs=np.full(V, 1.0 / V), beta=beta)


def soft_bellman(mdp: TokenMDP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eqs. (tbpo-eq-q, tbpo-eq-v, tbpo-eq-ratio): backward DP for the KL-regularised optimum.

    Returns:
        ``Q`` ``(T, V, V + 1)``, ``Vs`` ``(T + 1, V)`` (``Vs[T] = 0``) and ``pi_star``
        ``(T, V, V + 1)`` with ``pi_star = pi_ref exp((Q - V) / beta)``.
    """
    T, V, beta = mdp.horizon, mdp.n_tokens, mdp.beta
    log_ref = np.log(mdp.pi_ref)
    Q = np.zeros((T, V, V + 1))
    Vs = np.zeros((T + 1, V))
    for t in range(T - 1, -1, -1):
        cont = np.concatenate([Vs[t + 1], [0.0]])  # EOS ends: no continuation value
        Q[t] = mdp.reward[t] + cont[None, :]
        Vs[t] = beta * logsumexp(log_ref + Q[t] / beta, axis=1)
    pi_star = np.exp(log_ref[None] + (Q - Vs[:T, :, None]) / beta)
    return Q, Vs, pi_star


def exact_frontier(mdp: TokenMDP, n: int = 80, lo: float = 0.02, hi: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """The exact reward-KL frontier: ``(kl_ref, reward)`` of the optima pi*_b of
    ``E R - b KL(pi || pi_ref)`` for ``n`` log-spaced ``b`` in ``[lo, hi]``, sorted by KL.

    Each pi*_b maximises the reward among all policies with at most its KL to the reference
    (a Lagrangian argument), so no policy lies above this curve. ``(n,)`` arrays, KL in nats.
    """
    if n < 2 or not 0 < lo < hi:
        raise ValueError(f"need n >= 2 and 0 < lo < hi, got {n}, {lo}, {hi}")
    pts = []
    for b in np.geomspace(lo, hi, n):
        _, _, pi_b = soft_bellman(dataclasses.replace(mdp, beta=float(b)))
        m = exact_metrics(mdp, pi_b)
        pts.append((m["kl_ref"], m["reward"]))
    pts.append((0.0, exact_metrics(mdp, mdp.ref_table())["reward"]))
    kl, rew = np.array(sorted(pts)).T
    return kl, rew


def check_policy_table(mdp: TokenMDP, pi: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``pi`` is a ``(T, V, V + 1)`` table of distributions."""
    shape = (mdp.horizon, mdp.n_tokens, mdp.n_tokens + 1)
    if pi.shape != shape:
        raise ValueError(f"policy table must have shape {shape}, got {pi.shape}")
    if np.any(pi < 0) or not np.allclose(pi.sum(-1), 1.0):
        raise ValueError("policy table rows must be probability vectors")


def state_distribution(mdp: TokenMDP, pi: np.ndarray) -> np.ndarray:
    """``d[t, p]``: probability that the response is still running at step ``t`` with
    previous token ``p`` (``(T, V)``; rows sum to the probability of not having ended)."""
    check_policy_table(mdp, pi)
    T, V = mdp.horizon, mdp.n_tokens
    d = np.zeros((T, V))
    d[0] = mdp.prompt_probs
    for t in range(T - 1):
        d[t + 1] = d[t] @ pi[t, :, :V]
    return d


def exact_metrics(mdp: TokenMDP, pi: np.ndarray, target: np.ndarray | None = None) -> dict[str, float]:
    """Exact expectations for a table policy.

    Returns ``reward`` (E_pi R), ``kl_ref`` (sequence KL(pi || pi_ref)), ``entropy``
    (sequence entropy, nats), ``objective`` (reward - beta kl_ref), ``mean_length`` and,
    if ``target`` (a table, e.g. pi*) is given, ``state_kl``: E_{s ~ d_target} KL(pi(.|s) ||
    target(.|s)) averaged over the states visited by ``target`` (weights d_target / sum).
    """
    d = state_distribution(mdp, pi)
    logp = np.log(np.clip(pi, 1e-300, None))
    log_ref = np.log(mdp.pi_ref)[None]
    reward = float(np.sum(d[..., None] * pi * mdp.reward))
    kl_ref = float(np.sum(d[..., None] * pi * (logp - log_ref)))
    entropy = float(-np.sum(d[..., None] * pi * logp))
    out = {"reward": reward, "kl_ref": kl_ref, "entropy": entropy,
           "objective": reward - mdp.beta * kl_ref, "mean_length": float(d.sum())}
    if target is not None:
        check_policy_table(mdp, target)
        dt = state_distribution(mdp, target)
        kl_s = np.sum(pi * (logp - np.log(np.clip(target, 1e-300, None))), axis=-1)
        out["state_kl"] = float(np.sum(dt * kl_s) / dt.sum())
    return out


def sample_responses(mdp: TokenMDP, pi: np.ndarray, n: int, rng: np.random.Generator,
                     prompts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``n`` responses from a table policy.

    Returns ``prompts`` ``(n,)``, ``tokens`` ``(n, T)`` (padded with EOS after the end)
    and ``lengths`` ``(n,)`` (number of emitted tokens, counting the EOS if any).
    """
    check_policy_table(mdp, pi)
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    T, V = mdp.horizon, mdp.n_tokens
    if prompts is None:
        prompts = rng.choice(V, size=n, p=mdp.prompt_probs)
    tokens = np.full((n, T), mdp.eos, dtype=np.int64)
    lengths = np.zeros(n, dtype=np.int64)
    prev = prompts.copy()
    alive = np.ones(n, dtype=bool)
    for t in range(T):
        cdf = np.cumsum(pi[t, prev], axis=1)
        u = rng.random(n)[:, None]
        a = np.minimum((u > cdf).sum(1), V)
        a = np.where(alive, a, mdp.eos)
        tokens[:, t] = a
        lengths += alive
        alive &= a != mdp.eos
        prev = np.where(alive, a, 0)
    return prompts.astype(np.int64), tokens, lengths


def response_mask(lengths: np.ndarray, horizon: int) -> np.ndarray:
    """``(n, T)`` boolean mask, True where a token was emitted (``t < length``)."""
    return np.arange(horizon)[None, :] < np.asarray(lengths)[:, None]


def sequence_reward(mdp: TokenMDP, prompts: np.ndarray, tokens: np.ndarray,
                    lengths: np.ndarray) -> np.ndarray:
    """``(n,)`` true reward ``R(x, y) = sum_t r(t, y_{t-1}, y_t)`` over emitted tokens."""
    T, V = mdp.horizon, mdp.n_tokens
    prev = np.concatenate([prompts[:, None], tokens[:, :-1]], axis=1)
    prev = np.where(prev >= V, 0, prev)
    r = mdp.reward[np.arange(T)[None, :], prev, tokens]
    return (r * response_mask(lengths, T)).sum(1)


def make_preferences(mdp: TokenMDP, n_pairs: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Preference pairs: two responses from ``pi_ref`` per prompt, labelled by a noisy
    Bradley-Terry draw on the true sequence reward, ``P(y1 > y2) = sigmoid(R1 - R2)``.

    Returns arrays ``prompt`` ``(n,)``, ``chosen``/``rejected`` ``(n, T)``,
    ``len_chosen``/``len_rejected`` ``(n,)``, and ``p_chosen`` (the true BT probability
    that the chosen response is preferred; ``R_data = (1 - p) / p``).
    """
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be positive, got {n_pairs}")
    ref = mdp.ref_table()
    x, y1, l1 = sample_responses(mdp, ref, n_pairs, rng)
    _, y2, l2 = sample_responses(mdp, ref, n_pairs, rng, prompts=x)
    r1, r2 = sequence_reward(mdp, x, y1, l1), sequence_reward(mdp, x, y2, l2)
    p1 = 1.0 / (1.0 + np.exp(-(r1 - r2)))
    first = rng.random(n_pairs) < p1
    chosen = np.where(first[:, None], y1, y2)
    rejected = np.where(first[:, None], y2, y1)
    return {"prompt": x, "chosen": chosen, "rejected": rejected,
            "len_chosen": np.where(first, l1, l2), "len_rejected": np.where(first, l2, l1),
            "p_chosen": np.where(first, p1, 1 - p1)}


def token_q_values(mdp: TokenMDP, Q: np.ndarray, prompts: np.ndarray, tokens: np.ndarray,
                   lengths: np.ndarray) -> np.ndarray:
    """``(n, T)`` token values ``Q*(s_t, a_t)`` of responses (0 after a response's end, the
    terminal value); ``Q`` is :func:`soft_bellman`'s ``(T, V, V + 1)`` table."""
    T, V = mdp.horizon, mdp.n_tokens
    prev = np.concatenate([prompts[:, None], tokens[:, :-1]], axis=1)
    prev = np.where(prev >= V, 0, prev)
    return Q[np.arange(T)[None, :], prev, tokens] * response_mask(lengths, T)


def make_token_preferences(mdp: TokenMDP, n_pairs: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """[reconstruction] Pairs labelled by the *token-level* Bradley-Terry model.

    Two responses from ``pi_ref`` per prompt, compared position by position: position ``t``
    (up to the longer response's end) carries its own label, drawn with
    ``P(a^1_t > a^2_t) = sigmoid(Q*(s^1_t, a^1_t) - Q*(s^2_t, a^2_t))`` (``Q* = 0`` after a
    response's end). The sequence-level label, read by the sequence-level losses, is the
    collapsed model: one draw with logit ``sum_t (Q*^1_t - Q*^2_t)`` (the token-wise values
    summed; the product of the per-token odds). ``chosen`` is the sequence-level winner.

    Returns the keys of :func:`make_preferences` plus ``token_win`` ``(n, T)`` (1.0 where the
    chosen response wins position ``t``, 0.0 where it loses or no position is compared) and
    ``p_token`` ``(n, T)`` (the true probability that the chosen response wins position ``t``).
    """
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be positive, got {n_pairs}")
    Q, _, _ = soft_bellman(mdp)
    ref = mdp.ref_table()
    x, y1, l1 = sample_responses(mdp, ref, n_pairs, rng)
    _, y2, l2 = sample_responses(mdp, ref, n_pairs, rng, prompts=x)
    d = token_q_values(mdp, Q, x, y1, l1) - token_q_values(mdp, Q, x, y2, l2)
    cover = response_mask(np.maximum(l1, l2), mdp.horizon)
    p_tok = 1.0 / (1.0 + np.exp(-d))
    win1 = (rng.random(d.shape) < p_tok) & cover
    p1 = 1.0 / (1.0 + np.exp(-d.sum(1)))
    first = rng.random(n_pairs) < p1
    f = first[:, None]
    return {"prompt": x, "chosen": np.where(f, y1, y2), "rejected": np.where(f, y2, y1),
            "len_chosen": np.where(first, l1, l2), "len_rejected": np.where(first, l2, l1),
            "p_chosen": np.where(first, p1, 1 - p1),
            "token_win": np.where(f, win1, ~win1 & cover).astype(np.float64),
            "p_token": np.where(f, p_tok, 1 - p_tok) * cover}


def n_responses(n_tokens: int, horizon: int) -> int:
    """The number of possible responses to a prompt: ``V^(L-1)`` ending with EOS at each length
    ``L <= T``, plus the ``V^T`` cut at ``T`` without one (what :func:`enumerate_responses` lists)."""
    return sum(n_tokens ** (length - 1) for length in range(1, horizon + 1)) + n_tokens ** horizon


def enumerate_responses(mdp: TokenMDP, prompt: int) -> tuple[np.ndarray, np.ndarray]:
    """Every possible response to ``prompt`` (brute force; for tiny MDPs in tests).

    Returns ``tokens`` ``(m, T)`` padded with EOS and ``lengths`` ``(m,)``.
    """
    T, V = mdp.horizon, mdp.n_tokens
    if (V + 1) ** T > 200_000:
        raise ValueError(f"too many responses to enumerate ((V+1)^T = {(V + 1) ** T})")
    seqs: list[tuple[int, ...]] = []
    for L in range(1, T + 1):
        for body in itertools.product(range(V), repeat=L - 1):
            seqs.append((*body, mdp.eos) + (mdp.eos,) * (T - L))
    for body in itertools.product(range(V), repeat=T):  # cut at T without EOS
        seqs.append(body)
    tokens = np.array(seqs, dtype=np.int64)
    is_eos = tokens == mdp.eos
    lengths = np.where(is_eos.any(1), is_eos.argmax(1) + 1, T)
    del prompt  # the set of responses does not depend on the prompt
    return tokens, lengths


def table_logprob(mdp: TokenMDP, pi: np.ndarray, prompts: np.ndarray, tokens: np.ndarray,
                  lengths: np.ndarray) -> np.ndarray:
    """``(n,)`` log-probability of each response under a table policy."""
    T, V = mdp.horizon, mdp.n_tokens
    prev = np.concatenate([prompts[:, None], tokens[:, :-1]], axis=1)
    prev = np.where(prev >= V, 0, prev)
    lp = np.log(np.clip(pi[np.arange(T)[None, :], prev, tokens], 1e-300, None))
    return (lp * response_mask(lengths, T)).sum(1)
