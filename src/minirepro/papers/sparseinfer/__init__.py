"""SparseInfer (paper 19): core neurons picked at prefill, a sliced FFN for decoding.

Modules, one per concern:

* :mod:`~minirepro.papers.sparseinfer.core`: the method itself. Token-wise top
  neurons (:func:`token_core_neurons`), the sentence-level core set by frequency
  (:func:`sentence_core_neurons`), the FFN sliced once (:func:`sliced_ffn`), the
  per-token masking used by the per-token baselines (:func:`masked_ffn`).
* :mod:`~minirepro.papers.sparseinfer.baselines`: the similarity-guided variant
  (KMeans over core sets) and the baselines at equal budget (random, static hot,
  per-token oracle, DejaVu-like low-rank predictor).
* :mod:`~minirepro.papers.sparseinfer.experiment`: the prefill/decode protocol,
  continuation quality, stability and similarity of core sets.
* :mod:`~minirepro.papers.sparseinfer.speed`: SparseInfer generation, timings and
  the FLOP bound.
* :mod:`~minirepro.papers.sparseinfer.run`: the chapter's config and one seed of
  the comparison, and the sparsity sweep.
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
from minirepro.papers.sparseinfer.core import (
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
from minirepro.papers.sparseinfer.experiment import (
                                                    METHODS,
                                                    evaluate_method,
                                                    make_items,
                                                    similarity,
                                                    stability,
)
from minirepro.papers.sparseinfer.run import SparseInferConfig, run_seed, run_sweep, settle_claims
from minirepro.papers.sparseinfer.speed import (
                                                    decode_macs,
                                                    flop_bound,
                                                    sparseinfer_generate,
                                                    time_decoding,
                                                    time_ffn_block,
)

__all__ = [
    "METHODS", "LowRankPredictor", "SimilarityIndex", "SparseInferConfig", "budget",
    "capture_preactivations", "core_neurons", "decode_macs", "evaluate_method", "ffn_blocks",
    "fit_similarity_index", "flop_bound", "jaccard", "make_items", "masked_ffn", "random_sets",
    "run_seed", "run_sweep", "sentence_core_neurons", "settle_claims", "similarity", "sliced_ffn",
    "sparse_layer_ids", "sparseinfer_generate", "stability", "static_hot_sets",
    "time_decoding", "time_ffn_block", "token_core_neurons", "train_dejavu",
]
