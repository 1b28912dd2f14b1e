"""Flower's strategy API (``flwr`` 1.42): the message types and helpers the strategies use.

Every strategy of this chapter *is* an ``flwr.server.strategy.Strategy`` and the messages
are ``flwr.common`` objects; ``tests/unit/test_uniflow.py`` runs a round through a real
Flower gRPC server and clients started by the test. The chapter's own rounds call the
same strategy objects in process, with :class:`InProcessClientManager` in place of a
server's client manager.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
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


__all__ = ["Code", "FitIns", "FitRes", "InProcessClientManager", "Parameters", "Proxy",
           "Status", "Strategy", "ndarrays_to_parameters", "pack", "parameters_to_ndarrays", "unpack"]
