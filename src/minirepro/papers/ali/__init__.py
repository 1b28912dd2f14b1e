"""ALI (ICML 2026): relighting as a probe of visual priors, via augmented latent intrinsics.

* ``render``: the procedural scenes (height-field normals, textured albedo, Blinn-Phong
  materials, coloured lights) and the shifted domain.
* ``metrics``: RMSE, PSNR and SSIM (scikit-image's SSIM, in torch), per material region.
* ``models``: Latent Intrinsics (encoder, decoder), the prior trunk, ALI's fusion, Eq. (ali-eq-fusion), and L_reg, Eq. (ali-eq-reg).
* ``priors``: the semantic and dense priors and their linear probe.
* ``train``: the LI loss and Stages I-III.
* ``experiment``: the chapter's config and the runs over seeds.
* ``plots``: the chapter's figures.
"""

from minirepro.papers.ali import plots  # noqa: E402
from minirepro.papers.ali.experiment import (
    BASELINES,
    Config,
    Data,
    Pairs,
    Result,
    TestSet,
    cross_scene_pairs,
    evaluate,
    evaluate_seed,
    make_data,
    make_test_set,
    material_table,
    per_seed,
    run_experiment,
    swap_effects,
)
from minirepro.papers.ali.metrics import check_images, mse, psnr, region_metrics, ssim, ssim_map
from minirepro.papers.ali.models import (
    Decoder,
    Encoder,
    PriorEncoder,
    Relighter,
    coding_rate,
    n_params,
    rate_regulariser,
)
from minirepro.papers.ali.priors import (
    PRIORS,
    linear_probe,
    patch_mask,
    photometric_augment,
    train_prior,
)
from minirepro.papers.ali.render import (
    AMBIENT,
    DOMAINS,
    MATERIAL_PARAMS,
    MATERIALS,
    SHAPES,
    Light,
    SceneSet,
    heightfield_normals,
    make_scenes,
    material_index,
    random_albedo,
    random_height,
    random_light,
    shade,
)
from minirepro.papers.ali.train import (
    ARMS,
    SELF_SUP,
    STAGES,
    Models,
    li_loss,
    pseudo_pair_loss,
    set_trainable,
    train_seed,
    train_stage,
    training_scenes,
)

__all__ = [
    "check_images",
    "mse",
    "psnr",
    "region_metrics",
    "ssim",
    "ssim_map",
    "AMBIENT",
    "ARMS",
    "BASELINES",
    "Config",
    "DOMAINS",
    "Data",
    "Decoder",
    "Encoder",
    "Light",
    "MATERIALS",
    "MATERIAL_PARAMS",
    "Models",
    "PRIORS",
    "Pairs",
    "PriorEncoder",
    "Relighter",
    "Result",
    "TestSet",
    "SELF_SUP",
    "SHAPES",
    "STAGES",
    "SceneSet",
    "coding_rate",
    "cross_scene_pairs",
    "evaluate",
    "evaluate_seed",
    "heightfield_normals",
    "li_loss",
    "linear_probe",
    "make_data",
    "make_test_set",
    "make_scenes",
    "material_index",
    "n_params",
    "patch_mask",
    "material_table",
    "per_seed",
    "photometric_augment",
    "plots",
    "pseudo_pair_loss",
    "random_albedo",
    "random_height",
    "random_light",
    "rate_regulariser",
    "run_experiment",
    "set_trainable",
    "shade",
    "swap_effects",
    "train_prior",
    "train_seed",
    "train_stage",
    "training_scenes",
]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("models", "priors", "train")
