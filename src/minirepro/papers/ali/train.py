"""Training: the LI loss, ALI's stages I-III, and the pseudo-pairs of the self-supervised stage.

* base: LI itself, encoder and decoder trained together (Eq. (ali-eq-loss)).
* Stage I: encoder and ``Proj`` train, the decoder is frozen (§4.1).
* Stage II: only the decoder trains (§4.2).
* Stage III: the decoder trains on pseudo-pairs from the unlabeled shifted domain,
  mixed with labeled synthetic batches (§4.3).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from minirepro.core import progress, set_seed
from minirepro.papers.ali.models import Relighter, rate_regulariser
from minirepro.papers.ali.priors import PRIORS, train_prior
from minirepro.papers.ali.render import SceneSet, make_scenes

ARMS: dict[str, str | None] = {"LI": None, "LI + semantic": "semantic", "ALI (dense)": "dense"}
SELF_SUP = "ALI + self-sup."
Models = dict[str, torch.nn.Module]
"""One seed's trained models: ``"semantic prior"``, ``"dense prior"`` and ``"<arm> <stage>"`` relighters."""

STAGES: dict[str, tuple[str, ...]] = {
    "base": ("encoder", "decoder"),
    "I": ("encoder", "proj"),
    "II": ("decoder",),
    "III": ("decoder",),
}


def _pixels(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Gather pixel columns ``idx`` (P,) of ``t`` (N, C, H, W) -> (N, C, P, 1)."""
    return t.flatten(2)[:, :, idx].unsqueeze(-1)


def li_loss(model: Relighter, x: torch.Tensor, generator: torch.Generator, w_intrinsic: float = 0.1,
            w_reg: float = 0.01, lam: float = 1.0, n_pixels: int | None = None) -> torch.Tensor:
    """Eqs. (ali-eq-loss, ali-eq-reg): relight + intrinsic-consistency + coding-rate losses on one batch.

    ``x`` (B, M, 3, H, W) holds the M lights of each of B scenes (batches group the lights
    of one scene, as in the paper). Each image is relit to another light of its scene:
    ``D(A(x_{s,m}), L(x_{s,m'}))`` against ``x_{s,m'}``. The intrinsic term is the spread of
    ``A`` over a scene's lights relative to its total variance; the regulariser applies
    Eq. (ali-eq-reg) to 256 random per-pixel intrinsic vectors and to the light codes. The decoder is
    per-pixel, so the relight term may use ``n_pixels`` random pixels per image.
    """
    if x.ndim != 5 or x.shape[2] != 3:
        raise ValueError(f"x must be (scenes, lights, 3, H, W), got {tuple(x.shape)}")
    b, m = x.shape[:2]
    if m < 2:
        raise ValueError("the LI loss needs at least two lights per scene")
    flat = x.flatten(0, 1)
    a, light = model.codes(flat)
    shift = torch.randint(1, m, (b, 1), generator=generator)
    target = (torch.arange(m)[None] + shift) % m
    rows = torch.arange(b)[:, None]
    light_t = light.view(b, m, -1)[rows, target].flatten(0, 1)
    y = x[rows, target].flatten(0, 1)
    hw = x.shape[-1] * x.shape[-2]
    if n_pixels is not None and n_pixels < hw:
        idx = torch.randperm(hw, generator=generator)[:n_pixels]
        y = _pixels(y, idx)
        pred = model.decoder(_pixels(a, idx), light_t)
    else:
        pred = model.decoder(a, light_t)
    relight = F.mse_loss(pred, y)
    a5 = a.view(b, m, *a.shape[1:])
    intrinsic = ((a5 - a5.mean(1, keepdim=True)) ** 2).mean() / (a5.var() + 1e-6)
    vecs = a.permute(0, 2, 3, 1).reshape(-1, a.shape[1])
    pick = torch.randint(0, vecs.shape[0], (256,), generator=generator)
    reg = rate_regulariser(vecs[pick], lam, generator) + rate_regulariser(light, lam, generator)
    return relight + w_intrinsic * intrinsic + w_reg * reg


def pseudo_pair_loss(model: Relighter, x: torch.Tensor, generator: torch.Generator,
                     identity: float = 0.1) -> torch.Tensor:
    """§4.3 (Stage III): self-supervision on unlabeled images ``x`` (N, 3, H, W).

    The current model relights each image with the light of another image of the batch
    (the "lighting zoo"); the pseudo-relit image is the input, the original its target,
    lit by the original's own light code. A fraction ``identity`` of samples are identity pairs.
    """
    n = x.shape[0]
    with torch.no_grad():
        other = torch.roll(torch.arange(n), 1)
        pseudo = model.relight(x, x[other])
        keep = (torch.rand((n, 1, 1, 1), generator=generator) < identity)
        pseudo = torch.where(keep, x, pseudo)
    a, _ = model.codes(pseudo)
    _, light = model.codes(x)
    return F.mse_loss(model.decoder(a, light), x)


def set_trainable(model: Relighter, stage: str) -> list[torch.nn.Parameter]:
    """§3-4 (Stages I-III): freeze all but the parts that train in ``stage`` (:data:`STAGES`); return those."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    for p in model.parameters():
        p.requires_grad_(False)
    params = []
    for part in STAGES[stage]:
        module = getattr(model, part)
        if module is None:
            continue  # LI has no Proj
        for p in module.parameters():
            p.requires_grad_(True)
            params.append(p)
    return params


def train_stage(model: Relighter, stage: str, data: torch.Tensor, steps: int, *, batch_scenes: int = 8,
                lr: float = 3e-3, seed: int = 0, shifted: torch.Tensor | None = None,
                n_pixels: int | None = None, **loss_kw: float) -> list[float]:
    """§4: ``steps`` Adam steps of ``stage`` on labeled scenes ``data`` (S, M, 3, H, W).

    Stage III also needs ``shifted`` (N, 3, H, W) unlabeled images; each of its steps adds
    the pseudo-pair loss on ``batch_scenes * M`` of them. Returns the loss per step.
    """
    if stage == "III" and shifted is None:
        raise ValueError("Stage III needs the unlabeled shifted-domain images (shifted=...)")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    params = set_trainable(model, stage)
    if not params or steps == 0:
        return []
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(params, lr=lr)
    losses = []
    for _ in progress(range(steps), desc=f"stage {stage}"):
        idx = torch.randint(0, data.shape[0], (batch_scenes,), generator=gen)
        loss = li_loss(model, data[idx], gen, n_pixels=n_pixels, **loss_kw)
        if stage == "III":
            pick = torch.randint(0, shifted.shape[0], (batch_scenes * data.shape[1],), generator=gen)
            loss = loss + pseudo_pair_loss(model, shifted[pick], gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    for p in model.parameters():
        p.requires_grad_(False)
    return losses


def training_scenes(cfg, seed: int) -> tuple[SceneSet, SceneSet]:
    """[reconstruction] The scenes the models train on: ``cfg.n_train`` labeled synthetic scenes,
    each under ``cfg.n_lights`` lights of its own, and ``cfg.n_shifted`` unlabeled shifted-domain
    images (one light each) for Stage III, drawn from ``seed``."""
    train = make_scenes(cfg.n_train, cfg.n_lights, cfg.size, "synthetic", seed)
    shifted = make_scenes(cfg.n_shifted, 1, cfg.size, "shifted", seed + 20_000)
    return train, shifted


def train_seed(cfg, train_set: SceneSet, shifted_set: SceneSet, seed: int) -> tuple[Models, dict[str, list[float]]]:
    """§4 for one seed: both priors, LI, each fusion arm (:data:`ARMS`) through Stages I and II
    (a snapshot after each), and Stage III on the dense arm. ``cfg`` is the chapter's Config.
    Returns the models and the loss curves."""
    set_seed(seed)
    kw = {"batch_scenes": cfg.batch_scenes, "lr": cfg.lr, "n_pixels": cfg.n_pixels,
          "w_intrinsic": cfg.w_intrinsic, "w_reg": cfg.w_reg}
    train = torch.from_numpy(train_set.images)
    labels = torch.from_numpy(train_set.shape).repeat_interleave(train.shape[1])
    models: Models = {}
    curves: dict[str, list[float]] = {}
    for i, kind in enumerate(PRIORS):
        models[f"{kind} prior"], curves[f"{kind} prior"] = train_prior(
            kind, train.flatten(0, 1), labels, cfg.prior_steps, cfg.width, seed=seed * 100 + i)
    torch.manual_seed(seed)
    base = Relighter(cfg.width, cfg.c_s, cfg.c_l)
    curves["LI base"] = train_stage(base, "base", train, cfg.base_steps, seed=seed * 100 + 10, **kw)
    for j, (arm, prior) in enumerate(ARMS.items()):
        model = copy.deepcopy(base)
        if prior is not None:
            model.attach_prior(models[f"{prior} prior"])
        for k, (stage, steps) in enumerate((("I", cfg.stage1_steps), ("II", cfg.stage2_steps))):
            curves[f"{arm} {stage}"] = train_stage(model, stage, train, steps,
                                                   seed=seed * 100 + 20 + 2 * j + k, **kw)
            models[f"{arm} {stage}"] = copy.deepcopy(model)
    ss = copy.deepcopy(models["ALI (dense) II"])
    shifted = torch.from_numpy(shifted_set.images[:, 0])
    curves[f"{SELF_SUP} III"] = train_stage(ss, "III", train, cfg.stage3_steps, shifted=shifted,
                                            seed=seed * 100 + 30, **kw)
    models[f"{SELF_SUP} III"] = ss
    return models, curves
