"""The chapter's experiment: federated rounds for every method, seed and λ, in one batched model.

Each *run* is one federation (a method, a seed, a ridge weight, the modalities taking part)
with its own Flower strategy. All runs' clients train together as groups of one
:class:`~minirepro.papers.uniflow.model.GroupedUniModel`; between rounds every run's
strategy aggregates its clients' uploads exactly as on a Flower server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, progress
from minirepro.core.stats import seed_summary
from minirepro.papers.uniflow import aggregation as agg
from minirepro.papers.uniflow.data import MODALITIES, TEXT_VOCAB, Federation, make_federation
from minirepro.papers.uniflow.model import GroupedUniModel, load_backbone
from minirepro.papers.uniflow.strategies import (
    METHODS,
    LoRASpec,
    LoRAStrategy,
    client_update,
    message_bytes,
    upload_keys,
)


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature (the paper: ImageBind encoders + Vicuna-7B, LoRA in both)."""

    clients_per_modality: int = 3
    n_train: int = 450
    n_test: int = 200
    dirichlet: float = 0.1
    rank: int = 4
    lora_alpha: float = 8.0
    rounds: int = 8
    proj_steps: int = 2
    lora_steps: int = 4
    batch_size: int = 8
    lr: float = 1e-2
    lr_proj: float = 3e-2
    eval_every: int = 2
    lam_rel: float = 1e-3
    lam_grid: tuple[float, ...] = (1e-4, 1e-2, 1.0)
    lam_seeds: int = 3
    n_seeds: int = 5
    backbone: str = "lm-smoke"
    methods: tuple[str, ...] = METHODS
    text_only: bool = True
    PRESETS: ClassVar = {
        "smoke": {"rounds": 2, "n_seeds": 1, "n_test": 60, "lam_grid": (1.0,), "lam_seeds": 1,
                  "eval_every": 1},
        "book": {},
        "full": {"rounds": 30, "n_seeds": 10, "n_train": 900, "clients_per_modality": 5},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown methods {bad}; expected some of {', '.join(METHODS)}")
        for name in ("clients_per_modality", "rank", "rounds", "lora_steps", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.proj_steps < 0:
            raise ValueError(f"proj_steps must be >= 0, got {self.proj_steps}")
        for lam in (self.lam_rel, *self.lam_grid):
            if not (np.isfinite(lam) and lam >= 0):
                raise ValueError(f"the ridge weight lambda must be a finite number >= 0, got {lam}")
        if not (self.dirichlet > 0 and self.lora_alpha > 0 and self.lr > 0 and self.lr_proj > 0):
            raise ValueError("dirichlet, lora_alpha, lr and lr_proj must be positive")
        if self.eval_every < 1:
            raise ValueError(f"eval_every must be a positive integer, got {self.eval_every}")


@dataclass(frozen=True)
class RunSpec:
    """One federation: method, seed, relative ridge weight, modalities, and a label."""

    method: str
    seed: int
    lam_rel: float
    modalities: tuple[str, ...]
    arm: str  # "main", "lambda" or "text-only"


def plan_runs(cfg: Config, seeds: list[int]) -> list[RunSpec]:
    """The main comparison, the λ sweep (FedA2-LoRA) and the text-only arm, for every seed."""
    runs = [RunSpec(m, s, cfg.lam_rel, MODALITIES, "main") for s in seeds for m in cfg.methods]
    if "FedA2-LoRA" in cfg.methods:
        runs += [RunSpec("FedA2-LoRA", s, lam, MODALITIES, "lambda") for s in seeds[:cfg.lam_seeds]
                 for lam in cfg.lam_grid if lam != cfg.lam_rel]
        if cfg.text_only:
            runs += [RunSpec("FedA2-LoRA", s, cfg.lam_rel, ("text",), "text-only") for s in seeds]
    return runs


def initial_arrays(spec: LoRASpec, d: int, seed: int, text_embed: np.ndarray) -> dict[str, np.ndarray]:
    """[reconstruction] The initial global model of a run: ``A ~ N(0, 1/d_in)``, ``B = 0``,
    small random head and projectors; the text encoder starts as the LM's own embedding rows
    of the text vocabulary (``text_embed``, ``(V_text, d)``)."""
    rng = np.random.default_rng(10_000 + seed)
    f32 = np.float32
    out = {}
    for m, d_out, d_in in spec.modules:
        out[f"lora.{m}.A"] = (rng.normal(size=(spec.rank, d_in)) * spec.init_scale).astype(f32)
        out[f"lora.{m}.B"] = np.zeros((d_out, spec.rank), f32)
    out["head.w"] = (rng.normal(size=(10, d)) * 0.05).astype(f32)
    out["head.b"] = np.zeros(10, f32)
    for mod, f in (("image", 16), ("speech", 16)):
        out[f"enc.{mod}.w"] = (rng.normal(size=(f, d)) * 0.1 / np.sqrt(f) * 3).astype(f32)
        out[f"enc.{mod}.b"] = np.zeros(d, f32)
    out["enc.text.w"] = np.asarray(text_embed, dtype=f32).copy()
    out["enc.text.b"] = np.zeros(d, f32)
    return out


@dataclass
class Experiment:
    """Everything a run of the chapter produced."""

    runs: list[RunSpec]
    rounds: pd.DataFrame   # one row per (run, round): accuracy, error, drift, bytes
    federations: dict[int, Federation]
    spec: LoRASpec
    n_groups: int
    skew: pd.DataFrame = field(default_factory=pd.DataFrame)


def _batches(fed: Federation, rng: np.random.Generator, b: int) -> list[np.ndarray]:
    return [rng.integers(0, len(c.y), size=b) for c in fed.clients]


def run_experiment(cfg: Config) -> Experiment:
    """The chapter's experiment: every run of :func:`plan_runs` on the seeds ``cfg.seeds``, for
    ``cfg.rounds`` rounds.

    A round: each client applies the server's message, trains ``proj_steps`` steps of its
    projector and the head (stage I) and then ``lora_steps`` steps of the LoRA only
    (stage II, the paper's "II-stage" local training), and uploads; the run's strategy
    aggregates. The relative aggregation error, the clients' A drift, bytes up and down and
    the test accuracy (each client's model on its modality's test set) are recorded.
    """
    seeds = cfg.seeds
    runs = plan_runs(cfg, seeds)
    feds = {s: make_federation(cfg.clients_per_modality, cfg.n_train, cfg.n_test, cfg.dirichlet, s)
            for s in seeds}
    members = []  # (run index, client index in its federation)
    for r, run in enumerate(runs):
        members += [(r, i) for i, c in enumerate(feds[run.seed].clients) if c.modality in run.modalities]
    model = GroupedUniModel(load_backbone(cfg.backbone), [feds[runs[r].seed].clients[i].modality
                                                          for r, i in members], cfg.rank, cfg.lora_alpha)
    spec = LoRASpec(model.modules_spec(), cfg.rank, cfg.lora_alpha, 1.0 / np.sqrt(model.d))
    groups_of = {r: [g for g, (rr, _) in enumerate(members) if rr == r] for r in range(len(runs))}
    text_embed = model.embed.weight[TEXT_VOCAB[0]:TEXT_VOCAB[1]].detach().numpy()
    strategies = []
    for run in runs:
        cl = feds[run.seed].clients
        strategies.append(LoRAStrategy(run.method, spec, initial_arrays(spec, model.d, run.seed, text_embed),
                                       run.lam_rel, {c.cid: c.modality for c in cl}, seed=run.seed))
    ffa = torch.tensor([runs[r].method == "FFA-LoRA" for r, _ in members])
    rows: list[dict] = []
    bytes_down = _broadcast(model, runs, feds, members, groups_of, strategies, spec)
    acc = _evaluate(model, runs, feds, members, cfg)
    for r in range(len(runs)):
        rows.append(dict(run=r, round=0, error=np.nan, drift=np.nan, up=0, down=bytes_down[r], **acc[r]))
    for rnd in progress(range(1, cfg.rounds + 1), desc="rounds"):
        _local_train(model, runs, feds, members, cfg, rnd, ffa)
        up, err, drift = _aggregate(model, runs, feds, members, groups_of, strategies, spec, rnd)
        bytes_down = _broadcast(model, runs, feds, members, groups_of, strategies, spec)
        err = {r: _error(model, groups_of[r], [feds[runs[r].seed].clients[members[g][1]] for g in
                                               groups_of[r]], spec, err[r]) for r in range(len(runs))}
        last = rnd == cfg.rounds
        acc = _evaluate(model, runs, feds, members, cfg) if last or rnd % cfg.eval_every == 0 else {
            r: {k: np.nan for k in acc[r]} for r in range(len(runs))}
        for r in range(len(runs)):
            rows.append(dict(run=r, round=rnd, error=err[r], drift=drift[r], up=up[r],
                             down=bytes_down[r], **acc[r]))
    table = pd.DataFrame(rows)
    meta = pd.DataFrame([dict(run=r, method=x.method, seed=x.seed, lam_rel=x.lam_rel, arm=x.arm)
                         for r, x in enumerate(runs)])
    table = meta.merge(table, on="run")
    skew = pd.DataFrame([{"seed": s, **{f"skew {m}": v for m, v in f.skew.items()}} for s, f in feds.items()])
    return Experiment(runs, table, feds, spec, len(members), skew)


def _broadcast(model, runs, feds, members, groups_of, strategies, spec) -> dict[int, int]:
    """Every client applies its strategy's message; returns bytes sent per run."""
    sent = {}
    for r, strat in enumerate(strategies):
        total = 0
        for g in groups_of[r]:
            c = feds[runs[r].seed].clients[members[g][1]]
            named = strat.message_for(c.cid)  # what strat.fit_ins(cid) serialises
            total += message_bytes(named)
            state = client_update(model.get_state(g), named, spec, strat.reset_seed)
            model.set_state(g, state)
        sent[r] = total
    return sent


def _inputs(model, feds, runs, members, idx_of) -> tuple[dict, torch.Tensor]:
    xs, ys = {}, [None] * len(members)
    for m, gs in model.idx.items():
        batch = []
        for g in gs:
            r, i = members[g]
            c = feds[runs[r].seed].clients[i]
            ix = idx_of(g, c)
            batch.append(c.x[ix])
            ys[g] = c.y[ix]
        xs[m] = torch.as_tensor(np.stack(batch))
    return xs, torch.as_tensor(np.stack(ys))


def _local_train(model, runs, feds, members, cfg: Config, rnd: int, ffa: torch.Tensor) -> None:
    """Stage I (projector + head) then stage II (LoRA), fresh Adam per stage, same batches for
    every run of a seed (the batch stream depends on the seed, client and round only)."""
    stages = [(list(model.enc_w.values()) + list(model.enc_b.values()) + [model.head_w, model.head_b],
               cfg.proj_steps, cfg.lr_proj), (model.lora_params(), cfg.lora_steps, cfg.lr)]
    rngs = {s: np.random.default_rng([s, rnd]) for s in {r.seed for r in runs}}
    for params, steps, lr in stages:
        opt = torch.optim.Adam(params, lr=lr)
        for _ in range(steps):
            draws = {s: _batches(feds[s], rng, cfg.batch_size) for s, rng in rngs.items()}
            xs, ys = _inputs(model, feds, runs, members,
                             lambda g, c, d=draws: d[runs[members[g][0]].seed][members[g][1]])
            logits = model(xs)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ys.reshape(-1),
                                                     reduction="sum") / cfg.batch_size
            opt.zero_grad()
            loss.backward()
            if params is stages[1][0] and ffa.any():
                for m in model.lora.values():
                    m.lora_A["default"].weight.grad[ffa] = 0.0
            opt.step()


def _aggregate(model, runs, feds, members, groups_of, strategies, spec, rnd):
    """Each run's clients upload (as Flower ``FitRes``); its strategy aggregates."""
    up, err_in, drift = {}, {}, {}
    for r, strat in enumerate(strategies):
        results, states, p = [], [], []
        keys = upload_keys(runs[r].method, spec)
        for g in groups_of[r]:
            c = feds[runs[r].seed].clients[members[g][1]]
            st = model.get_state(g)
            named = {k: st[k] for k in keys}
            named.update({k: v for k, v in st.items() if k.startswith(("head.", "enc."))})
            results.append(named)
            states.append(st)
            p.append(len(c.y))
        up[r] = sum(message_bytes(named) for named in results)
        target = {m: agg.target_update([s[f"lora.{m}.A"] for s in states], [s[f"lora.{m}.B"] for s in states],
                                       p, spec.scaling) for m, _, _ in spec.modules}
        err_in[r] = (states, p, target)
        drift[r] = float(np.mean([agg.a_drift([s[f"lora.{m}.A"] for s in states], p)
                                  for m, _, _ in spec.modules]))
        # what strat.aggregate_fit does with these uploads as Flower FitRes (a unit test checks it)
        strat.aggregate_named(rnd, results, p, [feds[runs[r].seed].clients[members[g][1]].modality
                                                for g in groups_of[r]])
    return up, err_in, drift


def _error(model, groups, clients, spec: LoRASpec, before) -> float:
    """Eq. (uniflow-eq-error) over all modules: the clients' new models against ``dW*``."""
    states, p, target = before
    w = np.asarray(p, float) / np.sum(p)
    num = den = 0.0
    for m, _, _ in spec.modules:
        upd = 0.0
        for wi, g, old in zip(w, groups, states, strict=True):
            new = model.get_state(g)
            upd = upd + wi * (spec.scaling * new[f"lora.{m}.B"].astype(np.float64) @ new[f"lora.{m}.A"]
                              + new[f"base.{m}"] - old[f"base.{m}"])
        num += float(np.linalg.norm(upd - target[m]) ** 2)
        den += float(np.linalg.norm(target[m]) ** 2)
    return float(np.sqrt(num / max(den, 1e-300)))


@torch.no_grad()
def _evaluate(model, runs, feds, members, cfg: Config, chunk: int = 50) -> dict[int, dict]:
    """Each group's model on its modality's test set; per run the mean over its clients,
    overall and per modality."""
    n = len(next(iter(feds.values())).test["image"].y) if feds else 0
    correct = np.zeros(len(members))
    for lo in range(0, n, chunk):
        ix = np.arange(lo, min(n, lo + chunk))
        xs = {}
        for m, gs in model.idx.items():
            xs[m] = torch.as_tensor(np.stack([feds[runs[members[g][0]].seed].test[m].x[ix] for g in gs]))
        ys = torch.as_tensor(np.stack([feds[runs[r].seed].test[model.modality[g]].y[ix]
                                       for g, (r, _) in enumerate(members)]))
        correct += (model(xs).argmax(-1) == ys).sum(1).numpy()
    acc = correct / n
    out = {}
    for r in range(len(runs)):
        gs = [g for g, (rr, _) in enumerate(members) if rr == r]
        res = {"accuracy": float(np.mean(acc[gs]))}
        for m in MODALITIES:
            mg = [g for g in gs if model.modality[g] == m]
            res[f"acc {m}"] = float(np.mean(acc[mg])) if mg else np.nan
        out[r] = res
    return out


def final(table: pd.DataFrame, arm: str = "main") -> pd.DataFrame:
    """The last round of each run of ``arm``, with cumulative bytes, one row per (method, seed)."""
    t = table[table.arm == arm].copy()
    t["bytes"] = t.groupby("run")[["up", "down"]].cumsum().sum(axis=1)
    last = t[t["round"] == t["round"].max()].copy()
    mean_err = t[t["round"] > 0].groupby("run")["error"].mean().rename("mean error")
    mean_drift = t[t["round"] > 0].groupby("run")["drift"].mean().rename("mean drift")
    per_round = t[t["round"] > 1].groupby("run")[["up", "down"]].mean().sum(axis=1).rename("bytes/round")
    return last.merge(mean_err, on="run").merge(mean_drift, on="run").merge(per_round, on="run")


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread over seeds of the final accuracy, mean error and drift, bytes per round."""
    f = final(table)
    return seed_summary(f, "method", ["accuracy", "mean error", "mean drift", "bytes/round"], index=False)


def per_seed(table: pd.DataFrame, column: str, arm: str = "main", by: str = "method") -> pd.DataFrame:
    """``column`` at the last round (or a run-level column of :func:`final`), one row per seed."""
    f = final(table, arm)
    return f.pivot(index="seed", columns=by, values=column).sort_index()


def start_accuracy(table: pd.DataFrame) -> np.ndarray:
    """Per seed, the accuracy of the initial model (round 0; the same for every method)."""
    t = table[(table.arm == "main") & (table["round"] == 0)]
    return t.groupby("seed")["accuracy"].mean().sort_index().to_numpy()


__all__ = ["Config", "Experiment", "RunSpec", "final", "initial_arrays", "per_seed", "plan_runs",
           "run_experiment", "start_accuracy", "summarise"]
