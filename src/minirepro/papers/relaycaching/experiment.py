"""The chapter's protocol: calibration profile, the arms on fresh relays, sweeps, costs, phases.

Every arm prefills agent B's context ``P_B + S + Q`` and is compared with full prefill
at B's question tokens ``Q`` (the last one predicts B's answer).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core import set_seed
from minirepro.core.lm import load_model, load_substrate
from minirepro.core.progress import progress
from minirepro.core.scale import ScaledConfig
from minirepro.papers.relaycaching.blend import (
    blended_prefill,
    full_schedule,
    make_schedule,
    naive_schedule,
    prefill_flops,
    reuse_rate,
    reused_kv,
)
from minirepro.papers.relaycaching.pipeline import make_pipelines
from minirepro.papers.relaycaching.relay import RelayItem, a_cache, full_prefill, make_items
from minirepro.papers.relaycaching.select import (
    cacheblend_detect,
    cacheblend_schedule,
    kv_deviation,
    layer0_probe,
    layer_window,
    random_tokens,
    relay_schedule,
    relay_tokens,
)

ARMS: tuple[str, ...] = ("full prefill", "exact prefix", "naive reuse", "EPIC", "CacheBlend",
                         "RelayCaching", "random tokens")


@dataclass
class Config(ScaledConfig):
    """The chapter's knobs.

    Attributes:
        task: ``"chat"`` (two-agent chat pipelines, :mod:`.pipeline`; A's note is its own
            greedy generation) or ``"corpus"`` (the substrate corpus's relays, A's trace
            teacher-forced; the smoke scale's tiny model cannot write notes).
        model_name: the model (``"smollm2-135m"`` at book scale); ``None`` with ``task
            "corpus"`` uses the shipped substrate ``substrate``.
        substrate: the shipped substrate whose corpus gives the relays (``task "corpus"``).
        seed: the first reported seed; seeds ``seed .. seed + n_seeds - 1`` are run.
        n_seeds: seeds; each draws its own fresh pipelines.
        n_items: pipelines per seed (the units of the verdicts).
        n_calib: calibration pipelines of the offline profile (drawn with ``calib_seed``).
        calib_seed: the calibration draw (disjoint from the reported seeds).
        max_new_tokens: the longest note A may generate (``task "chat"``).
        budget: RelayCaching's recompute share of ``S`` (boundary + suffix + probe's top).
        cacheblend_ratio: CacheBlend's recompute share (paper: 0.15).
        window_frac: a layer is in RelayCaching's window when its mean calibration value
            deviation is at least this share of the largest layer's.
        n_boundary, n_suffix: tokens of ``S`` always recomputed at its start and end.
        sweep: recompute shares of the reuse-rate sweep (first seed's pipelines).
        n_sweep: pipelines of the sweep.
        n_phase: pipelines per seed of the decode-vs-prefill check (fp32 and bf16).
        n_timing, timing_repeats: pipelines timed per seed, and repeats (median).
        item_offset: pipelines of seed ``k`` are drawn with ``item_offset + k``.
    """

    task: str = "chat"
    model_name: str | None = "smollm2-135m"
    substrate: str = "smoke"
    seed: int = 0
    n_seeds: int = 4
    n_items: int = 10
    n_calib: int = 6
    calib_seed: int = 900
    max_new_tokens: int = 32
    budget: float = 0.15
    cacheblend_ratio: float = 0.15
    window_frac: float = 0.5
    n_boundary: int = 2
    n_suffix: int = 2
    sweep: tuple[float, ...] = (0.05, 0.3, 0.5)
    n_sweep: int = 3
    n_phase: int = 1
    n_timing: int = 2
    timing_repeats: int = 5
    item_offset: int = 1000

    PRESETS: ClassVar = {
        "smoke": {"task": "corpus", "model_name": None, "substrate": "smoke", "n_seeds": 2,
                  "n_items": 6, "n_calib": 4, "n_sweep": 3, "sweep": (0.15, 0.5), "n_timing": 2,
                  "timing_repeats": 2},
        "book": {},
        "full": {"n_seeds": 10, "n_items": 32, "n_calib": 32, "n_sweep": 16, "n_phase": 4,
                 "max_new_tokens": 64},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task not in ("chat", "corpus"):
            raise ValueError(f"task must be 'chat' or 'corpus', got {self.task!r}")
        if self.task == "chat" and not self.model_name:
            raise ValueError("task 'chat' needs a chat model (model_name, e.g. 'smollm2-135m')")
        for name in ("timing_repeats", "max_new_tokens"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("budget", "cacheblend_ratio"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        self.sweep = tuple(float(x) for x in self.sweep)


def deviation_map(model: PreTrainedModel, item: RelayItem, cache=None, full_cache=None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (relaycaching-eq-dev) per layer and ``S`` token: ``1 - cos`` of A's re-rotated keys (values) vs B's full prefill; ``(L, |S|)`` x2."""
    cache = cache if cache is not None else a_cache(model, item)
    if full_cache is None:
        _, full_cache = full_prefill(model, item.b_ids)
    re = reused_kv(cache, model, item)
    pb, s = len(item.pb), len(item.s)
    dk = [kv_deviation(k, lay.keys[:, :, pb:pb + s]).numpy() for (k, _), lay in zip(re, full_cache.layers)]
    dv = [kv_deviation(v, lay.values[:, :, pb:pb + s]).numpy() for (_, v), lay in zip(re, full_cache.layers)]
    return np.stack(dk), np.stack(dv)


def top_share(dev: np.ndarray, frac: float = 0.2) -> float:
    """Share of the summed deviation carried by the largest ``frac`` of the (layer, token) cells."""
    flat = np.sort(np.asarray(dev, dtype=float).ravel())[::-1]
    k = max(1, int(round(frac * flat.size)))
    return float(flat[:k].sum() / max(flat.sum(), 1e-30))


def deviation_stats(dev: np.ndarray, tau: float = 1.5) -> dict[str, float]:
    """Eq. (relaycaching-eq-dev): the shape of one pipeline's deviation map ``(L, |S|)``, layer 0
    left out of the sparsity numbers (its entries are exact by construction).

    Returns ``top20_share`` (:func:`top_share` over layers ``1..L-1``), ``over_tau`` (the mean over
    layers ``1..L-1`` of the share of tokens above ``tau`` x their layer's mean: the paper's
    deviation set with ``tau_diff = 1.5``), ``third_share`` (the share of the summed layer means
    carried by the best run of ``ceil(L / 3)`` consecutive layers, :func:`best_window_share`),
    ``u_ratio`` (:func:`u_ratio`) and ``layer_mean`` (``(L,)``).
    """
    dev = np.asarray(dev, dtype=float)
    if dev.ndim != 2 or dev.shape[0] < 2 or dev.shape[1] < 1:
        raise ValueError(f"a deviation map needs shape (layers >= 2, tokens >= 1), got {dev.shape}")
    upper = dev[1:]
    mean = upper.mean(1, keepdims=True)
    over = (upper > tau * mean).mean(1)
    lm = dev.mean(1)
    return {"top20_share": top_share(upper), "over_tau": float(over.mean()),
            "third_share": best_window_share(lm, -(-len(lm) // 3)), "u_ratio": u_ratio(lm),
            "layer_mean": lm}


def best_window_share(profile: np.ndarray, width: int) -> float:
    """Largest share of ``profile.sum()`` held by ``width`` consecutive layers (``profile`` >= 0)."""
    p = np.asarray(profile, dtype=float)
    if not 1 <= width <= p.size:
        raise ValueError(f"width must be in 1..{p.size}, got {width}")
    if (p < 0).any():
        raise ValueError("a deviation profile is non-negative")
    tot = p.sum()
    if tot <= 0:
        return float("nan")
    c = np.concatenate([[0.0], np.cumsum(p)])
    return float((c[width:] - c[:-width]).max() / tot)


def u_ratio(profile: np.ndarray) -> float:
    """``min(mean of the first third, mean of the last third) / mean of the middle third`` of the layers,
    the first third without layer 0 (exact by construction); > 1 is a U, NaN under 6 layers."""
    p = np.asarray(profile, dtype=float)
    n = p.size
    if n < 6:
        return float("nan")
    a, b = n // 3, 2 * n // 3
    mid = p[a:b].mean()
    return float(min(p[1:a].mean(), p[b:].mean()) / mid) if mid > 0 else float("nan")


def kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``KL(softmax(p) || softmax(q))`` per row, nats; ``(T, V)`` x2 -> ``(T,)``."""
    lp, lq = p_logits.log_softmax(-1), q_logits.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1).clamp_min(0)


def _score(name: str, ref: torch.Tensor, logits: torch.Tensor, item: RelayItem, tok, reuse: float,
           flops: float, flops_full: float) -> dict:
    """One arm on one pipeline: KL and top-1 agreement with full prefill on ``Q``, B's answer.

    With ``item.candidates`` (chat pipelines) B's answer is the candidate with the largest
    logit (a teacher-forced choice), ``agree_answer`` compares that choice with full prefill's
    and ``answer_nll`` is the correct answer's negative log-likelihood; otherwise (corpus
    relays) the answer is the greedy next token.
    """
    kl = kl_rows(ref, logits)
    if item.candidates:
        c = torch.tensor(item.candidates)
        pick, pick_ref = int(logits[-1, c].argmax()), int(ref[-1, c].argmax())
        correct, agree = float(pick == item.answer_index), float(pick == pick_ref)
        nll = float(-logits[-1].log_softmax(-1)[c[item.answer_index]])
    else:
        pred = tok.decode([int(logits[-1].argmax())]).strip()
        correct, agree, nll = float(pred == item.answer), float(ref[-1].argmax() == logits[-1].argmax()), np.nan
    return {"arm": name, "reuse": reuse, "kl_q": float(kl.mean()), "kl_answer": float(kl[-1]),
            "agree_q": float((ref.argmax(-1) == logits.argmax(-1)).float().mean()),
            "agree_answer": agree, "correct": correct, "answer_nll": nll,
            "flops_ratio": flops_full / flops}


@dataclass
class Prepared:
    """One relay's shared inputs: full prefill's logits at ``Q`` ``(|Q|, V)``, A's re-rotated KV, its FLOPs."""

    item: RelayItem
    ref: torch.Tensor
    reused: list
    flops_full: float
    a_cache: object = None
    full_cache: object = None


@torch.no_grad()
def prepare(model: PreTrainedModel, item: RelayItem) -> Prepared:
    """Full prefill of B's context and A's cache of ``S``, re-rotated to B's positions."""
    logits, fc = full_prefill(model, item.b_ids)
    fs = full_schedule(model.config.num_hidden_layers, len(item.s))
    ac = a_cache(model, item)
    return Prepared(item, logits[-len(item.q):], reused_kv(ac, model, item),
                    prefill_flops(model, item, fs), ac, fc)


@torch.no_grad()
def run_arms(model: PreTrainedModel, tok: PreTrainedTokenizerBase, prep: Prepared, cfg: Config,
             top_layer: int, budgets: dict[str, float] | None = None) -> list[dict]:
    """The arms on one relay; one row per arm (reuse rate, next-token KL and agreement at ``Q``, FLOPs).

    ``budgets`` (arm -> recompute share) runs only the selective arms named; ``None`` runs
    every arm of :data:`ARMS` at the config's shares, plus the no-prefix ablation.
    """
    item, ref, reused, f_full = prep.item, prep.ref, prep.reused, prep.flops_full
    n_layers, s = model.config.num_hidden_layers, len(item.s)
    rows = []
    sched = {}
    if budgets is None:
        rows.append(_score("full prefill", ref, ref, item, tok, 0.0, f_full, f_full))
        lcp = next((i for i, (a, b) in enumerate(zip(item.pa, item.pb)) if a != b), 0)
        ex = _score("exact prefix", ref, ref, item, tok, 0.0, f_full, f_full)
        ex["prefix_share"] = lcp / item.n_b
        rows.append(ex)
        sched["naive reuse"] = (naive_schedule(n_layers, s), None, False)
        budgets = {"EPIC": cfg.budget, "CacheBlend": cfg.cacheblend_ratio, "RelayCaching": cfg.budget,
                   "random tokens": cfg.budget}
        ablate = True
    else:
        ablate = False
    if "EPIC" in budgets:
        k = int(round(budgets["EPIC"] * s))
        sched["EPIC"] = (make_schedule(n_layers, s, [range(k)] * n_layers), None, False)
    if "CacheBlend" in budgets:
        sched["CacheBlend"] = (cacheblend_schedule(n_layers, s), cacheblend_detect(budgets["CacheBlend"]),
                               False)
    if "RelayCaching" in budgets:
        pm, inf = layer0_probe(model, item)
        toks = relay_tokens(pm, inf, n_boundary=cfg.n_boundary, n_suffix=cfg.n_suffix,
                            budget=budgets["RelayCaching"])
        sched["RelayCaching"] = (relay_schedule(n_layers, s, toks, top_layer), None, True)
    if "random tokens" in budgets:
        toks = random_tokens(s, budgets["random tokens"], cfg.n_boundary, cfg.n_suffix,
                             seed=int(sum(item.s)) + 7919 * s)
        sched["random tokens"] = (relay_schedule(n_layers, s, toks, top_layer), None, False)
    for name, (sc, det, probe) in sched.items():
        out = blended_prefill(model, item, reused, sc, det)
        rows.append(_score(name, ref, out.logits, item, tok, reuse_rate(out.schedule, s),
                           prefill_flops(model, item, out.schedule, probe=probe), f_full))
    if ablate:
        nop, _ = full_prefill(model, torch.tensor([item.s + item.q]))
        rows.append(_score("no prefix (ablation)", ref, nop[-len(item.q):], item, tok, 0.0,
                           f_full, f_full))
    return rows


@torch.no_grad()
def phase_gap(model: PreTrainedModel, item: RelayItem, dtype: torch.dtype) -> dict[str, float | str]:
    """Decode-phase vs prefill KV of A's identical context in ``dtype``: max and mean ``1 - cos`` over layers and ``S``.

    ``kernel`` says which attention kernel ran: torch's default SDPA dispatch, or its
    reference ("math") kernel where the fused bfloat16 kernel cannot run (it raises on
    CPUs with AVX-512-BF16 when torch's portable kernels are forced,
    ``ATEN_CPU_CAPABILITY=default``). With the reference kernel the phases were measured
    to agree in bfloat16 as closely as in float32 (the page says so).
    """
    m = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
    kernel = "default"
    try:
        dec, pre = a_cache(m, item, decode=True), a_cache(m, item, decode=False)
    except RuntimeError as err:
        if dtype == torch.float32 or "avx512" not in str(err):
            raise
        kernel = "math"
        with sdpa_kernel(SDPBackend.MATH):
            dec, pre = a_cache(m, item, decode=True), a_cache(m, item, decode=False)
    s0 = len(item.pa)
    devs = [kv_deviation(a.keys[:, :, s0:], b.keys[:, :, s0:]) for a, b in zip(dec.layers, pre.layers)]
    devs += [kv_deviation(a.values[:, :, s0:], b.values[:, :, s0:]) for a, b in zip(dec.layers, pre.layers)]
    d = torch.cat(devs)
    return {"max": float(d.max()), "mean": float(d.mean()), "kernel": kernel}


@torch.no_grad()
def time_prefill(model: PreTrainedModel, prep: Prepared, cfg: Config, top_layer: int,
                 shares: tuple[float, ...]) -> list[dict]:
    """Median seconds of B's prefill, same code for every arm: full (``share`` 1.0 with every
    token passing every layer) and RelayCaching at each recompute ``share`` (probe included).

    Returns rows ``{"share", "reuse", "seconds", "flops"}``; ``share = nan`` is full prefill.
    """
    item, reused = prep.item, prep.reused
    n_layers, s = model.config.num_hidden_layers, len(item.s)

    def relay(share):
        pm, inf = layer0_probe(model, item)
        toks = relay_tokens(pm, inf, n_boundary=cfg.n_boundary, n_suffix=cfg.n_suffix, budget=share)
        sc = relay_schedule(n_layers, s, toks, top_layer)
        blended_prefill(model, item, reused, sc)
        return sc

    fs = full_schedule(n_layers, s)
    arms = [(float("nan"), lambda: (blended_prefill(model, item, reused, fs), fs)[1])]
    arms += [(b, (lambda b=b: relay(b))) for b in shares]
    rows = []
    for share, fn in arms:
        sc = fn()
        ts = []
        for _ in range(cfg.timing_repeats):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        probe = not np.isnan(share)
        rows.append({"share": share, "reuse": reuse_rate(sc, s), "seconds": float(np.median(ts)),
                     "flops": prefill_flops(model, item, sc, probe=probe)})
    ts = []
    for _ in range(cfg.timing_repeats):  # the library's own forward, for scale
        t0 = time.perf_counter()
        model(input_ids=item.b_ids)
        ts.append(time.perf_counter() - t0)
    rows[0]["library_seconds"] = float(np.median(ts))
    return rows


@dataclass
class Results:
    """Everything the chapter shows.

    Attributes:
        rows: one row per (seed, pipeline, arm).
        seeds_table: per (seed, arm) means.
        profile_k, profile_v: calibration deviation ``(L, max |S|)`` (NaN past a note's end).
        window: RelayCaching's layer window ``(first, last)`` (from the value profile).
        dev: per (seed, pipeline) the deviation shape (:func:`deviation_stats`, value
            deviation) plus ``prefix_dev`` (mean key and value deviation, layers >= 1) and
            ``layer k`` columns (the value profile).
        sweep: the reuse-rate sweep rows.
        phase: per (seed, dtype) decode-vs-prefill deviation.
        timing: per (seed, pipeline) seconds full vs RelayCaching (and the library forward).
        sweep_time: per (pipeline, share) seconds and FLOPs of RelayCaching (``share`` NaN: full).
        items: the first seed's pipelines (for the page's example).
    """

    rows: pd.DataFrame
    seeds_table: pd.DataFrame
    profile_k: np.ndarray
    profile_v: np.ndarray
    window: tuple[int, int]
    dev: pd.DataFrame
    sweep: pd.DataFrame
    phase: pd.DataFrame
    timing: pd.DataFrame
    sweep_time: pd.DataFrame
    n_layers: int
    items: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)


def calibrate(model: PreTrainedModel, items: list[RelayItem], frac: float
              ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """The offline profile on calibration pipelines: mean key/value deviation per (layer, position) and
    the window (from the values, the paper's Eq. 1)."""
    maps = [deviation_map(model, it) for it in items]
    width = max(m[0].shape[1] for m in maps)
    pk = np.full((len(maps), maps[0][0].shape[0], width), np.nan)
    pv = pk.copy()
    for i, (dk, dv) in enumerate(maps):
        pk[i, :, :dk.shape[1]], pv[i, :, :dv.shape[1]] = dk, dv
    prof_k, prof_v = np.nanmean(pk, 0), np.nanmean(pv, 0)
    return prof_k, prof_v, layer_window(prof_v, frac)


def load(cfg: Config):
    """The model, tokenizer and (``task "corpus"``) corpus config the run uses."""
    if cfg.task == "chat":
        model, tok = load_model(cfg.model_name)
        return model, tok, None
    sub = load_substrate(cfg.substrate, model_name=cfg.model_name)
    return sub.model, sub.tokenizer, sub.corpus.config


def draw(cfg: Config, model: PreTrainedModel, tok: PreTrainedTokenizerBase, corpus_cfg, n: int,
         seed: int) -> list[RelayItem]:
    """``n`` pipelines (chat: A generates its notes) or corpus relays drawn with ``seed``."""
    if cfg.task == "chat":
        return make_pipelines(model, tok, n, seed, cfg.max_new_tokens)
    if corpus_cfg is None:
        raise ValueError("task 'corpus' needs the substrate's corpus config")
    return make_items(tok, corpus_cfg, n, seed, model.config.max_position_embeddings)


@dataclass
class State:
    """A run in progress (the notebook runs its stages in separate cells): the calibration and
    the rows gathered so far."""

    cfg: Config
    model: PreTrainedModel
    tok: PreTrainedTokenizerBase
    corpus_cfg: object
    prof_k: np.ndarray
    prof_v: np.ndarray
    window: tuple[int, int]
    rows: list = field(default_factory=list)
    devs: list = field(default_factory=list)
    phase: list = field(default_factory=list)
    timing: list = field(default_factory=list)
    items: dict = field(default_factory=dict)
    sweep_rows: list = field(default_factory=list)
    sweep_time: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)


def start(cfg: Config, model: PreTrainedModel | None = None, tok: PreTrainedTokenizerBase | None = None,
          corpus_cfg=None) -> State:
    """Stage 1: load (unless given) and calibrate: the offline profile and the layer window."""
    t0 = time.perf_counter()
    if model is None:
        model, tok, corpus_cfg = load(cfg)
    set_seed(0)
    calib = draw(cfg, model, tok, corpus_cfg, cfg.n_calib, cfg.calib_seed)
    prof_k, prof_v, window = calibrate(model, calib, cfg.window_frac)
    return State(cfg, model, tok, corpus_cfg, prof_k, prof_v, window,
                 seconds={"calibration": time.perf_counter() - t0})


def run_seeds(st: State, seeds) -> None:
    """Stage 2: for each seed, draw its pipelines and run every arm and the deviation map on each."""
    t0 = time.perf_counter()
    cfg, model, tok = st.cfg, st.model, st.tok
    for seed in progress(list(seeds), desc="seeds"):
        seed = int(seed)
        items = draw(cfg, model, tok, st.corpus_cfg, cfg.n_items, cfg.item_offset + seed)
        st.items[seed] = items
        for i, it in enumerate(items):
            prep = prepare(model, it)
            for r in run_arms(model, tok, prep, cfg, st.window[1]):
                st.rows.append({"seed": seed, "item": i, "s_len": len(it.s), "n_b": it.n_b, **r})
            dk, dv = deviation_map(model, it, prep.a_cache, prep.full_cache)
            stats = deviation_stats(dv)
            lm = stats.pop("layer_mean")
            st.devs.append({"seed": seed, "item": i, **stats,
                            "prefix_dev": float(np.concatenate([dk[1:], dv[1:]]).mean()),
                            **{f"layer {li}": float(v) for li, v in enumerate(lm)}})
    st.seconds["arms"] = st.seconds.get("arms", 0.0) + time.perf_counter() - t0


def run_checks(st: State) -> None:
    """Stage 3: per seed, the decode-vs-prefill check (fp32, bf16) and the timing of full vs RelayCaching."""
    t0 = time.perf_counter()
    cfg, model = st.cfg, st.model
    for seed, items in sorted(st.items.items()):
        for it in items[:cfg.n_phase]:
            for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
                st.phase.append({"seed": seed, "dtype": name, **phase_gap(model, it, dt)})
        for i, it in enumerate(items[:cfg.n_timing]):
            t = time_prefill(model, prepare(model, it), cfg, st.window[1], (cfg.budget,))
            st.timing.append({"seed": seed, "item": i, "full": t[0]["seconds"], "relay": t[1]["seconds"],
                              "library": t[0]["library_seconds"]})
    st.seconds["checks"] = time.perf_counter() - t0


def run_sweep(st: State) -> None:
    """Stage 4: the recompute-share sweep (and its timing) on the first seed's first pipelines."""
    t0 = time.perf_counter()
    cfg, model, tok = st.cfg, st.model, st.tok
    first = st.items[min(st.items)]
    for i, it in enumerate(first[:cfg.n_sweep]):
        prep = prepare(model, it)
        if i < cfg.n_timing:
            for r in time_prefill(model, prep, cfg, st.window[1], cfg.sweep):
                st.sweep_time.append({"item": i, **r})
        for b in cfg.sweep:
            for r in run_arms(model, tok, prep, cfg, st.window[1],
                              {"EPIC": b, "CacheBlend": b, "RelayCaching": b, "random tokens": b}):
                st.sweep_rows.append({"share": b, "item": i, **r})
    st.seconds["sweep"] = time.perf_counter() - t0


def finish(st: State) -> Results:
    """The run's :class:`Results` from the stages gathered in ``st``."""
    if not st.rows:
        raise ValueError("no seed has run: call run_seeds first")
    df = pd.DataFrame(st.rows)
    table = df.groupby(["seed", "arm"], sort=False).mean(numeric_only=True).reset_index()
    return Results(df, table, st.prof_k, st.prof_v, st.window, pd.DataFrame(st.devs),
                   pd.DataFrame(st.sweep_rows), pd.DataFrame(st.phase), pd.DataFrame(st.timing),
                   pd.DataFrame(st.sweep_time), st.model.config.num_hidden_layers,
                   st.items[min(st.items)], dict(st.seconds))


def run_experiment(cfg: Config, model: PreTrainedModel | None = None,
                   tok: PreTrainedTokenizerBase | None = None, corpus_cfg=None) -> Results:
    """The whole protocol in one call: :func:`start`, :func:`run_seeds` over ``cfg.seeds``,
    :func:`run_checks`, :func:`run_sweep`, :func:`finish`."""
    st = start(cfg, model, tok, corpus_cfg)
    run_seeds(st, cfg.seeds)
    run_checks(st)
    run_sweep(st)
    return finish(st)


def per_seed(res: Results, arm: str, col: str) -> np.ndarray:
    """Per-seed mean of ``col`` for ``arm`` (aligned by seed)."""
    t = res.seeds_table
    return t[t.arm == arm].sort_values("seed")[col].to_numpy(dtype=float)


def per_unit(res: Results, arm: str, col: str) -> np.ndarray:
    """Per-pipeline ``col`` for ``arm``, ordered by (seed, pipeline): the verdicts' units."""
    r = res.rows
    return r[r.arm == arm].sort_values(["seed", "item"])[col].to_numpy(dtype=float)
