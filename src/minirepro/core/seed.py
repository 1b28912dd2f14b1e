"""Seeding and thread control, so the same parameters give the same outputs."""

from __future__ import annotations

import os
import random

import numpy as np

# One thread by default: the book's models are tiny (thread start-up costs more
# than it saves, and far more on a busy machine), and one thread gives the same
# floating-point sums on every machine. MINIREPRO_THREADS or `threads=` overrides.
DEFAULT_THREADS = 1


def threads_from_env() -> int:
    """The thread count to use: ``MINIREPRO_THREADS`` if set, else 1."""
    raw = os.environ.get("MINIREPRO_THREADS", "")
    if not raw:
        return DEFAULT_THREADS
    try:
        n = int(raw)
    except ValueError as exc:
        raise ValueError(f"MINIREPRO_THREADS must be a positive integer, got {raw!r}") from exc
    if n < 1:
        raise ValueError(f"MINIREPRO_THREADS must be a positive integer, got {n}")
    return n


SEED_RANGE = (0, 2**32 - 1)  # what numpy's and torch's seeding accept


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` as an int in :data:`SEED_RANGE`, or a one-line ``ValueError``: the one seed
    validation (notebook parameters, configs, :func:`set_seed` and the results record use it)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"{name} must be an int in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {seed!r}"[:160])
    if not SEED_RANGE[0] <= int(seed) <= SEED_RANGE[1]:
        raise ValueError(f"{name} must be an int in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {int(seed)}"[:160])
    return int(seed)


def set_seed(seed: int, threads: int | None = None, deterministic: bool = True,
             seed_torch: bool = True) -> np.random.Generator:
    """Seed Python, NumPy and torch, fix the thread count, and return a NumPy generator.

    Args:
        seed: a non-negative integer.
        threads: intra-op threads for torch (default: ``MINIREPRO_THREADS`` or 1).
        deterministic: ask torch for deterministic algorithms (warn-only, so an op
            without a deterministic kernel still runs).
        seed_torch: also seed torch and fix its threads. A chapter that never uses
            torch passes ``False`` and so does not pay for importing it.

    Returns:
        ``np.random.default_rng(seed)``, for code that takes an explicit generator.
    """
    seed = check_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    n_threads = threads if threads is not None else threads_from_env()
    if not seed_torch:
        return np.random.default_rng(seed)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return np.random.default_rng(seed)
    torch.manual_seed(seed)
    if torch.get_num_threads() != n_threads:
        torch.set_num_threads(n_threads)
    if deterministic:
        _deterministic_torch(torch)
    return np.random.default_rng(seed)


def _deterministic_torch(torch) -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)``, without its cost.

    The public call imports ``torch._inductor`` (about a second) only to set the
    compiler's flag; nothing here uses ``torch.compile``, so we set the eager flag
    directly and the compiler's only if it is already loaded.
    """
    import sys

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # pragma: no cover - a torch without the private hook
        torch.use_deterministic_algorithms(True, warn_only=True)
        return
    setter(True, warn_only=True)
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = True
