"""``minirepro conservationbench ...``: export the benchmark, answer it, score answers.

    minirepro conservationbench export DIR [--pairs 48] [--seed 0] [--no-probes]
    minirepro conservationbench answer DIR --model PATH|always-same|random [--out answers.jsonl] [--limit N]
    minirepro conservationbench score ANSWERS.jsonl [--key DIR/answer_key.jsonl] [--json OUT]

Bad input (a malformed answers line, an unknown property or id) is one line on stderr
naming the file and line, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from minirepro.core.cli import UsageError, run, subcommands


def _parser() -> argparse.ArgumentParser:
    p, sub = subcommands("minirepro conservationbench",
                         "ConservationBench: export, answer with a model, score.")
    e = sub.add_parser("export", help="write frames (PNG), questions and answer key (JSONL)")
    e.add_argument("dir", help="folder to write (created if missing)")
    e.add_argument("--pairs", type=int, default=48, help="pairs per property (the paper's 48)")
    e.add_argument("--seed", type=int, default=0, help="seed of the scenes")
    e.add_argument("--no-probes", action="store_true", help="leave out the blank and text-only probes")
    a = sub.add_parser("answer", help="answer an exported benchmark with a model")
    a.add_argument("dir", help="an exported benchmark folder")
    a.add_argument("--model", required=True,
                   help="a transformers image-text model folder (or hub id), or always-same / random")
    a.add_argument("--out", default="answers.jsonl", help="answers JSONL to write")
    a.add_argument("--limit", type=int, help="answer only the first N questions")
    s = sub.add_parser("score", help="the full analysis of an answers JSONL")
    s.add_argument("answers", help="answers JSONL: one {id, model, response} per line")
    s.add_argument("--key", help="the answer key (default: answer_key.jsonl beside ANSWERS)")
    s.add_argument("--json", help="also write the tables as JSON to this file")
    return p


def _export(args) -> int:
    from minirepro.papers.conservationbench.bench import export

    if args.pairs < 1:
        raise UsageError(f"--pairs must be >= 1, got {args.pairs}")
    n = export(args.dir, n_pairs=args.pairs, seed=args.seed, probes=not args.no_probes)
    print(f"wrote {n['videos']} videos ({n['frames']} PNG frames) and {n['questions']} questions "
          f"to {args.dir}")
    return 0


def _answer(args) -> int:
    from minirepro.papers.conservationbench.bench import answer, load_trials
    from minirepro.papers.conservationbench.models import ConstantModel, RandomModel

    if not (Path(args.dir) / "questions.jsonl").is_file():
        raise UsageError(f"{args.dir} holds no questions.jsonl (make one with `export`)")
    if args.model == "always-same":
        model = ConstantModel("same")
    elif args.model == "random":
        model = RandomModel()
    else:
        from minirepro.papers.conservationbench.hf import TransformersVLM

        model = TransformersVLM(args.model)
    n = answer(model, load_trials(args.dir, limit=args.limit), args.out)
    print(f"{model.name}: wrote {n} answers to {args.out}")
    return 0


def _score(args) -> int:
    from minirepro.papers.conservationbench.bench import report, score

    key = Path(args.key) if args.key else Path(args.answers).with_name("answer_key.jsonl")
    if not key.is_file():
        raise UsageError(f"no answer key at {key}; pass --key DIR/answer_key.jsonl")
    result = score(args.answers, key)
    print(report(result))
    if args.json:
        tables = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in result.items()}
        Path(args.json).write_text(json.dumps(tables, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``minirepro conservationbench``; returns the exit status (2 on bad input)."""
    from minirepro.papers.conservationbench.bench import BenchError

    return run(_parser(), {"export": _export, "answer": _answer, "score": _score}, argv,
               errors=(BenchError,))


if __name__ == "__main__":
    sys.exit(main())
