"""The substrate tokenizer: byte-level BPE trained with ``tokenizers``, deterministic.

Pre-tokenisation is GPT-2's idea with digits kept apart: a regex splits the text
into pieces (`` word``, `` 7``, ``7``, `` .``) with the leading space inside the
piece, then every piece is mapped to bytes (``ByteLevel``), so any text encodes
(no ``<unk>`` in practice) and decoding gives the text back exactly. Every digit
is its own piece, so a one-digit answer is one token and a number is one token
per digit.

Fixed ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, then
:data:`N_RESERVED` tokens ``<reserved_0>`` ... ``<reserved_31>`` (ids 4-35) that
the corpus never uses, for chapters that need unseen filler tokens
(out-of-distribution tests). Encoding prepends ``<bos>``.

Determinism (why the old code fell back to word level, and the fix). In
``tokenizers`` (checked on 0.23.3) the BPE trainer keeps its word counts in an
``ahash`` map whose hash seed is drawn from the operating system in every
process: neither ``PYTHONHASHSEED`` nor ``RAYON_NUM_THREADS=1`` /
``TOKENIZERS_PARALLELISM=false`` changes it. The alphabet is sorted and ties
between equally frequent pairs are broken by pair id, so the result is
deterministic *as long as every symbol id is fixed before the merges start*.
That fails with ``continuing_subword_prefix`` (WordPiece-style ``##``) or
``end_of_word_suffix`` (``</w>``): the trainer then creates the prefixed or
suffixed symbols while it walks the word map, so their ids follow the random
map order, the tie-breaks between equal-count pairs follow the ids, and two
processes learn different merges (measured: three fresh processes, three
different vocabularies, with the same ``PYTHONHASHSEED`` and one thread). The
substrate tokenizer uses neither: spaces live inside byte-level pieces (``Ġword``),
and the full byte alphabet is given up front, so all base ids are fixed. Two
guards remain: ``tests/unit/test_lm_bpe.py`` trains in two fresh processes
(different ``PYTHONHASHSEED``) and compares the ids, and the book models never
retrain the tokenizer: its ``tokenizer.json`` ships inside each model artifact
and :func:`load_bpe` reads it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
N_RESERVED = 32
RESERVED: tuple[str, ...] = tuple(f"<reserved_{i}>" for i in range(N_RESERVED))
SPECIAL_KWARGS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>",
                  "unk_token": "<unk>"}
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

# pieces: optional space + letters | optional space + ONE digit | optional space + punctuation | spaces
PIECE_REGEX = r" ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PIECE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def train_bpe(texts: Iterable[str], vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE on ``texts``; return a ``transformers`` fast tokenizer.

    Args:
        texts: training lines (for example ``corpus.texts("train")``).
        vocab_size: total vocabulary, specials and reserved tokens included
            (at least 256 + 36 = 292: the byte alphabet is always in).
    """
    texts = list(texts)
    if not texts:
        raise ValueError("train_bpe needs at least one training text")
    floor = 256 + len(SPECIALS) + N_RESERVED
    if vocab_size < floor:
        raise ValueError(f"vocab_size must be at least {floor} (bytes + specials), got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = _pre_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=[*SPECIALS, *RESERVED],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A",
                                                       special_tokens=[("<bos>", BOS_ID)])
    for i, s in enumerate((*SPECIALS, *RESERVED)):
        if tok.token_to_id(s) != i:
            raise RuntimeError(f"special token {s} got id {tok.token_to_id(s)}, expected {i}")
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """A ``transformers`` fast tokenizer around ``tok`` (right padding, fixed specials)."""
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_KWARGS,
                                   additional_special_tokens=list(RESERVED))
    fast.padding_side = "right"
    return fast


def load_bpe(folder: str | Path) -> PreTrainedTokenizerFast:
    """The tokenizer saved in ``folder`` (its ``tokenizer.json``), as trained: never retrained."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer.json in {folder}")
    return wrap(Tokenizer.from_file(str(path)))


def save_bpe(tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> Path:
    """Write only ``tokenizer.json`` (the whole tokenizer) into ``folder``."""
    path = Path(folder) / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.backend_tokenizer.save(str(path))
    return path


def tokenizer_digest(tokenizer: PreTrainedTokenizerFast) -> str:
    """SHA-256 of the vocabulary and merges (equal digests mean identical token ids)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    blob = json.dumps({"vocab": model["vocab"], "merges": model["merges"]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
