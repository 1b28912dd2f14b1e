"""The substrate's models as checked artifacts: ``lm-book``, ``lm-book-opt``, ``lm-smoke``, ``lm-smoke-opt``.

The configs live in :mod:`~minirepro.core.lm.presets` (the manifest records and
checks them; this module's code and :data:`SOURCES` are what the source hash
covers).

Each recipe trains the tokenizer and the model
(:func:`~minirepro.core.lm.train.train_substrate`; resumable: a checkpoint under
``$MINIREPRO_CACHE/artifacts/checkpoints/`` survives an interrupted build and is
removed when the build ends), stores the weights in ``float16`` safetensors,
reloads them, and evaluates the *reloaded* model (so the quality figures describe
the shipped weights): greedy exact match per family on the validation split and,
once, on the test split; perplexity; the same for a bigram baseline; the chance
levels; and whether it reads its context (:func:`~minirepro.core.lm.diagnose.diagnose`).
Files written:

``model.safetensors``, ``config.json``, ``generation_config.json``
    the ``transformers`` checkpoint (``save_pretrained``; fp16 storage).
``tokenizer.json``
    the trained tokenizer (never retrained when loading).
``substrate.json``
    the recipe's configs (corpus, model, training), so the corpus can be rebuilt.
``curve.json``
    the training loss per step and, every ``eval_every`` steps, the validation loss,
    answer accuracy per family and the induction scores (a page plots it without
    retraining).
``eval.json``
    every evaluation figure (see :func:`evaluate_substrate`), where and how long it trained.

Re-make one with ``minirepro artifacts build lm-book`` (``MINIREPRO_DEVICE=cuda`` to
train on a GPU, where ``MINIREPRO_DATA_WORKERS`` processes, 4 by default, make the
batches ahead; the time it took is in the manifest, ``train_seconds``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import time
from pathlib import Path

import torch

from minirepro.core import artifacts
from minirepro.core.lm.bpe import load_bpe, save_bpe, tokenizer_digest
from minirepro.core.lm.corpus import (
    SINGLE_TOKEN,
    Corpus,
    build_corpus,
    chance_levels,
    score_answers,
)
from minirepro.core.lm.diagnose import diagnose
from minirepro.core.lm.eval import BigramLM, family_accuracy, generate, token_nll
from minirepro.core.lm.hub import n_params
from minirepro.core.lm.models import load_lm
from minirepro.core.lm.presets import BOOK, BOOK_OPT, SMOKE, SMOKE_OPT, SubstrateRecipe
from minirepro.core.lm.train import train_device, train_substrate

SOURCES = ("minirepro.core.lm.corpus", "minirepro.core.lm.prose", "minirepro.core.lm.bpe",
           "minirepro.core.lm.models", "minirepro.core.lm.train", "minirepro.core.lm.eval",
           "minirepro.core.lm.diagnose", "minirepro.core.lm.hub")


def evaluate_substrate(model, tokenizer, corpus: Corpus) -> dict:
    """Every figure the page shows: accuracy (val, test), chance, bigram, perplexity, diagnosis.

    Returns a JSON-able dict with ``val_acc`` (first 300 validation lines), ``test_acc`` (per
    family and ``all``), ``test_token_acc`` (per family: the share of answer words right,
    position by position, for the multi-word answers), ``chance``, ``bigram_test_acc``,
    ``test_ppl``, ``test_ppl_by_family``, ``bigram_test_ppl``, ``bigram_test_ppl_by_family``,
    ``n_params``, ``tokenizer_sha256``, ``diagnosis`` (:func:`diagnose` on the test split).
    """
    test = corpus.test
    bigram = BigramLM(tokenizer, corpus.texts("train"))
    outs = generate(model, tokenizer, [e.prompt for e in test], max_new_tokens=8)

    out: dict = {
        "n_params": n_params(model),
        "tokenizer_sha256": tokenizer_digest(tokenizer),
        "val_acc": family_accuracy(model, tokenizer, corpus.val[:300]),
        "test_acc": score_answers(test, outs),
        "test_token_acc": word_accuracy(test, outs),
        "chance": chance_levels(corpus, "test"),
        "bigram_test_acc": bigram.family_accuracy(test),
        "test_ppl_by_family": {}, "bigram_test_ppl_by_family": {},
    }
    out["bigram_test_token_acc"] = word_accuracy(test, bigram.generate([e.prompt for e in test], 8))
    fams = sorted({e.family for e in test}, key=lambda f: [e.family for e in test].index(f))
    tot = cnt = btot = bcnt = 0.0
    for f in fams:
        texts = [e.text for e in test if e.family == f]
        n, c = token_nll(model, tokenizer, texts)
        bn, bc = bigram.nll(texts)
        out["test_ppl_by_family"][f] = math.exp(n / c)
        out["bigram_test_ppl_by_family"][f] = math.exp(bn / bc)
        tot, cnt, btot, bcnt = tot + n, cnt + c, btot + bn, bcnt + bc
    out["test_ppl"] = math.exp(tot / cnt)
    out["bigram_test_ppl"] = math.exp(btot / bcnt)
    out["diagnosis"] = diagnose(model, tokenizer, corpus, "test")
    return out


def word_accuracy(examples, outputs) -> dict[str, float]:
    """Per family, the share of answer words that the output has right at the same position.

    For one-word answers this is exact match; for ``multi`` and ``copy`` it gives partial
    credit (``"1 3"`` for ``"1 4"`` scores 0.5).
    """
    right: dict[str, list[float]] = {}
    for e, o in zip(examples, outputs):
        want, got = e.answer.split(), o.strip().split()[:e.n_answer_words]
        if e.family == "prose":
            got = [g.rstrip(".,;:!?)'\"") for g in got]
        hits = sum(a == b for a, b in zip(want, got))
        right.setdefault(e.family, []).append(hits / len(want))
    return {f: float(sum(v) / len(v)) for f, v in right.items()}


def _where() -> str:
    """The device the build trains on, in words."""
    dev = train_device(None)
    if dev.type == "cuda":
        return f"GPU: {torch.cuda.get_device_name(dev)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {cpu}"


def build_substrate(rec: SubstrateRecipe, out: Path, desc: str) -> artifacts.BuildResult:
    """Train (resumably), store (``rec.store_dtype``), reload, evaluate; write the artifact's files into ``out``."""
    if rec.store_dtype not in ("float16", "float32"):
        raise ValueError(f"store_dtype must be 'float16' or 'float32', got {rec.store_dtype!r}")
    t0 = time.perf_counter()
    corpus = build_corpus(rec.corpus)
    key = hashlib.sha256(json.dumps(dataclasses.asdict(rec), sort_keys=True, default=list)
                         .encode()).hexdigest()[:16]
    ckpt = artifacts.cache_dir() / "checkpoints" / f"{desc}-{key}.pt"
    workers = int(os.environ.get("MINIREPRO_DATA_WORKERS",
                                 "4" if train_device().type == "cuda" else "0"))
    trained = train_substrate(corpus, rec.model, rec.train, desc=desc, checkpoint=ckpt,
                              checkpoint_every=max(1, min(500, rec.train.steps // 10)),
                              data_workers=workers)
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
              build_seconds=time.perf_counter() - t0, trained_on=_where(),
              train_threads=rec.train.threads if trained.device == "cpu" else None,
              command=f"minirepro artifacts build {desc}",
              val_fingerprint=corpus.fingerprint(("val", "test")))
    (out / "substrate.json").write_text(json.dumps(dataclasses.asdict(rec), indent=1, default=list))
    (out / "curve.json").write_text(json.dumps(trained.curve))
    (out / "eval.json").write_text(json.dumps(ev, indent=1))
    ckpt.unlink(missing_ok=True)
    single = [ev["test_acc"][f] for f in SINGLE_TOKEN if f in ev["test_acc"]]
    quality = {"test_acc_all": ev["test_acc"]["all"], "test_ppl": ev["test_ppl"],
               "bigram_test_ppl": ev["bigram_test_ppl"], "min_single_token_acc": min(single),
               "n_params": ev["n_params"], "tokens_seen": trained.tokens_seen,
               "induction_copy_acc": ev["diagnosis"]["induction"]["copy_acc"],
               "trained_on": ev["trained_on"]}
    quality.update({f"test_acc_{f}": v for f, v in ev["test_acc"].items() if f != "all"})
    return artifacts.BuildResult(quality=quality, data_hash=corpus.fingerprint())


@artifacts.recipe("lm-book", config=BOOK, sources=SOURCES,
                  description="LM substrate, book model: Llama-style, reads its context")
def build_lm_book(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] The substrate's book model (Llama-style: RoPE, SwiGLU, RMSNorm, GQA)."""
    return build_substrate(rec, out, "lm-book")


@artifacts.recipe("lm-smoke", config=SMOKE, sources=SOURCES,
                  description="LM substrate, smoke model: tiny Llama-style, for CI")
def build_lm_smoke(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] A tiny model for smoke runs and CI (no training at test time)."""
    return build_substrate(rec, out, "lm-smoke")


@artifacts.recipe("lm-book-opt", config=BOOK_OPT, sources=SOURCES,
                  description="LM substrate, OPT-style (ReLU FFN) sibling of the book model")
def build_lm_book_opt(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] The OPT-style sibling, for activation-sparsity chapters."""
    return build_substrate(rec, out, "lm-book-opt")


@artifacts.recipe("lm-smoke-opt", config=SMOKE_OPT, sources=SOURCES,
                  description="LM substrate, OPT-style (ReLU FFN) smoke model, for CI")
def build_lm_smoke_opt(rec: SubstrateRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] A tiny OPT-style model for SparseInfer's smoke runs (no training at test time)."""
    return build_substrate(rec, out, "lm-smoke-opt")
