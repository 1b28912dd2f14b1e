"""Progress bars and a small training loop.

Bars come from ``tqdm.auto`` and are silent when ``TQDM_DISABLE=1`` (the book build
and the goldens set it, so recorded outputs hold no bar lines).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from tqdm import TqdmWarning

with warnings.catch_warnings():  # without ipywidgets, tqdm.auto falls back to text bars
    warnings.simplefilter("ignore", TqdmWarning)
    from tqdm.auto import tqdm


def bars_disabled() -> bool:
    """True when ``TQDM_DISABLE`` is set to a true value."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() in {"1", "true", "yes", "on"}


def progress(iterable: Iterable | None = None, *, total: int | None = None,
             desc: str | None = None, leave: bool = False, **kwargs: Any) -> tqdm:
    """A ``tqdm.auto`` bar over ``iterable`` that honours ``TQDM_DISABLE``."""
    return tqdm(iterable, total=total, desc=desc, leave=leave,
                disable=bars_disabled() or kwargs.pop("disable", False), **kwargs)


def train_loop(step: Callable[[int], float], steps: int, *, desc: str = "train",
               log_every: int = 1, stop_if_nan: bool = True) -> list[float]:
    """Run ``step(i)`` for ``i in range(steps)`` under a progress bar.

    ``step`` does one optimisation step and returns the loss as a float. The
    loss of every ``log_every``-th step is kept and shown on the bar.

    Returns:
        The kept losses, in order (length ``ceil(steps / log_every)``).

    Raises:
        ValueError: ``steps`` or ``log_every`` is not positive.
        FloatingPointError: a loss became NaN or infinite (when ``stop_if_nan``).
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if log_every < 1:
        raise ValueError(f"log_every must be at least 1, got {log_every}")
    losses: list[float] = []
    bar = progress(range(steps), desc=desc, total=steps)
    for i in bar:
        loss = float(step(i))
        if stop_if_nan and not math.isfinite(loss):
            bar.close()
            raise FloatingPointError(f"{desc}: loss is {loss} at step {i}")
        if i % log_every == 0:
            losses.append(loss)
            bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
    return losses
