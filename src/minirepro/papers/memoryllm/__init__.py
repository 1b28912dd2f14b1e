"""MemoryLLM and Flex-MemoryLLM (ICML 2026): context-free FFNs as token-wise lookups.

* ``model``: a compact Llama-style decoder with the base, MemoryLLM and Flex FFN placements.
* ``tol``: token-wise lookups (ToLs): build, quantise, store and memory-map.
* ``train``: training and scoring on the substrate corpus.
* ``artifact`` / ``loading``: the trained variants as one checked artifact.
* ``experiment``: the chapter's config and studies; ``plots``: its figures.
* ``memory``: resident memory of decoding, measured in a fresh process.

The names below are imported on first use (PEP 562): the fresh processes that
:mod:`.memory` starts import only :mod:`.model` and :mod:`.tol`, not the
experiment's heavier dependencies, so their import baseline stays small.
"""

from importlib import import_module

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("model", "tol")

_WHERE = {
    "experiment": ("FAMILIES", "Config", "Results", "alpha_sweep", "decode_timing", "layer_study",
                   "per_seed_slope", "random_decoders", "reading", "rss_ratios", "rss_reading", "rss_study",
                   "rss_table", "run_experiment", "score_variants", "tol_bytes", "tol_study"),
    "model": ("VARIANTS", "Arch", "MemoryLM", "active_params", "ffn_m_params", "greedy_decode", "n_params"),
    "tol": ("ToL", "ToLError", "build_tol", "dequantize_rows", "open_tol", "quantize_rows", "save_tol"),
    "memory": ("ProbeError", "measure_rss"),
}
_MODULE_OF = {name: mod for mod, names in _WHERE.items() for name in names}

__all__ = sorted([*_MODULE_OF, "plots"])


def __getattr__(name: str):
    """The package's public names, imported from their module on first use."""
    if name == "plots":
        return import_module(f"{__name__}.plots")
    if name in _MODULE_OF:
        return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
