"""The model interface, answer parsing, and the offline stand-in models.

Any model answers the benchmark through :class:`Model`: it receives :class:`Trial`
objects (prompt text, the frames as images, the options in slot order) and returns
free text, which :func:`parse_response` maps to an answer or ``"FAIL"``. A real VLM
plugs in through :class:`~minirepro.papers.conservationbench.hf.TransformersVLM`.

The stand-ins [reconstruction] are small multinomial logistic classifiers (scikit-learn)
over features measured from the frames, with a perception noise ``sigma`` added to the
log features of every frame on every trial, a training mixture (the share of
"same" answers among their training items), and either first-vs-last input or
temporal input (the mean of the first third of the frames against the last third).
They exist to check that the protocol and its analysis detect a pattern when it is
planted and do not find it when it is absent; they say nothing about real VLMs.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from sklearn.linear_model import LogisticRegression

from minirepro.papers.conservationbench.conditions import LETTERS, PERMUTATIONS
from minirepro.papers.conservationbench.generator import ANSWERS, INK_THRESHOLD, PROPERTIES

FEATURES: tuple[str, ...] = ("count", "mass", "width", "height", "right")
FAIL = "FAIL"


@dataclass(frozen=True)
class Trial:
    """[reconstruction] One question as a model sees it: prompt, frames (multi-image input), options.

    Attributes:
        qid: the question id (unique in the benchmark).
        prompt: the text of the question, options included.
        images: the frames in order, each a 2-D uint8 grey image; empty for text-only.
        options: the answers in slot order A, B, C (``"same"``, ``"more"``, ``"less"``).
        prop: the property asked about (one of ``PROPERTIES``).
    """

    qid: str
    prompt: str
    images: tuple[np.ndarray, ...]
    options: tuple[str, ...]
    prop: str


@runtime_checkable
class Model(Protocol):
    """[reconstruction] What the benchmark needs from a model (VLM or stand-in): a name, free-text answers."""

    name: str

    def respond(self, trials: Sequence[Trial]) -> list[str]:
        """One free-text response per trial, in order."""
        ...


_WORDS = {"same": ("same", "equal", "unchanged"),
          "more": ("more", "longer", "larger", "bigger", "greater"),
          "less": ("less", "fewer", "shorter", "smaller")}


def parse_response(text: str, options: Sequence[str]) -> str:
    """§3 (scoring): rule-based match of a free-text response to an answer, else ``"FAIL"``.

    In order: an ``Answer: X`` line (the last one), a response that is only a letter
    (``"B"``, ``"(B)"``, ``"B."``), then answer words (same/equal, more/longer/...,
    less/fewer/...) when exactly one answer's words occur. The paper then asks four
    LLM judges; we do not, so what the rules cannot read counts as FAIL (wrong).
    """
    if len(options) != 3 or sorted(options) != sorted(ANSWERS):
        raise ValueError(f"options must be a permutation of {ANSWERS}, got {tuple(options)}")
    t = text.strip()
    found = re.findall(r"answer\s*[:\-]?\s*\(?([ABC])\b", t, flags=re.IGNORECASE)
    if found:
        return options[LETTERS.index(found[-1].upper())]
    m = re.fullmatch(r"\(?([ABC])[\).:]?", t, flags=re.IGNORECASE)
    if m:
        return options[LETTERS.index(m.group(1).upper())]
    low = t.lower()
    hits = [a for a, words in _WORDS.items() if any(re.search(rf"\b{w}\b", low) for w in words)]
    return hits[0] if len(hits) == 1 else FAIL


def _euler_number(ink: np.ndarray) -> np.ndarray:
    """Euler number (components minus holes) of each ``(n, H, W)`` binary image, 4-connected,
    by counting 2x2 quads (Gray 1971): ``(Q1 - Q3 + 2 QD) / 4``."""
    p = np.pad(ink, ((0, 0), (1, 1), (1, 1))).astype(np.int8)
    a, b, c, d = p[:, :-1, :-1], p[:, :-1, 1:], p[:, 1:, :-1], p[:, 1:, 1:]
    s = a + b + c + d
    diag = (s == 2) & (a == d)
    q1, q3 = (s == 1).sum(axis=(1, 2)), (s == 3).sum(axis=(1, 2))
    return (q1 - q3 + 2 * diag.sum(axis=(1, 2))) / 4


def frame_features(frames: np.ndarray) -> np.ndarray:
    """[reconstruction] Per-frame measurements, ``(..., H, W)`` uint8 -> ``(..., 5)`` float.

    count: connected dark components (4-connected; computed as the Euler number, exact for
    shapes without holes, which is all the benchmark draws); mass: dark pixels; width, height: the dark
    bounding box (px); right: the right-most dark column + 1 (0 when there is no ink).
    """
    frames = np.asarray(frames)
    if frames.ndim < 2:
        raise ValueError(f"frames must be (..., H, W), got shape {frames.shape}")
    ink = frames < INK_THRESHOLD
    flat = ink.reshape(-1, *ink.shape[-2:])
    out = np.zeros((flat.shape[0], len(FEATURES)))
    cols, rows = flat.any(axis=1), flat.any(axis=2)
    w = cols.shape[1]
    has = cols.any(axis=1)
    first_c, last_c = np.argmax(cols, axis=1), w - 1 - np.argmax(cols[:, ::-1], axis=1)
    first_r, last_r = np.argmax(rows, axis=1), rows.shape[1] - 1 - np.argmax(rows[:, ::-1], axis=1)
    out[:, 1] = flat.sum(axis=(1, 2))
    out[:, 2] = np.where(has, last_c - first_c + 1, 0)
    out[:, 3] = np.where(has, last_r - first_r + 1, 0)
    out[:, 4] = np.where(has, last_c + 1, 0)
    out[:, 0] = _euler_number(flat)
    return out.reshape(*ink.shape[:-2], len(FEATURES))


@dataclass(frozen=True)
class StandInSpec:
    """[reconstruction] A stand-in model's design: perception noise, training mixture, input, position bias.

    ``sigma``: s.d. of the noise added to each frame's log features on each trial.
    ``p_same``: share of "same" among its training items (the rest split evenly).
    ``temporal``: compare the mean of the first and the last third of the frames,
    instead of the first and the last frame. ``slot_bias``: logits added to slots A, B, C.
    """

    name: str
    sigma: float
    p_same: float
    temporal: bool = False
    slot_bias: tuple[float, float, float] = (0.2, 0.1, 0.0)

    def __post_init__(self) -> None:
        if not (self.sigma >= 0 and 0 < self.p_same < 1):
            raise ValueError(f"{self.name}: sigma must be >= 0 and p_same in (0, 1)")


def encode(feats: np.ndarray, lengths: np.ndarray, props: Sequence[str] | np.ndarray,
           temporal: bool) -> np.ndarray:
    """[reconstruction] The stand-in's input: property one-hot times the change of the log features.

    Args:
        feats: ``(n, k_max, 5)`` noisy log features of the shown frames (padded).
        lengths: ``(n,)`` number of frames shown per trial (>= 2).
        props: the property of each trial, or their ``(n, 4)`` one-hot rows.
        temporal: mean of the first vs the last third of the frames (else first vs last).
    Returns:
        ``(n, 4 * 5)`` array.
    """
    n = feats.shape[0]
    lengths = np.asarray(lengths)
    if np.any(lengths < 2):
        raise ValueError("every trial needs at least 2 frames")
    pos = np.arange(feats.shape[1])[None, :]
    last = feats[np.arange(n), lengths - 1]
    if temporal:
        third = np.maximum(lengths // 3, 1)[:, None]
        head = (pos < third)[..., None]
        tail = ((pos >= lengths[:, None] - third) & (pos < lengths[:, None]))[..., None]
        delta = (feats * tail).sum(1) / third - (feats * head).sum(1) / third
    else:
        delta = last - feats[:, 0]
    if isinstance(props, np.ndarray) and props.ndim == 2:
        onehot = props
    else:
        onehot = np.zeros((n, len(PROPERTIES)))
        onehot[np.arange(n), [PROPERTIES.index(p) for p in props]] = 1.0
    return (onehot[:, :, None] * delta[:, None, :]).reshape(n, -1)


def noisy_log_features(feats: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """[reconstruction] The stand-in's perception noise: ``log1p(features) + sigma * N(0, 1)`` per frame and feature."""
    return np.log1p(feats) + sigma * rng.standard_normal(feats.shape, dtype=np.float32)


class StandIn:
    """[reconstruction] A trained stand-in model; satisfies :class:`Model`.

    ``fit`` trains it on trials drawn from its mixture; ``decide`` answers from features
    (the fast path of the experiment); ``respond`` answers :class:`Trial` objects
    from their images and returns the letter of its choice.
    """

    def __init__(self, spec: StandInSpec, seed: int = 0) -> None:
        self.spec, self.name, self.seed = spec, spec.name, seed
        self.clf = LogisticRegression(C=10.0, solver="newton-cholesky", max_iter=100)
        self.prior = np.full(3, 1 / 3)

    def fit(self, x: np.ndarray, y: Sequence[str]) -> StandIn:
        """Fit the classifier on encoded trials ``x`` with answers ``y``; store its mean prediction."""
        self.clf.fit(x, np.asarray(y))
        self.prior = self._proba(x).mean(axis=0)
        return self

    def _proba(self, x: np.ndarray) -> np.ndarray:
        p = self.clf.predict_proba(x)
        cls = list(self.clf.classes_)
        return p[:, [cls.index(a) for a in ANSWERS]]

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Answer log-probabilities, ``(n, 3)`` in ``ANSWERS`` order."""
        return np.log(np.clip(self._proba(x), 1e-12, None))

    def choose(self, logits: np.ndarray, orders: Sequence[Sequence[str]] | np.ndarray) -> np.ndarray:
        """The answer with the highest logit plus the bias of the slot it sits in.

        ``orders``: each trial's answers in slot order, or their indices in ``PERMUTATIONS``.
        """
        table = np.array([[self.spec.slot_bias[o.index(a)] for a in ANSWERS] for o in PERMUTATIONS])
        if not (isinstance(orders, np.ndarray) and orders.dtype.kind in "iu"):
            orders = np.array([PERMUTATIONS.index(tuple(o)) for o in orders], dtype=int)
        return np.array(ANSWERS)[np.argmax(logits + table[orders], axis=1)]

    def decide(self, feats: np.ndarray, lengths: np.ndarray, props: Sequence[str] | np.ndarray,
               orders: Sequence[Sequence[str]] | np.ndarray, rng: np.random.Generator,
               logged: bool = False) -> np.ndarray:
        """Answers (``ANSWERS`` words) from frame features ``(n, k_max, 5)`` (raw, or already
        ``log1p`` when ``logged``)."""
        if logged:
            noisy = feats + self.spec.sigma * rng.standard_normal(feats.shape, dtype=np.float32)
        else:
            noisy = noisy_log_features(feats, self.spec.sigma, rng)
        return self.choose(self.logits(encode(noisy, lengths, props, self.spec.temporal)), orders)

    def text_only(self, orders: Sequence[Sequence[str]]) -> np.ndarray:
        """The text-only probe: no image, so the answer follows the learned prior and slot bias."""
        return self.choose(np.tile(np.log(self.prior), (len(orders), 1)), orders)

    def respond(self, trials: Sequence[Trial]) -> list[str]:
        out = []
        for tr in trials:
            if not tr.images:
                ans = self.text_only([tr.options])[0]
            else:
                rng = np.random.default_rng([self.seed, zlib.crc32(tr.qid.encode())])
                f = frame_features(np.stack(tr.images))[None]
                ans = self.decide(f, np.array([len(tr.images)]), [tr.prop], [tr.options], rng)[0]
            out.append(LETTERS[list(tr.options).index(ans)])
        return out


class ConstantModel:
    """[reconstruction] A baseline that always gives one answer (default ``"same"``: mean 0.5, strict 0)."""

    def __init__(self, answer: str = "same") -> None:
        if answer not in ANSWERS:
            raise ValueError(f"answer must be one of {ANSWERS}, got {answer!r}")
        self.answer, self.name = answer, f"always-{answer}"

    def respond(self, trials: Sequence[Trial]) -> list[str]:
        return [self.answer for _ in trials]


class RandomModel:
    """§4 (chance): a baseline that picks a letter uniformly at random (seeded per question)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed, self.name = seed, "random"

    def respond(self, trials: Sequence[Trial]) -> list[str]:
        return [LETTERS[np.random.default_rng([self.seed, zlib.crc32(t.qid.encode())]).integers(3)]
                for t in trials]


def planted_family(n_models: int = 8) -> list[StandInSpec]:
    """[reconstruction] The planted family: the paper's patterns built in.

    Weak perception (sigma 0.35 or 0.5), first-vs-last input only, and training mixtures
    from 50 % to 95 % "same": a text prior toward "same" whose strength varies across models.
    """
    p = np.linspace(0.5, 0.95, n_models)
    return [StandInSpec(f"planted-{i}", sigma=(0.35, 0.5)[i % 2], p_same=float(round(p[i], 3)))
            for i in range(n_models)]


def null_family(n_models: int = 8) -> list[StandInSpec]:
    """[reconstruction] The null family: none of the paper's patterns.

    Balanced training (1/3 "same"), temporal input, and perception from sharp to poor
    (sigma 0.05 to 0.4, log-spaced): models differ in skill, not in prior.
    """
    s = np.geomspace(0.05, 0.4, n_models)
    return [StandInSpec(f"null-{i}", sigma=float(round(s[i], 4)), p_same=1 / 3, temporal=True)
            for i in range(n_models)]
