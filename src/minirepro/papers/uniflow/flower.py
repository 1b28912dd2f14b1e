"""Flower's strategy API: the real ``flwr`` classes when installed, else a minimal stand-in.

``flwr`` (1.42.0, the only release line on the registry that has the ``Strategy`` API
with ``aggregate_fit``) caps ``typer < 0.21``, ``rich < 15`` and ``packaging < 26``,
which conflict with the book's locked environment (typer 0.29.2, rich 15.0.0,
packaging 26.4). So it is an optional dependency: with ``flwr`` importable, every
strategy of this chapter *is* an ``flwr.server.strategy.Strategy`` and the messages
are ``flwr.common`` objects (``tests/unit/test_uniflow.py`` then runs a round through
a real Flower gRPC server and clients). Without it, the classes below have the same
fields and the same byte serialisation (``numpy.save``, as ``flwr.common.ndarray_to_bytes``),
so the chapter's in-process rounds run the same code.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

import numpy as np

try:  # pragma: no cover - depends on the environment
    from flwr.common import (
        Code,
        FitIns,
        FitRes,
        Parameters,
        Status,
        ndarrays_to_parameters,
        parameters_to_ndarrays,
    )
    from flwr.server.strategy import Strategy

    HAVE_FLWR = True
except ImportError:  # the stand-in, field for field
    HAVE_FLWR = False

    class Code:  # noqa: D101 - mirrors flwr.common.Code
        OK = 0

    @dataclass
    class Status:  # noqa: D101
        code: int
        message: str

    @dataclass
    class Parameters:  # noqa: D101
        tensors: list[bytes]
        tensor_type: str

    @dataclass
    class FitIns:  # noqa: D101
        parameters: Parameters
        config: dict[str, Any] = field(default_factory=dict)

    @dataclass
    class FitRes:  # noqa: D101
        status: Status
        parameters: Parameters
        num_examples: int
        metrics: dict[str, Any] = field(default_factory=dict)

    def _to_bytes(a: np.ndarray) -> bytes:
        buf = BytesIO()
        np.save(buf, a, allow_pickle=False)
        return buf.getvalue()

    def _from_bytes(b: bytes) -> np.ndarray:
        return np.load(BytesIO(b), allow_pickle=False)

    def ndarrays_to_parameters(ndarrays: list[np.ndarray]) -> Parameters:
        """A list of arrays as ``Parameters`` (``numpy.save`` bytes, as Flower does)."""
        return Parameters(tensors=[_to_bytes(a) for a in ndarrays], tensor_type="numpy.ndarray")

    def parameters_to_ndarrays(parameters: Parameters) -> list[np.ndarray]:
        """The arrays of a ``Parameters``."""
        return [_from_bytes(t) for t in parameters.tensors]

    class Strategy(abc.ABC):
        """The abstract methods of ``flwr.server.strategy.Strategy`` (same signatures)."""

        @abc.abstractmethod
        def initialize_parameters(self, client_manager): ...

        @abc.abstractmethod
        def configure_fit(self, server_round, parameters, client_manager): ...

        @abc.abstractmethod
        def aggregate_fit(self, server_round, results, failures): ...

        @abc.abstractmethod
        def configure_evaluate(self, server_round, parameters, client_manager): ...

        @abc.abstractmethod
        def aggregate_evaluate(self, server_round, results, failures): ...

        @abc.abstractmethod
        def evaluate(self, server_round, parameters): ...


def pack(named: dict[str, np.ndarray]) -> tuple[Parameters, str]:
    """Named arrays as Flower ``Parameters`` plus the comma-joined names (sent in the config)."""
    names = list(named)
    if any("," in n for n in names):
        raise ValueError("array names must not contain commas")
    return ndarrays_to_parameters([np.ascontiguousarray(named[n]) for n in names]), ",".join(names)


def unpack(parameters: Parameters, names: str) -> dict[str, np.ndarray]:
    """The inverse of :func:`pack`."""
    keys = [n for n in names.split(",") if n]
    arrays = parameters_to_ndarrays(parameters)
    if len(keys) != len(arrays):
        raise ValueError(f"{len(keys)} names for {len(arrays)} arrays")
    return dict(zip(keys, arrays, strict=True))


@dataclass
class Proxy:
    """An in-process stand-in for ``flwr.server.client_proxy.ClientProxy`` (only ``cid``)."""

    cid: str


class InProcessClientManager:
    """The two methods of Flower's ``ClientManager`` the strategies call, over fixed cids."""

    def __init__(self, cids: list[str]) -> None:
        self.proxies = [Proxy(c) for c in cids]

    def num_available(self) -> int:
        return len(self.proxies)

    def sample(self, num_clients: int, min_num_clients: int | None = None, criterion=None) -> list:
        return list(self.proxies[:num_clients])


__all__ = ["Code", "FitIns", "FitRes", "HAVE_FLWR", "InProcessClientManager", "Parameters", "Proxy",
           "Status", "Strategy", "ndarrays_to_parameters", "pack", "parameters_to_ndarrays", "unpack"]
