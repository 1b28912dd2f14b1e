"""``lm-v2-book-opt``: the OPT-style (ReLU FFN) sibling of the book model, as an artifact.

Trained exactly as ``lm-v2-book`` (same corpus, tokenizer training, steps and
settings; :data:`~minirepro.core.lm.presets_v2.BOOK_OPT`), with a ReLU
feed-forward ``fc2(relu(fc1(x)))`` of width 768 (two matrices instead of
SwiGLU's three, so the parameter count matches) and learned positions. ReLU
gives exact zeros, which activation-sparsity chapters (SparseInfer) need.
Registered in its own module so that it can be added to ``RECIPE_MODULES``
only once it is built.
"""

from __future__ import annotations

from pathlib import Path

from minirepro.core import artifacts
from minirepro.core.lm.presets_v2 import BOOK_OPT, SubstrateRecipe
from minirepro.core.lm.recipes import SOURCES, build_substrate


@artifacts.recipe("lm-v2-book-opt", config=BOOK_OPT,
                  sources=(*SOURCES, "minirepro.core.lm.recipes"),
                  description="v2 LM substrate, OPT-style (ReLU FFN) sibling of the book model")
def build_lm_v2_book_opt(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] The OPT-style sibling, for activation-sparsity chapters."""
    return build_substrate(rec, out, "lm-v2-book-opt")
