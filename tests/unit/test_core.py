"""minirepro.core: seeding, scales and presets, progress, timing, plotting."""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar

import numpy as np
import pytest
import torch

from minirepro.core import (
    ScaledConfig,
    color,
    compare_times,
    median_time,
    progress,
    resolve_scale,
    set_seed,
    train_loop,
)
from minirepro.core.datasets import digits, gaussian_mixture
from minirepro.core.plotting import METHOD_COLORS, figure_path, savefig


def test_set_seed_makes_python_numpy_torch_repeat():
    import random

    def draw():
        rng = set_seed(3)
        return random.random(), np.random.rand(), torch.rand(2).tolist(), rng.random()

    assert draw() == draw()
    set_seed(4)
    assert np.random.rand() != draw()[1]


def test_set_seed_turns_on_deterministic_algorithms():
    set_seed(0)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()


def test_set_seed_fixes_threads(monkeypatch):
    monkeypatch.setenv("MINIREPRO_THREADS", "1")
    set_seed(0)
    assert torch.get_num_threads() == 1
    set_seed(0, threads=2)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_set_seed_rejects_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        set_seed(bad)


def test_resolve_scale(monkeypatch):
    monkeypatch.delenv("MINIREPRO_SCALE", raising=False)
    assert resolve_scale() == "book"
    monkeypatch.setenv("MINIREPRO_SCALE", "smoke")
    assert resolve_scale() == "smoke"
    assert resolve_scale("full") == "full"
    with pytest.raises(ValueError, match="smoke, book, full"):
        resolve_scale("huge")


@dataclasses.dataclass
class _Cfg(ScaledConfig):
    n: int = 100
    lr: float = 0.1
    PRESETS: ClassVar = {"smoke": {"n": 10}, "book": {}, "full": {"n": 1000, "lr": 0.01}}


def test_preset_applies_scale_then_overrides():
    assert _Cfg.preset("smoke").n == 10
    assert _Cfg.preset("book").n == 100
    assert _Cfg.preset("full", lr=None).lr == 0.01  # None keeps the preset
    assert _Cfg.preset("smoke", n=7).n == 7
    with pytest.raises(TypeError, match="no field 'm'"):
        _Cfg.preset("smoke", m=1)


def test_train_loop_keeps_losses_and_stops_on_nan():
    losses = train_loop(lambda i: 10.0 - i, steps=10, log_every=3, desc="t")
    assert losses == [10.0, 7.0, 4.0, 1.0]
    with pytest.raises(FloatingPointError, match="step 2"):
        train_loop(lambda i: float("nan") if i == 2 else 1.0, steps=5)
    with pytest.raises(ValueError):
        train_loop(lambda i: 0.0, steps=0)


def test_progress_is_quiet_under_tqdm_disable(monkeypatch, capsys):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert list(progress(range(3), desc="quiet")) == [0, 1, 2]
    assert "quiet" not in capsys.readouterr().err


def test_timing_medians_and_ratios():
    import time

    t = compare_times({"slow": lambda: time.sleep(0.004), "fast": lambda: None}, repeats=3)
    assert t.medians["slow"] >= 0.003
    assert t.speedups["fast"] > 10 and t.speedups["slow"] == 1.0
    assert median_time(lambda: None, repeats=1) >= 0
    with pytest.raises(ValueError):
        compare_times({})
    with pytest.raises(ValueError, match="baseline"):
        compare_times({"a": lambda: None}, baseline="b")


def test_colours_are_stable_and_distinct_for_known_methods():
    assert color("GPM") == color("gpm ") == METHOD_COLORS["gpm"]
    assert color("some new method") == color("Some New Method")
    assert color("some new method").startswith("#")
    with pytest.raises(ValueError):
        color("")


def test_savefig_writes_only_under_a_run(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()
    monkeypatch.delenv("MINIREPRO_FIGDIR", raising=False)
    assert savefig(fig, "a") is None and figure_path("a") is None
    monkeypatch.setenv("MINIREPRO_FIGDIR", str(tmp_path))
    assert savefig(fig, "a") is None
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        savefig(fig, "../escape")
    plt.close(fig)


def test_datasets():
    s = digits(seed=1)
    assert s.X_train.shape[1] == 64 and 0 <= s.X_train.min() and s.X_train.max() <= 1
    assert len(s.X_train) + len(s.X_test) == 1797
    assert np.array_equal(digits(seed=1).y_test, s.y_test)
    X, lab = gaussian_mixture(500, 16, 4, 3, seed=0)
    assert X.shape == (500, 16) and set(np.unique(lab)) <= set(range(4))
    assert np.array_equal(gaussian_mixture(50, 4, 2, 2, seed=5)[0], gaussian_mixture(50, 4, 2, 2, seed=5)[0])
    # sample_seed: the same mixture (seed), other samples; near-identical component statistics
    a, la = gaussian_mixture(4000, 8, 3, 2, seed=5)
    b, lb = gaussian_mixture(4000, 8, 3, 2, seed=5, sample_seed=11)
    c, _ = gaussian_mixture(4000, 8, 3, 2, seed=6, sample_seed=11)
    assert not np.array_equal(a, b)
    for k in range(3):
        assert np.abs(a[la == k].mean(0) - b[lb == k].mean(0)).max() < 0.15
    assert np.abs(np.sort(a.mean(0)) - np.sort(c.mean(0))).max() > 0.3  # another seed: another mixture
    with pytest.raises(ValueError):
        gaussian_mixture(10, 4, 2, 5)
    with pytest.raises(ValueError):
        digits(test_fraction=1.5)


def test_threads_env_is_validated(monkeypatch):
    monkeypatch.setenv("MINIREPRO_THREADS", "zero")
    with pytest.raises(ValueError, match="MINIREPRO_THREADS"):
        set_seed(0)
    os.environ.pop("MINIREPRO_THREADS", None)


def test_set_seed_without_torch_does_not_import_it():
    import subprocess
    import sys

    code = ("import sys; from minirepro.core import set_seed; import random; "
            "g = set_seed(5, seed_torch=False); a = random.random(); set_seed(5, seed_torch=False); "
            "assert random.random() == a; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@dataclasses.dataclass
class _Counts(ScaledConfig):
    n_train: int = 10
    n_test: int = 0
    n_extra: int | None = None
    lr: float = 0.0
    checked: list = dataclasses.field(default_factory=list)
    ZERO_COUNTS: ClassVar = ("n_test",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.checked.append("own")
        if self.lr < 0:
            raise ValueError(f"lr must be >= 0, got {self.lr}")


def test_scaled_config_refuses_a_zero_count_naming_the_field_and_value():
    with pytest.raises(ValueError, match=r"_Counts: n_train must be >= 1, got 0"):
        _Counts(n_train=0)
    with pytest.raises(ValueError, match=r"n_train must be >= 1, got -3"):
        _Counts.preset("book", n_train=-3)
    with pytest.raises(ValueError, match=r"n_test must be >= 0, got -1"):  # ZERO_COUNTS: 0 allowed
        _Counts(n_test=-1)
    assert _Counts(n_test=0, n_extra=None).n_test == 0  # a None count is left alone
    with pytest.raises(ValueError, match=r"n_extra must be >= 1, got 0"):
        _Counts(n_extra=0)
    assert _Cfg(n=0).n == 0  # only fields named n_* are counts
    cfg = _Counts()
    with pytest.raises(ValueError, match="n_train"):
        dataclasses.replace(cfg, n_train=0)


def test_scaled_config_subclass_post_init_still_runs():
    assert _Counts().checked == ["own"]
    with pytest.raises(ValueError, match="lr must be >= 0"):
        _Counts(lr=-1.0)


def test_every_chapter_config_checks_its_counts():
    from minirepro.chapters import discover

    for chapter in discover():
        config = chapter.config_class()
        if config is None:
            continue
        counts = [f.name for f in dataclasses.fields(config) if f.name.startswith("n_")]
        assert issubclass(config, ScaledConfig)
        name = next(n for n in counts if n not in config.ZERO_COUNTS)
        with pytest.raises(ValueError, match=f"{name} must be >= 1, got 0"):
            config.preset("smoke", **{name: 0})


def test_tbpo_lm_setting_config_checks_its_counts():
    from minirepro.papers.tbpo.lm_setting import LMSettingConfig

    with pytest.raises(ValueError, match="n_prompts must be >= 1, got 0"):
        LMSettingConfig.preset("smoke", n_prompts=0)


def test_from_params_maps_notebook_parameters_named_as_fields():
    from dataclasses import dataclass
    from typing import ClassVar

    from minirepro.core.scale import ScaledConfig

    @dataclass
    class Cfg(ScaledConfig):
        n_train: int = 100
        lr: float = 0.1
        PRESETS: ClassVar = {"smoke": {"n_train": 10}, "book": {}, "full": {}}

    ns = {"scale": "smoke", "lr": 0.5, "n_train": None, "seed": 3, "unrelated": 1}
    cfg = Cfg.from_params(ns)
    assert (cfg.n_train, cfg.lr) == (10, 0.5)
    assert Cfg.from_params({"scale": "book"}).n_train == 100
