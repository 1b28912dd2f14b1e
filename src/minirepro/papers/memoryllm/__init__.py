"""MemoryLLM and Flex-MemoryLLM (ICML 2026): context-free FFNs as token-wise lookups.

* ``model``: a compact Llama-style decoder with the base, MemoryLLM and Flex FFN placements.
* ``tol``: token-wise lookups (ToLs): build, quantise, store and memory-map.
* ``train``: training and scoring on the v2 corpus.
* ``artifact`` / ``loading``: the trained variants as one checked artifact.
* ``experiment``: the chapter's config and studies; ``plots``: its figures.
"""

from minirepro.papers.memoryllm import plots  # noqa: E402
from minirepro.papers.memoryllm.experiment import (
    FAMILIES,
    Config,
    Results,
    alpha_sweep,
    decode_timing,
    layer_study,
    per_seed_slope,
    reading,
    run_experiment,
    score_variants,
    tol_bytes,
    tol_study,
)
from minirepro.papers.memoryllm.model import (
    VARIANTS,
    Arch,
    MemoryLM,
    active_params,
    ffn_m_params,
    greedy_decode,
    n_params,
)
from minirepro.papers.memoryllm.tol import (
    ToL,
    ToLError,
    build_tol,
    dequantize_rows,
    open_tol,
    quantize_rows,
    save_tol,
)

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("model", "tol")

__all__ = [
    "FAMILIES", "VARIANTS", "Arch", "Config", "MemoryLM", "Results", "ToL", "ToLError", "active_params",
    "alpha_sweep", "build_tol", "decode_timing", "dequantize_rows", "ffn_m_params", "greedy_decode",
    "layer_study", "n_params", "open_tol", "per_seed_slope", "plots", "quantize_rows", "reading", "run_experiment",
    "save_tol", "score_variants", "tol_bytes", "tol_study",
]
