"""ConservationBench (ICML 2026): do vision-language models conserve number, length, volume, size?

* ``generator``: the four properties rendered with numpy (conserving videos and matched controls),
  and ``measure`` to read the quantity back from the pixels.
* ``conditions``: frame selection (uniform, human, saliency), frame counts, prompt templates and
  counterbalanced option orders.
* ``models``: the ``Model`` protocol, rule-based answer parsing, and the offline stand-ins.
* ``hf``: ``TransformersVLM``, the adapter for image-text models through ``transformers``.
* ``analysis``: C / NC / mean / strict accuracy, the cross-model correlation, the frame-count ANOVA,
  the vision-removal transition matrices, chance levels.
* ``bench``: export the benchmark (PNG + JSONL) and score answers from any model.
* ``experiment``: the chapter's runs (planted and null stand-in families over seeds).
"""

from minirepro.papers.conservationbench import analysis, bench, plots
from minirepro.papers.conservationbench.analysis import (
    accuracy_by,
    accuracy_table,
    chance_levels,
    cross_model_correlation,
    frame_count_anova,
    frame_count_pairs,
    same_share,
    transitions,
)
from minirepro.papers.conservationbench.conditions import (
    FRAME_COUNTS,
    SELECTIONS,
    TEMPLATES,
    option_order,
    prompt,
    select_frames,
    trial_table,
)
from minirepro.papers.conservationbench.experiment import (
    FAMILIES,
    Config,
    Experiment,
    SeedRun,
    answer_standins,
    baselines,
    run_experiment,
    run_seed,
    summarise_family,
    train_family,
)
from minirepro.papers.conservationbench.generator import (
    ANSWERS,
    PROPERTIES,
    Video,
    generate,
    make_video,
    measure,
    measured_answer,
)
from minirepro.papers.conservationbench.models import (
    ConstantModel,
    Model,
    RandomModel,
    StandIn,
    StandInSpec,
    Trial,
    frame_features,
    null_family,
    parse_response,
    planted_family,
)

__all__ = [
    "ANSWERS",
    "Config",
    "ConstantModel",
    "Experiment",
    "FAMILIES",
    "FRAME_COUNTS",
    "Model",
    "PROPERTIES",
    "RandomModel",
    "SELECTIONS",
    "SeedRun",
    "StandIn",
    "StandInSpec",
    "TEMPLATES",
    "Trial",
    "Video",
    "accuracy_by",
    "accuracy_table",
    "analysis",
    "answer_standins",
    "baselines",
    "bench",
    "chance_levels",
    "cross_model_correlation",
    "frame_count_anova",
    "frame_count_pairs",
    "frame_features",
    "generate",
    "make_video",
    "measure",
    "measured_answer",
    "null_family",
    "option_order",
    "parse_response",
    "planted_family",
    "plots",
    "prompt",
    "run_experiment",
    "run_seed",
    "same_share",
    "select_frames",
    "summarise_family",
    "train_family",
    "transitions",
    "trial_table",
]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("conditions", "models", "analysis")
