"""Corpus: ten seeded task families with checkable answers, for the substrate.

Every example is one line of text, ``prompt + " " + answer``; the prompt ends
with a question marker (``=``, ``?``, ``:`` or ``->``) and the answer is one or
more words that the family's scorer checks exactly. The families:

``arith``  (one digit)
    ``calc 3 + 4 * 2 =``: a chain evaluated left to right modulo 10.
``recall`` (one digit)
    ``keys c 3 h 7 a 1 ; get h =``: key-value recall from the context.
``trace``  (one digit)
    ``prog x = 3 ; y = x + 2 ; print y =``: straight-line code, values modulo 10.
``text``   (one word)
    templated sentences on one topic, ``topic ?``: the topic's name.
``multi``  (several digits)
    ``keys a 3 b 7 c 1 ; get c a =`` -> ``1 3``: a multi-token answer.
``relay``  (one digit)
    agent A's role prefix and its step-by-step worked trace of an arithmetic
    chain, then agent B's different role prefix and a question whose answer
    needs A's trace (a step's result, the final result, or the final result
    plus a number). Up to about 200 tokens.
``facts``  (one word)
    ``fact : the color of kelomu is`` -> ``amber``, optionally after an unrelated
    sentence: a context-free lookup, the same answer for the same key in every
    context (the table :data:`FACTS` is fixed by :data:`FACT_SEED`).
``copy``   (three words)
    ``copy : zib tafo ... ; again : tafo rul ->`` -> the three words that
    followed ``tafo rul`` in the context (induction; the answer is only in the
    context, the words are nonce words).
``mcq``    (one letter)
    ``quiz : what is 3 + 4 ? options : a ) 9 b ) 7 c ) 2 d ) 5 . answer :`` -> ``b``;
    questions on arithmetic, facts and topics, the right option placed uniformly.
``prose``  (one word)
    a paragraph of Python standard-library docstrings (shipped, see
    :mod:`~minirepro.core.lm.prose`) up to its last word, which is the answer:
    the natural-language family. Paragraphs are split between train, val and
    test, never shared.

Two more families are *drills*, for training only (never in the validation or
test splits, never scored): they exist to form the in-context lookup
(induction) circuit that ``copy``, ``recall``, ``multi``, ``mcq`` and ``relay`` need.

``induct`` (training only)
    ``rep : x_1 .. x_k ; x_1 .. x_k``: a random sequence of corpus words, then the
    same again (the answer is the second copy). Only a model that looks back can
    predict it: the repeated-random-sequence task on which induction heads form.
``mqar`` (training only)
    ``pairs : k_1 v_1 .. k_n v_n ; ask : k_a v_a k_b v_b .. k_q`` -> ``v_q``:
    multi-query associative recall (the Zoology benchmark's MQAR, Arora et al.
    2024) over nonce-word keys and digit, letter or word values; every asked key
    is followed by its value, so each query line trains the lookup several times.

The generator is a pure function of ``(CorpusConfig)``: the same config
gives the same examples, byte for byte, on every machine
(:meth:`Corpus.fingerprint`). The train split is generated lazily (only
when asked for), so loading a shipped model costs only the val/test splits.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from minirepro.core.lm.prose import load_prose
from minirepro.core.scale import ScaledConfig

FAMILIES: tuple[str, ...] = ("arith", "recall", "trace", "text", "multi", "relay", "facts",
                                "copy", "mcq", "prose")
# families whose answer is a single token of the substrate tokenizer (the 0.8 quality bar applies)
SINGLE_TOKEN: tuple[str, ...] = ("arith", "recall", "trace", "text", "relay", "facts", "mcq")

# The topic vocabularies of the ``text`` family: each topic has its own nouns, adjectives, verbs.
TOPICS: dict[str, dict[str, tuple[str, ...]]] = {
    "ocean": {
        "noun": ("wave", "whale", "reef", "shell", "tide", "shark", "boat", "coral"),
        "adj": ("salty", "deep", "blue", "wet", "vast"),
        "verb": ("swims", "drifts", "dives", "floats", "splashes"),
    },
    "forest": {
        "noun": ("oak", "fern", "owl", "moss", "deer", "pine", "fox", "trail"),
        "adj": ("green", "shady", "quiet", "old", "dense"),
        "verb": ("grows", "rustles", "hides", "climbs", "sprouts"),
    },
    "desert": {
        "noun": ("dune", "cactus", "camel", "sand", "lizard", "oasis", "mesa", "scorpion"),
        "adj": ("dry", "hot", "dusty", "golden", "barren"),
        "verb": ("bakes", "crawls", "shimmers", "burns", "wanders"),
    },
    "city": {
        "noun": ("tower", "street", "bus", "cafe", "bridge", "taxi", "market", "subway"),
        "adj": ("busy", "loud", "bright", "crowded", "modern"),
        "verb": ("hums", "honks", "rushes", "glows", "opens"),
    },
    "space": {
        "noun": ("star", "comet", "planet", "moon", "rocket", "orbit", "nebula", "galaxy"),
        "adj": ("dark", "cold", "silent", "distant", "endless"),
        "verb": ("spins", "orbits", "shines", "launches", "drifts"),
    },
    "kitchen": {
        "noun": ("pan", "oven", "knife", "bread", "soup", "spoon", "kettle", "onion"),
        "adj": ("warm", "spicy", "fresh", "sweet", "crisp"),
        "verb": ("boils", "bakes", "simmers", "sizzles", "chops"),
    },
    "music": {
        "noun": ("drum", "guitar", "piano", "song", "choir", "violin", "melody", "chord"),
        "adj": ("soft", "loud", "lively", "gentle", "rhythmic"),
        "verb": ("plays", "rings", "echoes", "hums", "sings"),
    },
    "farm": {
        "noun": ("barn", "cow", "tractor", "hen", "field", "goat", "hay", "fence"),
        "adj": ("muddy", "sunny", "rural", "wide", "calm"),
        "verb": ("grazes", "plows", "clucks", "feeds", "rests"),
    },
}


def _apply(a: int, op: str, b: int, m: int) -> int:
    if op == "+":
        return (a + b) % m
    if op == "-":
        return (a - b) % m
    return (a * b) % m


_KEYS = tuple("abcdefghijklmnop")
_VARS = ("x", "y", "z", "w")
_OPS = ("+", "-", "*")
_LETTERS = ("a", "b", "c", "d")
_TOPIC_TEMPLATES: tuple[str, ...] = (
    "the {adj} {noun} {verb} .",
    "a {noun} {verb} near the {noun2} .",
    "every {noun} is {adj} .",
    "we saw the {adj} {noun} and the {noun2} .",
    "the {noun} {verb} all day .",
    "there the {noun2} {verb} slowly .",
)

# The agents of the relay family: A writes the trace, B reads it and answers.
RELAY_A_ROLES: tuple[str, ...] = (
    "agent solver : you are the solver . work the chain one step at a time and show each result .",
    "agent planner : you plan the work . split the task into steps and write every step down .",
    "agent worker : you are the worker . compute each step and report it in order .",
)
RELAY_B_ROLES: tuple[str, ...] = (
    "agent checker : you are the checker . read the work above and answer the question .",
    "agent judge : you judge the report . use the steps written above to reply .",
    "agent reader : you read what the other agent wrote and give one number .",
)

FACT_SEED = 20260
FACT_RELATION = "color"
FACT_VALUES: tuple[str, ...] = ("red", "blue", "green", "amber", "violet", "gray", "white",
                                "black", "pink", "gold", "olive", "teal")
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")


def _nonce_words(n: int, seed: int, syllables: int) -> tuple[str, ...]:
    """``n`` distinct nonce words of ``syllables`` consonant-vowel syllables, fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        w = "".join(_SYLLABLES[int(i)] for i in rng.integers(0, len(_SYLLABLES), size=syllables))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return tuple(out)


# The fact table (128 entities, 12 values) and the copy family's word pool: disjoint nonce words.
FACT_KEYS: tuple[str, ...] = _nonce_words(128, FACT_SEED, 3)
FACTS: dict[str, str] = {k: FACT_VALUES[int(v)] for k, v in zip(
    FACT_KEYS, np.random.default_rng(FACT_SEED + 1).integers(0, len(FACT_VALUES), size=128))}
COPY_WORDS: tuple[str, ...] = tuple(w for w in _nonce_words(400, FACT_SEED + 2, 2)
                                    if w not in FACTS)[:256]

# The drills (training only) and the words they are made of: every word of the scored
# families' vocabularies, so that the lookup is learned over all of them.
DRILLS: tuple[str, ...] = ("induct", "mqar")
DRILL_WORDS: tuple[str, ...] = tuple(dict.fromkeys(
    COPY_WORDS + FACT_KEYS + FACT_VALUES + _KEYS + tuple(str(d) for d in range(10))
    + tuple(w for t in TOPICS.values() for ws in t.values() for w in ws) + tuple(TOPICS)))


@dataclass
class CorpusConfig(ScaledConfig):
    """How much text to generate, and the families' difficulty.

    Attributes:
        n_train, n_val, n_test: examples per split; families take turns, so
            each gets ``n / len(families)`` (``prose`` draws from its own
            paragraphs of the split).
        families: which of :data:`FAMILIES` to include.
        topics: how many topics the ``text`` family uses (2..8).
        arith_steps, recall_pairs, trace_steps, text_sentences: (min, max) sizes.
        multi_keys: (min, max) keys asked at once in ``multi``.
        relay_steps: (min, max) steps of agent A's worked trace.
        copy_len: (min, max) words in the ``copy`` context (the answer is 3 words).
        drills: training-only families of :data:`DRILLS` (``induct``, ``mqar``).
        induct_len: (min, max) words of an ``induct`` sequence (it is shown twice).
        mqar_pairs: (min, max) key-value pairs of an ``mqar`` line.
        train_weights: relative number of *training* lines per family, aligned
            with ``families + drills`` (empty: the families take turns). Validation and
            test lines always take turns, so every family is scored on as many
            lines. Used to balance the families by tokens rather than by lines
            (a ``relay`` line is ten times as long as an ``arith`` one).
        seed: the generator's seed (splits use ``seed``, ``seed + 1``, ``seed + 2``).
    """

    n_train: int = 200_000
    n_val: int = 1000
    n_test: int = 2000
    families: tuple[str, ...] = FAMILIES
    topics: int = 8
    arith_steps: tuple[int, int] = (1, 3)
    recall_pairs: tuple[int, int] = (2, 6)
    trace_steps: tuple[int, int] = (2, 3)
    text_sentences: tuple[int, int] = (1, 3)
    multi_keys: tuple[int, int] = (2, 3)
    relay_steps: tuple[int, int] = (3, 10)
    copy_len: tuple[int, int] = (8, 16)
    drills: tuple[str, ...] = ()
    induct_len: tuple[int, int] = (6, 24)
    mqar_pairs: tuple[int, int] = (4, 12)
    train_weights: tuple[float, ...] = ()
    seed: int = 2026

    PRESETS: ClassVar = {
        "smoke": {"n_train": 20_000, "n_val": 300, "n_test": 500},
        "book": {},
        "full": {"n_train": 1_000_000},
    }

    def __post_init__(self) -> None:
        self.families = tuple(self.families)
        bad = [f for f in self.families if f not in FAMILIES]
        if bad or not self.families:
            raise ValueError(f"unknown family {bad[0]!r}; families must be a non-empty subset "
                             f"of {FAMILIES}" if bad else "families must not be empty")
        if not 2 <= self.topics <= len(TOPICS):
            raise ValueError(f"topics must be in 2..{len(TOPICS)}, got {self.topics}")
        for name in ("n_train", "n_val", "n_test"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        self.drills = tuple(self.drills)
        if [d for d in self.drills if d not in DRILLS] or len(set(self.drills)) < len(self.drills):
            raise ValueError(f"drills must be distinct names from {DRILLS}, got {self.drills}")
        for name in ("arith_steps", "recall_pairs", "trace_steps", "text_sentences",
                     "multi_keys", "relay_steps", "copy_len", "induct_len", "mqar_pairs"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name} must be (min, max) with 1 <= min <= max, got {(lo, hi)}")
            setattr(self, name, (int(lo), int(hi)))
        if self.recall_pairs[1] > len(_KEYS) or self.multi_keys[1] > 4:
            raise ValueError("recall_pairs max must be <= 16 and multi_keys max <= 4")
        if self.copy_len[0] < 6:
            raise ValueError("copy_len min must be at least 6 (2 query words + 3 answer words + 1)")
        if self.mqar_pairs[0] < 2 or self.mqar_pairs[1] > 32:
            raise ValueError(f"mqar_pairs must be within (2, 32), got {self.mqar_pairs}")
        if self.induct_len[1] > 100:
            raise ValueError(f"induct_len max must be at most 100, got {self.induct_len}")
        self.train_weights = tuple(float(w) for w in self.train_weights)
        n_fam = len(self.train_families)
        if self.train_weights and (len(self.train_weights) != n_fam
                                   or not all(w >= 0 and np.isfinite(w) for w in self.train_weights)
                                   or not sum(self.train_weights) > 0):
            raise ValueError(f"train_weights must be empty or {n_fam} non-negative numbers, not "
                             f"all zero (one per family of families + drills), got "
                             f"{self.train_weights}")

    @property
    def train_families(self) -> tuple[str, ...]:
        """The families of the training split: ``families`` then ``drills``."""
        return self.families + self.drills

    @property
    def topic_names(self) -> tuple[str, ...]:
        return tuple(TOPICS)[: self.topics]


@dataclass(frozen=True)
class Example:
    """One corpus line.

    Attributes:
        family: one of :data:`FAMILIES`.
        prompt: the text up to and including the question marker.
        answer: what a correct model writes after the prompt (one or more words).
        topic: the topic for ``text``, the relation for ``facts``, the
            question kind for ``relay`` and ``mcq``, else the family name.
        choices: the options of an ``mcq`` example (in letter order), else ``()``.
    """

    family: str
    prompt: str
    answer: str
    topic: str = ""
    choices: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The line the model is trained on: ``prompt + " " + answer``."""
        return f"{self.prompt} {self.answer}"

    @property
    def n_answer_words(self) -> int:
        return len(self.answer.split())


class Corpus:
    """The three splits of a generated corpus; ``train`` is generated on first access."""

    def __init__(self, config: CorpusConfig) -> None:
        self.config = config

    @cached_property
    def prose_split(self) -> dict[str, tuple[str, ...]]:
        """The shipped paragraphs, shuffled with ``seed`` and cut 90/4/6 into train/val/test."""
        paras = load_prose()
        order = np.random.default_rng(self.config.seed).permutation(len(paras))
        n_val, n_test = int(0.04 * len(paras)), int(0.06 * len(paras))
        picked = [paras[int(i)] for i in order]
        return {"val": tuple(picked[:n_val]), "test": tuple(picked[n_val:n_val + n_test]),
                "train": tuple(picked[n_val + n_test:])}

    @cached_property
    def train(self) -> list[Example]:
        return generate_split(self.config, self.config.n_train, self.config.seed, self, "train")

    @cached_property
    def val(self) -> list[Example]:
        return generate_split(self.config, self.config.n_val, self.config.seed + 1, self, "val")

    @cached_property
    def test(self) -> list[Example]:
        return generate_split(self.config, self.config.n_test, self.config.seed + 2, self, "test")

    def split(self, name: str) -> list[Example]:
        if name not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {name!r}")
        return getattr(self, name)

    def texts(self, split: str = "train") -> list[str]:
        return [e.text for e in self.split(split)]

    def fingerprint(self, splits: Iterable[str] = ("train", "val", "test")) -> str:
        """SHA-256 of every example of ``splits`` (the artifact's data hash)."""
        h = hashlib.sha256()
        for name in splits:
            for e in self.split(name):
                h.update(f"{name}\t{e.family}\t{e.topic}\t{'|'.join(e.choices)}\t{e.text}\n".encode())
        return h.hexdigest()


# ---------------------------------------------------------------------------
# generators: (rng, cfg, corpus, split) -> Example


def _chain(rng: np.random.Generator, steps: int) -> tuple[int, list[tuple[int, str, int, int]]]:
    """A start value and ``steps`` (a, op, b, result) modulo 10."""
    value = int(rng.integers(0, 10))
    start, out = value, []
    for _ in range(steps):
        op = _OPS[int(rng.integers(0, 3))]
        b = int(rng.integers(0, 10))
        new = _apply(value, op, b, 10)
        out.append((value, op, b, new))
        value = new
    return start, out


def make_arith(rng, cfg, corpus=None, split="train") -> Example:
    start, steps = _chain(rng, int(rng.integers(cfg.arith_steps[0], cfg.arith_steps[1] + 1)))
    body = " ".join(f"{op} {b}" for _, op, b, _ in steps)
    return Example("arith", f"calc {start} {body} =", str(steps[-1][3]), "arith")


def make_recall(rng, cfg, corpus=None, split="train") -> Example:
    n = int(rng.integers(cfg.recall_pairs[0], cfg.recall_pairs[1] + 1))
    keys = [_KEYS[int(i)] for i in rng.choice(len(_KEYS), size=n, replace=False)]
    vals = [str(int(v)) for v in rng.integers(0, 10, size=n)]
    q = int(rng.integers(0, n))
    body = " ".join(f"{k} {v}" for k, v in zip(keys, vals))
    return Example("recall", f"keys {body} ; get {keys[q]} =", vals[q], "recall")


def make_multi(rng, cfg, corpus=None, split="train") -> Example:
    k = int(rng.integers(cfg.multi_keys[0], cfg.multi_keys[1] + 1))
    n = int(rng.integers(max(k, cfg.recall_pairs[0]), max(k, cfg.recall_pairs[1]) + 1))
    keys = [_KEYS[int(i)] for i in rng.choice(len(_KEYS), size=n, replace=False)]
    vals = [str(int(v)) for v in rng.integers(0, 10, size=n)]
    asked = [int(i) for i in rng.choice(n, size=k, replace=False)]
    body = " ".join(f"{a} {v}" for a, v in zip(keys, vals))
    return Example("multi", f"keys {body} ; get {' '.join(keys[i] for i in asked)} =",
                   " ".join(vals[i] for i in asked), "multi")


def make_trace(rng, cfg, corpus=None, split="train") -> Example:
    steps = int(rng.integers(cfg.trace_steps[0], cfg.trace_steps[1] + 1))
    env: dict[str, int] = {}
    first = _VARS[int(rng.integers(0, len(_VARS)))]
    env[first] = int(rng.integers(0, 10))
    stmts = [f"{first} = {env[first]}"]
    for _ in range(steps - 1):
        target = _VARS[int(rng.integers(0, len(_VARS)))]
        src = sorted(env)[int(rng.integers(0, len(env)))]
        op = _OPS[int(rng.integers(0, 3))]
        b = int(rng.integers(0, 10))
        env[target] = _apply(env[src], op, b, 10)
        stmts.append(f"{target} = {src} {op} {b}")
    shown = sorted(env)[int(rng.integers(0, len(env)))]
    return Example("trace", "prog " + " ; ".join(stmts) + f" ; print {shown} =",
                   str(env[shown]), "trace")


def _topic_sentences(rng, topic: str, n: int) -> str:
    vocab = TOPICS[topic]
    out = []
    for _ in range(n):
        tpl = _TOPIC_TEMPLATES[int(rng.integers(0, len(_TOPIC_TEMPLATES)))]
        i, j = rng.choice(len(vocab["noun"]), size=2, replace=False)
        out.append(tpl.format(adj=vocab["adj"][int(rng.integers(0, len(vocab["adj"])))],
                              noun=vocab["noun"][int(i)], noun2=vocab["noun"][int(j)],
                              verb=vocab["verb"][int(rng.integers(0, len(vocab["verb"])))]))
    return " ".join(out)


def make_text(rng, cfg, corpus=None, split="train") -> Example:
    names = cfg.topic_names
    topic = names[int(rng.integers(0, len(names)))]
    n = int(rng.integers(cfg.text_sentences[0], cfg.text_sentences[1] + 1))
    return Example("text", f"text : {_topic_sentences(rng, topic, n)} topic ?", topic, topic)


def make_relay(rng, cfg, corpus=None, split="train") -> Example:
    n = int(rng.integers(cfg.relay_steps[0], cfg.relay_steps[1] + 1))
    start, steps = _chain(rng, n)
    role_a = RELAY_A_ROLES[int(rng.integers(0, len(RELAY_A_ROLES)))]
    role_b = RELAY_B_ROLES[int(rng.integers(0, len(RELAY_B_ROLES)))]
    task = f"{start} " + " ".join(f"{op} {b}" for _, op, b, _ in steps)
    work = " ".join(f"step {i + 1} : {a} {op} {b} = {c} ." for i, (a, op, b, c) in enumerate(steps))
    kind = ("step", "final", "plus")[int(rng.integers(0, 3))]
    if kind == "step":
        k = int(rng.integers(1, n + 1))
        question, answer = f"what was the result of step {k} ?", steps[k - 1][3]
    elif kind == "final":
        question, answer = "what was the final result ?", steps[-1][3]
    else:
        d = int(rng.integers(1, 10))
        question, answer = f"what is the final result plus {d} ?", (steps[-1][3] + d) % 10
    prompt = f"{role_a} task : {task} . {work} done . {role_b} question : {question}"
    return Example("relay", prompt, str(answer), kind)


def _fact_context(rng, cfg) -> str:
    """An unrelated sentence (or nothing) before a fact: the answer must not depend on it."""
    r = int(rng.integers(0, 3))
    if r == 0:
        return ""
    if r == 1:
        return _topic_sentences(rng, cfg.topic_names[int(rng.integers(0, cfg.topics))], 1) + " "
    words = [COPY_WORDS[int(i)] for i in rng.choice(len(COPY_WORDS), size=4, replace=False)]
    return " ".join(words) + " . "


def make_facts(rng, cfg, corpus=None, split="train") -> Example:
    key = FACT_KEYS[int(rng.integers(0, len(FACT_KEYS)))]
    ctx = _fact_context(rng, cfg)
    return Example("facts", f"{ctx}fact : the {FACT_RELATION} of {key} is", FACTS[key], FACT_RELATION)


def make_copy(rng, cfg, corpus=None, split="train") -> Example:
    n = int(rng.integers(cfg.copy_len[0], cfg.copy_len[1] + 1))
    words = [COPY_WORDS[int(i)] for i in rng.choice(len(COPY_WORDS), size=n, replace=False)]
    p = int(rng.integers(0, n - 5 + 1))
    query, answer = words[p:p + 2], words[p + 2:p + 5]
    return Example("copy", f"copy : {' '.join(words)} ; again : {' '.join(query)} ->",
                   " ".join(answer), "copy")


def make_mcq(rng, cfg, corpus=None, split="train") -> Example:
    kind = ("arith", "facts", "text")[int(rng.integers(0, 3))]
    if kind == "arith":
        a, b = int(rng.integers(0, 10)), int(rng.integers(0, 10))
        op = _OPS[int(rng.integers(0, 3))]
        question, right = f"what is {a} {op} {b} ?", str(_apply(a, op, b, 10))
        pool = [str(i) for i in range(10)]
    elif kind == "facts":
        key = FACT_KEYS[int(rng.integers(0, len(FACT_KEYS)))]
        question, right = f"what is the {FACT_RELATION} of {key} ?", FACTS[key]
        pool = list(FACT_VALUES)
    else:
        topic = cfg.topic_names[int(rng.integers(0, cfg.topics))]
        question, right = f"which topic : {_topic_sentences(rng, topic, 1)}", topic
        pool = list(cfg.topic_names)
    wrong = [w for w in pool if w != right]
    options = [wrong[int(i)] for i in rng.choice(len(wrong), size=3, replace=False)]
    pos = int(rng.integers(0, 4))
    options.insert(pos, right)
    listed = " ".join(f"{letter} ) {o}" for letter, o in zip(_LETTERS, options))
    return Example("mcq", f"quiz : {question} options : {listed} . answer :", _LETTERS[pos], kind,
                   tuple(options))


def make_induct(rng, cfg, corpus=None, split="train") -> Example:
    """A drill: ``rep : x_1 .. x_k ;`` then the same ``k`` words (the answer)."""
    k = int(rng.integers(cfg.induct_len[0], cfg.induct_len[1] + 1))
    words = " ".join(DRILL_WORDS[int(i)] for i in rng.choice(len(DRILL_WORDS), size=k, replace=False))
    return Example("induct", f"rep : {words} ;", words, "induct")


_MQAR_VALUES: tuple[tuple[str, ...], ...] = (tuple(str(d) for d in range(10)), _KEYS,
                                             FACT_VALUES, COPY_WORDS)


def make_mqar(rng, cfg, corpus=None, split="train") -> Example:
    """A drill: key-value pairs, then several keys each followed by its value; the last value is the answer.

    Keys are distinct nonce words (:data:`COPY_WORDS` or :data:`FACT_KEYS`, or the
    letters of ``recall``); values are digits, letters, colors or nonce words (one
    kind per line).
    """
    n = int(rng.integers(cfg.mqar_pairs[0], cfg.mqar_pairs[1] + 1))
    key_pool = (COPY_WORDS, FACT_KEYS, _KEYS)[int(rng.integers(0, 3))]
    n = min(n, len(key_pool))
    keys = [key_pool[int(i)] for i in rng.choice(len(key_pool), size=n, replace=False)]
    pool = _MQAR_VALUES[int(rng.integers(0, len(_MQAR_VALUES)))]
    vals = [pool[int(i)] for i in rng.integers(0, len(pool), size=n)]
    m = int(rng.integers(1, n + 1))
    asked = [int(i) for i in rng.choice(n, size=m, replace=False)]
    body = " ".join(f"{k} {v}" for k, v in zip(keys, vals))
    shown = " ".join(f"{keys[i]} {vals[i]}" for i in asked[:-1])
    prompt = f"pairs : {body} ; ask :" + (f" {shown}" if shown else "") + f" {keys[asked[-1]]}"
    return Example("mqar", prompt, vals[asked[-1]], "mqar")


_ALPHA = re.compile(r"^[A-Za-z]+$")


def _prose_example(para: str) -> Example | None:
    """The paragraph up to its last purely alphabetic word, which is the answer."""
    words = para.split()
    for i in range(len(words) - 1, 7, -1):
        w = words[i].rstrip(".,;:!?)'\"")
        if _ALPHA.match(w):
            return Example("prose", " ".join(words[:i]), w, "prose")
    return None


def make_prose(rng, cfg, corpus, split) -> Example:
    paras = corpus.prose_split[split]
    while True:
        ex = _prose_example(paras[int(rng.integers(0, len(paras)))])
        if ex is not None:
            return ex


GENERATORS: dict[str, Callable[..., Example]] = {
    "arith": make_arith, "recall": make_recall, "trace": make_trace, "text": make_text,
    "multi": make_multi, "relay": make_relay, "facts": make_facts, "copy": make_copy,
    "mcq": make_mcq, "prose": make_prose, "induct": make_induct, "mqar": make_mqar,
}


def family_schedule(n: int, weights: Sequence[float]) -> list[int]:
    """Which family writes each of ``n`` lines: smooth weighted round-robin over ``weights``.

    Deterministic and evenly spread: after any prefix of ``k`` lines, family
    ``j`` has written ``k * w_j / sum(w)`` lines to within one. Equal weights give
    plain turns ``0, 1, 2, ...``.
    """
    w = np.asarray(weights, dtype=float)
    credit = np.zeros(len(w))
    out = []
    for _ in range(n):
        credit += w
        j = int(np.argmax(credit))
        credit[j] -= w.sum()
        out.append(j)
    return out


def generate_split(cfg: CorpusConfig, n: int, seed: int, corpus: Corpus | None = None,
                   split: str = "train") -> list[Example]:
    """``n`` examples, families in turn; ``prose`` draws from ``split``'s paragraphs.

    The train split also has the drills and follows ``cfg.train_weights`` if set.
    """
    corpus = corpus or Corpus(cfg)
    rng = np.random.default_rng(seed)
    fams = cfg.train_families if split == "train" else cfg.families
    if split == "train" and cfg.train_weights:
        order = family_schedule(n, cfg.train_weights)
    else:
        order = [i % len(fams) for i in range(n)]
    return [GENERATORS[fams[j]](rng, cfg, corpus, split) for j in order]


def sample_lines(corpus: Corpus, rng: np.random.Generator, weights: Sequence[float],
                 n: int) -> list[Example]:
    """``n`` fresh training lines, each family drawn independently with probability ∝ ``weights``.

    ``weights`` is aligned with ``corpus.config.train_families``. Used to stream
    training data (every line new); the result is a function of the ``rng``'s state.
    """
    fams = corpus.config.train_families
    w = np.asarray(weights, dtype=float)
    if len(w) != len(fams) or (w < 0).any() or not w.sum() > 0:
        raise ValueError(f"weights must be {len(fams)} non-negative numbers, not all zero, "
                         f"aligned with {fams}; got {list(weights)}")
    picks = rng.choice(len(fams), size=n, p=w / w.sum())
    return [GENERATORS[fams[int(j)]](rng, corpus.config, corpus, "train") for j in picks]


def build_corpus(cfg: CorpusConfig | None = None) -> Corpus:
    """The corpus of ``cfg`` (default: the book preset); splits are generated on access."""
    return Corpus(cfg or CorpusConfig())


# ---------------------------------------------------------------------------
# scoring


def answer_words(output: str, n: int) -> str:
    """The first ``n`` whitespace-separated words of ``output`` (trailing punctuation kept)."""
    return " ".join(output.strip().split()[:n])


def check_answer(example: Example, output: str) -> bool:
    """Exact match of the first ``len(answer.split())`` words of ``output`` with the answer.

    ``"7 keys ..."`` is right for ``"7"``, ``"71"`` is not; a ``prose`` word may be
    followed by punctuation (``"module."`` is right for ``"module"``).
    """
    got = answer_words(output, example.n_answer_words)
    if example.family == "prose":
        got = got.rstrip(".,;:!?)'\"")
    return got == example.answer


def score_answers(examples: Sequence[Example], outputs: Sequence[str]) -> dict[str, float]:
    """Exact-match accuracy per family and overall (``"all"``, the mean over examples)."""
    if len(examples) != len(outputs):
        raise ValueError(f"got {len(examples)} examples but {len(outputs)} outputs")
    if not examples:
        raise ValueError("score_answers needs at least one example")
    hits: dict[str, list[bool]] = defaultdict(list)
    for e, o in zip(examples, outputs):
        ok = check_answer(e, o)
        hits[e.family].append(ok)
        hits["all"].append(ok)
    return {k: float(np.mean(hits[k])) for k in [*FAMILIES, "all"] if k in hits}


def chance_levels(corpus: Corpus, split: str = "test") -> dict[str, float]:
    """Accuracy of guessing per family, on ``split``.

    Uniform guessing among the family's possible answers (digits: 1/10 per
    digit, so ``multi`` is ``mean(0.1 ** k)``; topics 1/topics; colors 1/12;
    letters 1/4; ``copy`` (1/256)**3), except ``prose``, whose chance level is
    the majority baseline: always answering the most frequent answer word of
    the train paragraphs.
    """
    cfg = corpus.config
    ex = corpus.split(split)
    fams = [f for f in FAMILIES if f in cfg.families]
    out: dict[str, float] = {}
    per = {"arith": 0.1, "recall": 0.1, "trace": 0.1, "relay": 0.1, "text": 1 / cfg.topics,
           "facts": 1 / len(FACT_VALUES), "mcq": 0.25, "copy": (1 / len(COPY_WORDS)) ** 3}
    for f in fams:
        if f == "multi":
            ks = [e.n_answer_words for e in ex if e.family == "multi"]
            out[f] = float(np.mean([0.1 ** k for k in ks])) if ks else 0.01
        elif f == "prose":
            train_ans = Counter(_prose_example(p).answer for p in corpus.prose_split["train"]
                                if _prose_example(p) is not None)
            top = train_ans.most_common(1)[0][0]
            test_ans = [e.answer for e in ex if e.family == "prose"]
            out[f] = float(np.mean([a == top for a in test_ans])) if test_ans else 0.0
        else:
            out[f] = per[f]
    counts = Counter(e.family for e in ex)
    total = sum(counts[f] for f in fams)
    out["all"] = float(sum(out[f] * counts[f] for f in fams) / max(1, total))
    return out


def _solve_arith(words: list[str], prompt: str) -> str:
    value = int(words[1])
    for op, b in zip(words[2:-1:2], words[3:-1:2]):
        value = _apply(value, op, int(b), 10)
    return str(value)


def _solve_lookup(words: list[str], prompt: str) -> str:
    """``recall`` and ``multi``: the values of the asked keys in the table."""
    body = words[1:words.index(";")]
    table = dict(zip(body[0::2], body[1::2]))
    asked = words[words.index("get") + 1:-1]
    return " ".join(table[k] for k in asked)


def _solve_trace(words: list[str], prompt: str) -> str:
    env: dict[str, int] = {}
    for stmt in " ".join(words[1:]).split(" ; "):
        parts = stmt.split()
        if parts[0] == "print":
            return str(env[parts[1]])
        env[parts[0]] = int(parts[2]) if len(parts) == 3 else _apply(
            env[parts[2]], parts[3], int(parts[4]), 10)
    raise ValueError(f"trace prompt has no print: {prompt!r}")


def _solve_text(words: list[str], prompt: str) -> str:
    counts = {t: sum(w in v["noun"] or w in v["adj"] or w in v["verb"] for w in words)
              for t, v in TOPICS.items()}
    return max(counts, key=counts.get)


def _solve_relay(words: list[str], prompt: str) -> str:
    results = [int(m) for m in re.findall(r"step \d+ : \d [-+*] \d = (\d) \.", prompt)]
    task = re.search(r"task : ([0-9 +*-]+) \.", prompt).group(1).split()
    value = int(task[0])
    for op, b in zip(task[1::2], task[2::2]):
        value = _apply(value, op, int(b), 10)
    if results and results[-1] != value:
        raise ValueError("relay trace disagrees with its task")
    q = prompt.rsplit("question :", 1)[1]
    if "step" in q:
        return str(results[int(re.search(r"step (\d+)", q).group(1)) - 1])
    if "plus" in q:
        return str((value + int(re.search(r"plus (\d)", q).group(1))) % 10)
    return str(value)


def _solve_facts(words: list[str], prompt: str) -> str:
    return FACTS[words[-2]]


def _solve_copy(words: list[str], prompt: str) -> str:
    ctx = words[2:words.index(";")]
    q = words[words.index(";") + 3:-1]
    for i in range(len(ctx) - 1):
        if ctx[i:i + 2] == q:
            return " ".join(ctx[i + 2:i + 5])
    raise ValueError("copy query not found in its context")


def _solve_mcq(words: list[str], prompt: str) -> str:
    opts = re.findall(r"([abcd]) \) (\S+)", prompt.split(" options : ")[1])
    q = prompt.split("quiz : ", 1)[1].split(" options : ")[0]
    m = re.match(r"what is (\d) ([-+*]) (\d) \?", q)
    if m:
        right = str(_apply(int(m.group(1)), m.group(2), int(m.group(3)), 10))
    elif q.startswith("what is the"):
        right = FACTS[q.split()[-2]]
    else:
        right = _solve_text(q.split(), q)
    return next(letter for letter, o in opts if o == right)


def _solve_prose(words: list[str], prompt: str) -> str:
    for para in load_prose():
        ex = _prose_example(para)
        if ex is not None and ex.prompt == prompt:
            return ex.answer
    raise ValueError("prose prompt is not from the shipped paragraphs")


def _solve_induct(words: list[str], prompt: str) -> str:
    return " ".join(words[2:words.index(";")])


def _solve_mqar(words: list[str], prompt: str) -> str:
    body = words[2:words.index(";")]
    table = dict(zip(body[0::2], body[1::2]))
    return table[words[-1]]


SOLVERS: dict[str, Callable[[list[str], str], str]] = {
    "arith": _solve_arith, "recall": _solve_lookup, "multi": _solve_lookup,
    "trace": _solve_trace, "text": _solve_text, "relay": _solve_relay, "facts": _solve_facts,
    "copy": _solve_copy, "mcq": _solve_mcq, "prose": _solve_prose,
    "induct": _solve_induct, "mqar": _solve_mqar,
}


def solve(example: Example) -> str:
    """Recompute the answer from the prompt alone (brute force; an independent check).

    One solver per family (:data:`SOLVERS`); ``prose`` is looked up in the
    shipped paragraphs (its answer is the author's word).
    """
    if example.family not in SOLVERS:
        raise ValueError(f"unknown family {example.family!r}; expected one of {FAMILIES}")
    return SOLVERS[example.family](example.prompt.split(), example.prompt)


def by_family(examples: Iterable[Example]) -> dict[str, list[Example]]:
    """Group examples by family, in :data:`FAMILIES` order."""
    groups: dict[str, list[Example]] = defaultdict(list)
    for e in examples:
        groups[e.family].append(e)
    return {f: groups[f] for f in FAMILIES if f in groups}



__all__ = ["DRILLS", "DRILL_WORDS", "sample_lines", "COPY_WORDS", "FACTS", "FACT_KEYS", "FAMILIES", "SINGLE_TOKEN", "Corpus",
           "CorpusConfig", "Example", "build_corpus", "by_family", "chance_levels",
           "check_answer", "generate_split", "score_answers", "solve"]
