"""Loading the book-scale networks from their checked artifact (``artifacts/rq-moe-quantizers/``).

Kept apart from the recipe (:mod:`minirepro.papers.rq_moe.artifact`), whose code is hashed
into the manifest: loading code can change without a rebuild.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from safetensors.torch import load_file

from minirepro.core import artifacts
from minirepro.papers.rq_moe.quantizers import QINCo, RQMoE

NAME = "rq-moe-quantizers"
WEIGHTS = "quantizers.safetensors"
META = "quantizers.json"
# config fields that must equal the recipe's for a stored network to stand in for a live run
MATCH = ("n_train", "n_database", "n_queries", "d", "K", "steps", "batch_size", "lr", "lr_schedule",
         "n_experts", "hidden", "n_layers", "qinco_hidden", "qinco_layers", "kmeans_iters")


@lru_cache(maxsize=2)
def _load(folder: str) -> tuple[dict[str, Any], dict]:
    meta = json.loads((Path(folder) / META).read_text(encoding="utf-8"))
    return meta, load_file(str(Path(folder) / WEIGHTS))


def artifact_meta() -> dict[str, Any]:
    """The recipe, loss curves and database MSEs of every stored network."""
    return _load(str(artifacts.verified_folder(NAME)))[0]


def mismatches(cfg: Any) -> list[str]:
    """The config fields in which ``cfg`` differs from the stored networks' recipe (empty: usable)."""
    rec = artifact_meta()["recipe"]
    return [f for f in MATCH if getattr(cfg, f) != rec[f]]


def stored_network(cfg: Any, method: str, dataset: str, seed: int, M: int) -> RQMoE | QINCo | None:
    """The stored trained network for this setting (eval mode), or ``None`` if there is none.

    ``None`` when the config differs from the recipe in any field of ``MATCH`` or the
    (method, dataset, seed, M) was not trained; the caller then trains live.
    """
    if mismatches(cfg):
        return None
    meta, state = _load(str(artifacts.verified_folder(NAME)))
    prefix = f"{method}/{dataset}/{seed}/M{M}/"
    if prefix not in meta["networks"]:
        return None
    if method == "RQ-MoE":
        net = RQMoE(cfg.d, cfg.K, M, n_experts=cfg.n_experts, hidden=cfg.hidden, n_layers=cfg.n_layers)
    else:
        net = QINCo(cfg.d, cfg.K, M, hidden=cfg.qinco_hidden, n_layers=cfg.qinco_layers)
    net.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return net.eval()


def stored_losses(method: str, dataset: str, seed: int, M: int) -> tuple[float, float]:
    """(first step's loss, mean loss of the last stored block) of a stored network."""
    n = artifact_meta()["networks"][f"{method}/{dataset}/{seed}/M{M}/"]
    return n["first_loss"], n["curve"][-1]


def stored_late_drop(method: str, dataset: str, seed: int, M: int) -> float:
    """``late_drop`` of a stored network's loss curve (its block means)."""
    from minirepro.papers.rq_moe.evaluate import late_drop

    return late_drop(artifact_meta()["networks"][f"{method}/{dataset}/{seed}/M{M}/"]["curve"])


def training_curves(M: int | None = None) -> pd.DataFrame:
    """The stored loss curves, long format: method, dataset, seed, M, step, loss (block means)."""
    meta = artifact_meta()
    every, rows = meta["curve_every"], []
    for n in meta["networks"].values():
        if M is not None and n["M"] != M:
            continue
        rows += [{"method": n["method"], "dataset": n["dataset"], "seed": n["seed"], "M": n["M"],
                  "step": (i + 1) * every, "loss": v} for i, v in enumerate(n["curve"])]
    return pd.DataFrame(rows)
