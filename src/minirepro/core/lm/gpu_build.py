"""Build the book-scale substrate artifacts on one GPU, and measure what more would buy.

::

    python -m minirepro.core.lm.gpu_build OUT [--deadline 480]

Runs at once, each in its own process on the one GPU (``MINIREPRO_DEVICE=cuda``):

* the builds of ``lm-book`` and ``lm-book-opt`` into ``OUT/`` through the package API,
  :func:`minirepro.core.artifacts.build` (what ``minirepro artifacts build NAME`` calls;
  the recipes are registered in ``core.lm.recipes``): the artifact folders, manifests
  included, exactly as a CPU build writes them;
* two *probes*, trained like ``lm-book`` but not artifacts, scored on validation lines
  only (never the test split), written to ``OUT/probes/<name>.json`` after every
  evaluation: ``tokens-3x`` (the same recipe with three times the steps) and ``big``
  (d=384, 6 layers, 12 heads / 4 KV heads, SwiGLU 1024: 11 M parameters, the book's
  tokens). They say what a family that misses the bar would need.

Progress lines go to ``OUT/logs/<name>.log``. At ``--deadline`` seconds the probes
are stopped (their curve so far is kept); the builds are waited for. Nothing here is
hashed into an artifact: the builds run the registered recipes unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROBES = ("tokens-3x", "big")
BUILDS = ("lm-book", "lm-book-opt")


def probe_recipe(name: str):
    """The recipe of probe ``name`` (a variant of :data:`~minirepro.core.lm.presets.BOOK`)."""
    from minirepro.core.lm.presets import BOOK

    if name == "tokens-3x":
        return dataclasses.replace(BOOK, train=dataclasses.replace(BOOK.train,
                                                                   steps=3 * BOOK.train.steps))
    if name == "big":
        return dataclasses.replace(BOOK, model=dataclasses.replace(
            BOOK.model, d_model=384, n_layers=6, n_heads=12, n_kv_heads=4, d_ff=1024))
    raise ValueError(f"unknown probe {name!r}; probes: {', '.join(PROBES)}")


def run_probe(name: str, out: Path) -> None:
    """Train probe ``name``; after every evaluation write the curve, at the end greedy validation accuracy."""
    from minirepro.core.lm.corpus import build_corpus
    from minirepro.core.lm.eval import family_accuracy
    from minirepro.core.lm.hub import n_params
    from minirepro.core.lm.train import train_substrate

    rec = probe_recipe(name)
    corpus = build_corpus(rec.corpus)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    info = {"name": name, "recipe": dataclasses.asdict(rec), "split": "validation"}

    def dump(curve: dict, **extra) -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({**info, "seconds": round(time.perf_counter() - t0, 1),
                                   "curve": curve, **extra}, default=list))
        os.replace(tmp, out)

    run = train_substrate(corpus, rec.model, rec.train, desc=name, on_eval=dump, data_workers=3)
    dump(run.curve, n_params=n_params(run.model), tokens_seen=run.tokens_seen,
         greedy_val_acc=family_accuracy(run.model, run.tokenizer, corpus.val))


def run_build(name: str) -> None:
    """Build artifact ``name`` into ``$MINIREPRO_ARTIFACTS`` with :func:`core.artifacts.build`
    (left alone when a verified copy is already there) and print where it went."""
    from minirepro.core import artifacts

    folder = artifacts.build(name)
    man = artifacts.read_manifest(folder)
    print(f"{name}: {folder}, built {man['built_at']} in {man['train_seconds']} s")


def _spawn(out: Path, role: str, name: str, log: str, env: dict[str, str]) -> subprocess.Popen:
    """This module in a process of its own, running ``--build NAME`` or ``--probe NAME``,
    its output in ``OUT/logs/<log>.log``."""
    return subprocess.Popen([sys.executable, "-m", "minirepro.core.lm.gpu_build", str(out), f"--{role}", name],
                            env=env, stdout=open(out / "logs" / f"{log}.log", "w"), stderr=subprocess.STDOUT)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder for the artifacts, probes and logs")
    ap.add_argument("--deadline", type=float, default=480.0, help="seconds before probes stop")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--build", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    if args.probe:
        run_probe(args.probe, out / "probes" / f"{args.probe}.json")
        return
    if args.build:
        run_build(args.build)
        return
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MINIREPRO_DEVICE": "cuda", "MINIREPRO_ARTIFACTS": str(out),
           "MINIREPRO_CACHE": str(out / ".cache"), "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
           "MINIREPRO_DATA_WORKERS": "4", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("TQDM_DISABLE", None)  # keep the progress lines
    jobs = {name: _spawn(out, "build", name, name, env) for name in BUILDS}
    probes = {name: _spawn(out, "probe", name, f"probe-{name}", env) for name in PROBES}
    t0 = time.time()
    while any(p.poll() is None for p in [*jobs.values(), *probes.values()]):
        if time.time() - t0 > args.deadline:
            for p in probes.values():
                if p.poll() is None:
                    p.terminate()
        time.sleep(5)
    status = {n: p.returncode for n, p in {**jobs, **{f"probe-{k}": v for k, v in probes.items()}}.items()}
    (out / "logs" / "status.json").write_text(json.dumps({"returncodes": status,
                                                          "seconds": round(time.time() - t0)}))
    print(json.dumps(status))
    sys.exit(max(jobs[n].returncode or 0 for n in jobs))


if __name__ == "__main__":
    main()
