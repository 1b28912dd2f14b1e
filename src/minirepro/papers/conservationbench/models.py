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


# Answer words [reconstruction]. Phrases are read before single words, so "no change" counts as
# "same" and "no longer" is not "longer"; "higher"/"lower"/"taller" are left out on purpose (the
# liquid's level is not its amount).
_PHRASES: dict[str, tuple[str, ...]] = {
    "same": ("neither more nor less", "did not change", "didn't change", "does not change",
             "doesn't change", "has not changed", "hasn't changed", "not changed", "no change",
             "stays the same", "remains the same"),
    "": ("no longer", "any longer", "no more than", "no less than"),  # idioms that name no answer
    "hedge": ("more or less",),  # "approximately": names both more and less, so never one answer
}
_WORDS: dict[str, tuple[str, ...]] = {
    "same": ("same", "equal", "equally", "unchanged", "identical", "conserved"),
    "more": ("more", "greater", "larger", "bigger", "longer", "increased", "increase", "increases"),
    "less": ("less", "fewer", "smaller", "shorter", "decreased", "decrease", "decreases", "reduced"),
}
_NEGATION = re.compile(r"\b(?:not|never|no|neither|nor|isn't|aren't|wasn't|weren't|isnt|arent)\s+(?:\w+\s+)?$"
                       r"|n't\s+(?:\w+\s+)?$", re.IGNORECASE)
_WORD_OF = {w: a for a, ws in _WORDS.items() for w in ws}
_OPTION_WORD = r"(?:the\s+)?(?P<word>" + "|".join(sorted(_WORD_OF, key=len, reverse=True)) + r")\b"
# A letter in a frame: "answer is B", "Option B", "I choose (C)", "**B**". Upper case, or lower case
# only when nothing word-like follows ("answer: c", never the article in "answer a question").
_WRAP_L, _WRAP_R = r"[\s*_(\[\"']*", r"[*_)\]\"']*"
_LETTER = (r"(?:(?P<up>(?-i:[ABC]))(?![\w'’])|(?P<low>(?-i:[abc]))(?=[*_)\]\"']*\s*(?:$|[.,;:!?\n])))")
_STRONG = re.compile(
    r"(?:\banswer(?:\s+(?:is|would\s+be|will\s+be|should\s+be))?|\boption|\bchoice"
    r"|\bi\s+(?:would\s+)?(?:choose|pick|select|go\s+with)|\bi'd\s+(?:choose|pick|select|go\s+with))"
    r"\s*[:=\-–—]?" + _WRAP_L + _LETTER + _WRAP_R, re.IGNORECASE)
_STRONG_WORD = re.compile(r"\banswer(?:\s+(?:is|would\s+be|will\s+be|should\s+be)\s*:?|\s*[:=\-–—])"
                          + _WRAP_L + _OPTION_WORD, re.IGNORECASE)
_WEAK = re.compile(
    r"(?:\bit\s+is|\bit's|\bthat\s+is|\bthat's|\bwould\s+be|\bi\s+(?:would\s+)?say|\bi'd\s+say)"
    r"\s*[:\-–—]?" + _WRAP_L + r"(?P<up>(?-i:[ABC]))" + _WRAP_R
    + r"(?=\s*(?:$|[.,;:!?\n]|[-–—(]|\s" + _OPTION_WORD + r"))", re.IGNORECASE)
_ALONE = re.compile(r"\s*" + _WRAP_L + r"(?P<letter>[ABCabc])" + _WRAP_R
                    + r"\s*(?:[.:)\-–—]\s*(?P<rest>.*))?\s*$", re.DOTALL)
_OTHER_LETTER = re.compile(r"(?<![\w'])[ABC](?![\w'])|\(\s*[abcABC]\s*\)")
_MARKER = re.compile(r"\(\s*(?P<letter>[ABC])\s*\)|\*\*\s*\(?(?P<bold>[ABC])\)?[.:]?\s*\*\*")


def _word_answers(text: str) -> set[str]:
    """The answers whose words occur in ``text``, not negated ("not longer", "isn't the same")."""
    low = " " + " ".join(text.lower().replace("’", "'").split()) + " "
    found: set[str] = set()
    for ans, phrases in _PHRASES.items():
        for ph in phrases:
            if re.search(rf"\b{re.escape(ph)}\b", low):
                found |= {"more", "less"} if ans == "hedge" else {ans} if ans else set()
                low = re.sub(rf"\b{re.escape(ph)}\b", " ", low)
    for m in re.finditer(r"\b(" + "|".join(_WORD_OF) + r")\b", low):
        if not _NEGATION.search(low[max(0, m.start() - 30):m.start()]):
            found.add(_WORD_OF[m.group(1)])
    return found


def _after_agrees(text: str, end: int, answer: str) -> bool:
    """False when the words right after a letter name another answer ("B) less" with B = more)."""
    m = re.match(r"[\s*_)\].:,\-–—]*" + _OPTION_WORD, text[end:], flags=re.IGNORECASE)
    return m is None or _WORD_OF[m.group("word").lower()] == answer


def parse_response(text: str, options: Sequence[str]) -> str:
    """§3 (scoring) [reconstruction]: rule-based match of a free-text response to an answer, else ``"FAIL"``.

    In order, the first rule that applies decides:

    1. an explicit answer, the last one in the text: "Answer: B", "The answer is (B)",
       "Final answer: **B**", "Option B", "I choose B", "The answer is the same";
    2. a response that is only a letter, possibly wrapped or followed by its option
       ("B", "(B)", "**B**", "B. more dots");
    3. a letter after "it is", "it's", "would be", "I'd say" ("I think it is B.");
    4. letters in parentheses or bold, when they all agree (an echo of the options does not);
    5. answer words (same, equal, unchanged, no change / more, longer, larger / less,
       fewer, shorter, ...), negated ones ("not longer", "isn't the same") dropped, when
       exactly one answer is named in the text or else in its last sentence.

    A letter whose next words name another option ("B) less" when B is "more"), two
    answers at the same level, or no answer at all give FAIL. Lower-case letters count
    only where nothing word-like follows them, so "To answer a question ... the same" is
    read by its words, not as option A. The paper then asks four LLM judges; we do not,
    so what the rules cannot read counts as FAIL (wrong).
    """
    if len(options) != 3 or sorted(options) != sorted(ANSWERS):
        raise ValueError(f"options must be a permutation of {ANSWERS}, got {tuple(options)}")
    t = str(text).replace("’", "'").strip()

    def of_match(m: re.Match) -> str | None:
        letter = m.groupdict().get("up") or m.groupdict().get("low")
        if letter:
            ans = options[LETTERS.index(letter.upper())]
            return ans if _after_agrees(t, m.end(), ans) else FAIL
        word = m.groupdict().get("word")
        return _WORD_OF[word.lower()] if word else None

    strong = sorted((m.start(), a) for rx in (_STRONG, _STRONG_WORD) for m in rx.finditer(t)
                    if (a := of_match(m)))
    if strong:
        return strong[-1][1]
    alone = _ALONE.fullmatch(t)
    if alone and not _OTHER_LETTER.search(alone.group("rest") or ""):
        ans = options[LETTERS.index(alone.group("letter").upper())]
        return ans if _after_agrees(alone.group("rest") or "", 0, ans) else FAIL
    weak = [a for m in _WEAK.finditer(t) if (a := of_match(m))]
    if weak:
        return weak[-1]
    marked = {options[LETTERS.index(m.group("letter") or m.group("bold"))] for m in _MARKER.finditer(t)}
    if len(marked) == 1:
        return marked.pop()
    for part in (t, re.split(r"(?<=[.!?…])\s+|\n+", t.rstrip(".!? \n"))[-1]):
        words = _word_answers(part)
        if len(words) == 1:
            return words.pop()
    return FAIL


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
