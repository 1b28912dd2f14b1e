"""The book's plotting style: one seaborn theme and one colour per method name.

A method keeps its colour on every page: ``color("GPM")`` is the same wherever
GPM appears. Names the book knows are listed in ``METHOD_COLORS``; any other
name gets a colour from a fixed palette chosen by a stable hash of the name.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import matplotlib

# A fixed, colour-blind-friendly palette (Okabe-Ito first, then tab20 extras).
PALETTE: tuple[str, ...] = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442",
    "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF", "#9467BD", "#AEC7E8",
    "#FFBB78", "#98DF8A", "#FF9896", "#C5B0D5", "#C49C94", "#F7B6D2",
)

# Methods that appear in the book: the paper's own method is always a strong blue
# or green, dense/exact references black, naive baselines grey or orange.
METHOD_COLORS: dict[str, str] = {
    # references
    "dense": "#000000", "exact": "#000000", "oracle": "#7F7F7F", "joint": "#000000",
    "solver": "#000000", "optimum": "#000000",
    # CAffNet
    "caffnet": "#0072B2", "caffnet (w=0)": "#56B4E9", "soft penalty": "#D55E00",
    "hardnet-aff": "#E69F00", "fixed projection": "#009E73",
    # SparseInfer
    "sparseinfer": "#0072B2", "sparseinfer (similarity)": "#56B4E9", "random": "#BCBD22",
    "static hot": "#E69F00", "per-token oracle": "#7F7F7F", "dejavu": "#CC79A7",
    # RQ-MoE
    "rq-moe": "#0072B2", "rq-moe (serial)": "#0072B2", "qinco": "#D55E00", "rq": "#009E73",
    "rq (beam 8)": "#17BECF", "pq": "#E69F00",
    "opq": "#CC79A7", "lsq": "#8C564B",
    # MoCL
    "mocl": "#0072B2", "gpm": "#D55E00", "ewc": "#009E73", "fine-tuning": "#7F7F7F",
    "sgp": "#CC79A7", "trgp": "#CC79A7", "mocl (no gate)": "#C5B0D5", "mocl (shannon)": "#56B4E9",
    "mocl (hard projection)": "#17BECF", "mocl (no decay)": "#AEC7E8",
    # TBPO
    "tbpo-q": "#0072B2", "tbpo-a": "#56B4E9", "dpo": "#D55E00", "tdpo": "#E69F00",
    "reference": "#7F7F7F", "bregman (kliep)": "#CC79A7",
    # HCA
    "hca": "#0072B2", "lime": "#D55E00", "majority": "#7F7F7F", "hca (calibrated)": "#56B4E9",
    "hca without kg": "#CC79A7", "hca without kkt": "#009E73", "hca without pcmci": "#BCBD22",
    # SSA
    "ssa": "#0072B2", "ssp": "#56B4E9", "clip": "#D55E00", "gap penalty": "#E69F00",
    "translation": "#009E73",
    # ALI
    "ali (dense)": "#0072B2", "ali + self-sup.": "#56B4E9", "li": "#7F7F7F",
    "li + semantic": "#D55E00", "copy input": "#BCBD22", "copy reference": "#8C564B",
}


def _key(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip().lower())


def color(name: str) -> str:
    """The book-wide colour (a hex string) of a method or series name."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"color() needs a non-empty method name, got {name!r}")
    key = _key(name)
    if key in METHOD_COLORS:
        return METHOD_COLORS[key]
    digest = int(hashlib.sha1(key.encode()).hexdigest(), 16)
    return PALETTE[digest % len(PALETTE)]


def palette(names: list[str]) -> dict[str, str]:
    """``{name: color(name)}`` for seaborn's ``palette=`` argument."""
    return {n: color(n) for n in names}


def use_style() -> None:
    """Apply the book's theme (seaborn whitegrid, readable fonts, PNG figures)."""
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    matplotlib.rcParams.update({
        "figure.dpi": 100,
        "savefig.dpi": 130,
        "figure.figsize": (7.0, 4.0),
        "axes.titleweight": "bold",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.frameon": False,
        "svg.hashsalt": "minirepro",
    })
    try:  # inline figures as PNG: nbval skips PNG, so goldens check numbers, not pixels
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
    except Exception:  # outside IPython there is nothing to set
        pass


def figure_path(name: str) -> Path | None:
    """Where ``savefig(fig, name)`` writes, or ``None`` outside ``minirepro run``."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
        raise ValueError(f"figure name {name!r} must be letters, digits, '.', '_' or '-'")
    folder = os.environ.get("MINIREPRO_FIGDIR")
    return Path(folder) / f"{name}.png" if folder else None


def savefig(fig: matplotlib.figure.Figure, name: str) -> None:
    """Save ``fig`` as ``<name>.png`` in ``MINIREPRO_FIGDIR`` (set by ``minirepro run``).

    Outside a run (the book build, the goldens) nothing is written and the figure
    shows inline only. Returns ``None`` so that a cell ending in ``savefig(...)``
    displays the same under every runner; ``figure_path(name)`` says where it went.
    """
    path = figure_path(name)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")


def distinct_colors(names: list[str]) -> dict[str, str]:
    """``{name: color(name)}``, except that a name whose colour an earlier name already
    took gets the next palette colour no one uses (hashed colours can collide)."""
    out: dict[str, str] = {}
    for name in names:
        c = color(name)
        if c in out.values():
            c = next((p for p in PALETTE if p not in out.values()), c)
        out[name] = c
    return out


def plot_seed_band(ax, x, runs, color: str, label: str | None = None, alpha: float = 0.15,
                   **line_kw):
    """The mean over seeds as a line, and the seeds' min-max range as a band behind it.

    Args:
        ax: the matplotlib axes.
        x: the shared x values, shape ``(n,)``.
        runs: one row per seed, shape ``(n_seeds, n)`` (anything ``numpy.asarray`` takes).
        color: the line's and the band's colour.
        label: the legend entry (the line's; the band has none).
        alpha: the band's opacity.
        **line_kw: passed to ``ax.plot`` (``marker``, ``lw``, ``ls``, ...).

    Returns:
        The line (a ``Line2D``).
    """
    import numpy as np

    y = np.asarray(runs, dtype=float)
    if y.ndim != 2 or y.shape[1] != len(x):
        raise ValueError(f"runs must be (n_seeds, {len(x)}), got shape {y.shape}")
    ax.fill_between(x, y.min(0), y.max(0), color=color, alpha=alpha, lw=0)
    (line,) = ax.plot(x, y.mean(0), color=color, label=label, **line_kw)
    return line
