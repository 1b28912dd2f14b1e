"""Networks for every method, one training loop, and the test metrics.

Every method shares the prediction network ``f(x)`` (same architecture, same
initial weights for a given seed) and the training loss
``task + penalty * mean(ReLU(A y - b)^2)``; they differ only in the output layer.

All (method, seed) networks train together as one *ensemble*: member ``k`` has its
own weights, its own minibatches and its own loss, and the optimiser (Adam,
elementwise) sees the sum of the members' losses, so each member follows exactly
the steps it would follow alone. One step then costs one batched matrix product
per layer instead of fifteen small ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from minirepro.core import set_seed, train_loop
from minirepro.papers.caffnet.layer import (
    Faces,
    caffine,
    compute_faces,
    hardnet_aff,
    matvec,
    max_violation,
    project_polytope,
    violation,
)

METHODS: tuple[str, ...] = ("soft penalty", "HardNet-Aff", "fixed projection",
                            "CAffNet (w=0)", "CAffNet", "CAffNet (w zero-init)")
HARD_METHODS: tuple[str, ...] = ("fixed projection", "CAffNet (w=0)", "CAffNet",
                                 "CAffNet (w zero-init)")
# Methods with a learned null-space branch w(x): random initialisation (as the paper's
# code) and a zero-initialised last layer, so that training starts at the projection.
W_METHODS: tuple[str, ...] = ("CAffNet", "CAffNet (w zero-init)")


class EnsembleMLP(nn.Module):
    """Eq. (caffnet-eq-candidate): the branches ``f(x)``, ``w(x)`` as ``K`` independent ReLU MLPs.

    Each member maps ``d_in -> hidden... -> d_out`` in float64.

    Member ``k`` is initialised from ``seeds[k]`` like ``nn.Linear`` (uniform in
    ``+-1/sqrt(fan_in)``), so members with equal seeds start equal.
    Input (K, B, d_in), output (K, B, d_out).
    """

    def __init__(self, seeds: list[int], d_in: int, d_out: int, hidden: tuple[int, ...]):
        super().__init__()
        dims = [d_in, *hidden, d_out]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        per_member = []
        for s in seeds:
            g = torch.Generator().manual_seed(int(s))
            layers = []
            for a, c in zip(dims[:-1], dims[1:]):
                bound = 1.0 / math.sqrt(a)
                W = (torch.rand(a, c, generator=g, dtype=torch.float64) * 2 - 1) * bound
                bias = (torch.rand(1, c, generator=g, dtype=torch.float64) * 2 - 1) * bound
                layers.append((W, bias))
            per_member.append(layers)
        for li in range(len(dims) - 1):
            self.weights.append(nn.Parameter(torch.stack([m[li][0] for m in per_member])))
            self.biases.append(nn.Parameter(torch.stack([m[li][1] for m in per_member])))

    @torch.no_grad()
    def zero_last_layer(self, members: list[int]) -> EnsembleMLP:
        """Set the last layer of ``members`` to zero, so that they output 0 at the start."""
        for k in members:
            self.weights[-1][k].zero_()
            self.biases[-1][k].zero_()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        last = len(self.weights) - 1
        for i, (W, bias) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(bias, h, W)
            if i < last:
                h = torch.relu(h)
        return h


@dataclass(frozen=True)
class Constraints:
    """Eq. (caffnet-eq-constraints): a scenario's ``A(x)``, ``b(x)`` evaluated once for some inputs.

    ``A`` (m, n) or (N, m, n) and ``b`` (N, m) for ``A y <= b``; ``A_h``, ``bl``,
    ``bu`` for HardNet-Aff's ``bl <= A_h y <= bu``; ``faces`` for the CAffine layer.
    """

    A: torch.Tensor
    b: torch.Tensor
    A_h: torch.Tensor
    bl: torch.Tensor
    bu: torch.Tensor
    faces: Faces

    @classmethod
    def of(cls, scenario, x: torch.Tensor) -> Constraints:
        A, b = scenario.constraints(x)
        return cls(A, b, *scenario.hardnet_constraints(x), compute_faces(A))

    def take(self, idx: torch.Tensor) -> Constraints:
        """The rows ``idx`` (a 1-D index) of every per-input tensor."""
        per = lambda t: t[idx] if t.ndim == 3 else t  # noqa: E731 - shared matrices stay
        return Constraints(per(self.A), self.b[idx], per(self.A_h), self.bl[idx],
                           self.bu[idx], self.faces.take(idx))


def output_layer(method: str, f: torch.Tensor, cons: Constraints,
                 w: torch.Tensor | None = None) -> torch.Tensor:
    """Eqs. (caffnet-eq-select, caffnet-eq-hardnet, caffnet-eq-projection): a method's last layer.

    Applied to the prediction ``f`` (B, n) under the constraints ``cons``; the soft
    penalty method keeps ``y = f``.
    """
    if method == "soft penalty":
        return f
    if method == "HardNet-Aff":
        return hardnet_aff(f, cons.A_h, cons.bl, cons.bu)
    if method == "fixed projection":
        return project_polytope(f, cons.A, cons.b)
    if method == "CAffNet (w=0)":
        return caffine(f, None, cons.A, cons.b, faces=cons.faces)
    if method in W_METHODS:
        if w is None:
            raise ValueError(f"{method} needs its null-space branch w")
        return caffine(f, w, cons.A, cons.b, faces=cons.faces)
    raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")


@dataclass
class Data:
    """Eq. (caffnet-eq-constraints): inputs, targets (labels or solutions y*), their constraints."""

    x_train: torch.Tensor
    t_train: torch.Tensor
    x_test: torch.Tensor
    t_test: torch.Tensor
    cons_train: Constraints
    cons_test: Constraints


def make_data(scenario, n_train: int, n_test: int, seed: int, grid_test: bool = False) -> Data:
    """Eq. (caffnet-eq-constraints): sample inputs and targets; evaluate ``A(x)``, ``b(x)`` once."""
    rng = np.random.default_rng(seed)
    x_train = scenario.sample_x(n_train, rng)
    x_test = scenario.grid_x(n_test) if grid_test else scenario.sample_x(n_test, rng)
    t_train = (scenario.target(x_train) if scenario.supervised
               else torch.zeros(n_train, scenario.n, dtype=torch.float64))
    return Data(x_train, t_train, x_test, scenario.target(x_test),
                Constraints.of(scenario, x_train), Constraints.of(scenario, x_test))


@dataclass
class TrainedMethods:
    """Eq. (caffnet-eq-loss): the trained ensemble; member ``k`` is (methods[k//S], seeds[k%S])."""

    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    f_net: EnsembleMLP
    w_net: EnsembleMLP | None
    losses: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def member(self, method: str, seed: int) -> int:
        return self.methods.index(method) * len(self.seeds) + self.seeds.index(seed)

    @torch.no_grad()
    def predict(self, x: torch.Tensor, cons: Constraints) -> torch.Tensor:
        """Outputs of every member on the same inputs ``x`` (T, d): (K, T, n)."""
        S = len(self.seeds)
        X = x.expand(len(self.methods) * S, *x.shape)
        return self.outputs(X, cons.take(torch.arange(x.shape[0]).repeat(S)))

    @property
    def w_methods(self) -> tuple[str, ...]:
        """The methods with a w branch, in the order of the members of ``w_net``."""
        return tuple(m for m in self.methods if m in W_METHODS)

    def outputs(self, X: torch.Tensor, cons: Constraints | list[Constraints]) -> torch.Tensor:
        """Outputs (K, B, n) for member inputs ``X`` (K, B, d); ``cons`` holds one
        method's flattened batch (S * B rows, seed-major), shared by every method, or
        a list with one such batch per method (when each method sees its own inputs)."""
        S = len(self.seeds)
        F = self.f_net(X)
        W = None
        if self.w_net is not None:
            W = self.w_net(torch.cat([X[self.methods.index(m) * S:(self.methods.index(m) + 1) * S]
                                      for m in self.w_methods]))
        out = []
        for mi, method in enumerate(self.methods):
            f = F[mi * S:(mi + 1) * S].reshape(-1, F.shape[-1])
            w = None
            if method in W_METHODS:
                wi = self.w_methods.index(method)
                w = W[wi * S:(wi + 1) * S].reshape(-1, W.shape[-1])
            c = cons[mi] if isinstance(cons, list) else cons
            out.append(output_layer(method, f, c, w).reshape(S, -1, F.shape[-1]))
        return torch.cat(out, dim=0)


def train_methods(scenario, data: Data, methods=METHODS, seeds=(0,), *,
                  hidden: tuple[int, ...] = (64, 64), steps: int = 500, lr: float = 3e-3,
                  batch_size: int = 64, penalty: float = 100.0) -> TrainedMethods:
    """Eq. (caffnet-eq-loss): train every (method, seed) with Adam; returns the ensemble.

    The loss is ``task + penalty * mean(ReLU(Ay - b)^2)``. Member (method, seed) starts
    from the weights of ``seed`` and draws its minibatches from a generator seeded by
    ``seed``, so a method's run does not depend on which other methods train beside it.
    """
    methods, seeds = tuple(methods), tuple(int(s) for s in seeds)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods or not seeds:
        raise ValueError(f"need methods from {METHODS} and at least one seed; got {methods}, {seeds}")
    set_seed(seeds[0])
    S, n_train = len(seeds), data.x_train.shape[0]
    f_net = EnsembleMLP([s for _ in methods for s in seeds], scenario.x_dim, scenario.n, hidden)
    w_methods = [m for m in methods if m in W_METHODS]
    w_net = None
    if w_methods:  # same hidden-layer start for both w methods; zero-init zeroes the last layer
        w_net = EnsembleMLP([s + 10_000 for _ in w_methods for s in seeds], scenario.x_dim,
                            scenario.n, hidden)
        if "CAffNet (w zero-init)" in w_methods:
            zi = w_methods.index("CAffNet (w zero-init)")
            w_net.zero_last_layer(list(range(zi * S, (zi + 1) * S)))
    model = TrainedMethods(methods, seeds, f_net, w_net)
    params = list(f_net.parameters()) + (list(w_net.parameters()) if w_net else [])
    opt = torch.optim.Adam(params, lr=lr, foreach=True)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    B = min(batch_size, n_train)
    history: list[np.ndarray] = []
    K = len(methods) * S

    def step(_i: int) -> float:
        idx = torch.stack([torch.randperm(n_train, generator=g)[:B] for g in gens])  # (S, B)
        flat = idx.reshape(-1)
        cons = data.cons_train.take(flat)
        X = data.x_train[idx].repeat(len(methods), 1, 1)                            # (K, B, d)
        Y = model.outputs(X, cons)                                                  # (K, B, n)
        T = data.t_train[idx].repeat(len(methods), 1, 1)
        y_flat = Y.reshape(len(methods), S * B, -1)
        viol = torch.relu(torch.stack([matvec(cons.A, y) for y in y_flat]) - cons.b)
        viol = (viol ** 2).reshape(K, B, -1).mean(dim=(1, 2))
        member_loss = scenario.task_loss(Y, X, T) + penalty * viol                 # (K,)
        opt.zero_grad()
        member_loss.sum().backward()
        opt.step()
        history.append(member_loss.detach().numpy().copy())
        return member_loss.mean().item()

    train_loop(step, steps, desc=f"{scenario.name}: {len(methods)} methods x {S} seeds")
    model.losses = np.array(history)
    return model


@torch.no_grad()
def evaluate(model: TrainedMethods, scenario, data: Data, eps: float = 1e-6) -> list[dict]:
    """Eq. (caffnet-eq-constraints): test error and violations of every member, one dict each.

    The metrics: mean error (MSE or optimality gap), max and mean violation, and the
    fraction of test inputs violating some row by more than ``eps``.
    """
    Y = model.predict(data.x_test, data.cons_test)
    A, b = data.cons_test.A, data.cons_test.b
    rows = []
    for method in model.methods:
        for seed in model.seeds:
            y = Y[model.member(method, seed)]
            viol = max_violation(y, A, b)
            rows.append({"scenario": scenario.name, "method": method, "seed": seed,
                         "error": scenario.error(y, data.x_test, data.t_test).mean().item(),
                         "max_violation": viol.max().item(),
                         "mean_violation": violation(y, A, b).mean().item(),
                         "violating_fraction": (viol > eps).double().mean().item()})
    return rows


@torch.no_grad()
def predict(model: TrainedMethods, scenario, x: torch.Tensor, method: str, seed: int) -> torch.Tensor:
    """Eqs. (caffnet-eq-select, caffnet-eq-hardnet, caffnet-eq-projection): one member's outputs.

    Shape (T, n) on inputs ``x`` (T, d).
    """
    return model.predict(x, Constraints.of(scenario, x))[model.member(method, seed)]
