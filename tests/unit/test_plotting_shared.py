"""The shared plot idioms of minirepro.core.plotting (seed bands, distinct colours)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from minirepro.core import color, distinct_colors, plot_seed_band  # noqa: E402
from minirepro.core.plotting import PALETTE  # noqa: E402


def test_seed_band_draws_the_mean_and_the_min_max_range():
    runs = np.array([[0.0, 1.0, 2.0], [2.0, 3.0, 6.0]])
    fig, ax = plt.subplots()
    line = plot_seed_band(ax, np.arange(3), runs, "#0072B2", label="m", marker="o")
    np.testing.assert_allclose(line.get_ydata(), [1.0, 2.0, 4.0])
    assert line.get_label() == "m" and line.get_marker() == "o"
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == 0.0 and ys.max() == 6.0
    plt.close(fig)


def test_seed_band_refuses_runs_of_the_wrong_shape():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="runs must be"):
        plot_seed_band(ax, np.arange(4), np.zeros((2, 3)), "k")
    plt.close(fig)


def test_distinct_colors_keeps_the_book_colour_unless_taken():
    names = ["MoCL", "GPM", "mocl"]  # the same key twice: the second must move
    out = distinct_colors(names)
    assert out["MoCL"] == color("MoCL") and out["GPM"] == color("GPM")
    assert out["mocl"] != out["MoCL"] and out["mocl"] in PALETTE
    assert len(set(out.values())) == len(names)
