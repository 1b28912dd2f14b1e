"""The recorded copy-lines model: its recipe, its measures, and how it is rebuilt.

``tests/unit/test_lm_train.py`` once trained this model in the unit stage (800
steps, about a minute) and thresholded what it had learned; under other CPU
kernels (``ATEN_CPU_CAPABILITY=default``) the same recipe ended below the
thresholds. The claim "a 2-layer model trained on copy lines alone learns to
copy" is now a recorded fact: this script trains the recipe once, stores the
model (float16) and writes ``recorded.json`` (the recipe, the learning curve, the
measures of the shipped weights, the kernels it was trained with). The unit
test reads the record and re-measures the committed weights (forward passes
only, which agree across kernel sets).

Rebuild (about a minute on 2 cores), from the repository root::

    PYTHONPATH=src python tests/unit/data/lm-copy/build.py
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from minirepro.core.lm.bpe import load_bpe, save_bpe, train_bpe
from minirepro.core.lm.corpus import COPY_WORDS, CorpusConfig, build_corpus
from minirepro.core.lm.diagnose import induction_scores
from minirepro.core.lm.models import ModelConfig, load_lm
from minirepro.core.lm.train import TrainConfig, encode_examples, evaluate_encoded, train_substrate

HERE = Path(__file__).resolve().parent
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")

# The circuit v2 never formed, formed in a CI-sized run: copy lines only, fresh every step.
# Two layers suffice for an induction circuit (a previous-token head feeding a
# prefix-matching head). 800 steps of ~1,000 tokens, constant learning rate 3e-3.
RECIPE = {
    "corpus": {"families": ["copy"], "n_train": 2000, "n_val": 200, "n_test": 100,
               "copy_len": [6, 10]},
    "vocab_size": 700,
    "model": {"d_model": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "d_ff": 256,
              "max_len": 96},
    "train": {"steps": 800, "batch_tokens": 1024, "lr": 3e-3, "min_lr_frac": 1.0, "warmup": 30,
              "eval_every": 400, "eval_examples": 100, "vocab_size": 700, "stream": True},
}
# What the recipe is claimed to reach (the thresholds of the test it replaces).
CLAIM = {"final_val_copy_acc": 0.5, "best_prefix_score": 0.25, "best_prev_score": 0.4}


def recipe() -> tuple[CorpusConfig, ModelConfig, TrainConfig]:
    c = RECIPE["corpus"]
    corpus = CorpusConfig(families=tuple(c["families"]), n_train=c["n_train"], n_val=c["n_val"],
                          n_test=c["n_test"], copy_len=tuple(c["copy_len"]))
    return corpus, ModelConfig(**RECIPE["model"]), TrainConfig(**RECIPE["train"])


def copy_pool(tok) -> list[int]:
    """The first token of each copy word: what induction sequences are drawn from."""
    return sorted({tok(" " + w, add_special_tokens=False)["input_ids"][0] for w in COPY_WORDS})


@torch.no_grad()
def measure(model, tok, corpus) -> dict:
    """Forward passes only: induction scores and teacher-forced copy accuracy on validation lines."""
    ind = induction_scores(model, tok, length=12, n=32, pool=copy_pool(tok))
    val = corpus.val[:RECIPE["train"]["eval_examples"]]
    ev = evaluate_encoded(model, encode_examples(tok, val), [e.family for e in val],
                          tok.pad_token_id)
    return {"val_copy_acc": ev["acc_copy"], "val_loss": ev["loss"],
            "induction_copy_acc": ind["copy_acc"], "best_prefix_score": ind["best_prefix_score"],
            "best_prev_score": ind["best_prev_score"], "best_prefix_head": ind["best_prefix_head"],
            "best_prev_head": ind["best_prev_head"]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(out: Path = HERE) -> dict:
    corpus_cfg, model_cfg, train_cfg = recipe()
    corpus = build_corpus(corpus_cfg)
    tok = train_bpe(corpus.texts("train"), vocab_size=RECIPE["vocab_size"])
    t0 = time.perf_counter()
    run = train_substrate(corpus, model_cfg, train_cfg, tokenizer=tok, log_every_s=1e9)
    seconds = time.perf_counter() - t0
    trained = measure(run.model, tok, corpus)
    run.model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    save_bpe(tok, out)
    shipped = measure(load_lm(out), load_bpe(out), corpus)     # what the test re-measures
    record = {
        "recipe": RECIPE, "claim": CLAIM,
        "curve": {"eval_step": run.curve["eval_step"],
                  "val_copy_acc": [a["copy"] for a in run.curve["val_family_acc"]],
                  "val_loss": run.curve["val_loss"],
                  "train_loss_first_last": [run.curve["train_loss"][0], run.curve["train_loss"][-1]],
                  "induction_copy_acc": run.curve["induction_copy_acc"],
                  "prefix_matching": run.curve["prefix_matching"]},
        "trained_float32": trained, "shipped_float16": shipped,
        "train_seconds": round(seconds, 1),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "files": {f: sha256(out / f) for f in FILES},
    }
    (out / "recorded.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def meets_claim(record: dict) -> bool:
    """Whether a build reached what the recipe is claimed to reach (on its shipped weights)."""
    got = record["shipped_float16"]
    return (record["curve"]["val_copy_acc"][0] == 0.0
            and got["val_copy_acc"] >= CLAIM["final_val_copy_acc"]
            and got["best_prefix_score"] > CLAIM["best_prefix_score"]
            and got["best_prev_score"] > CLAIM["best_prev_score"])


if __name__ == "__main__":
    # with a folder argument: a fresh build there (the recipe re-run as a check; exit 1 if it
    # falls short of the claim). Note: under ATEN_CPU_CAPABILITY=default the recipe ends with
    # a best prefix-matching score of 0.17: whether the circuit forms in 800 steps depends on
    # the kernels; the record states the kernels it was trained with.
    rec = build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
    print(json.dumps(rec, indent=1))
    sys.exit(0 if meets_claim(rec) else 1)
