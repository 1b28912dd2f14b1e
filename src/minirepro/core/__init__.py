"""What two or more chapters share.

Import the pieces you need, for example::

    from minirepro.core import set_seed, progress, train_loop, color, use_style
"""

from minirepro.core.plotting import color, distinct_colors, plot_seed_band, savefig, use_style
from minirepro.core.progress import progress, train_loop
from minirepro.core.scale import SCALES, ScaledConfig, resolve_scale
from minirepro.core.seed import set_seed
from minirepro.core.timing import compare_times, median_time

__all__ = [
    "SCALES",
    "ScaledConfig",
    "color",
    "compare_times",
    "distinct_colors",
    "median_time",
    "plot_seed_band",
    "progress",
    "resolve_scale",
    "savefig",
    "set_seed",
    "train_loop",
    "use_style",
]
