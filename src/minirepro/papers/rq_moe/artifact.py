"""The book-scale neural quantizers, trained once as a checked artifact (``artifacts/rq-moe-quantizers/``).

RQ-MoE and QINCo on both vector sets and five seeds at the headline code size, plus the
code-size curve's other step counts on the synthetic set (first seed), each trained with
the same Adam budget from the same faiss RQ start, exactly as a live run of
``run_setting`` would (same data, seeds and initialisation). Re-make with
``minirepro artifacts build rq-moe-quantizers`` (two worker processes, one thread each).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from minirepro.core import artifacts

NAME = "rq-moe-quantizers"
WEIGHTS = "quantizers.safetensors"
META = "quantizers.json"
CURVE_EVERY = 20  # the stored curve is the mean loss of each block of this many steps


@dataclass
class QuantizersRecipe:
    """Sizes and training of the stored networks (the book preset of ``rq_moe.Config``)."""

    n_train: int = 5000
    n_database: int = 2000
    n_queries: int = 200
    d: int = 32
    K: int = 32
    M: int = 4
    curve_M: tuple[int, ...] = (2, 8)
    steps: int = 5000
    batch_size: int = 128
    lr: float = 3e-3
    lr_schedule: str = "cosine"
    n_experts: int = 4
    hidden: int = 16
    n_layers: int = 1
    qinco_hidden: int = 32
    qinco_layers: int = 2
    kmeans_iters: int = 20
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    datasets: tuple[str, ...] = ("synthetic", "digits")
    workers: int = 2

    def jobs(self) -> list[tuple[str, str, int, int]]:
        """Every (method, dataset, seed, M) to train: headline M on all, curve M on synthetic seed 0."""
        out = [(m, ds, s, self.M) for ds in self.datasets for s in self.seeds
               for m in ("RQ-MoE", "QINCo")]
        out += [(m, self.datasets[0], self.seeds[0], M) for M in self.curve_M
                for m in ("RQ-MoE", "QINCo")]
        return out


def key(method: str, dataset: str, seed: int, M: int) -> str:
    """The prefix of one network's tensors in the weights file."""
    return f"{method}/{dataset}/{seed}/M{M}/"


def network(spec: QuantizersRecipe, method: str, M: int):
    """A fresh (uninitialised) RQ-MoE or QINCo of the recipe's size with ``M`` steps."""
    from minirepro.papers.rq_moe.quantizers import QINCo, RQMoE

    if method == "RQ-MoE":
        return RQMoE(spec.d, spec.K, M, n_experts=spec.n_experts, hidden=spec.hidden,
                     n_layers=spec.n_layers)
    return QINCo(spec.d, spec.K, M, hidden=spec.qinco_hidden, n_layers=spec.qinco_layers)


def _job(args: tuple) -> dict:
    spec, (method, ds, seed, M) = args
    import faiss

    from minirepro.core import set_seed
    from minirepro.papers.rq_moe.baselines import FaissQuantizer
    from minirepro.papers.rq_moe.data import load_vectors
    from minirepro.papers.rq_moe.train import data_scale, train_quantizer

    t0 = time.process_time()
    splits = load_vectors(ds, spec.n_train, spec.n_database, spec.n_queries, d=spec.d, seed=seed)
    set_seed(seed)
    faiss.omp_set_num_threads(1)
    nbits = int(np.log2(spec.K))
    rq = FaissQuantizer("RQ", spec.d, M, nbits, kmeans_iters=spec.kmeans_iters, seed=seed).fit(splits.train)
    torch.manual_seed(seed)
    q = network(spec, method, M).init_from_rq(rq.codebooks(), data_scale(splits.train))
    losses = train_quantizer(q, splits.train, spec.steps, spec.batch_size, spec.lr, seed=seed,
                             desc=f"{method} {ds} seed={seed} M={M}", schedule=spec.lr_schedule)
    xb = splits.database
    err = {name: float(((xb - np.asarray(dec, dtype=np.float64)) ** 2).sum(1).mean())
           for name, dec in (("RQ", rq.decode(rq.encode(xb))), (method, q.decode(q.encode(xb)).numpy()))}
    blocks = np.asarray(losses[: len(losses) // CURVE_EVERY * CURVE_EVERY]).reshape(-1, CURVE_EVERY)
    return {"job": (method, ds, seed, M), "state": {k: v.detach().contiguous() for k, v in q.state_dict().items()},
            "curve": [round(float(v), 5) for v in blocks.mean(1)], "first_loss": round(losses[0], 5),
            "db_mse": err[method], "db_mse_rq": err["RQ"], "cpu": time.process_time() - t0,
            "data": artifacts.sha256_hex(np.ascontiguousarray(splits.train, dtype=np.float32).tobytes())}


@artifacts.recipe(NAME, config=QuantizersRecipe(),
                  sources=("minirepro.papers.rq_moe.quantizers", "minirepro.papers.rq_moe.train",
                           "minirepro.papers.rq_moe.rq", "minirepro.papers.rq_moe.data",
                           "minirepro.papers.rq_moe.baselines"),
                  description="RQ-MoE chapter: RQ-MoE and QINCo trained to convergence (same Adam "
                              "budget) on both vector sets, 5 seeds, plus the code-size curve; fp32")
def build_quantizers(spec: QuantizersRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Train every network of ``spec.jobs()``; store weights, curves, MSEs."""
    with ProcessPoolExecutor(spec.workers) as pool:
        done = list(pool.map(_job, [(spec, j) for j in spec.jobs()]))
    state, nets = {}, {}
    for r in done:
        method, ds, seed, M = r["job"]
        state.update({key(method, ds, seed, M) + k: v for k, v in r["state"].items()})
        nets[key(method, ds, seed, M)] = {k: r[k] for k in ("curve", "first_loss", "db_mse", "db_mse_rq")} | {
            "method": method, "dataset": ds, "seed": seed, "M": M, "cpu_seconds": round(r["cpu"], 1)}
    meta = {"recipe": json.loads(json.dumps(asdict(spec))), "curve_every": CURVE_EVERY, "networks": nets}
    artifacts.write_files(out, WEIGHTS, state, {META: meta}, indent=1)
    quality = {}
    for ds in spec.datasets:
        for method in ("RQ-MoE", "QINCo"):
            rel = [n["db_mse"] / n["db_mse_rq"] for n in nets.values()
                   if n["method"] == method and n["dataset"] == ds and n["M"] == spec.M]
            quality[f"db mse / RQ {method} {ds}"] = round(float(np.mean(rel)), 4)
    quality["train cpu seconds"] = round(sum(r["cpu"] for r in done), 1)
    digest = artifacts.sha256_hex("".join(sorted({r["data"] for r in done})).encode())
    return artifacts.BuildResult(quality=quality, data_hash=digest)
