"""The chapter's config, GRPO training per reward form, the arms and their evaluation."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, progress, set_seed
from minirepro.papers.active_o3.boxes import box_iou, grid_actions, tiling, to_json
from minirepro.papers.active_o3.canvas import (
    CANVAS,
    Canvases,
    global_view,
    make_canvases,
    upsample_view,
)
from minirepro.papers.active_o3.grpo import (
    greedy,
    group_advantages,
    grpo_loss,
    sample_without_replacement,
    sequence_logprobs,
)
from minirepro.papers.active_o3.policy import SensingPolicy
from minirepro.papers.active_o3.rewards import (
    COVERED,
    FORMS,
    IOU_MAX,
    RewardTable,
    RewardWeights,
    format_reward,
    found_digits,
)
from minirepro.papers.active_o3.taskmodel import crop_resize, predict

EVAL_SEED = 5_000  # tags the held-out streams (evaluation and readability canvases), see held_out_seed
TASK_MODEL_SEED = 10_000  # the task model's own training canvases (artifact.DATA_SEED): never a chapter seed


def held_out_seed(seed: int, stream: int = 0) -> int:
    """The seed of a held-out canvas stream of data seed ``seed``: ``stream`` 0 the evaluation
    canvases, 1 the readability check's. Drawn from ``SeedSequence([seed, EVAL_SEED, stream])``,
    so it differs from every training stream (the training canvases use ``seed`` itself) for any
    ``seed``, the pilot's and the replications' included."""
    return int(np.random.SeedSequence([seed, EVAL_SEED, stream]).generate_state(1)[0])


@dataclass
class Config(ScaledConfig):
    """The miniature's sizes and GRPO's settings."""

    n_seeds: int = 5  # policy seeds per reward form
    n_train: int = 128  # training canvases (rewards precomputed for every grid box)
    n_eval: int = 200  # held-out evaluation canvases
    iters: int = 480  # GRPO iterations (the book budget holds 480; the curves still rose at 120)
    batch: int = 16  # canvases (prompts) per iteration
    group: int = 8  # G, answers per canvas
    k_boxes: int = 3  # K, boxes per answer
    inner: int = 2  # gradient steps per batch (PPO epochs)
    clip: float = 0.2
    beta: float = 0.01
    lr: float = 3e-3
    weights: RewardWeights = field(default_factory=RewardWeights)
    PRESETS: ClassVar = {"smoke": {"n_seeds": 1, "n_train": 32, "n_eval": 60, "iters": 30},
                         "book": {}, "full": {"n_seeds": 10, "n_train": 512, "n_eval": 1000, "iters": 600}}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group < 2:
            raise ValueError(f"GRPO needs a group of at least 2 answers, got group={self.group}")
        if not 1 <= self.k_boxes <= 3:
            raise ValueError(f"k_boxes (K) must be 1..3 (the answer format's limit), got {self.k_boxes}")
        if self.iters < 1:
            raise ValueError(f"iters must be positive, got {self.iters}")


@dataclass
class Data:
    """Training canvases with their reward table, and held-out evaluation canvases."""

    train: Canvases
    train_view: torch.Tensor
    table: RewardTable
    eval: Canvases
    eval_view: torch.Tensor


def grid_predictions(model: torch.nn.Module, cv: Canvases, actions: np.ndarray) -> np.ndarray:
    """The task model's answer on every grid box of every canvas, [C, A]."""
    c, a = len(cv), len(actions)
    idx = torch.arange(c).repeat_interleave(a)
    crops = crop_resize(cv.images, idx, torch.from_numpy(actions).repeat(c, 1))
    return predict(model, crops).reshape(c, a).numpy()


def make_data(cfg: Config, task_model: torch.nn.Module) -> Data:
    """Training canvases (seed ``cfg.seed``, train digits) with their reward table, and held-out
    canvases (seed :func:`held_out_seed` of ``cfg.seed``, test digits)."""
    if cfg.seed == TASK_MODEL_SEED:
        raise ValueError(f"seed {TASK_MODEL_SEED} draws the task model's own training canvases; use another")
    train = make_canvases(cfg.n_train, cfg.seed, "train")
    actions = grid_actions()
    table = RewardTable(actions, train.boxes, train.labels, grid_predictions(task_model, train, actions))
    ev = make_canvases(cfg.n_eval, held_out_seed(cfg.seed), "test")
    return Data(train, global_view(train.images), table, ev, global_view(ev.images))


_FORMAT_CACHE: dict[bytes, float] = {}


def _format_of(table: RewardTable, acts: tuple[int, ...]) -> float:
    """The format reward of the JSON answer for these grid actions (parsed once per distinct answer)."""
    boxes = table.actions[list(acts)]
    key = boxes.tobytes()
    if key not in _FORMAT_CACHE:
        _FORMAT_CACHE[key] = format_reward(to_json(boxes))
    return _FORMAT_CACHE[key]


def rewards_for(table: RewardTable, canvas: torch.Tensor, acts: torch.Tensor, form: str,
                weights: RewardWeights) -> dict[str, torch.Tensor]:
    """§3.2 The reward of each answer: the weighted parts for ``form``; the format part parses each
    answer's JSON text for real. Returns the parts and ``reward`` ([N] float64 each)."""
    wt, wh, wf = weights.for_form(form)
    parts = table.parts(canvas, acts)
    fmt = torch.tensor([_format_of(table, tuple(a)) for a in acts.tolist()], dtype=torch.float64)
    parts["format"] = fmt
    parts["reward"] = wt * parts["task"] + wh * parts["heuristic"] + wf * fmt
    return parts


def train_policy(cfg: Config, data: Data, form: str, seed: int, desc: str = "GRPO"
                 ) -> tuple[SensingPolicy, pd.DataFrame]:
    """§3.3 GRPO on the sensing policy with reward ``form``; the reference is the initial policy.

    Returns the policy and its curve per iteration: mean reward, task recall, heuristic
    reward, share of zero-variance groups, KL and share of clipped tokens.
    """
    if form not in FORMS:
        raise ValueError(f"reward form must be one of {FORMS}, got {form!r}")
    set_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    policy = SensingPolicy()
    ref = copy.deepcopy(policy).requires_grad_(False)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    with torch.no_grad():
        ref_logits = ref(data.train_view)  # the reference is frozen: its logits once per canvas
    rows = []
    for it in progress(range(cfg.iters), desc=f"{desc} {form} seed {seed}"):
        canvas = torch.randint(len(data.train), (cfg.batch,), generator=gen)
        view = data.train_view[canvas]
        logits = policy(view).repeat_interleave(cfg.group, 0)  # pi_old = pi_theta before this batch's steps
        with torch.no_grad():
            acts, old_lp = sample_without_replacement(logits.detach(), cfg.k_boxes, gen)
            ref_lp = sequence_logprobs(ref_logits[canvas].repeat_interleave(cfg.group, 0), acts)
        parts = rewards_for(data.table, canvas.repeat_interleave(cfg.group), acts, form, cfg.weights)
        adv, zero = group_advantages(parts["reward"].reshape(cfg.batch, cfg.group).float())
        for step in range(cfg.inner):
            if step:
                logits = policy(view).repeat_interleave(cfg.group, 0)
            lp = sequence_logprobs(logits, acts)
            loss, info = grpo_loss(lp, old_lp, ref_lp, adv.reshape(-1), cfg.clip, cfg.beta)
            opt.zero_grad()
            loss.backward()
            opt.step()
        rows.append({"iter": it, "reward": float(parts["reward"].mean()), "task": float(parts["task"].mean()),
                     "heuristic": float(parts["heuristic"].mean()), "zero_var": float(zero.float().mean()),
                     "kl": info["kl"], "clipped": info["clipped"]})
    return policy.eval(), pd.DataFrame(rows)


def saliency_boxes(view: torch.Tensor, k: int, side: int = 24) -> list[np.ndarray]:
    """[reconstruction] The "o3-style zoom" heuristic: the ``k`` grid boxes of side ``side`` with the
    most brightness in the global view, greedily keeping boxes with IoU <= 0.3 to those kept."""
    acts = grid_actions()
    cand = acts[(acts[:, 2] - acts[:, 0]) == side]
    up = upsample_view(view)
    cs = torch.nn.functional.pad(up.cumsum(1).cumsum(2), (1, 0, 1, 0))  # integral image
    x1, y1, x2, y2 = (torch.from_numpy(cand[:, i]) for i in range(4))
    mass = cs[:, y2, x2] - cs[:, y1, x2] - cs[:, y2, x1] + cs[:, y1, x1]  # [N, A_side]
    iou = box_iou(cand, cand) > IOU_MAX
    out = []
    for m in mass:
        keep: list[int] = []
        for a in torch.argsort(m, descending=True).tolist():
            if not any(iou[a, b] for b in keep):
                keep.append(a)
            if len(keep) == k:
                break
        out.append(cand[keep])
    return out


def random_boxes(n: int, k: int, seed: int, max_side: int = 40) -> list[np.ndarray]:
    """Random answers: ``k`` distinct grid boxes of side <= ``max_side`` (inside the area range), uniformly."""
    acts = grid_actions()
    ok = acts[(acts[:, 2] - acts[:, 0]) <= max_side]
    rng = np.random.default_rng(seed)
    return [ok[rng.choice(len(ok), k, replace=False)] for _ in range(n)]


def policy_boxes(policy: SensingPolicy, view: torch.Tensor, k: int) -> list[np.ndarray]:
    """The policy's greedy answer (its ``k`` most likely distinct boxes) on each global view."""
    acts = grid_actions()
    with torch.no_grad():
        chosen = greedy(policy(view), k).numpy()
    return [acts[c] for c in chosen]


def evaluate(task_model: torch.nn.Module, cv: Canvases, answers: list[np.ndarray],
             images: torch.Tensor | None = None) -> dict[str, float]:
    """Task recall (share of GT digits read correctly), regions used per canvas and regions per
    correct answer, for one answer (boxes [k, 4]) per canvas; ``images`` replaces the canvases
    the crops are cut from (the passive arm reads the upsampled global view)."""
    if len(answers) != len(cv):
        raise ValueError(f"{len(answers)} answers for {len(cv)} canvases")
    imgs = cv.images if images is None else images
    idx = torch.cat([torch.full((len(a),), i) for i, a in enumerate(answers)])
    boxes = torch.from_numpy(np.concatenate(answers))
    preds = predict(task_model, crop_resize(imgs, idx, boxes)).numpy()
    found, start = 0, 0
    for i, a in enumerate(answers):
        found += int(found_digits(a, preds[start:start + len(a)], cv.boxes[i], cv.labels[i]).sum())
        start += len(a)
    regions = len(boxes)
    return {"recall": found / cv.n_digits, "regions": regions / len(cv),
            "regions_per_correct": regions / max(found, 1)}


def passive_answers(n: int) -> list[np.ndarray]:
    """The passive arm: one region, the whole canvas (read from the global view)."""
    return [np.array([[0, 0, CANVAS, CANVAS]])] * n


def tight_boxes(cv: Canvases, pad: int = 2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every GT digit's box grown by ``pad`` pixels: ``(canvas index [D], boxes [D, 4], labels [D])``."""
    idx = torch.cat([torch.full((len(b),), i) for i, b in enumerate(cv.boxes)])
    boxes = torch.from_numpy(np.concatenate(cv.boxes))
    boxes = torch.cat([(boxes[:, :2] - pad).clamp(min=0), (boxes[:, 2:] + pad).clamp(max=CANVAS)], 1)
    return idx, boxes, torch.from_numpy(np.concatenate(cv.labels))


def digit_reads(task_model: torch.nn.Module, cv: Canvases, n: int | None = None) -> dict[str, np.ndarray]:
    """The trap check per digit: whether the task model reads each GT digit right (argmax over the
    10 digits, chance 0.1) from its box in the 24x24 global view (upsampled) and in the full
    canvas; 0/1 per digit, the first ``n`` digits of ``cv`` in order (all by default)."""
    idx, boxes, labels = tight_boxes(cv)
    if n is not None:
        if n > len(labels):
            raise ValueError(f"{n} digits asked of canvases that hold {len(labels)}")
        idx, boxes, labels = idx[:n], boxes[:n], labels[:n]
    out = {}
    for name, imgs in (("global view", upsample_view(global_view(cv.images))), ("full resolution", cv.images)):
        pred = predict(task_model, crop_resize(imgs, idx, boxes), digits_only=True)
        out[name] = (pred == labels).numpy().astype(float)
    return out


def readability(task_model: torch.nn.Module, cv: Canvases) -> dict[str, float]:
    """The trap check: the task model's digit accuracy (chance 0.1) on every GT digit of ``cv``,
    read from the 24x24 global view and from the full canvas (the means of :func:`digit_reads`)."""
    return {k: float(v.mean()) for k, v in digit_reads(task_model, cv).items()}


def read_canvases(seed: int, n_digits: int) -> Canvases:
    """[reconstruction] Held-out canvases (test digits, :func:`held_out_seed` stream 1) holding at
    least ``n_digits`` digits: the readability check's own sample."""
    if n_digits < 1:
        raise ValueError(f"n_digits must be >= 1, got {n_digits}")
    return make_canvases(n_digits, held_out_seed(seed, 1), "test")  # every canvas holds >= 1 digit


def reading_by_side(table: RewardTable) -> pd.Series:
    """[reconstruction] Diagnostic: per grid-box side (pixels), the share of (canvas, box, digit)
    triples with the digit covered by at least half that the task model reads correctly."""
    sides = table.actions[:, 2] - table.actions[:, 0]
    covered = (table.cov >= COVERED) & table.valid[:, None, :]  # [C, A, 3]
    out = {}
    for side in np.unique(sides):
        m = covered[:, sides == side]
        out[int(side)] = float(table.correct[:, sides == side][m].double().mean()) if m.any() else math.nan
    return pd.Series(out, name="read when covered")


def chosen_sides(policies: dict[tuple[str, int], SensingPolicy], view: torch.Tensor, k: int) -> pd.DataFrame:
    """Diagnostic: the share of each box side (pixels) among the greedy answers of every seed's
    policy, per reward form; rows are sides, columns ``GRPO <form>``."""
    sides: dict[str, list[np.ndarray]] = {}
    for (form, _seed), pol in policies.items():
        b = np.concatenate(policy_boxes(pol, view, k))
        sides.setdefault(f"GRPO {form}", []).append(b[:, 2] - b[:, 0])
    return pd.DataFrame({f: pd.Series(np.concatenate(v)).value_counts(normalize=True)
                         for f, v in sides.items()}).fillna(0.0).sort_index()


@dataclass
class Result:
    """Everything the chapter shows: curves, the arms' scores, the policies, the checks."""

    curves: pd.DataFrame  # form, seed, iter, reward, task, heuristic, zero_var, kl, clipped
    arms: pd.DataFrame  # arm, seed, k, recall, regions, regions_per_correct
    policies: dict[tuple[str, int], SensingPolicy]
    ability: pd.DataFrame  # seed, before, after: the task model's held-out digit accuracy
    readable: dict[str, float]
    data: Data


def run_experiment(cfg: Config, task_model: torch.nn.Module, ability_set: tuple) -> Result:
    """Train GRPO with each reward form for each policy seed of ``cfg.seeds`` and score every arm
    on held-out layouts (the canvases are drawn from ``cfg.seed``).

    ``ability_set`` is ``(crops, labels)`` of held-out single digits: the task model's general
    ability, measured before and after each seed's runs.
    """
    seeds = cfg.seeds
    data = make_data(cfg, task_model)
    ev = data.eval
    ks = list(range(1, cfg.k_boxes + 1))
    crops, labels = ability_set

    def ability() -> float:
        return float((predict(task_model, crops, digits_only=True) == labels).double().mean())

    rows = [{"arm": "passive view", "seed": s, "k": 1,
             **evaluate(task_model, ev, passive_answers(len(ev)), upsample_view(data.eval_view))} for s in seeds]
    rows += [{"arm": "full tiling", "seed": s, "k": 9, **evaluate(task_model, ev, [tiling()] * len(ev))}
             for s in seeds]
    for k in ks:
        sal = evaluate(task_model, ev, saliency_boxes(data.eval_view, k))
        rows += [{"arm": "saliency zoom", "seed": s, "k": k, **sal} for s in seeds]
        rows += [{"arm": "random boxes", "seed": s, "k": k,
                  **evaluate(task_model, ev, random_boxes(len(ev), k, 1000 + s))} for s in seeds]
    curves, policies, abil = [], {}, []
    for s in seeds:
        before = ability()
        for form in FORMS:
            pol, c = train_policy(cfg, data, form, s)
            policies[(form, s)] = pol
            curves.append(c.assign(form=form, seed=s))
            for k in ks:
                rows.append({"arm": f"GRPO {form}", "seed": s, "k": k,
                             **evaluate(task_model, ev, policy_boxes(pol, data.eval_view, k))})
        abil.append({"seed": s, "before": before, "after": ability()})
    return Result(pd.concat(curves, ignore_index=True), pd.DataFrame(rows), policies,
                  pd.DataFrame(abil), readability(task_model, ev), data)


def smoothed(curves: pd.DataFrame, column: str, window: int = 10) -> pd.DataFrame:
    """``column`` of each (form, seed) curve, smoothed by a trailing mean over ``window`` iterations;
    wide: one row per iteration, columns (form, seed)."""
    wide = curves.pivot_table(index="iter", columns=["form", "seed"], values=column)
    return wide.rolling(window, min_periods=1).mean()


def seed_spread(curves: pd.DataFrame, form: str, column: str = "task", window: int = 10) -> np.ndarray:
    """[reconstruction] Per seed, the smoothed ``column`` curve of reward form ``form``: [seeds, iters]."""
    return smoothed(curves, column, window)[form].to_numpy().T


def curve_deviation(curves: pd.DataFrame, form: str, column: str = "task", window: int = 10) -> np.ndarray:
    """[reconstruction] Instability per seed: the mean over iterations of the absolute distance of the
    seed's smoothed ``column`` curve from the mean curve of the seeds of reward form ``form`` (one
    value per seed, in seed order). The across-seed spread of the curves is made of these."""
    wide = seed_spread(curves, form, column, window)
    if wide.shape[0] < 2:
        raise ValueError("the deviation from the seeds' mean curve needs at least 2 seeds")
    return np.abs(wide - wide.mean(0, keepdims=True)).mean(1)
