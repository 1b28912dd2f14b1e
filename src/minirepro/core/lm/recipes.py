"""The v2 substrate's models as checked artifacts: ``lm-v2-book`` and ``lm-v2-smoke``.

The configs live in :mod:`~minirepro.core.lm.presets_v2` (the manifest records
and checks them; this module's code and :data:`SOURCES` are what the source hash
covers). The OPT-style sibling ``lm-v2-book-opt`` is registered by
:mod:`~minirepro.core.lm.recipes_opt`.

Each recipe trains the tokenizer and the model on one thread
(:func:`~minirepro.core.lm.train_v2.train_substrate`), stores the weights in
``float16`` safetensors, reloads them, and evaluates the *reloaded* model (so
the quality figures describe the shipped weights): greedy exact match per
family on the validation split and, once, on the test split; perplexity; the
same for a bigram baseline; the chance levels. Files written:

``model.safetensors``, ``config.json``, ``generation_config.json``
    the ``transformers`` checkpoint (``save_pretrained``; fp16 storage).
``tokenizer.json``
    the trained tokenizer (never retrained when loading).
``substrate.json``
    the recipe's configs (corpus, model, training), so the corpus can be rebuilt.
``curve.json``
    the training loss per step and the validation loss / answer accuracy every
    ``eval_every`` steps (a page plots it without retraining).
``eval.json``
    every evaluation figure (see :func:`evaluate_substrate`).

Re-make one with ``minirepro artifacts build lm-v2-book`` (the time it took is
in the manifest, ``train_seconds``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import torch

from minirepro.core import artifacts
from minirepro.core.lm.bpe import load_bpe, save_bpe, tokenizer_digest
from minirepro.core.lm.corpus_v2 import SINGLE_TOKEN, CorpusV2, build_corpus_v2, chance_levels
from minirepro.core.lm.eval_v2 import BigramLM, family_accuracy, token_nll_v2
from minirepro.core.lm.models_v2 import load_lm, n_params_v2
from minirepro.core.lm.presets_v2 import BOOK, SMOKE, SubstrateRecipe
from minirepro.core.lm.train_v2 import train_substrate

SOURCES = ("minirepro.core.lm.corpus_v2", "minirepro.core.lm.prose", "minirepro.core.lm.bpe",
           "minirepro.core.lm.models_v2", "minirepro.core.lm.train_v2", "minirepro.core.lm.eval_v2")


def evaluate_substrate(model, tokenizer, corpus: CorpusV2) -> dict:
    """Every figure the page shows: accuracy (val, test), chance, bigram, perplexity.

    Returns a JSON-able dict with ``val_acc`` (first 300 validation lines), ``test_acc`` (per family and
    ``all``), ``chance``, ``bigram_test_acc``, ``test_ppl``, ``test_ppl_by_family``,
    ``bigram_test_ppl``, ``bigram_test_ppl_by_family``, ``n_params``,
    ``tokenizer_sha256``.
    """
    test = corpus.test
    bigram = BigramLM(tokenizer, corpus.texts("train"))
    out: dict = {
        "n_params": n_params_v2(model),
        "tokenizer_sha256": tokenizer_digest(tokenizer),
        "val_acc": family_accuracy(model, tokenizer, corpus.val[:300]),
        "test_acc": family_accuracy(model, tokenizer, test),
        "chance": chance_levels(corpus, "test"),
        "bigram_test_acc": bigram.family_accuracy(test),
        "test_ppl_by_family": {}, "bigram_test_ppl_by_family": {},
    }
    fams = sorted({e.family for e in test}, key=lambda f: [e.family for e in test].index(f))
    tot = cnt = btot = bcnt = 0.0
    for f in fams:
        texts = [e.text for e in test if e.family == f]
        n, c = token_nll_v2(model, tokenizer, texts)
        bn, bc = bigram.nll(texts)
        out["test_ppl_by_family"][f] = math.exp(n / c)
        out["bigram_test_ppl_by_family"][f] = math.exp(bn / bc)
        tot, cnt, btot, bcnt = tot + n, cnt + c, btot + bn, bcnt + bc
    out["test_ppl"] = math.exp(tot / cnt)
    out["bigram_test_ppl"] = math.exp(btot / bcnt)
    return out


def build_substrate(rec: SubstrateRecipe, out: Path, desc: str) -> artifacts.BuildResult:
    """Train, store (``rec.store_dtype``), reload, evaluate; write the artifact's files into ``out``."""
    if rec.store_dtype not in ("float16", "float32"):
        raise ValueError(f"store_dtype must be 'float16' or 'float32', got {rec.store_dtype!r}")
    t0 = time.perf_counter()
    corpus = build_corpus_v2(rec.corpus)
    trained = train_substrate(corpus, rec.model, rec.train, desc=desc)
    trained.model.to(getattr(torch, rec.store_dtype)).save_pretrained(out, safe_serialization=True)
    save_bpe(trained.tokenizer, out)
    model, tok = load_lm(out), load_bpe(out)  # evaluate what ships
    with torch.no_grad():
        threads = torch.get_num_threads()
        torch.set_num_threads(rec.train.threads)
        try:
            ev = evaluate_substrate(model, tok, corpus)
        finally:
            torch.set_num_threads(threads)
    ev.update(train_seconds=trained.train_seconds, tokens_seen=trained.tokens_seen,
              tokenizer_seconds=trained.tokenizer_seconds,
              build_seconds=time.perf_counter() - t0,
              val_fingerprint=corpus.fingerprint(("val", "test")))
    (out / "substrate.json").write_text(json.dumps(dataclasses.asdict(rec), indent=1, default=list))
    (out / "curve.json").write_text(json.dumps(trained.curve))
    (out / "eval.json").write_text(json.dumps(ev, indent=1))
    single = [ev["test_acc"][f] for f in SINGLE_TOKEN if f in ev["test_acc"]]
    quality = {"test_acc_all": ev["test_acc"]["all"], "test_ppl": ev["test_ppl"],
               "bigram_test_ppl": ev["bigram_test_ppl"], "min_single_token_acc": min(single),
               "n_params": ev["n_params"], "tokens_seen": trained.tokens_seen}
    quality.update({f"test_acc_{f}": v for f, v in ev["test_acc"].items() if f != "all"})
    return artifacts.BuildResult(quality=quality, data_hash=corpus.fingerprint())


@artifacts.recipe("lm-v2-book", config=BOOK, sources=SOURCES,
                  description="v2 LM substrate, book model: Llama-style 2.0 M params, BPE 2048")
def build_lm_v2_book(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] The v2 substrate's book model (Llama-style: RoPE, SwiGLU, RMSNorm, GQA)."""
    return build_substrate(rec, out, "lm-v2-book")


@artifacts.recipe("lm-v2-smoke", config=SMOKE, sources=SOURCES,
                  description="v2 LM substrate, smoke model: tiny Llama-style, for CI")
def build_lm_v2_smoke(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] A tiny model for smoke runs and CI (no training at test time)."""
    return build_substrate(rec, out, "lm-v2-smoke")
