"""``lm-v2-smoke-opt``: the OPT-style (ReLU FFN) smoke model, as an artifact.

Trained like ``lm-v2-smoke`` (same corpus, tokenizer training and settings;
:data:`~minirepro.core.lm.presets_v2.SMOKE_OPT`) with a ReLU feed-forward of
width 192 and three layers, for SparseInfer's smoke runs and CI. Registered in
its own module (as ``recipes_opt``) so that adding it changes the source hash of
no other artifact.
"""

from __future__ import annotations

from pathlib import Path

from minirepro.core import artifacts
from minirepro.core.lm.presets_v2 import SMOKE_OPT, SubstrateRecipe
from minirepro.core.lm.recipes import SOURCES, build_substrate


@artifacts.recipe("lm-v2-smoke-opt", config=SMOKE_OPT,
                  sources=(*SOURCES, "minirepro.core.lm.recipes"),
                  description="v2 LM substrate, OPT-style (ReLU FFN) smoke model, for CI")
def build_lm_v2_smoke_opt(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] A tiny OPT-style model for SparseInfer's smoke runs (no training at test time)."""
    return build_substrate(rec, out, "lm-v2-smoke-opt")
