"""The six federated-LoRA aggregators as Flower strategies, and the client's side of a message.

Every message is a dict of named arrays, sent as Flower ``Parameters`` with the names in
``config["names"]`` (``FitIns``) or ``metrics["names"]`` (``FitRes``):

* ``lora.<m>.A`` ``(r, d_in)`` and ``lora.<m>.B`` ``(d_out, r)``: the LoRA factors of module ``m``;
* ``res.<m>`` ``(d_out, d_in)``: a dense update the client adds to its frozen weight (FedEx-LoRA);
* ``stackA.<m>``/``stackB.<m>``: FLoRA's stacked factors, merged into the frozen weight,
  after which the client restarts its LoRA (``A`` from ``config["reset_seed"]``, ``B = 0``);
* ``head.w``, ``head.b``, ``enc.<modality>.w``, ``enc.<modality>.b``: the classifier head
  and the modality projectors, FedAvg'd for every method (projectors per modality).

What each method uploads and downloads (besides head and projector):

============  ==================  =========================================
method        client -> server    server -> client
============  ==================  =========================================
FedIT         A, B                A+, B+ (averages)
FFA-LoRA      B (A frozen)        B+
FLoRA         A, B                stacked A's and p-weighted B's; LoRA restarts
FedSA-LoRA    A (B stays local)   A+
FedEx-LoRA    A, B                A+, B+ and the dense residual
FedA2-LoRA    A, B                A+ and the ridge B+
============  ==================  =========================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minirepro.papers.uniflow import aggregation as agg
from minirepro.papers.uniflow.flower import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    Strategy,
    pack,
    unpack,
)

METHODS: tuple[str, ...] = ("FedIT", "FFA-LoRA", "FLoRA", "FedSA-LoRA", "FedEx-LoRA", "FedA2-LoRA")


@dataclass(frozen=True)
class LoRASpec:
    """Eq. (uniflow-eq-lora): the LoRA modules' names and shapes, the rank and peft's scaling ``alpha / r``."""

    modules: tuple[tuple[str, int, int], ...]  # (name, d_out, d_in)
    rank: int
    alpha: float
    init_scale: float  # std of a fresh A (FLoRA restarts)

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def fresh_A(self, seed: int) -> dict[str, np.ndarray]:
        """[reconstruction] A fresh ``A`` per module, ``N(0, init_scale^2)``, from ``seed``."""
        rng = np.random.default_rng(seed)
        return {m: (rng.normal(size=(self.rank, d_in)) * self.init_scale).astype(np.float32)
                for m, _, d_in in self.modules}


def upload_keys(method: str, spec: LoRASpec) -> list[str]:
    """[reconstruction] The LoRA arrays a client of ``method`` uploads."""
    parts = {"FFA-LoRA": ("B",), "FedSA-LoRA": ("A",)}.get(method, ("A", "B"))
    return [f"lora.{m}.{x}" for m, _, _ in spec.modules for x in parts]


def message_bytes(named: dict[str, np.ndarray]) -> int:
    """[reconstruction] Payload bytes of a message: the sum of its arrays' ``nbytes``."""
    return int(sum(a.nbytes for a in named.values()))


def client_update(state: dict[str, np.ndarray], named: dict[str, np.ndarray], spec: LoRASpec,
                  reset_seed: int | None = None) -> dict[str, np.ndarray]:
    """[reconstruction] The client side: apply a server message to a client's state (a new dict).

    ``state`` holds ``lora.<m>.A``, ``lora.<m>.B``, ``base.<m>`` (the accumulated change
    to the frozen weight), the head and the client's projector.
    """
    out = dict(state)
    for name, value in named.items():
        kind, *rest = name.split(".")
        if kind in ("lora", "head", "enc"):
            out[name] = np.asarray(value, dtype=np.float32)
        elif kind == "res":
            out[f"base.{rest[0]}"] = (out[f"base.{rest[0]}"] + value).astype(np.float32)
    stacked = sorted({n.split(".")[1] for n in named if n.startswith("stackA.")})
    if stacked:
        if reset_seed is None:
            raise ValueError("a FLoRA message needs config['reset_seed'] to restart the LoRA")
        fresh = spec.fresh_A(reset_seed)
        for m in stacked:
            merged = spec.scaling * named[f"stackB.{m}"].astype(np.float64) @ named[f"stackA.{m}"]
            out[f"base.{m}"] = (out[f"base.{m}"] + merged).astype(np.float32)
            out[f"lora.{m}.A"] = fresh[m]
            out[f"lora.{m}.B"] = np.zeros_like(out[f"lora.{m}.B"])
    return out


class LoRAStrategy(Strategy):
    """[reconstruction] One federated-LoRA aggregator as a Flower ``Strategy`` (``aggregate_fit`` on client results).

    Args:
        method: one of :data:`METHODS`.
        spec: the LoRA modules, rank and scaling.
        initial: the initial global arrays (``lora.*``, ``head.*``, ``enc.*``).
        lam_rel: FedA2-LoRA's relative ridge weight (:func:`aggregation.ridge_lambda`).
        modality_of: ``cid -> modality``; a client then receives only its own projector
            (``None``: every projector is sent).
        seed: seeds FLoRA's fresh ``A`` after each merge.
        min_clients: Flower waits until this many clients are connected before a round.
    """

    def __init__(self, method: str, spec: LoRASpec, initial: dict[str, np.ndarray],
                 lam_rel: float = 1e-3, modality_of: dict[str, str] | None = None,
                 seed: int = 0, min_clients: int = 1) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
        if not (np.isfinite(lam_rel) and lam_rel >= 0):
            raise ValueError(f"the ridge weight lambda must be a finite number >= 0, got {lam_rel}")
        self.method, self.spec, self.lam_rel = method, spec, float(lam_rel)
        self.modality_of, self.seed, self.min_clients = modality_of, seed, int(min_clients)
        self.global_arrays = {k: np.asarray(v, dtype=np.float32) for k, v in initial.items()}
        self.outbox: dict[str, np.ndarray] = dict(self.global_arrays)  # round 1: the initial model
        self.reset_seed: int | None = None
        self.round_metrics: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"LoRAStrategy({self.method})"

    # -- Flower's Strategy interface -------------------------------------------------------
    def initialize_parameters(self, client_manager) -> Parameters:
        return pack(self.global_arrays)[0]

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager
                      ) -> list[tuple[object, FitIns]]:
        """Every available client gets the outbox (its own projector only, if modalities are known)."""
        n = max(client_manager.num_available(), self.min_clients)
        clients = client_manager.sample(num_clients=n, min_num_clients=n)
        return [(c, self.fit_ins(c.cid)) for c in clients]

    def message_for(self, cid: str) -> dict[str, np.ndarray]:
        """The named arrays client ``cid`` receives this round (its own projector only, if known)."""
        mod = None if self.modality_of is None else self.modality_of[cid]
        return {k: v for k, v in self.outbox.items()
                if not k.startswith("enc.") or mod is None or k.startswith(f"enc.{mod}.")}

    def fit_ins(self, cid: str) -> FitIns:
        """The message for client ``cid`` this round, as a Flower ``FitIns``."""
        params, names = pack(self.message_for(cid))
        config = {"names": names, "method": self.method}
        if self.reset_seed is not None:
            config["reset_seed"] = int(self.reset_seed)
        return FitIns(params, config)

    def aggregate_fit(self, server_round: int, results: Sequence[tuple[object, FitRes]],
                      failures: Sequence) -> tuple[Parameters | None, dict[str, float]]:
        """Aggregate the clients' uploads into the next global arrays and the next outbox."""
        if failures:
            raise RuntimeError(f"{len(failures)} client(s) failed in round {server_round}")
        if not results:
            raise ValueError("aggregate_fit got no client results")
        ups = [unpack(r.parameters, r.metrics["names"]) for _, r in results]
        self.aggregate_named(server_round, ups, [r.num_examples for _, r in results],
                             [r.metrics.get("modality", "") for _, r in results])
        return pack(self.global_arrays)[0], dict(self.round_metrics)

    def aggregate_named(self, server_round: int, ups: list[dict[str, np.ndarray]],
                        num_examples: Sequence[int], mods: Sequence[str]) -> None:
        """The body of :meth:`aggregate_fit` on already-decoded uploads (the in-process path)."""
        p = np.asarray(num_examples, dtype=float)
        new = self._aggregate_lora(ups, p, server_round)
        new["head.w"] = agg.fedavg([u["head.w"] for u in ups], p).astype(np.float32)
        new["head.b"] = agg.fedavg([u["head.b"] for u in ups], p).astype(np.float32)
        for mod in sorted(set(mods)):
            idx = np.array([i for i, m in enumerate(mods) if m == mod])
            for part in ("w", "b"):
                key = f"enc.{mod}.{part}"
                new[key] = agg.fedavg([ups[i][key] for i in idx], p[idx]).astype(np.float32)
        self.outbox = new
        for k, v in new.items():
            if k.startswith(("lora.", "head.", "enc.")):
                self.global_arrays[k] = v

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None

    # -- the methods ------------------------------------------------------------------------
    def _aggregate_lora(self, ups: list[dict[str, np.ndarray]], p: np.ndarray,
                        server_round: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        s, f32 = self.spec.scaling, np.float32
        self.reset_seed = None
        for m, _, _ in self.spec.modules:
            if self.method == "FFA-LoRA":
                out[f"lora.{m}.B"] = agg.fedavg([u[f"lora.{m}.B"] for u in ups], p).astype(f32)
                continue
            As = [u[f"lora.{m}.A"] for u in ups]
            if self.method == "FedSA-LoRA":
                out[f"lora.{m}.A"] = agg.fedavg(As, p).astype(f32)
                continue
            Bs = [u[f"lora.{m}.B"] for u in ups]
            A_plus, B_plus = agg.fedit(As, Bs, p)
            if self.method == "FedIT":
                out[f"lora.{m}.A"], out[f"lora.{m}.B"] = A_plus.astype(f32), B_plus.astype(f32)
            elif self.method == "FedEx-LoRA":
                out[f"lora.{m}.A"], out[f"lora.{m}.B"] = A_plus.astype(f32), B_plus.astype(f32)
                out[f"res.{m}"] = agg.fedex_residual(As, Bs, p, s).astype(f32)
            elif self.method == "FedA2-LoRA":
                target = agg.target_update(As, Bs, p, s)
                lam = agg.ridge_lambda(A_plus, self.lam_rel)
                out[f"lora.{m}.A"] = A_plus.astype(f32)
                out[f"lora.{m}.B"] = agg.feda2_b(target, A_plus, s, lam).astype(f32)
            elif self.method == "FLoRA":
                A_s, B_s = agg.flora_stack(As, Bs, p)
                out[f"stackA.{m}"], out[f"stackB.{m}"] = A_s.astype(f32), B_s.astype(f32)
                self.reset_seed = self.seed * 100_003 + server_round
        if self.method == "FLoRA":
            fresh = self.spec.fresh_A(self.reset_seed)
            for m, d_out, _ in self.spec.modules:
                self.global_arrays[f"lora.{m}.A"] = fresh[m]
                self.global_arrays[f"lora.{m}.B"] = np.zeros((d_out, self.spec.rank), np.float32)
        return out


def fit_res(named: dict[str, np.ndarray], num_examples: int, modality: str) -> FitRes:
    """[reconstruction] A client's reply: its uploaded arrays as a Flower ``FitRes``."""
    params, names = pack(named)
    return FitRes(Status(Code.OK, "ok"), params, int(num_examples),
                  {"names": names, "modality": modality})


__all__ = ["LoRASpec", "LoRAStrategy", "METHODS", "client_update", "fit_res", "message_bytes",
           "upload_keys"]
