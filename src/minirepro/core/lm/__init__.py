"""The tiny language-model substrate shared by the book's LM chapters.

v2 (new chapters use this)::

    from minirepro.core.lm import load_substrate, family_accuracy
    sub = load_substrate("book")     # artifact lm-v2-book: Llama-style, BPE 2048; no training
    family_accuracy(sub.model, sub.tokenizer, sub.corpus.test)   # {"arith": .., ..., "all": ..}
    load_substrate("book", model_name="/path/to/checkpoint")     # any checkpoint, same path

v2 modules: ``corpus_v2`` (ten families: arith, recall, trace, text, multi,
relay, facts, copy, mcq, prose; scorers, chance levels, solvers), ``prose``
(shipped stdlib docstrings), ``bpe`` (deterministic byte-level BPE, fixed
special and reserved ids), ``models_v2`` (Llama/OPT from ``transformers``
configs; :func:`ffn_activations`, :func:`residual_stream`, :func:`prefill`,
:func:`layer_kv`, :func:`reward_model`), ``train_v2``, ``eval_v2``
(greedy exact match, perplexity, :class:`BigramLM`), ``presets_v2`` and
``recipes`` / ``recipes_opt`` (the artifacts ``lm-v2-book``, ``lm-v2-smoke``,
``lm-v2-book-opt``), ``substrate`` (:func:`load_substrate`).

v1 (kept while SparseInfer and TBPO still use it):

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

from minirepro.core.lm.bpe import load_bpe, train_bpe
from minirepro.core.lm.corpus import (
                                      FAMILIES,
                                      TOPICS,
                                      Corpus,
                                      CorpusConfig,
                                      Example,
                                      build_corpus,
                                      chance_accuracy,
                                      check_answer,
                                      generate_split,
                                      overlap,
                                      score_answers,
                                      solve,
)
from minirepro.core.lm.corpus_v2 import (
                                      FAMILIES_V2,
                                      SINGLE_TOKEN,
                                      CorpusV2,
                                      CorpusV2Config,
                                      build_corpus_v2,
                                      chance_levels,
                                      check_answer_v2,
                                      score_answers_v2,
                                      solve_v2,
)
from minirepro.core.lm.eval_v2 import BigramLM, family_accuracy, generate_v2, perplexity_v2
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
from minirepro.core.lm.models_v2 import (
                                      FFNActivations,
                                      ModelV2Config,
                                      build_lm,
                                      ffn_activations,
                                      layer_kv,
                                      load_lm,
                                      prefill,
                                      residual_stream,
                                      reward_model,
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
from minirepro.core.lm.substrate import PRESETS_V2, Substrate, load_checkpoint, load_substrate
from minirepro.core.lm.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

__all__ = [
    "ARCHS", "FAMILIES", "TOPICS", "Corpus", "CorpusConfig", "Example", "HubUnavailable",
    "LMConfig", "PretrainedLM", "TrainConfig", "answer_accuracy", "build_corpus", "build_model",
    "cache_key", "cache_root", "chance_accuracy", "check_answer", "clear_cache",
    "encode", "generate", "generate_split", "greedy_decode", "hf_config", "load_pretrained",
    "load_tokenizer", "n_params", "overlap", "perplexity", "pretrain", "save_tokenizer",
    "score_answers", "solve", "task_accuracy", "token_nll", "train_tokenizer", "unigram_loss",
    "verify_entry",
    # v2
    "FAMILIES_V2", "PRESETS_V2", "SINGLE_TOKEN", "BigramLM", "CorpusV2", "CorpusV2Config",
    "FFNActivations", "ModelV2Config", "Substrate", "build_corpus_v2", "build_lm",
    "chance_levels", "check_answer_v2", "family_accuracy", "ffn_activations", "generate_v2",
    "layer_kv", "load_bpe", "load_checkpoint", "load_lm", "load_substrate", "perplexity_v2",
    "prefill", "residual_stream", "reward_model", "score_answers_v2", "solve_v2", "train_bpe",
]
