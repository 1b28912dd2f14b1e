"""The tiny language-model substrate shared by the book's LM chapters.

Real small models, trained here in about a minute, on text whose answers can be
checked. Everything is built with the libraries the field uses: ``tokenizers``
trains the tokenizer, ``transformers`` supplies the models, ``generate`` and the
KV cache.

Quick start::

    from minirepro.core.lm import pretrain, perplexity, task_accuracy

    lm = pretrain(scale="book")           # cached: the second call loads in seconds
    lm.model, lm.tokenizer, lm.corpus     # an OPTForCausalLM, its fast tokenizer, the data
    perplexity(lm.model, lm.tokenizer, lm.corpus.texts("val"))
    task_accuracy(lm.model, lm.tokenizer, lm.corpus.test)   # {"arith": .., "recall": .., ..., "all": ..}

    lm = pretrain(model_name="facebook/opt-125m")  # a real checkpoint, only with network access

Pieces (each a module):

``corpus``
    :class:`CorpusConfig` and :func:`build_corpus`: a seeded generator of four
    task families with checkable answers (``arith`` modular chains, ``recall``
    key-value lookup, ``trace`` tiny programs, ``text`` templated descriptions
    of distinct topics), train/val/test splits of :class:`Example`
    (``prompt``, ``answer``, ``family``, ``topic``), :func:`check_answer`,
    :func:`score_answers` (accuracy per family), :func:`chance_accuracy`,
    :func:`solve` (recomputes an answer from its prompt).
``tokenizer``
    :func:`train_tokenizer` (BPE, digits split, ``<pad>=0 <bos> <eos> <unk>``)
    returning a ``transformers.PreTrainedTokenizerFast``; :func:`load_tokenizer`.
``models``
    :class:`LMConfig` (``arch="opt"``: ReLU FFN ``fc1/fc2``; ``arch="llama"``:
    RoPE, SwiGLU ``gate/up/down``, grouped-query attention) and
    :func:`build_model`; :func:`load_pretrained` for hub ids (fails fast offline
    with :class:`HubUnavailable`).
``pretrain``
    :class:`TrainConfig` and :func:`pretrain` returning a :class:`PretrainedLM`
    (``model``, ``tokenizer``, ``corpus``, ``losses``, ``from_cache``,
    ``train_seconds``...). Results are cached under ``$MINIREPRO_CACHE/lm/``
    (default ``~/.cache/minirepro``) by a SHA-256 of configs, data and library
    versions; entries are written atomically with a checksum manifest, and a
    corrupt or partial entry is rebuilt, never loaded.
``evaluate``
    :func:`perplexity`, :func:`token_nll`, :func:`unigram_loss` (the baseline
    a trained model must beat), :func:`task_accuracy` (greedy ``generate``),
    :func:`answer_accuracy` (argmax of the next token, one forward),
    :func:`generate` (with or without the KV cache) and :func:`greedy_decode`
    (the decoding loop written out, with an ``on_prefill`` hook for methods
    that change the model between prefill and decoding).

Every config is a :class:`~minirepro.core.ScaledConfig`: ``LMConfig.preset("smoke")``,
``TrainConfig.preset("book", steps=300)``. Presets: smoke trains a 2-layer
``d_model=64`` model in about 2 s (250 steps); book a 4-layer ``d_model=128``,
``d_ff=512`` model (0.83 M parameters) in about 55 s of one core (1800 steps of 16 examples).

Shapes: ``input_ids`` are ``(B, T)`` ``torch.long``; FFN pre-activations are
``(tokens, d_ff)``. Training runs on one thread by default (``TrainConfig.threads``)
so the weights are the same on every machine.
"""

from minirepro.core.lm.corpus import (
                                      FAMILIES,
                                      TOPICS,
                                      Corpus,
                                      CorpusConfig,
                                      Example,
                                      build_corpus,
                                      by_family,
                                      chance_accuracy,
                                      check_answer,
                                      generate_split,
                                      overlap,
                                      score_answers,
                                      solve,
)
from minirepro.core.lm.evaluate import (
                                      answer_accuracy,
                                      generate,
                                      greedy_decode,
                                      perplexity,
                                      task_accuracy,
                                      token_nll,
                                      unigram_loss,
)
from minirepro.core.lm.models import (
                                      ARCHS,
                                      HubUnavailable,
                                      LMConfig,
                                      build_model,
                                      hf_config,
                                      load_pretrained,
                                      n_params,
)
from minirepro.core.lm.pretrain import (
                                      PretrainedLM,
                                      TrainConfig,
                                      cache_key,
                                      cache_root,
                                      clear_cache,
                                      encode,
                                      pretrain,
                                      verify_entry,
)
from minirepro.core.lm.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

__all__ = [
    "ARCHS", "FAMILIES", "TOPICS", "Corpus", "CorpusConfig", "Example", "HubUnavailable",
    "LMConfig", "PretrainedLM", "TrainConfig", "answer_accuracy", "build_corpus", "build_model",
    "by_family", "cache_key", "cache_root", "chance_accuracy", "check_answer", "clear_cache",
    "encode", "generate", "generate_split", "greedy_decode", "hf_config", "load_pretrained",
    "load_tokenizer", "n_params", "overlap", "perplexity", "pretrain", "save_tokenizer",
    "score_answers", "solve", "task_accuracy", "token_nll", "train_tokenizer", "unigram_loss",
    "verify_entry",
]
