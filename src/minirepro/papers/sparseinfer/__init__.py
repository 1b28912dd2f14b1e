"""SparseInfer (paper 19): core neurons picked at prefill, a sliced FFN for decoding.

Modules, one per concern:

* :mod:`~minirepro.papers.sparseinfer.neurons`: the method itself. Token-wise top
  neurons (:func:`token_core_neurons`), the sentence-level core set by frequency
  (:func:`sentence_core_neurons`), the FFN sliced once (:func:`sliced_ffn`), the
  per-token masking used by the per-token baselines (:func:`masked_ffn`).
* :mod:`~minirepro.papers.sparseinfer.baselines`: the similarity-guided variant
  (KMeans over core sets) and the baselines at equal budget (random, static hot,
  per-token oracle, DejaVu-like low-rank predictor).
* :mod:`~minirepro.papers.sparseinfer.protocol`: the protocol on the substrate
  substrate (dense prefill of the full prompt, sparse decoding; exact match,
  NLL and agreement with the dense model), stability and similarity of core sets.
* :mod:`~minirepro.papers.sparseinfer.speed`: SparseInfer generation, timings and
  the FLOP bound.
* :mod:`~minirepro.papers.sparseinfer.offload`: the memory-offload setting, FFN
  weights memory-mapped from disk and read at every decoding step.
* :mod:`~minirepro.papers.sparseinfer.experiment`: the chapter's :class:`Config`, one
  seed of the comparison (:func:`run_seed`, :func:`run_experiment`) and the sparsity sweep.
* :mod:`~minirepro.papers.sparseinfer.plots`: the figures.
"""

from minirepro.papers.sparseinfer.baselines import (
                                                    LowRankPredictor,
                                                    SimilarityIndex,
                                                    budget,
                                                    fit_similarity_index,
                                                    random_sets,
                                                    static_hot_sets,
                                                    train_dejavu,
)
from minirepro.papers.sparseinfer.experiment import (
                                                    Config,
                                                    run_experiment,
                                                    run_seed,
                                                    run_sweep,
                                                    summarise,
                                                    test_items,
)
from minirepro.papers.sparseinfer.neurons import (
                                                    capture_preactivations,
                                                    core_neurons,
                                                    ffn_blocks,
                                                    jaccard,
                                                    masked_ffn,
                                                    sentence_core_neurons,
                                                    sliced_ffn,
                                                    sparse_layer_ids,
                                                    token_core_neurons,
)
from minirepro.papers.sparseinfer.offload import (
                                                    offload_measurement,
                                                    synthetic_offload,
)
from minirepro.papers.sparseinfer.protocol import (
                                                    METHODS,
                                                    Item,
                                                    decode_item,
                                                    make_items,
                                                    score_item,
                                                    similarity,
                                                    stability,
                                                    trace_example,
)
from minirepro.papers.sparseinfer.speed import (
                                                    decode_macs,
                                                    dense_generate,
                                                    flop_bound,
                                                    sparseinfer_generate,
                                                    time_decoding,
                                                    time_ffn_block,
)

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("neurons", "baselines")

__all__ = [
    "METHODS", "Config", "Item", "LowRankPredictor", "SimilarityIndex", "budget",
    "capture_preactivations", "core_neurons", "decode_item", "decode_macs", "dense_generate",
    "ffn_blocks", "fit_similarity_index", "flop_bound", "jaccard", "make_items", "masked_ffn",
    "offload_measurement", "random_sets", "run_experiment", "run_seed", "run_sweep", "score_item", "sentence_core_neurons",
    "similarity", "sliced_ffn", "sparse_layer_ids", "sparseinfer_generate", "stability",
    "static_hot_sets", "summarise", "synthetic_offload", "test_items", "time_decoding", "time_ffn_block",
    "token_core_neurons", "trace_example", "train_dejavu",
]
