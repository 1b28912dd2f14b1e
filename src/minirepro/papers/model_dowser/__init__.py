"""Model-Dowser (ICML 2026): data-free importance probing against catastrophic forgetting.

* ``data``: the 8x8 digits and the templated upstream/downstream prompts.
* ``model``: the tiny multimodal LM (digit CNN, projector, decoder) and what fine-tuning may change.
* ``dowser``: the importance score with its Hutchinson estimator, the per-layer masks,
  the synthetic probe prompts and AdamW with a masked update.
* ``baselines``: magnitude, Wanda and random masks, LoRA (``peft``), SPIDER, Grafting,
  DARE and Model Tailor.
* ``experiment``: the chapter's config and the runs over seeds and depths.
* ``artifact`` / ``loading``: the pretrained model as a checked artifact.
"""

from minirepro.papers.model_dowser import plots  # noqa: E402
from minirepro.papers.model_dowser.baselines import (
    dare,
    graft,
    lora_model,
    lora_ranks,
    magnitude_scores,
    model_tailor,
    random_scores,
    spider_blend,
    top_delta_mask,
    wanda_scores,
)
from minirepro.papers.model_dowser.data import (
    DOWNSTREAM,
    UPSTREAM,
    downstream_set,
    split_digits,
    upstream_sets,
)
from minirepro.papers.model_dowser.dowser import (
    MaskedAdamW,
    check_fraction,
    dowser_scores,
    hutchinson_sq_norms,
    layer_masks,
    probe_batches,
    rademacher,
    state_bytes,
)
from minirepro.papers.model_dowser.experiment import (
    MASKED,
    METHODS,
    POST_HOC,
    TRAINED,
    Config,
    EvalSets,
    Experiment,
    evaluate,
    h_score,
    mask_overlap,
    mask_scores,
    per_seed,
    post_hoc,
    run_experiment,
    run_method,
    run_seed,
    run_sweep,
    summarise,
)
from minirepro.papers.model_dowser.loading import load_curve, load_model
from minirepro.papers.model_dowser.model import TinyMLLM, accuracy, finetune_linears

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("dowser", "baselines")

__all__ = [
    "Config", "DOWNSTREAM", "EvalSets", "Experiment", "MASKED", "METHODS", "MaskedAdamW", "POST_HOC",
    "TRAINED", "TinyMLLM", "UPSTREAM", "accuracy", "check_fraction", "dare", "downstream_set",
    "dowser_scores", "evaluate", "finetune_linears", "graft", "h_score", "hutchinson_sq_norms",
    "layer_masks", "load_curve", "load_model", "lora_model", "lora_ranks", "magnitude_scores",
    "mask_overlap", "mask_scores", "model_tailor", "per_seed", "plots", "post_hoc", "probe_batches", "rademacher",
    "random_scores", "run_experiment", "run_method", "run_seed", "run_sweep", "spider_blend",
    "split_digits", "state_bytes", "summarise", "top_delta_mask", "upstream_sets", "wanda_scores",
]
