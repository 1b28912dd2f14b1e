"""UniFLoW / FedA²-LoRA (ICML 2026): federated multimodal LoRA with analytical aggregation.

* ``aggregation``: the server-side rules on one LoRA module (FedIT averages, FedA²-LoRA's
  ridge ``B+``, FedEx-LoRA's residual, FLoRA's stacking), the aggregation error and A drift.
* ``strategies``: the six aggregators as Flower ``Strategy`` classes and the client's side
  of a message; ``flower``: ``flwr``'s message types and an in-process client manager.
* ``data``: digit images, synthetic "speech" spectrograms, token sequences; Dirichlet split.
* ``model``: projectors -> frozen substrate LM with peft LoRA -> head, for many clients at once.
* ``experiment``: the chapter's config and the federated rounds; ``plots``: the figures.
"""

from minirepro.papers.uniflow import aggregation, plots  # noqa: E402
from minirepro.papers.uniflow.aggregation import (
    a_drift,
    check_factors,
    feda2_b,
    fedavg,
    fedex_residual,
    fedit,
    flora_stack,
    relative_error,
    ridge_lambda,
    target_update,
)
from minirepro.papers.uniflow.data import (
    MODALITIES,
    dirichlet_split,
    label_skew,
    make_federation,
    speech_pool,
    text_pool,
)
from minirepro.papers.uniflow.experiment import (
    Config,
    Experiment,
    RunSpec,
    final,
    initial_arrays,
    per_seed,
    plan_runs,
    run_experiment,
    start_accuracy,
    summarise,
)
from minirepro.papers.uniflow.flower import InProcessClientManager, pack, unpack
from minirepro.papers.uniflow.model import GroupedUniModel, load_backbone
from minirepro.papers.uniflow.strategies import (
    METHODS,
    LoRASpec,
    LoRAStrategy,
    client_update,
    fit_res,
    message_bytes,
    upload_keys,
)

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("aggregation", "strategies", "model")

__all__ = [
    "Config", "Experiment", "GroupedUniModel", "InProcessClientManager", "LoRASpec",
    "LoRAStrategy", "METHODS", "MODALITIES", "RunSpec", "a_drift", "aggregation", "check_factors",
    "client_update", "dirichlet_split", "fedavg", "feda2_b", "fedex_residual", "fedit", "final",
    "fit_res", "flora_stack", "initial_arrays", "label_skew", "load_backbone", "make_federation",
    "message_bytes", "pack", "per_seed", "plan_runs", "plots", "relative_error", "ridge_lambda",
    "run_experiment", "speech_pool", "start_accuracy", "summarise", "target_update", "text_pool",
    "unpack", "upload_keys",
]
