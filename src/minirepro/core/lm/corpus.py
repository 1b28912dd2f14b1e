"""A deterministic synthetic corpus with task families whose answers can be checked.

Every example is one line of plain text, ``prompt + " " + answer``, where the
prompt ends with a question marker (``=`` or ``?``) and the answer is a short
string the scorer checks exactly. Four families:

``arith``
    a modular-arithmetic chain read left to right, ``calc 3 + 4 * 2 - 5 =`` with
    every intermediate result taken modulo ``modulus`` (answer: one digit).
``recall``
    key-value recall, ``keys c 3 h 7 a 1 ; get h =`` (answer: ``7``).
``trace``
    tiny program tracing, ``prog x = 3 ; y = x + 2 ; x = y * 2 ; print x =``
    (answer: the printed value, modulo ``modulus``).
``text``
    templated descriptive text on one of several distinct topics (ocean,
    forest, ...), each topic with its own vocabulary, ending ``topic ?`` (answer:
    the topic name). This family gives the corpus clear semantic structure.

The generator is a pure function of ``(CorpusConfig, seed)``: the same config
gives the same examples, byte for byte, on every machine.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from minirepro.core.scale import ScaledConfig

FAMILIES: tuple[str, ...] = ("arith", "recall", "trace", "text")

# Topic vocabularies for the ``text`` family. Each topic has its own nouns,
# adjectives and verbs, so texts on one topic share words and texts on two
# topics share only the template's function words.
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

_TEMPLATES: tuple[str, ...] = (
    "the {adj} {noun} {verb} .",
    "a {noun} {verb} near the {noun2} .",
    "every {noun} is {adj} .",
    "we saw the {adj} {noun} and the {noun2} .",
    "the {noun} {verb} all day .",
    "there the {noun2} {verb} slowly .",
)

_KEYS = tuple("abcdefghijklmnop")
_VARS = ("x", "y", "z", "w")
_OPS = ("+", "-", "*")


@dataclass
class CorpusConfig(ScaledConfig):
    """How much text to generate and how hard the tasks are.

    Attributes:
        n_train, n_val, n_test: examples per split (families are interleaved in
            equal shares, so each family gets about a quarter).
        families: which task families to include (subset of ``FAMILIES``).
        topics: how many of the ``TOPICS`` the ``text`` family uses (2..8).
        modulus: arithmetic is done modulo this number (2..10, answers one digit).
        arith_steps: (min, max) operations in an arithmetic chain.
        recall_pairs: (min, max) key-value pairs in a recall prompt.
        trace_steps: (min, max) assignments in a program trace.
        text_sentences: (min, max) sentences in a descriptive text.
        seed: the generator's seed (the splits use ``seed``, ``seed+1``, ``seed+2``).
    """

    n_train: int = 6000
    n_val: int = 400
    n_test: int = 400
    families: tuple[str, ...] = FAMILIES
    topics: int = 6
    modulus: int = 10
    arith_steps: tuple[int, int] = (1, 3)
    recall_pairs: tuple[int, int] = (2, 4)
    trace_steps: tuple[int, int] = (2, 3)
    text_sentences: tuple[int, int] = (3, 5)
    seed: int = 1234

    PRESETS: ClassVar = {
        # smoke and book use short texts (1-2 sentences): text is learned either way,
        # and shorter lines leave the time budget to the other three families.
        "smoke": {"n_train": 1500, "n_val": 120, "n_test": 120, "text_sentences": (1, 2)},
        "book": {"text_sentences": (1, 2)},
        "full": {"n_train": 40000, "n_val": 2000, "n_test": 2000},
    }

    def __post_init__(self) -> None:
        self.families = tuple(self.families)
        bad = [f for f in self.families if f not in FAMILIES]
        if bad or not self.families:
            raise ValueError(f"families must be a non-empty subset of {FAMILIES}, got {self.families}")
        if not 2 <= self.topics <= len(TOPICS):
            raise ValueError(f"topics must be in 2..{len(TOPICS)}, got {self.topics}")
        if not 2 <= self.modulus <= 10:
            raise ValueError(f"modulus must be in 2..10 (one-digit answers), got {self.modulus}")
        for name in ("n_train", "n_val", "n_test"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("arith_steps", "recall_pairs", "trace_steps", "text_sentences"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name} must be (min, max) with 1 <= min <= max, got {(lo, hi)}")
            setattr(self, name, (int(lo), int(hi)))
        if self.recall_pairs[1] > len(_KEYS):
            raise ValueError(f"recall_pairs max must be at most {len(_KEYS)}")

    @property
    def topic_names(self) -> tuple[str, ...]:
        """The topics the ``text`` family draws from, in a fixed order."""
        return tuple(TOPICS)[: self.topics]


@dataclass(frozen=True)
class Example:
    """One corpus line.

    Attributes:
        family: one of ``FAMILIES``.
        prompt: the text up to and including the question marker.
        answer: the string a correct model produces after the prompt.
        topic: the topic name for ``text`` examples, else the family name.
    """

    family: str
    prompt: str
    answer: str
    topic: str

    @property
    def text(self) -> str:
        """The full line the model is trained on: ``prompt + " " + answer``."""
        return f"{self.prompt} {self.answer}"


@dataclass
class Corpus:
    """The three splits of a generated corpus and the config that made them."""

    config: CorpusConfig
    train: list[Example] = field(default_factory=list)
    val: list[Example] = field(default_factory=list)
    test: list[Example] = field(default_factory=list)

    def split(self, name: str) -> list[Example]:
        """The examples of split ``name`` (``train``, ``val`` or ``test``)."""
        if name not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {name!r}")
        return getattr(self, name)

    def texts(self, split: str = "train") -> list[str]:
        """The full lines of one split."""
        return [e.text for e in self.split(split)]

    def fingerprint(self) -> str:
        """A SHA-256 of every example of every split (the cache key uses it)."""
        h = hashlib.sha256()
        for name in ("train", "val", "test"):
            for e in self.split(name):
                h.update(f"{name}\t{e.family}\t{e.topic}\t{e.text}\n".encode())
        return h.hexdigest()


# ---------------------------------------------------------------------------
# the four generators; each takes a numpy Generator and the config


def _apply(a: int, op: str, b: int, m: int) -> int:
    if op == "+":
        return (a + b) % m
    if op == "-":
        return (a - b) % m
    return (a * b) % m


def make_arith(rng: np.random.Generator, cfg: CorpusConfig) -> Example:
    """``calc a op b op c ... =`` evaluated left to right modulo ``cfg.modulus``."""
    m = cfg.modulus
    steps = int(rng.integers(cfg.arith_steps[0], cfg.arith_steps[1] + 1))
    value = int(rng.integers(0, m))
    tokens = ["calc", str(value)]
    for _ in range(steps):
        op = _OPS[int(rng.integers(0, len(_OPS)))]
        b = int(rng.integers(0, m))
        value = _apply(value, op, b, m)
        tokens += [op, str(b)]
    return Example("arith", " ".join(tokens) + " =", str(value), "arith")


def make_recall(rng: np.random.Generator, cfg: CorpusConfig) -> Example:
    """``keys k1 v1 k2 v2 ... ; get k =`` with distinct keys and one-digit values."""
    n = int(rng.integers(cfg.recall_pairs[0], cfg.recall_pairs[1] + 1))
    keys = [_KEYS[i] for i in rng.choice(len(_KEYS), size=n, replace=False)]
    vals = [str(int(v)) for v in rng.integers(0, 10, size=n)]
    q = int(rng.integers(0, n))
    body = " ".join(f"{k} {v}" for k, v in zip(keys, vals))
    return Example("recall", f"keys {body} ; get {keys[q]} =", vals[q], "recall")


def make_trace(rng: np.random.Generator, cfg: CorpusConfig) -> Example:
    """``prog x = 3 ; y = x + 2 ; ... ; print y =``: straight-line code, values mod ``modulus``."""
    m = cfg.modulus
    steps = int(rng.integers(cfg.trace_steps[0], cfg.trace_steps[1] + 1))
    env: dict[str, int] = {}
    first = _VARS[int(rng.integers(0, len(_VARS)))]
    env[first] = int(rng.integers(0, m))
    stmts = [f"{first} = {env[first]}"]
    for _ in range(steps - 1):
        target = _VARS[int(rng.integers(0, len(_VARS)))]
        src = sorted(env)[int(rng.integers(0, len(env)))]
        op = _OPS[int(rng.integers(0, len(_OPS)))]
        b = int(rng.integers(0, m))
        env[target] = _apply(env[src], op, b, m)
        stmts.append(f"{target} = {src} {op} {b}")
    shown = sorted(env)[int(rng.integers(0, len(env)))]
    return Example("trace", "prog " + " ; ".join(stmts) + f" ; print {shown} =", str(env[shown]), "trace")


def make_text(rng: np.random.Generator, cfg: CorpusConfig) -> Example:
    """A few templated sentences on one topic, then ``topic ?`` (answer: the topic)."""
    names = cfg.topic_names
    topic = names[int(rng.integers(0, len(names)))]
    vocab = TOPICS[topic]
    n = int(rng.integers(cfg.text_sentences[0], cfg.text_sentences[1] + 1))
    sentences = []
    for _ in range(n):
        tpl = _TEMPLATES[int(rng.integers(0, len(_TEMPLATES)))]
        i, j = rng.choice(len(vocab["noun"]), size=2, replace=False)
        sentences.append(tpl.format(
            adj=vocab["adj"][int(rng.integers(0, len(vocab["adj"])))],
            noun=vocab["noun"][int(i)], noun2=vocab["noun"][int(j)],
            verb=vocab["verb"][int(rng.integers(0, len(vocab["verb"])))]))
    return Example("text", "text : " + " ".join(sentences) + " topic ?", topic, topic)


GENERATORS: dict[str, Callable[[np.random.Generator, CorpusConfig], Example]] = {
    "arith": make_arith, "recall": make_recall, "trace": make_trace, "text": make_text,
}


def generate_split(cfg: CorpusConfig, n: int, seed: int) -> list[Example]:
    """``n`` examples, families in turn (``arith, recall, trace, text, arith, ...``)."""
    rng = np.random.default_rng(seed)
    return [GENERATORS[cfg.families[i % len(cfg.families)]](rng, cfg) for i in range(n)]


def build_corpus(cfg: CorpusConfig | None = None) -> Corpus:
    """Generate the train, validation and test splits of ``cfg`` (default: book preset).

    Test and validation prompts that also occur verbatim in train are kept (the
    tasks have few distinct short prompts); ``overlap`` reports how many.
    """
    cfg = cfg or CorpusConfig()
    return Corpus(cfg,
                  train=generate_split(cfg, cfg.n_train, cfg.seed),
                  val=generate_split(cfg, cfg.n_val, cfg.seed + 1),
                  test=generate_split(cfg, cfg.n_test, cfg.seed + 2))


def overlap(corpus: Corpus, split: str = "test") -> float:
    """Fraction of ``split`` prompts that also appear verbatim in the train split."""
    seen = {e.prompt for e in corpus.train}
    ex = corpus.split(split)
    return sum(e.prompt in seen for e in ex) / max(1, len(ex))


# ---------------------------------------------------------------------------
# answer checking


def check_answer(example: Example, output: str) -> bool:
    """True when ``output`` (a model's text after the prompt) starts with the answer.

    Only the first whitespace-separated word counts, so ``"7 <eos> ..."`` or
    ``" 7"`` is correct for answer ``"7"`` and ``"71"`` is not.
    """
    words = output.strip().split()
    return bool(words) and words[0] == example.answer


def solve(example: Example, modulus: int = 10) -> str:
    """Recompute the answer from the prompt alone (an independent check of the generator)."""
    words = example.prompt.split()
    if example.family == "arith":
        value = int(words[1])
        for op, b in zip(words[2:-1:2], words[3:-1:2]):
            value = _apply(value, op, int(b), modulus)
        return str(value)
    if example.family == "recall":
        body = words[1:words.index(";")]
        table = dict(zip(body[0::2], body[1::2]))
        return table[words[-2]]
    if example.family == "trace":
        env: dict[str, int] = {}
        for stmt in " ".join(words[1:]).split(" ; "):
            parts = stmt.split()
            if parts[0] == "print":
                return str(env[parts[1]])
            if len(parts) == 3:
                env[parts[0]] = int(parts[2])
            else:
                env[parts[0]] = _apply(env[parts[2]], parts[3], int(parts[4]), modulus)
        raise ValueError(f"trace prompt has no print: {example.prompt!r}")
    if example.family == "text":
        counts = {t: sum(w in v["noun"] or w in v["adj"] or w in v["verb"] for w in words)
                  for t, v in TOPICS.items()}
        return max(counts, key=counts.get)
    raise ValueError(f"unknown family {example.family!r}")


def score_answers(examples: Sequence[Example], outputs: Sequence[str]) -> dict[str, float]:
    """Accuracy per family and overall: ``{"arith": 0.9, ..., "all": 0.85}``.

    Args:
        examples: the examples that were asked.
        outputs: the model's text after each prompt (same length and order).
    """
    if len(examples) != len(outputs):
        raise ValueError(f"got {len(examples)} examples but {len(outputs)} outputs")
    if not examples:
        raise ValueError("score_answers needs at least one example")
    hits: dict[str, list[bool]] = defaultdict(list)
    for e, o in zip(examples, outputs):
        ok = check_answer(e, o)
        hits[e.family].append(ok)
        hits["all"].append(ok)
    return {k: float(np.mean(v)) for k, v in hits.items()}


def chance_accuracy(cfg: CorpusConfig) -> dict[str, float]:
    """Accuracy of uniform guessing per family (one digit: 1/modulus or 1/10; topic: 1/topics)."""
    per = {"arith": 1 / cfg.modulus, "trace": 1 / cfg.modulus, "recall": 0.1, "text": 1 / cfg.topics}
    out = {f: per[f] for f in cfg.families}
    out["all"] = float(np.mean(list(out.values())))
    return out
