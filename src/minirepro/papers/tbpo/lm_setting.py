"""TBPO's second setting: a small shipped language model and a programmatic reward.

The reference policy (and the start of every trained policy) is the tiny Llama-style substrate
model ``lm-smoke`` (139,584 weights, built on the CPU and shipped as a checked artifact), at
every scale; ``model_name`` names another (``minirepro.core.lm.load_model``: a substrate
artifact, a pretrained model or a local folder). Nothing is pre-trained here. Prompts are the
distinct openings of the substrate corpus's ``text`` family (``"text : the"``, ``"text : a"``, ...),
read from its validation split; a response is at most ``max_new_tokens`` sampled tokens (the
end token, if sampled, is the last one). The reward is computed from the decoded words:

    R(y) = #{words of y in the target topic's vocabulary} - length_penalty * #words of y,

and preference pairs (two reference samples per prompt) are labelled by one Bradley-Terry draw,
``p(y_1 > y_2) = sigmoid(R(y_1) - R(y_2))``. DPO, TBPO-A and TBPO-Q are trained with the very
losses of ``losses.py`` (through its ``method_loss``), one loop, same beta, steps, lr and data.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from minirepro.core import ScaledConfig, progress, set_seed
from minirepro.core.lm import Substrate, load_substrate
from minirepro.core.lm.corpus import TOPICS
from minirepro.papers.tbpo.config import check_methods
from minirepro.papers.tbpo.losses import METHODS, method_loss

CORPUS = "smoke"  # the substrate preset whose corpus gives the prompts (lm-smoke's own corpus)


@dataclass
class LMSettingConfig(ScaledConfig):
    """The LM setting: which model, the reward, the preference data, training."""

    model_name: str = "lm-smoke"   # the reference model (load_model: an artifact, pretrained model or folder)
    topic: str = "ocean"           # reward topic (a key of corpus.TOPICS)
    length_penalty: float = 0.2    # reward cost per generated word
    n_prompts: int = 5             # distinct corpus openings used as prompts
    max_new_tokens: int = 8        # response length bound (tokens, end token included)
    n_pairs: int = 320             # preference pairs per seed (spread over the prompts)
    beta: float = 0.1              # KL strength of every loss
    steps: int = 20                # optimisation steps per run
    batch_size: int = 16           # pairs per step
    lr: float = 3e-4               # Adam learning rate (all methods)
    n_eval: int = 24               # policy samples per prompt per evaluation
    eval_every: int = 20           # steps between evaluations (start and end at book scale)
    n_seeds: int = 3               # training seeds (3 fit the book-scale time budget)
    tdpo_alpha: float = 0.5        # (read by method_loss; TDPO is not run by default)
    tbpo_member: str = "logistic"  # Bregman member inside TBPO-Q / TBPO-A
    tbpo_lam: float = 1.0          # lam of the BA member
    methods: tuple[str, ...] = ("DPO", "TBPO-A")

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"n_pairs": 32, "steps": 4, "n_eval": 6, "eval_every": 4,
                  "n_seeds": 1},
        "book": {},
        "full": {"n_pairs": 2048, "steps": 200, "n_eval": 128, "eval_every": 20, "n_seeds": 5,
                 "methods": ("DPO", "TBPO-A", "TBPO-Q")},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.model_name, str) or not self.model_name.strip():
            raise ValueError(f"model_name must be a non-empty string, got {self.model_name!r}")
        if self.topic not in TOPICS:
            raise ValueError(f"topic must be one of {list(TOPICS)}, got {self.topic!r}")
        check_methods(self.methods, self.tbpo_member)
        for name in ("max_new_tokens", "steps", "batch_size", "eval_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.beta > 0:
            raise ValueError(f"beta must be positive, got {self.beta}")


def chapter_config(params: dict[str, Any]) -> LMSettingConfig:
    """The LM setting's config for the chapter's parameters cell ``params`` (its ``globals()``).

    Reads only the parameters the two settings share: ``scale`` (the preset), ``seed`` (the
    first seed), ``n_seeds`` (``None``: the preset's), ``tbpo_member`` and ``model_name``
    (``None``: the preset's model, ``lm-smoke``). The token-MDP parameters (``steps``,
    ``n_pairs``, ``beta``, ``lr``) do not apply here.

    Raises:
        KeyError: ``params`` lacks ``scale``.
    """
    return LMSettingConfig.preset(params["scale"], seed=params.get("seed"), n_seeds=params.get("n_seeds"),
                                  tbpo_member=params.get("tbpo_member"), model_name=params.get("model_name"))


# ---------------------------------------------------------------------------- the reward


def topic_vocabulary(topic: str) -> frozenset[str]:
    """[reconstruction] The nouns, adjectives and verbs of ``topic`` in the substrate corpus."""
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; expected one of {list(TOPICS)}")
    return frozenset(w for words in TOPICS[topic].values() for w in words)


def text_reward(words: list[str], vocab: frozenset[str], length_penalty: float) -> float:
    """[reconstruction] ``R = #{w in vocab} - length_penalty * len(words)`` for one response's words."""
    return float(sum(w in vocab for w in words) - length_penalty * len(words))


def response_words(tokenizer, tokens: torch.Tensor, lengths: torch.Tensor) -> list[list[str]]:
    """The whitespace-separated words of each decoded response (``tokens`` ``(n, T)``,
    ``lengths`` ``(n,)``; special tokens such as the end token dropped)."""
    return [tokenizer.decode(row[:n], skip_special_tokens=True).split()
            for row, n in zip(tokens.tolist(), lengths.tolist())]


def rewards(tokenizer, tokens: torch.Tensor, lengths: torch.Tensor, cfg: LMSettingConfig) -> np.ndarray:
    """``(n,)`` true rewards of sampled responses."""
    vocab = topic_vocabulary(cfg.topic)
    return np.array([text_reward(w, vocab, cfg.length_penalty)
                     for w in response_words(tokenizer, tokens, lengths)])


# ------------------------------------------------------------------ prompts and sampling


def corpus_prompts(sub: Substrate, n: int) -> list[str]:
    """The first ``n`` distinct openings ``"text : <word>"`` of the corpus's ``text`` family
    (validation split, corpus order)."""
    seen: list[str] = []
    for e in sub.corpus.val:
        if e.family != "text":
            continue
        p = " ".join(e.prompt.split()[:3])
        if p not in seen:
            seen.append(p)
        if len(seen) == n:
            return seen
    raise ValueError(f"the corpus has only {len(seen)} distinct text openings, asked for {n}")


def encode_prompts(tokenizer, prompts: list[str]) -> torch.Tensor:
    """``(n_prompts, P)`` ids (with ``<bos>``); the prompts must tokenize to the same length."""
    ids = tokenizer(prompts)["input_ids"]
    if len({len(x) for x in ids}) != 1:
        raise ValueError(f"prompts must have equal token lengths, got {[len(x) for x in ids]}")
    return torch.tensor(ids, dtype=torch.long)


@torch.no_grad()
def sample(model: nn.Module, prompt_ids: torch.Tensor, max_new_tokens: int, eos: int, pad: int,
           generator: torch.Generator, use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral samples (temperature 1) after ``prompt_ids`` ``(n, P)`` (equal-length prompts).

    With ``use_cache`` the prompt is prefilled once and each step feeds one token through the
    KV cache (the same distribution as re-reading the prefix, which ``use_cache=False`` does).
    Returns ``tokens`` ``(n, max_new_tokens)`` (``pad`` after the end) and ``lengths`` ``(n,)``:
    tokens emitted, the end token included when it was sampled.
    """
    if prompt_ids.ndim != 2:
        raise ValueError(f"prompt_ids must be (n, P), got {tuple(prompt_ids.shape)}")
    n = prompt_ids.shape[0]
    ids, feed, past = prompt_ids, prompt_ids, None
    alive = torch.ones(n, dtype=torch.bool)
    lengths = torch.zeros(n, dtype=torch.long)
    out = torch.full((n, max_new_tokens), pad, dtype=torch.long)
    for t in range(max_new_tokens):
        if use_cache:
            o = model(input_ids=feed, cache=past, use_cache=True)
            past = o.cache
        else:
            o = model(input_ids=ids)
        a = torch.multinomial(torch.softmax(o.logits[:, -1].float(), -1), 1, generator=generator).squeeze(1)
        out[:, t] = torch.where(alive, a, torch.full_like(a, pad))
        lengths += alive.long()
        alive &= a != eos
        if not bool(alive.any()):
            break
        ids, feed = torch.cat([ids, a[:, None]], dim=1), a[:, None]
    return out, lengths


def make_lm_preferences(sub: Substrate, prompt_ids: torch.Tensor, cfg: LMSettingConfig,
                        seed: int) -> dict[str, torch.Tensor]:
    """[reconstruction] ``cfg.n_pairs`` pairs: two reference samples per pair, prompts in turn,
    label drawn from Bradley-Terry on the true reward. Keys: ``prompt`` (index), ``chosen``,
    ``rejected`` ``(n, T)``, ``len_chosen``, ``len_rejected``, ``r_chosen``, ``r_rejected``."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    tok = sub.tokenizer
    k = prompt_ids.shape[0]
    idx = torch.arange(cfg.n_pairs) % k
    y = torch.full((2, cfg.n_pairs, cfg.max_new_tokens), tok.pad_token_id, dtype=torch.long)
    n = torch.zeros(2, cfg.n_pairs, dtype=torch.long)
    for i in range(k):
        rows = (idx == i).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        toks, lens = sample(sub.model, prompt_ids[i].repeat(2 * len(rows), 1), cfg.max_new_tokens,
                            tok.eos_token_id, tok.pad_token_id, gen)
        y[:, rows], n[:, rows] = toks.view(2, len(rows), -1), lens.view(2, len(rows))
    r = np.stack([rewards(tok, y[j], n[j], cfg) for j in (0, 1)])
    first_wins = torch.as_tensor(rng.random(cfg.n_pairs) < 1 / (1 + np.exp(-(r[0] - r[1]))))
    w, lo = torch.where(first_wins, 0, 1), torch.where(first_wins, 1, 0)
    ar = torch.arange(cfg.n_pairs)
    rt = torch.as_tensor(r, dtype=torch.float32)
    return {"prompt": idx, "chosen": y[w, ar], "rejected": y[lo, ar], "len_chosen": n[w, ar],
            "len_rejected": n[lo, ar], "r_chosen": rt[w, ar], "r_rejected": rt[lo, ar]}


def topic_word_rate(tokenizer, prefs: dict[str, torch.Tensor], cfg: LMSettingConfig) -> float:
    """Topic words per response in the reference samples of one seed's pairs (chosen and
    rejected together): the skill the LM claim needs, measured on the reference model."""
    vocab = topic_vocabulary(cfg.topic)
    words = (response_words(tokenizer, prefs["chosen"], prefs["len_chosen"])
             + response_words(tokenizer, prefs["rejected"], prefs["len_rejected"]))
    if not words:
        raise ValueError("prefs holds no responses")
    return float(np.mean([sum(w in vocab for w in ws) for ws in words]))


# ---------------------------------------------------------------------- the policy, stats


class LMPolicy(nn.Module):
    """A trainable copy of the substrate model plus TBPO-Q's light state baseline
    (a zero-initialised linear head on the detached last hidden state)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.lm = copy.deepcopy(model)
        self.lm.train()
        self.value = nn.Linear(self.lm.config.hidden_size, 1)
        nn.init.zeros_(self.value.weight)
        nn.init.zeros_(self.value.bias)


def _inputs(prompt_ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The model input that predicts every response token: the prompt and the response
    without its last token, ``(B, P + T - 1)``."""
    return torch.cat([prompt_ids, tokens[:, :-1]], dim=1)


@torch.no_grad()
def reference_logprobs(ref: nn.Module, prompt_ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T, vocab)`` log pi_ref(. | s_t) at every response position (computed once per batch
    of pairs: the reference never changes)."""
    P = prompt_ids.shape[1]
    return torch.log_softmax(ref(input_ids=_inputs(prompt_ids, tokens)).logits[:, P - 1:].float(), -1)


def lm_token_stats(policy: LMPolicy, lref: torch.Tensor, prompt_ids: torch.Tensor, tokens: torch.Tensor,
                   lengths: torch.Tensor) -> dict[str, torch.Tensor]:
    """[reconstruction] the token MDP of an LM: per-token statistics of responses; (B, T) each.

    Per-token statistics of responses ``tokens``
    ``(B, T)`` after ``prompt_ids`` ``(B, P)``, given the reference's log-probs ``lref``
    ``(B, T, vocab)`` (:func:`reference_logprobs`), in the format ``losses.method_loss`` reads:
    ``lr`` (log pi/pi_ref of the emitted token), ``mask``, ``v`` (baseline), ``kl_pi_ref`` =
    KL(pi||pi_ref)(s_t), ``kl_ref_pi``, ``entropy``, all ``(B, T)`` and 0 after each response's end."""
    if tokens.ndim != 2 or prompt_ids.shape[0] != tokens.shape[0] or lengths.shape != (tokens.shape[0],):
        raise ValueError(f"expected prompt_ids (B, P), tokens (B, T), lengths (B,); got "
                         f"{tuple(prompt_ids.shape)}, {tuple(tokens.shape)}, {tuple(lengths.shape)}")
    if lref.shape[:2] != tokens.shape:
        raise ValueError(f"lref must be (B, T, vocab) for tokens {tuple(tokens.shape)}, got {tuple(lref.shape)}")
    P, T = prompt_ids.shape[1], tokens.shape[1]
    out = policy.lm(input_ids=_inputs(prompt_ids, tokens), output_hidden_states=True)
    logp = torch.log_softmax(out.logits[:, P - 1:].float(), -1)
    v = policy.value(out.hidden_states[-1][:, P - 1:].detach()).squeeze(-1)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    p = logp.exp()
    lr = (logp - lref).gather(-1, tokens[..., None]).squeeze(-1) * mask
    return {"lr": lr, "mask": mask, "v": v * mask,
            "kl_pi_ref": (p * (logp - lref)).sum(-1) * mask,
            "kl_ref_pi": (lref.exp() * (lref - logp)).sum(-1) * mask,
            "entropy": -(p * logp).sum(-1) * mask}


@torch.no_grad()
def evaluate_lm(policy: LMPolicy, sub: Substrate, prompt_ids: torch.Tensor, cfg: LMSettingConfig,
                seed: int = 12345) -> dict[str, float]:
    """``cfg.n_eval`` samples per prompt from the policy (same random numbers for every method):
    ``reward`` (mean true R), ``kl_ref`` (sequence KL(pi||pi_ref) estimated as the mean over
    samples of the summed per-state KLs, nats), ``length`` (mean emitted tokens), ``topic_words``."""
    was = policy.lm.training
    policy.lm.eval()
    gen = torch.Generator().manual_seed(seed)
    tok = sub.tokenizer
    rs, kls, lens, hits = [], [], [], []
    vocab = topic_vocabulary(cfg.topic)
    for i in range(prompt_ids.shape[0]):
        x = prompt_ids[i].repeat(cfg.n_eval, 1)
        y, n = sample(policy.lm, x, cfg.max_new_tokens, tok.eos_token_id, tok.pad_token_id, gen)
        s = lm_token_stats(policy, reference_logprobs(sub.model, x, y), x, y, n)
        rs.append(rewards(tok, y, n, cfg))
        kls.append(s["kl_pi_ref"].sum(1).numpy())
        lens.append(n.numpy())
        hits.append([sum(w in vocab for w in ws) for ws in response_words(tok, y, n)])
    policy.lm.train(was)
    return {"reward": float(np.concatenate(rs).mean()), "kl_ref": float(np.concatenate(kls).mean()),
            "length": float(np.concatenate(lens).mean()), "topic_words": float(np.concatenate(hits).mean())}


def train_lm_method(method: str, sub: Substrate, prompt_ids: torch.Tensor,
                    prefs: dict[str, torch.Tensor], cfg: LMSettingConfig, seed: int,
                    ref_lp: tuple[torch.Tensor, torch.Tensor] | None = None,
                    start: dict[str, float] | None = None) -> pd.DataFrame:
    """[reconstruction] preference optimisation: one run of ``method`` from the substrate model.

    One run from the substrate model with
    ``method``'s loss (``losses.method_loss``): the same data, minibatch order (from ``seed``),
    beta, steps and lr for every method. ``ref_lp`` holds the reference log-probs of the chosen
    and rejected responses (computed here if ``None``); ``start`` the step-0 evaluation (the
    reference model's, the same for every run; computed here if ``None``).
    Returns one row per evaluation (step 0 included)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    if ref_lp is None:
        ref_lp = pair_reference_logprobs(sub, prompt_ids, prefs)
    set_seed(seed)
    policy = LMPolicy(sub.model)
    params = list(policy.lm.parameters())
    if METHODS[method][0] == "tbpo-q":
        params += list(policy.value.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr)
    order = np.random.default_rng(seed + 1000)
    n = prefs["prompt"].shape[0]
    start = evaluate_lm(policy, sub, prompt_ids, cfg) if start is None else start
    rows = [{"method": method, "seed": seed, "step": 0, **start}]
    for step in progress(range(1, cfg.steps + 1), desc=f"LM {method} seed {seed}"):
        idx = torch.as_tensor(order.choice(n, size=min(cfg.batch_size, n), replace=False))
        x = prompt_ids[prefs["prompt"][idx]]
        s = lm_token_stats(policy, torch.cat([ref_lp[0][idx], ref_lp[1][idx]]), torch.cat([x, x]),
                           torch.cat([prefs["chosen"][idx], prefs["rejected"][idx]]),
                           torch.cat([prefs["len_chosen"][idx], prefs["len_rejected"][idx]]))
        B = idx.shape[0]
        loss = method_loss(method, {k: v[:B] for k, v in s.items()}, {k: v[B:] for k, v in s.items()},
                           cfg)  # type: ignore[arg-type]  # reads beta, tdpo_alpha, tbpo_member, tbpo_lam
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            rows.append({"method": method, "seed": seed, "step": step,
                         **evaluate_lm(policy, sub, prompt_ids, cfg)})
    return pd.DataFrame(rows)


def pair_reference_logprobs(sub: Substrate, prompt_ids: torch.Tensor, prefs: dict[str, torch.Tensor],
                            chunk: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n_pairs, T, vocab)`` reference log-probs of the chosen and of the rejected responses."""
    out = []
    for key in ("chosen", "rejected"):
        parts = [reference_logprobs(sub.model, prompt_ids[prefs["prompt"][i:i + chunk]], prefs[key][i:i + chunk])
                 for i in range(0, prefs["prompt"].shape[0], chunk)]
        out.append(torch.cat(parts))
    return out[0], out[1]


@dataclass
class LMExperiment:
    """What the LM setting produced."""

    cfg: LMSettingConfig
    sub: Substrate
    prompts: list[str]
    evals: pd.DataFrame
    prefs: dict[str, torch.Tensor]  # the first seed's pairs
    topic_rate: dict[int, float]    # per seed: topic words per reference response in its pairs


def run_lm_experiment(cfg: LMSettingConfig) -> LMExperiment:
    """Load ``cfg.model_name`` (no training); for each seed of ``cfg.seeds`` draw preference
    pairs and train every method of ``cfg.methods`` from that model.

    The model and its tokenizer come from ``load_substrate(CORPUS, model_name=cfg.model_name)``
    (``"lm-smoke"``: the shipped artifact; a local checkpoint folder works the same way); the
    prompts come from lm-smoke's corpus whatever the model."""
    sub = load_substrate(CORPUS, model_name=cfg.model_name)
    prompts = corpus_prompts(sub, cfg.n_prompts)
    prompt_ids = encode_prompts(sub.tokenizer, prompts)
    start = evaluate_lm(LMPolicy(sub.model), sub, prompt_ids, cfg)  # the reference itself
    evals, first, rate = [], None, {}
    for s in cfg.seeds:
        prefs = make_lm_preferences(sub, prompt_ids, cfg, seed=s)
        first = prefs if first is None else first
        rate[s] = topic_word_rate(sub.tokenizer, prefs, cfg)
        ref_lp = pair_reference_logprobs(sub, prompt_ids, prefs)
        for m in cfg.methods:
            evals.append(train_lm_method(m, sub, prompt_ids, prefs, cfg, s, ref_lp, start))
    return LMExperiment(cfg, sub, prompts, pd.concat(evals, ignore_index=True), first, rate)


def lm_final(evals: pd.DataFrame) -> pd.DataFrame:
    """The last evaluation of every (method, seed) run, plus ``reference`` rows (each seed's
    step-0 evaluation of DPO's run: the substrate model itself)."""
    last = evals[evals["step"] == evals.groupby(["method", "seed"])["step"].transform("max")]
    first_method = evals["method"].iloc[0]
    ref = evals[(evals["step"] == 0) & (evals["method"] == first_method)].assign(method="reference")
    return pd.concat([last, ref], ignore_index=True)


def plot_lm_frontier(evals: pd.DataFrame, model: str = "lm-smoke"):
    """Seed-mean path of each method in the (KL to reference, true reward) plane."""
    import matplotlib.pyplot as plt

    from minirepro.papers.tbpo.plots import color

    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for m in dict.fromkeys(evals["method"]):
        g = evals[evals["method"] == m].groupby("step")[["kl_ref", "reward"]].mean()
        ax.plot(g["kl_ref"], g["reward"], "-o", ms=3, color=color(m), label=m)
        ax.plot(g["kl_ref"].iloc[-1], g["reward"].iloc[-1], "o", ms=8, color=color(m), markeredgecolor="black")
    r0 = evals[evals["step"] == 0][["kl_ref", "reward"]].mean()
    ax.plot(r0["kl_ref"], r0["reward"], "s", ms=9, color=color("reference"), label=f"reference ({model})",
            linestyle="none")
    ax.set_xlabel("KL(pi || pi_ref) per response (nats, estimated from samples)")
    ax.set_ylabel("true reward of the policy's samples")
    ax.set_title(f"{model}: reward against KL to the reference (mean of seeds)")
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig
