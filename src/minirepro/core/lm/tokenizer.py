"""A word-level tokenizer trained with ``tokenizers``, used through ``transformers``.

The tokenizer splits on whitespace and punctuation and keeps every digit a token
of its own (so arithmetic answers are one token), then learns its vocabulary
(the words seen at least ``min_frequency`` times) from the training split. It is
wrapped as a ``transformers.PreTrainedTokenizerFast`` with ``<pad>`` (id 0),
``<bos>``, ``<eos>`` and ``<unk>``; encoding adds ``<bos>`` in front.

Why word-level and not BPE: the corpus is templated words, so BPE would end up
with one token per word anyway; and the ``tokenizers`` trainers break frequency
ties in hash-map order, which differs between processes. A word vocabulary can
be put in a canonical order (specials, then words sorted), so the same corpus
gives the same ids, hence the same trained weights, in every process.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS: dict[str, str] = {"pad_token": "<pad>", "bos_token": "<bos>",
                                  "eos_token": "<eos>", "unk_token": "<unk>"}


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512,
                    min_frequency: int = 1) -> PreTrainedTokenizerFast:
    """Train a word-level tokenizer on ``texts`` and wrap it for ``transformers``.

    Args:
        texts: training lines (for example ``corpus.texts("train")``).
        vocab_size: upper bound on the vocabulary (special tokens included); the
            most frequent words are kept.
        min_frequency: words seen fewer times become ``<unk>``.

    Returns:
        A fast tokenizer whose ``__call__`` prepends ``<bos>``; ``pad_token_id`` is 0,
        and ids are canonical (specials 0-3, then the words in sorted order).
    """
    texts = list(texts)
    if not texts:
        raise ValueError("train_tokenizer needs at least one training text")
    if vocab_size < 16:
        raise ValueError(f"vocab_size must be at least 16, got {vocab_size}")
    specials = [SPECIAL_TOKENS[k] for k in ("pad_token", "bos_token", "eos_token", "unk_token")]
    pre = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                   pre_tokenizers.Digits(individual_digits=True)])
    tok = Tokenizer(models.WordLevel(unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=specials, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    # canonical ids: the trainer's order among equally frequent words is not reproducible
    words = sorted(w for w in tok.get_vocab() if w not in specials)
    vocab = {w: i for i, w in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    bos = SPECIAL_TOKENS["bos_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` as a ``transformers`` fast tokenizer."""
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    fast.padding_side = "right"
    return fast


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> list[Path]:
    """Save with ``save_pretrained``; returns the files written."""
    return [Path(p) for p in tokenizer.save_pretrained(str(folder))]


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerFast:
    """Reload a tokenizer saved by :func:`save_tokenizer`."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json in {folder}")
    fast = PreTrainedTokenizerFast.from_pretrained(str(folder))
    fast.padding_side = "right"
    return fast
