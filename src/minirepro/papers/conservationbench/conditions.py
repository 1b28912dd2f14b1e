"""The benchmark's conditions: frame selection, frame counts, prompt templates, option order.

A *trial* is one video shown under one condition: a frame selection method, a frame
count and a prompt template. The three answer options appear in an order that cycles
through all six permutations, so each answer sits in each slot equally often.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pandas as pd

from minirepro.papers.conservationbench.generator import (
    ANSWERS,
    MOTION,
    N_SOURCE,
    PROPERTIES,
    Video,
)

SELECTIONS: tuple[str, ...] = ("uniform", "human", "saliency")
FRAME_COUNTS: tuple[int, ...] = (3, 5, 7, 9, 16)
TEMPLATES: tuple[str, ...] = ("direct", "continuous", "cot", "exam")
PERMUTATIONS: tuple[tuple[str, ...], ...] = tuple(itertools.permutations(ANSWERS))
LETTERS = ("A", "B", "C")

QUESTIONS = {
    "number": ("Compare the number of dots in the last image with the first image.",
               {"same": "the same number of dots", "more": "more dots", "less": "fewer dots"}),
    "length": ("Compare the length of the black stick in the last image with the first image.",
               {"same": "the same length", "more": "longer", "less": "shorter"}),
    "volume": ("Compare the amount of liquid in the last image with the first image.",
               {"same": "the same amount of liquid", "more": "more liquid", "less": "less liquid"}),
    "size": ("Compare the amount of clay in the last image with the first image.",
             {"same": "the same amount of clay", "more": "more clay", "less": "less clay"}),
}


def frame_change(video: Video) -> np.ndarray:
    """[reconstruction] Saliency's signal: pixel change of each frame from the previous, ``(N_SOURCE - 1,)``."""
    return np.abs(np.diff(video.frames.astype(np.int16), axis=0)).sum(axis=(1, 2))


def select_frames(video: Video, n: int, method: str, change: np.ndarray | None = None) -> np.ndarray:
    """§3 (frame selection) [reconstruction]: ``n`` sorted frame indices, first and last always in.

    ``uniform``: evenly spaced. ``human``: the keyframes a person would pick (the still
    start, the start and end of the motion, a control's quantity change, the end), then
    frames farthest from those already picked. ``saliency`` (stand-in for the paper's
    SeViLA keyframe model): the frames that change most from the previous one.
    """
    if n < 2 or n > N_SOURCE:
        raise ValueError(f"a frame count must be in 2..{N_SOURCE}, got {n}")
    last = N_SOURCE - 1
    if method == "uniform":
        return np.array(_uniform(n))
    if method == "human":
        return np.array(_human(n, video.event))
    if method == "saliency":
        change = frame_change(video) if change is None else change
        order = np.argsort(-change, kind="stable") + 1  # frame t+1 changed from frame t
        picked = [0, last] + [int(t) for t in order if t not in (0, last)]
        return np.array(sorted(picked[:n]))
    raise ValueError(f"unknown frame selection {method!r}; expected one of {', '.join(SELECTIONS)}")


@cache
def _uniform(n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.unique(np.round(np.linspace(0, N_SOURCE - 1, n)).astype(int)))


@cache
def _human(n: int, event: int) -> tuple[int, ...]:
    last = N_SOURCE - 1
    prefer = [0, last] + ([event] if event >= 0 else []) + list(MOTION)
    chosen: list[int] = []
    for t in prefer:
        if t not in chosen and len(chosen) < n:
            chosen.append(t)
    grid = np.arange(N_SOURCE)
    dist = np.min(np.abs(grid[:, None] - np.array(chosen)[None, :]), axis=1)
    while len(chosen) < n:  # farthest point from the chosen frames, ties to the earliest
        t = int(np.argmax(dist))
        chosen.append(t)
        dist = np.minimum(dist, np.abs(grid - t))
    return tuple(sorted(chosen))


def option_order(video: Video, template: str) -> tuple[str, ...]:
    """[reconstruction] Counterbalanced options: the answers in slot order (A, B, C), cycling 6 permutations."""
    k = PROPERTIES.index(video.prop) + video.pair + TEMPLATES.index(template)
    return PERMUTATIONS[k % len(PERMUTATIONS)]


def prompt(prop: str, template: str, n_frames: int, order: tuple[str, ...]) -> str:
    """§3 (prompts) [reconstruction]: the question text of one trial.

    The paper's four styles are Direct, Continuous, CoT and a fourth whose name we did
    not find; ``exam`` (a terse multiple-choice form) stands in for it.
    """
    if prop not in QUESTIONS:
        raise ValueError(f"unknown property {prop!r}; expected one of {', '.join(PROPERTIES)}")
    question, words = QUESTIONS[prop]
    opts = "\n".join(f"({L}) {words[a]}" for L, a in zip(LETTERS, order, strict=True))
    if n_frames == 0:
        head = "Imagine a short video of a physical transformation."
    else:
        head = f"The {n_frames} images are frames of a video, in order."
    if template == "direct":
        return f"{head} {question} Is it\n{opts}\nAnswer with the letter of one option."
    if template == "continuous":
        return (f"{head} They show one continuous scene: nothing leaves the view unless you see it "
                f"happen. {question} Is it\n{opts}\nAnswer with the letter of one option.")
    if template == "cot":
        return (f"{head} {question} Is it\n{opts}\nThink step by step about what happens between the "
                "frames, then write 'Answer: ' and the letter on the last line.")
    if template == "exam":
        return f"{head}\nQuestion: {question}\nOptions: {' '.join(opts.splitlines())}\nAnswer:"
    raise ValueError(f"unknown prompt template {template!r}; expected one of {', '.join(TEMPLATES)}")


def trial_table(videos: list[Video], counts: tuple[int, ...] = FRAME_COUNTS,
                selections: tuple[str, ...] = SELECTIONS,
                templates: tuple[str, ...] = TEMPLATES) -> pd.DataFrame:
    """[reconstruction] The design, 3 selections x frame counts x 4 templates per video: one row per trial.

    Columns: ``qid, video, video_id, prop, pair, conserving, truth, selection, n_frames,
    template, order`` (the answers in slot order, a tuple) and ``frames`` (indices).
    """
    cols: dict[str, list] = {k: [] for k in ("qid", "video", "video_id", "prop", "pair", "conserving",
                                             "truth", "selection", "n_frames", "template", "order",
                                             "frames")}
    for vi, v in enumerate(videos):
        change = frame_change(v)
        for sel in selections:
            for n in counts:
                idx = tuple(int(t) for t in select_frames(v, n, sel, change))
                for tpl in templates:
                    for key, val in (("qid", f"{v.video_id}/{sel}/{n}/{tpl}"), ("video", vi),
                                     ("video_id", v.video_id), ("prop", v.prop), ("pair", v.pair),
                                     ("conserving", v.conserving), ("truth", v.answer),
                                     ("selection", sel), ("n_frames", n), ("template", tpl),
                                     ("order", option_order(v, tpl)), ("frames", idx)):
                        cols[key].append(val)
    out = pd.DataFrame(cols)
    for c in ("prop", "truth", "selection", "template"):
        out[c] = out[c].astype("category")
    return out
