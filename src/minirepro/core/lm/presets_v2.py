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
# Sized for the machine it was built on: 2 cores shared with many other jobs. One training
# thread got 120-380 tokens/s under a load average of 12-24 and about 2800 tokens/s when
# the machine was quiet. 4400 steps of 12 lines is about 1.6 M tokens, one pass over the
# train split. Chosen on the validation split: final validation loss 2.11 at 4400 steps,
# 2.17 at 2800, 2.25 at 2000 (greedy validation accuracy 0.21 at both 2800 and 4400); an
# 800-step run left every family near chance. lr 3e-3 was chosen over 1e-3 on the
# validation loss of two 150-step pilots (4.76 vs 4.81 nats/token).
BOOK = SubstrateRecipe(
    corpus=CorpusV2Config(n_train=53000, n_val=1000, n_test=1000, relay_steps=(2, 8)),
    model=ModelV2Config(d_model=192, n_layers=4, n_heads=6, n_kv_heads=2, d_ff=512, max_len=256),
    train=TrainV2Config(steps=4400, batch_size=12, lr=3e-3, warmup=40, answer_weight=10.0,
                        vocab_size=2048, eval_every=400, eval_examples=200),
)
# The OPT-style sibling: ReLU FFN of width 768 (two matrices, so about the book's size),
# trained like the 2000-step book run (0.74 M tokens); not yet re-made at 2800 steps.
BOOK_OPT = SubstrateRecipe(
    corpus=dataclasses.replace(BOOK.corpus, n_train=24000),
    model=ModelV2Config(arch="opt", d_model=192, n_layers=4, n_heads=6, n_kv_heads=6,
                        d_ff=768, max_len=256),
    train=dataclasses.replace(BOOK.train, steps=2000, eval_every=200),
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
