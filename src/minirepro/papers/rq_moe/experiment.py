"""The chapter's experiment: every quantizer on the same splits, same code size, several seeds."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, progress, set_seed
from minirepro.core.seed import threads_from_env
from minirepro.core.stats import per_seed_wide, seed_summary
from minirepro.papers.rq_moe.baselines import BASELINES, FaissQuantizer
from minirepro.papers.rq_moe.data import DATASETS, VectorSplits, load_vectors
from minirepro.papers.rq_moe.evaluate import late_drop, mse, recall_at, true_neighbours
from minirepro.papers.rq_moe.pretrained import stored_late_drop, stored_losses, stored_network
from minirepro.papers.rq_moe.quantizers import QINCo, RQMoE
from minirepro.papers.rq_moe.redraw import redraw_eval
from minirepro.papers.rq_moe.train import data_scale, train_quantizer

NEURAL: tuple[str, ...] = ("RQ-MoE", "QINCo")
METHODS: tuple[str, ...] = NEURAL + BASELINES


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature. Code size is ``M * log2(K)`` bits per vector."""

    n_train: int = 5000          # training vectors (quantizers are fitted on these only)
    n_database: int = 2000       # database vectors (encoded, decoded, searched)
    n_queries: int = 200         # query vectors (raw, never encoded)
    d: int = 32                  # vector dimension
    K: int = 32                  # codewords per step (5 bits)
    M: int = 4                   # steps of the headline comparison
    curve_M: tuple[int, ...] = (2, 4, 8)  # steps for the code-size curve (seed 0, synthetic)
    steps: int = 5000            # Adam steps for RQ-MoE and QINCo (the same budget)
    batch_size: int = 128
    lr: float = 3e-3
    lr_schedule: str = "cosine"  # learning-rate schedule {constant, cosine}
    pretrained: bool = True      # load the networks from the artifact when it matches the config
    n_experts: int = 4           # RQ-MoE: experts per step
    hidden: int = 16             # RQ-MoE: expert hidden width
    n_layers: int = 1            # RQ-MoE: residual blocks per expert
    qinco_hidden: int = 32       # QINCo: hidden width (parameters roughly matched to RQ-MoE)
    qinco_layers: int = 2        # QINCo: residual blocks per step
    kmeans_iters: int = 20       # k-means iterations of the faiss PQ and RQ codebooks
    opq_iters: int = 50          # OPQ rotation iterations (faiss's OPQMatrix default)
    lsq_train_iters: int = 25    # LSQ training iterations (faiss's LocalSearchQuantizer default)
    lsq_encode_iters: int = 16   # LSQ encoding local-search iterations (faiss's default)
    timing_M: tuple[int, ...] = (2, 4, 8, 16)
    timing_repeats: int = 9
    timing_batches: tuple[int, ...] = (64, 2000, 16384)  # codes per decode call in the timing
    n_seeds: int = 5             # seeds of the headline comparison
    eval_seed: int | None = None  # None: each seed's own database and queries; else a fresh draw (vectors)

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"n_train": 1000, "n_database": 500, "n_queries": 100, "steps": 10,
                  "pretrained": False,
                  "curve_M": (2, 4), "timing_M": (2, 4, 8), "timing_repeats": 5,
                  "timing_batches": (64, 500),
                  "kmeans_iters": 10, "n_seeds": 1},
        "book": {},
        "full": {"n_train": 30000, "n_database": 10000, "n_queries": 1000, "K": 64,
                 "steps": 2000, "batch_size": 256, "lr": 1e-3, "hidden": 32, "pretrained": False,
                 "qinco_hidden": 64, "timing_repeats": 7},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.K < 2 or self.K & (self.K - 1):
            raise ValueError(f"K must be a power of two >= 2, got {self.K}")
        for name in ("M", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.eval_seed is not None and not 0 <= int(self.eval_seed) < 2**32:
            raise ValueError(f"eval_seed must be None or in 0..2**32-1, got {self.eval_seed}")

    @property
    def nbits(self) -> int:
        if self.K < 2 or self.K & (self.K - 1):
            raise ValueError(f"K must be a power of two >= 2, got {self.K}")
        return int(math.log2(self.K))


def build_neural(method: str, cfg: Config, M: int) -> RQMoE | QINCo:
    """An RQ-MoE or QINCo network of the config's size with ``M`` steps (not yet initialised)."""
    if method == "RQ-MoE":
        return RQMoE(cfg.d, cfg.K, M, n_experts=cfg.n_experts, hidden=cfg.hidden,
                     n_layers=cfg.n_layers)
    if method == "QINCo":
        return QINCo(cfg.d, cfg.K, M, hidden=cfg.qinco_hidden, n_layers=cfg.qinco_layers)
    raise ValueError(f"unknown neural method {method!r}; expected one of {NEURAL}")


def fit_neural(name: str, cfg: Config, dataset: str, xt: np.ndarray, rq, M: int,
               seed: int) -> tuple[Any, dict[str, Any]]:
    """RQ-MoE or QINCo (``name``) with ``M`` steps: loaded from the artifact when
    ``cfg.pretrained`` and the config match its recipe, else initialised at ``rq``'s
    codebooks and trained live on ``xt`` (n, d). Returns the network and its row's
    extra columns (``trained``, ``late_drop``, ``params``, ``loss_first``, ``loss_last``)."""
    q = stored_network(cfg, name, dataset, seed, M) if cfg.pretrained else None
    if q is not None:
        first, last = stored_losses(name, dataset, seed, M)
        extra = {"trained": "artifact", "late_drop": stored_late_drop(name, dataset, seed, M)}
    else:
        torch.manual_seed(seed)
        q = build_neural(name, cfg, M).init_from_rq(rq.codebooks(), data_scale(xt))
        losses = train_quantizer(q, xt, cfg.steps, cfg.batch_size, cfg.lr, seed=seed,
                                 desc=f"{name} M={M} seed={seed}", schedule=cfg.lr_schedule)
        first, last = losses[0], losses[-1]
        extra = {"trained": "live", "late_drop": late_drop(losses)}
    return q, extra | {"params": q.n_parameters(), "loss_first": first, "loss_last": last}


def run_setting(splits: VectorSplits, cfg: Config, M: int, seed: int,
                methods: tuple[str, ...] = METHODS) -> tuple[list[dict], dict]:
    """Fit, encode and decode the database with every method; measure MSE and recall.

    RQ-MoE and QINCo start from the codebooks of faiss's beam-1 ``ResidualQuantizer``
    (the "RQ" row), so at step 0 of training they are exactly that quantizer. With
    ``cfg.pretrained`` and a config equal to the artifact's recipe, the networks trained
    this way are loaded from ``artifacts/rq-moe-quantizers`` instead of trained again
    (``trained`` column: "artifact" or "live").

    Returns:
        (rows, models): one dict per method with ``mse``, ``R@1``, ``R@10``, timings
        (seconds, this run only) and sizes; and the fitted quantizers by name.
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; expected some of {METHODS}")
    import faiss

    set_seed(seed)
    faiss.omp_set_num_threads(threads_from_env())
    xt, xb, xq = splits.train, splits.database, splits.queries
    gt = true_neighbours(xq, xb)
    models: dict[str, Any] = {}
    rq = FaissQuantizer("RQ", cfg.d, M, cfg.nbits, kmeans_iters=cfg.kmeans_iters, seed=seed).fit(xt)
    rows = []
    for name in methods:
        t0 = time.perf_counter()
        extra: dict[str, Any] = {}
        if name == "RQ":
            q = rq
        elif name in BASELINES:
            q = FaissQuantizer(name, cfg.d, M, cfg.nbits, opq_iters=cfg.opq_iters,
                               lsq_train_iters=cfg.lsq_train_iters,
                               lsq_encode_iters=cfg.lsq_encode_iters,
                               kmeans_iters=cfg.kmeans_iters, seed=seed).fit(xt)
        else:
            q, extra = fit_neural(name, cfg, splits.name, xt, rq, M, seed)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        codes = np.asarray(q.encode(xb))
        enc_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        dec = np.asarray(q.decode(codes))
        dec_s = time.perf_counter() - t0
        rec = recall_at(xq, dec, gt)
        rows.append({"dataset": splits.name, "seed": seed, "method": name, "M": M,
                     "bits": M * cfg.nbits, "mse": mse(xb, dec), "R@1": rec[1], "R@10": rec[10],
                     "fit_s": fit_s, "encode_s": enc_s, "decode_s": dec_s, **extra})
        models[name] = q
    return rows, models


def vectors(dataset: str, cfg: Config, seed: int) -> VectorSplits:
    """The seed's vectors at the config's sizes; with ``cfg.eval_seed``, a fresh database and
    query draw from the same distribution, the training vectors unchanged (:func:`~.redraw.redraw_eval`)."""
    splits = load_vectors(dataset, cfg.n_train, cfg.n_database, cfg.n_queries, d=cfg.d, seed=seed)
    return splits if cfg.eval_seed is None else redraw_eval(splits, seed, cfg.eval_seed)


def run_experiment(cfg: Config, datasets: tuple[str, ...] = DATASETS, M: int | None = None,
                   methods: tuple[str, ...] = METHODS) -> tuple[pd.DataFrame, dict[tuple[str, int], dict]]:
    """``run_setting`` on each dataset and seed of ``cfg.seeds`` (fresh data draw per seed,
    :func:`vectors`).

    Returns:
        (one row per method and run, the fitted quantizers by ``(dataset, seed)``).
    """
    M = M or cfg.M
    rows: list[dict] = []
    models: dict[tuple[str, int], dict] = {}
    for ds, seed in progress([(ds, s) for ds in datasets for s in cfg.seeds], desc="settings"):
        splits = vectors(ds, cfg, seed)
        new_rows, models[ds, seed] = run_setting(splits, cfg, M, seed, methods)
        rows += new_rows
    return pd.DataFrame(rows), models


def code_size_curve(cfg: Config, headline: pd.DataFrame, dataset: str = "synthetic",
                    seed: int = 0) -> pd.DataFrame:
    """Every method at each ``cfg.curve_M`` on one dataset and seed.

    Rows for ``M == cfg.M`` are taken from ``headline`` (same data, same seed), the other
    code sizes are run here.
    """
    parts = [headline[(headline.dataset == dataset) & (headline.seed == seed)
                      & (headline.M == cfg.M)]]
    for M in cfg.curve_M:
        if M != cfg.M:
            parts.append(run_experiment(replace(cfg, seed=seed, n_seeds=1), (dataset,), M=M)[0])
    return pd.concat(parts, ignore_index=True).sort_values(["method", "M"], ignore_index=True)


def decode_time_curve(cfg: Config, n_codes: int | None = None, seed: int = 0) -> pd.DataFrame:
    """Median decode time of QINCo, RQ-MoE (fused) and RQ-MoE (serial) for each ``cfg.timing_M``.

    All three are timed interleaved in one run per M on the same random codes
    (``n_codes`` of them, default ``cfg.n_database``). Returns one row per (M, method)
    with ``seconds``, ``speedup_vs_QINCo``, the ``depth`` bound of ``sequential_depth`` and
    ``macs``, the multiply-adds per decoded vector of ``decode_macs`` (the serial RQ-MoE
    decoder does the fused one's products step by step, without the instruction product).
    """
    from minirepro.core import compare_times
    from minirepro.papers.rq_moe.evaluate import model_decode_macs, sequential_depth

    set_seed(seed)
    n_codes = n_codes or cfg.n_database
    rows = []
    for M in progress(cfg.timing_M, desc="decode timing"):
        models = timing_models(cfg, M, seed)
        codes = torch.as_tensor(np.random.default_rng(seed).integers(0, cfg.K, size=(n_codes, M)))
        q, r = models["QINCo"], models["RQ-MoE"]
        fns = {"QINCo": lambda q=q, c=codes: q.decode(c),
               "RQ-MoE": lambda r=r, c=codes: r.decode(c),
               "RQ-MoE (serial)": lambda r=r, c=codes: r.decode_serial(c)}
        t = compare_times(fns, repeats=cfg.timing_repeats, warmup=1, baseline="QINCo")
        layers = {"QINCo": cfg.qinco_layers, "RQ-MoE": cfg.n_layers, "RQ-MoE (serial)": cfg.n_layers}
        for name, sec in t.medians.items():
            depth = sequential_depth("QINCo" if name != "RQ-MoE" else "RQ-MoE", M, layers[name])
            macs = model_decode_macs(q if name == "QINCo" else r)
            if name == "RQ-MoE (serial)":
                macs -= (M - 1) ** 2 * cfg.d  # no triangular product: the instructions are a running sum
            rows.append({"batch": n_codes, "M": M, "method": name, "seconds": sec,
                         "speedup_vs_QINCo": t.speedups[name], "depth": depth, "macs": macs})
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame, metrics: tuple[str, ...] = ("mse", "R@1", "R@10")) -> pd.DataFrame:
    """Mean, standard deviation and 95% t interval over seeds per dataset and method
    (``minirepro.core.stats.seed_summary``), methods in book order."""
    out = seed_summary(df, ["dataset", "method"], list(metrics))
    out.index = pd.MultiIndex.from_tuples(out.index, names=["dataset", "method"])
    order = {m: i for i, m in enumerate(METHODS)}
    return out.sort_index(level=1, key=lambda s: s.map(order)).sort_index(level=0, sort_remaining=False)


def per_seed(df: pd.DataFrame, dataset: str, column: str = "mse",
             relative_to: str | None = None) -> pd.DataFrame:
    """``column`` of every method on one dataset, one row per seed (aligned for paired rules).

    With ``relative_to`` (e.g. ``"RQ"``) each row is divided by that method's value on the
    same seed, so a seed's harder or easier data draw cancels out.
    """
    wide = per_seed_wide(df, column, dataset=dataset)
    if relative_to is not None:
        wide = wide.div(wide[relative_to], axis=0)
    return wide


def timing_models(cfg: Config, M: int, seed: int = 0) -> dict[str, RQMoE | QINCo]:
    """RQ-MoE and QINCo with ``M`` steps and perturbed weights, for decode timing only.

    Decode cost does not depend on the weights' values, so these need no training.
    """
    from minirepro.papers.rq_moe.evaluate import perturb_

    rng = np.random.default_rng(seed)
    books = rng.normal(size=(M, cfg.K, cfg.d)).astype(np.float32)
    out = {}
    for name in ("QINCo", "RQ-MoE"):
        torch.manual_seed(seed)
        out[name] = perturb_(build_neural(name, cfg, M).init_from_rq(books), seed=seed)
    return out
