"""SparseInfer (paper 19): core neurons picked at prefill, a sliced FFN for decoding.

Modules, one per concern:

* :mod:`~minirepro.papers.sparseinfer.neurons`: the method itself. Token-wise top
  neurons by activation magnitude (:func:`token_core_neurons`), the sentence-level core
  set by frequency (:func:`sentence_core_neurons`), the FFN sliced once
  (:func:`sliced_ffn`), the masking that applies a set per sequence or per token in a
  batch (:func:`masked_ffn`).
* :mod:`~minirepro.papers.sparseinfer.baselines`: the similarity-guided variant
  (KMeans over core sets) and the baselines at equal budget (random, static hot,
  per-token oracle).
* :mod:`~minirepro.papers.sparseinfer.texts`: the test texts, eight topics, prompts and
  held-out continuations.
* :mod:`~minirepro.papers.sparseinfer.protocol`: dense prefill, the continuation scored
  with each method's neurons (batched), stability and similarity of core sets.
* :mod:`~minirepro.papers.sparseinfer.speed`: SparseInfer generation, timings and the
  FLOP and byte bounds.
* :mod:`~minirepro.papers.sparseinfer.experiment`: the chapter's :class:`Config` and one run.
* :mod:`~minirepro.papers.sparseinfer.plots`: the figures.
"""

from minirepro.papers.sparseinfer.baselines import (
                                                    SimilarityIndex,
                                                    budget,
                                                    fit_similarity_index,
                                                    oracle_selector,
                                                    random_sets,
                                                    static_hot_sets,
)
from minirepro.papers.sparseinfer.experiment import (
                                                    Config,
                                                    run_experiment,
                                                    run_main,
                                                    run_sweep,
                                                    time_speed,
                                                    topics_table,
)
from minirepro.papers.sparseinfer.neurons import (
                                                    capture_hidden,
                                                    core_neurons,
                                                    ffn_blocks,
                                                    jaccard,
                                                    masked_ffn,
                                                    sentence_core_neurons,
                                                    sliced_ffn,
                                                    sparse_layer_ids,
                                                    token_core_neurons,
)
from minirepro.papers.sparseinfer.protocol import (
                                                    METHODS,
                                                    encode_units,
                                                    evaluate,
                                                    masked_vs_sliced,
                                                    similarity,
                                                    sliced_reference,
                                                    stability,
                                                    token_overlap_control,
)
from minirepro.papers.sparseinfer.speed import (
                                                    byte_bound,
                                                    decode_macs,
                                                    dense_generate,
                                                    flop_bound,
                                                    sparseinfer_generate,
                                                    time_decoding,
                                                    time_ffn_block,
)
from minirepro.papers.sparseinfer.texts import TOPICS, Unit, calibration_texts, draw_units

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("neurons", "baselines")

__all__ = [
    "METHODS", "TOPICS", "Config", "SimilarityIndex", "Unit", "budget", "byte_bound", "calibration_texts",
    "capture_hidden", "core_neurons", "decode_macs", "dense_generate", "draw_units", "encode_units",
    "evaluate", "ffn_blocks", "fit_similarity_index", "flop_bound", "jaccard", "masked_ffn",
    "masked_vs_sliced", "oracle_selector", "random_sets", "run_experiment", "run_main", "run_sweep", "sentence_core_neurons",
    "similarity", "sliced_ffn", "sliced_reference", "sparse_layer_ids", "sparseinfer_generate",
    "stability", "static_hot_sets", "time_decoding", "time_speed", "time_ffn_block", "token_core_neurons",
    "token_overlap_control", "topics_table",
]
