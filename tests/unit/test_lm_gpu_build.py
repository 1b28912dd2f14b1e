"""Tests of the GPU build script's process plumbing (``minirepro.core.lm.gpu_build``), on a toy."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from minirepro.core import artifacts
from minirepro.core.artifacts import recipes as recipes_module
from minirepro.core.lm import gpu_build


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A throwaway recipe alone in the registry, built into ``tmp_path/artifacts``."""
    from safetensors.torch import save_file

    monkeypatch.setenv("MINIREPRO_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setattr(artifacts, "RECIPE_MODULES", ())
    monkeypatch.setattr(recipes_module, "_REGISTRY", {})
    state = SimpleNamespace(calls=0)

    @artifacts.recipe("toy-gpu", config={"n": 3})
    def make(config, out: Path) -> artifacts.BuildResult:
        state.calls += 1
        save_file({"w": torch.arange(config["n"], dtype=torch.float32)}, str(out / "w.safetensors"))
        return artifacts.BuildResult()

    return state


def test_a_build_process_calls_the_package_api_and_leaves_a_verified_copy_alone(toy, tmp_path, capsys):
    gpu_build.main([str(tmp_path), "--build", "toy-gpu"])
    folder = tmp_path / "artifacts" / "toy-gpu"
    assert toy.calls == 1 and artifacts.verify("toy-gpu") == []
    assert capsys.readouterr().out.startswith(f"toy-gpu: {folder}, built ")
    gpu_build.main([str(tmp_path), "--build", "toy-gpu"])  # up to date: not re-made
    assert toy.calls == 1


def test_main_starts_this_module_for_every_build_and_probe_never_the_cli(tmp_path, monkeypatch):
    started = []

    def fake_popen(cmd, **kwargs):
        started.append(cmd)
        return SimpleNamespace(poll=lambda: 0, returncode=0, terminate=lambda: None)

    monkeypatch.setattr(gpu_build.subprocess, "Popen", fake_popen)
    with pytest.raises(SystemExit) as done:
        gpu_build.main([str(tmp_path)])
    assert done.value.code == 0
    assert all(cmd[1:3] == ["-m", "minirepro.core.lm.gpu_build"] for cmd in started)
    assert sorted(tuple(cmd[-2:]) for cmd in started) == sorted(
        [("--build", n) for n in gpu_build.BUILDS] + [("--probe", n) for n in gpu_build.PROBES])
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == sorted(
        [f"{n}.log" for n in gpu_build.BUILDS] + [f"probe-{n}.log" for n in gpu_build.PROBES] + ["status.json"])
