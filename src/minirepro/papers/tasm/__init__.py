"""TASM (ICML 2026): task-aware structured memory for in-context learning under a KV budget.

* ``data``: digits as 2x2 patch tokens, k-shot episodes with labels permuted per episode.
* ``model``: the in-context learner (prefill of the demonstrations' KV cache, answering a
  query from a compressed cache with proportional attention).
* ``compress``: the baselines (random, H2O, SnapKV with and without the query, ToMe), the
  bipartite assignment, size-weighted merging and the JS divergence.
* ``tasm``: TASM's task vector, token scores, windowed merging, Core + Latent Bank, gate.
* ``artifact`` / ``loading``: the learner's checked artifact ``tasm-icl-transformer``.
* ``spread`` / ``spread_artifact``: the spread variant (label-first, a local per-image encoder)
  and its learner's checked artifact ``tasm-icl-spread``.
* ``experiment``: the config and the comparison; ``plots``: the figures.
"""

from minirepro.papers.tasm import plots  # noqa: E402
from minirepro.papers.tasm.compress import (
    bipartite_assign,
    budget,
    check_ratio,
    h2o_select,
    js_divergence,
    merge_into_sinks,
    random_select,
    snapkv_query_select,
    snapkv_select,
    tome_merge,
)
from minirepro.papers.tasm.data import FORMATS, make_episodes, patchify, shuffle_labels
from minirepro.papers.tasm.experiment import (
    GATED,
    METHODS,
    NOT_COMPARABLE,
    SPREAD,
    Config,
    calibrate_delta,
    latency,
    per_seed,
    run_experiment,
    run_spread,
)
from minirepro.papers.tasm.loading import load_curve, load_model, load_spread_model
from minirepro.papers.tasm.model import KV, ICLTransformer, attend
from minirepro.papers.tasm.spread import SpreadICLTransformer, local_item_mask
from minirepro.papers.tasm.tasm import (
    Gate,
    dropped_bank,
    layer_weight,
    merge_weights,
    proportional_attention,
    task_vector,
    tasm_compress,
    token_scores,
)

__all__ = ["FORMATS", "GATED", "KV", "METHODS", "calibrate_delta", "dropped_bank", "NOT_COMPARABLE", "SPREAD", "Config", "SpreadICLTransformer", "Gate", "ICLTransformer", "attend",
           "bipartite_assign", "budget", "check_ratio", "h2o_select", "js_divergence", "latency",
           "layer_weight", "load_curve", "load_model", "load_spread_model", "local_item_mask", "make_episodes", "merge_into_sinks",
           "merge_weights", "patchify", "per_seed", "plots", "proportional_attention", "random_select",
           "run_experiment", "run_spread", "shuffle_labels", "snapkv_query_select", "snapkv_select", "task_vector",
           "tasm_compress", "tome_merge", "token_scores"]

# Modules implementing the paper's steps (TASM and the compressors it is compared with);
# each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("tasm", "compress", "model", "spread")
