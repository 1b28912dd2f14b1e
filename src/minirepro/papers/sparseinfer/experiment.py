"""The chapter's config, one run of the comparison, the sparsity sweep and the timings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core.progress import progress
from minirepro.core.scale import ScaledConfig
from minirepro.core.seed import set_seed
from minirepro.papers.sparseinfer.baselines import fit_similarity_index, static_hot_sets
from minirepro.papers.sparseinfer.neurons import capture_hidden, ffn_blocks, sparse_layer_ids
from minirepro.papers.sparseinfer.protocol import (
    METHODS,
    evaluate,
    masked_vs_sliced,
    similarity,
    stability,
    token_jaccard_matrix,
    token_overlap_control,
)
from minirepro.papers.sparseinfer.speed import (
    byte_bound,
    dense_generate,
    flop_bound,
    sparseinfer_generate,
    time_decoding,
)
from minirepro.papers.sparseinfer.texts import TOPICS, calibration_texts, draw_units


@dataclass
class Config(ScaledConfig):
    """The chapter's knobs.

    Attributes:
        model_name: the model (``"smollm2-135m"`` at book scale, the tiny ``"lm-smoke"`` at
            smoke scale), a substrate artifact or a local checkpoint folder.
        token_sparsity: ``alpha``, the token-wise kept fraction of the non-zero activations (paper: 0.2).
        sparsity: ``gamma``, kept fraction of FFN neurons per sparsified layer (paper: 0.4).
        layers: ``"middle"`` (paper: first and last layer stay dense) or ``"all"``.
        n_units: test units (prompt and held-out continuation), drawn fresh from ``seed``; even.
        n_prompt, n_cont: sentences in a prompt and in its continuation.
        n_calib: calibration prompts (static hot sets, clusters), drawn from another stream of ``seed``.
        n_clusters: KMeans clusters of the similarity-guided variant.
        sweep: further kept fractions of the sparsity sweep (on the first ``n_sweep`` units).
        n_sweep: units of the sparsity sweep.
        decode_tokens: tokens generated in each timed decoding run.
        n_timing_prompts: prompts timed (each a median of ``timing_repeats``).
        timing_repeats: timing samples per arm and prompt (at least 5).
        chunk: units per batched forward.
        threads: torch threads for the batched passes (one: two are several times slower on a loaded
            2-core machine); the timings run on one.
    """

    model_name: str = "smollm2-135m"
    token_sparsity: float = 0.2
    sparsity: float = 0.4
    layers: str = "middle"
    n_units: int = 64
    n_prompt: int = 3
    n_cont: int = 2
    n_calib: int = 48
    n_clusters: int = 8
    sweep: tuple[float, ...] = (0.2, 0.6)
    n_sweep: int = 32
    decode_tokens: int = 16
    n_timing_prompts: int = 3
    timing_repeats: int = 5
    chunk: int = 32
    threads: int = 1

    PRESETS: ClassVar = {
        "smoke": {"model_name": "lm-smoke", "n_units": 12, "n_calib": 8, "n_clusters": 4, "n_sweep": 4,
                  "sweep": (0.2,), "decode_tokens": 4, "n_timing_prompts": 2, "chunk": 12},
        "book": {},
        "full": {"n_units": 256, "n_calib": 160, "n_sweep": 128, "n_timing_prompts": 8, "timing_repeats": 9},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("token_sparsity", "sparsity"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        if self.layers not in ("middle", "all"):
            raise ValueError(f"layers must be 'middle' or 'all', got {self.layers!r}")
        if self.n_units < 4 or self.n_units % 2:
            raise ValueError(f"n_units must be an even number >= 4, got {self.n_units}")
        if self.n_calib < self.n_clusters:
            raise ValueError("need n_calib >= n_clusters >= 1")
        if self.timing_repeats < 5 or self.decode_tokens < 2:
            raise ValueError("need timing_repeats >= 5, decode_tokens >= 2")
        if not 2 <= self.n_sweep <= self.n_units or self.chunk < 2:
            raise ValueError("need 2 <= n_sweep <= n_units and chunk >= 2")
        self.sweep = tuple(float(s) for s in self.sweep)
        if any(not 0 < s <= 1 for s in self.sweep):
            raise ValueError(f"sweep fractions must be in (0, 1], got {self.sweep}")


@torch.no_grad()
def calibrate(model, tok, cfg: Config, seed: int, layers: list[int]):
    """Static hot sets and the similarity index, fitted on ``n_calib`` calibration prompts."""
    acts = []
    for text in calibration_texts(cfg.n_calib, 20_000 + seed, cfg.n_prompt):
        store: dict = {}
        with capture_hidden(model, store):
            model(input_ids=torch.tensor([tok(text)["input_ids"]]), use_cache=False)
        acts.append([torch.cat(store[i])[0] for i in sorted(store)])
    static = static_hot_sets(acts, layers, cfg.sparsity)
    index = fit_similarity_index(acts, layers, cfg.n_clusters, cfg.token_sparsity, cfg.sparsity, seed=seed)
    return acts, static, index


def run_main(cfg: Config, model, tok) -> dict[str, Any]:
    """The main comparison (seed ``cfg.seed``): the methods' scores per unit, stability, similarity
    and its token control, and the masked-vs-sliced check."""
    seed = cfg.seed
    rng = set_seed(seed, threads=cfg.threads)
    n_layers = len(ffn_blocks(model))
    layers = sparse_layer_ids(n_layers, cfg.layers)
    d_ff = ffn_blocks(model)[0].d_ff
    units = draw_units(cfg.n_units, 10_000 + seed, cfg.n_prompt, cfg.n_cont)
    calib, static, index = calibrate(model, tok, cfg, seed, layers)
    ev = evaluate(model, tok, units, layers, cfg.token_sparsity, cfg.sparsity, rng, static, index,
                  METHODS, cfg.chunk)
    stab = stability(ev["prompt_core"], ev["cont_core"], units, layers, d_ff, cfg.sparsity)
    topics = [u.topic for u in units]
    sim, M, names, J = similarity(ev["prompt_core"], topics, layers, d_ff)
    special = set(tok.all_special_ids)
    tj = token_jaccard_matrix([[t for t in tok(u.prompt)["input_ids"] if t not in special] for u in units])
    control = token_overlap_control(J, tj, topics)
    masked_gap = masked_vs_sliced(model, tok, units[:2], layers, cfg.token_sparsity, cfg.sparsity)
    return {"units": units, "layers": layers, "n_layers": n_layers, "d_ff": d_ff, "eval": ev, "calib": calib,
            "stability": stab, "similarity": sim, "topic_matrix": (M, names), "control": control,
            "masked_vs_sliced": masked_gap}


def run_sweep(cfg: Config, model, tok, main: dict[str, Any]) -> pd.DataFrame:
    """The sparsity sweep: the fixed-set methods and the oracle at every kept fraction of ``cfg.sweep``
    on the first ``n_sweep`` units (static sets re-fitted per fraction), and the main run's rows at ``sparsity``."""
    rng = set_seed(cfg.seed + 1, threads=cfg.threads)
    units, layers, ev = main["units"][:cfg.n_sweep], main["layers"], main["eval"]
    rows = []
    for g in progress(cfg.sweep, desc="sparsity sweep"):
        st = static_hot_sets(main["calib"], layers, g)
        e = evaluate(model, tok, units, layers, cfg.token_sparsity, g, rng, st, None,
                     ("dense", "SparseInfer", "random", "static hot", "per-token oracle"), cfg.chunk)
        rows += [{"kept": g, "method": m, "nll": float(np.mean(v)), "agree": float(np.mean(e["agree"][m]))}
                 for m, v in e["nll"].items() if m != "dense"]
    rows += [{"kept": cfg.sparsity, "method": m, "nll": float(np.mean(ev["nll"][m][:cfg.n_sweep])),
              "agree": float(np.mean(ev["agree"][m][:cfg.n_sweep]))}
             for m in ("SparseInfer", "random", "static hot", "per-token oracle")]
    return pd.DataFrame(rows).sort_values(["method", "kept"])


def run_experiment(cfg: Config, model, tok) -> dict[str, Any]:
    """Everything for one run: :func:`run_main`, :func:`run_sweep` and :func:`time_speed`."""
    res = run_main(cfg, model, tok)
    res["sweep"] = run_sweep(cfg, model, tok, res)
    return {**res, **time_speed(model, tok, cfg, res["units"], res["layers"])}


def time_speed(model, tok, cfg: Config, units, layers) -> dict[str, Any]:
    """Decoding speed-up of SparseInfer over dense (interleaved medians), with the FLOP and byte bounds,
    on the first ``n_timing_prompts`` prompts, one thread; and the full-set check (every neuron kept
    decodes the dense tokens)."""
    torch.set_num_threads(1)
    speed, flops, bytes_, mism = [], [], [], 0
    try:
        for u in units[:cfg.n_timing_prompts]:
            ids = torch.tensor([tok(u.prompt)["input_ids"]])
            t = time_decoding(model, ids, cfg.decode_tokens, layers, cfg.token_sparsity, cfg.sparsity,
                              repeats=cfg.timing_repeats)
            speed.append(t.speedups["SparseInfer"])
            ctx = ids.shape[1] + cfg.decode_tokens // 2
            flops.append(flop_bound(model, cfg.sparsity, layers, ctx))
            bytes_.append(byte_bound(model, cfg.sparsity, layers, ctx))
            full = sparseinfer_generate(model, ids, cfg.decode_tokens, layers, cfg.token_sparsity, 1.0)
            mism += int((full != dense_generate(model, ids, cfg.decode_tokens)).sum())
    finally:
        torch.set_num_threads(cfg.threads)
    return {"speed": np.asarray(speed), "flop_bound": np.asarray(flops), "byte_bound": np.asarray(bytes_),
            "full_set_mismatches": mism}


def topics_table(res: dict[str, Any]) -> pd.DataFrame:
    """Per topic: the mean decoded NLL (nats/token) of dense, SparseInfer and random sets."""
    ev = res["eval"]
    df = pd.DataFrame({"topic": [u.topic for u in res["units"]], "dense": ev["nll"]["dense"],
                       "SparseInfer": ev["nll"]["SparseInfer"], "random": ev["nll"]["random"]})
    return df.groupby("topic", sort=False).mean()


__all__ = ["Config", "TOPICS", "calibrate", "run_experiment", "run_main", "run_sweep", "time_speed",
           "topics_table"]
