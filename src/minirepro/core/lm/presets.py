"""The configs of the substrate's artifacts (book, OPT-style sibling, smoke, smoke OPT).

Kept apart from the recipe code: an artifact's manifest records its config and
``minirepro artifacts verify`` compares it, while the source hash covers the
code that trains (``recipes`` and its sources). Changing a number here makes the
matching artifact stale, and only that one.

Mixtures are written as *token shares* and turned into line weights with each
family's mean line length in tokens (:data:`MEAN_TOKENS`, measured once with a
BPE-2048 tokenizer of this corpus), because a ``relay`` line is eleven times as
long as an ``arith`` one: the families are balanced by what the model reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minirepro.core.lm.corpus import DRILLS, FAMILIES, CorpusConfig
from minirepro.core.lm.models import ModelConfig
from minirepro.core.lm.train import TrainConfig


@dataclass
class SubstrateRecipe:
    """The configs of one substrate artifact.

    Attributes:
        corpus, model, train: the corpus, model and training configs.
        store_dtype: the dtype the weights are stored in (``float16`` or ``float32``).
    """

    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    store_dtype: str = "float16"


# Mean tokens per line (with <bos> and <eos>), 12,000 lines, BPE 2048 of the book corpus.
MEAN_TOKENS: dict[str, float] = {
    "arith": 10.0, "recall": 16.0, "trace": 19.9, "text": 19.7, "multi": 19.5, "relay": 109.1,
    "facts": 14.2, "copy": 25.0, "mcq": 29.4, "prose": 44.1, "induct": 34.2, "mqar": 31.8}


def line_weights(token_shares: dict[str, float],
                 families: tuple[str, ...] = FAMILIES + DRILLS) -> tuple[float, ...]:
    """Line weights (aligned with ``families``) that give each family its share of the tokens."""
    unknown = set(token_shares) - set(families)
    if unknown:
        raise ValueError(f"token shares for unknown families {sorted(unknown)}")
    return tuple(round(token_shares.get(f, 0.0) / MEAN_TOKENS[f], 4) for f in families)


# The final mixture (token %): the scored families as in v2's second build, minus a little
# each for the two drills, which keep 7 % each so the lookup is never unlearned.
FINAL_SHARES: dict[str, float] = {
    "arith": 12, "recall": 8, "trace": 12, "text": 3, "multi": 6, "relay": 15, "facts": 5,
    "copy": 8, "mcq": 10, "prose": 7, "induct": 7, "mqar": 7}
# The first step's mixture: the lookup first (drills, copy, recall: 85 % of the tokens); it
# moves linearly to FINAL_SHARES over the curriculum.
EARLY_SHARES: dict[str, float] = {
    "induct": 30, "mqar": 25, "copy": 15, "recall": 10, "multi": 5, "arith": 3, "trace": 2,
    "text": 1, "relay": 4, "facts": 1, "mcq": 2, "prose": 2}

# Book: Llama d=256, 4 layers, 8 heads / 2 KV heads, SwiGLU 640, vocabulary 2048 (3.1 M
# parameters, 1.6x the v2 book model, so the chapters' inference stays within their budget).
# 5,000 steps of 8,192 packed tokens (41 M tokens); the curriculum's first 500 steps move from
# EARLY_SHARES to FINAL_SHARES; lr 1e-3 (3e-3 was too high for the lookup families). Chosen from
# the CPU pilots in the substrate page's file substrate-pilots.json (validation lines only).
BOOK = SubstrateRecipe(
    corpus=CorpusConfig(n_train=100_000, n_val=1000, n_test=1000, relay_steps=(2, 8),
                        drills=DRILLS, train_weights=line_weights(FINAL_SHARES)),
    model=ModelConfig(d_model=256, n_layers=4, n_heads=8, n_kv_heads=2, d_ff=640, max_len=256),
    train=TrainConfig(steps=5000, batch_tokens=8192, lr=1e-3, warmup=200, min_lr_frac=0.05,
                      answer_weight=10.0, vocab_size=2048, eval_every=250, eval_examples=500,
                      threads=2, stream=True, early_weights=line_weights(EARLY_SHARES),
                      curriculum_steps=500),
)
# The OPT-style sibling (SparseInfer): a ReLU FFN of width 960 (two matrices, as many weights as
# the book's SwiGLU 640 x 3), full multi-head attention, learned positions; the book's corpus
# and training.
BOOK_OPT = SubstrateRecipe(
    corpus=BOOK.corpus,
    model=ModelConfig(arch="opt", d_model=256, n_layers=4, n_heads=8, n_kv_heads=8,
                      d_ff=960, max_len=256),
    train=BOOK.train,
)
SMOKE = SubstrateRecipe(
    corpus=CorpusConfig(n_train=5000, n_val=300, n_test=500, relay_steps=(2, 8), drills=DRILLS,
                        train_weights=line_weights(FINAL_SHARES)),
    model=ModelConfig(d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=128, max_len=256),
    train=TrainConfig(steps=300, batch_tokens=2048, lr=3e-3, warmup=30, answer_weight=10.0,
                      vocab_size=1024, eval_every=50, eval_examples=100, stream=True,
                      early_weights=line_weights(EARLY_SHARES), curriculum_steps=100),
)
# The OPT-style smoke sibling (SparseInfer at smoke scale): SMOKE's corpus and training with a
# ReLU FFN of width 192 (two matrices, about SMOKE's SwiGLU 128 x 3) and three layers, so that
# one middle layer stays between the dense first and last ones.
SMOKE_OPT = SubstrateRecipe(
    corpus=SMOKE.corpus,
    model=ModelConfig(arch="opt", d_model=64, n_layers=3, n_heads=2, n_kv_heads=2, d_ff=192,
                      max_len=256),
    train=SMOKE.train,
)

__all__ = ["BOOK", "BOOK_OPT", "EARLY_SHARES", "FINAL_SHARES", "MEAN_TOKENS", "SMOKE",
           "SMOKE_OPT", "SubstrateRecipe", "line_weights"]
