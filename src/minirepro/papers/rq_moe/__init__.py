"""RQ-MoE (residual quantization via mixture of experts) and the quantizers it is compared with.

One file per concern:

* ``data``: the two vector sets (synthetic mixture, warped-digits embeddings) and their splits;
* ``rq``: plain residual quantization written here (greedy k-means on residuals);
* ``quantizers``: ``RQMoE`` and ``QINCo`` in torch, and the normalised training loss;
* ``train``: initialisation scale and the training loop;
* ``baselines``: faiss PQ, OPQ, RQ (beam 1 / 8), LSQ behind one ``FaissQuantizer``;
* ``evaluate``: MSE, R@k, decode timing, sequential depth, multiply-adds per decoded vector;
* ``artifact`` / ``pretrained``: the book's trained networks as a checked artifact, and loading them;
* ``experiment``: the chapter's config and comparison runs;
* ``redraw``: fresh database and query vectors for a seed's trained quantizers (robustness runs).
"""

from minirepro.papers.rq_moe.baselines import BASELINES, FaissQuantizer
from minirepro.papers.rq_moe.data import DATASETS, VectorSplits, load_vectors
from minirepro.papers.rq_moe.evaluate import (
    decode_macs,
    late_drop,
    model_decode_macs,
    mse,
    recall_at,
    sequential_depth,
    true_neighbours,
)
from minirepro.papers.rq_moe.experiment import (
    METHODS,
    NEURAL,
    Config,
    build_neural,
    code_size_curve,
    decode_time_curve,
    per_seed,
    run_experiment,
    run_setting,
    summarise,
    timing_models,
    vectors,
)
from minirepro.papers.rq_moe.pretrained import stored_network, training_curves
from minirepro.papers.rq_moe.quantizers import QINCo, RQMoE, normalized_loss
from minirepro.papers.rq_moe.rq import PlainRQ
from minirepro.papers.rq_moe.special_cases import special_case_deviations
from minirepro.papers.rq_moe.train import data_scale, train_quantizer

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("rq", "quantizers", "train", "special_cases", "baselines")

__all__ = [
    "BASELINES",
    "DATASETS",
    "METHODS",
    "NEURAL",
    "Config",
    "FaissQuantizer",
    "PlainRQ",
    "QINCo",
    "RQMoE",
    "VectorSplits",
    "build_neural",
    "code_size_curve",
    "decode_macs",
    "data_scale",
    "decode_time_curve",
    "late_drop",
    "load_vectors",
    "model_decode_macs",
    "mse",
    "normalized_loss",
    "per_seed",
    "recall_at",
    "run_experiment",
    "run_setting",
    "sequential_depth",
    "special_case_deviations",
    "stored_network",
    "summarise",
    "timing_models",
    "train_quantizer",
    "training_curves",
    "true_neighbours",
    "vectors",
]
