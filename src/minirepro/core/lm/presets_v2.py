"""The configs of the v2 substrate's artifacts (book, OPT-style sibling, smoke).

Kept apart from the recipe code: an artifact's manifest records its config and
``minirepro artifacts verify`` compares it, while the source hash covers the
code that trains (``recipes`` and its sources). Changing a number here makes the
matching artifact stale, and only that one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from minirepro.core.lm.corpus_v2 import CorpusV2Config
from minirepro.core.lm.models_v2 import ModelV2Config
from minirepro.core.lm.train_v2 import TrainV2Config


@dataclass
class SubstrateRecipe:
    """The configs of one substrate artifact.

    Attributes:
        corpus, model, train: the corpus, model and training configs.
        store_dtype: the dtype the weights are stored in (``float16`` or ``float32``).
    """

    corpus: CorpusV2Config = field(default_factory=CorpusV2Config)
    model: ModelV2Config = field(default_factory=ModelV2Config)
    train: TrainV2Config = field(default_factory=TrainV2Config)
    store_dtype: str = "float16"


# Book: 2.0 M parameters (d=192, 4 layers, 6 heads / 2 KV heads, SwiGLU 512, vocab 2048).
# Re-made in issue 12's second round. The first book model (4400 steps of 12 lines, 1.6 M
# tokens, families taking turns by line) stayed near chance on most families: a relay line is
# ten times as long as an arith line, so relay took 36 % of the training tokens and prose 14 %,
# and each step saw ~350 tokens. This recipe, fixed before the run from that diagnosis and not
# tuned on its results: (1) families weighted by *tokens* -- intended token shares arith, recall,
# trace 12 % each, relay 16 %, copy and mcq 10 %, multi, facts and prose 8 %, text 4 % (text was
# already solved), divided by each family's mean line length in tokens (9.9, 15.8, 20.0, 19.5,
# 19.6, 108.9, 15.7, 25.1, 30.0, 42.9 with the first book tokenizer) to give line weights;
# (2) batches of ~2048 tokens rather than 12 lines; (3) two training threads (about 5,700
# tokens/s on a quiet 2-core machine) and 4500 steps, ~9 M tokens in about 26 minutes, the
# issue's 30-minute budget; (4) 240,000 training lines (about two passes).
_BOOK_WEIGHTS = (12.0, 7.5, 6.0, 2.0, 4.0, 1.5, 5.0, 4.0, 3.5, 2.0)
BOOK = SubstrateRecipe(
    corpus=CorpusV2Config(n_train=240000, n_val=1000, n_test=1000, relay_steps=(2, 8),
                          train_weights=_BOOK_WEIGHTS),
    model=ModelV2Config(d_model=192, n_layers=4, n_heads=6, n_kv_heads=2, d_ff=512, max_len=256),
    train=TrainV2Config(steps=4500, batch_size=12, batch_tokens=2048, lr=3e-3, warmup=100,
                        answer_weight=10.0, vocab_size=2048, eval_every=250, eval_examples=300,
                        threads=2),
)
# The OPT-style sibling (SparseInfer): ReLU FFN of width 768 (two matrices, so about the book's
# size), the book's corpus and training recipe for 2500 steps (~5 M tokens, ~14 minutes).
BOOK_OPT = SubstrateRecipe(
    corpus=BOOK.corpus,
    model=ModelV2Config(arch="opt", d_model=192, n_layers=4, n_heads=6, n_kv_heads=6,
                        d_ff=768, max_len=256),
    train=dataclasses.replace(BOOK.train, steps=2500),
)
SMOKE = SubstrateRecipe(
    corpus=CorpusV2Config(n_train=5000, n_val=300, n_test=500, relay_steps=(2, 8)),
    model=ModelV2Config(d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=128, max_len=256),
    train=TrainV2Config(steps=300, batch_size=16, lr=3e-3, warmup=30, answer_weight=10.0,
                        vocab_size=1024, eval_every=50, eval_examples=100),
)
# The OPT-style smoke sibling (SparseInfer at smoke scale): SMOKE's corpus and training with a
# ReLU FFN of width 192 (two matrices, about SMOKE's SwiGLU 128 x 3) and three layers, so that
# one middle layer stays between the dense first and last ones.
SMOKE_OPT = SubstrateRecipe(
    corpus=SMOKE.corpus,
    model=ModelV2Config(arch="opt", d_model=64, n_layers=3, n_heads=2, n_kv_heads=2, d_ff=192,
                        max_len=256),
    train=SMOKE.train,
)
