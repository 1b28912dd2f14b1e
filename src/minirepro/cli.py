"""The ``minirepro`` command: list, run, sweep, claims, goldens, book, artifacts, arena.

Bad input (an unknown chapter, artifact, parameter, type, scale, an out-of-range value,
a missing path, ``--threads 0``, an unusable ``--runs-dir``, an unknown ``sweep --metric``)
prints one line naming the valid choices and exits with status 2, before anything is
written. An interrupt (Ctrl-C, SIGTERM, SIGHUP) stops the run's processes, marks the run
FAILED and exits with 128 + the signal's number (130 for Ctrl-C); a closed output pipe
(``minirepro list | head``) ends quietly with 141, as a process killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from minirepro import chapters
from minirepro.chapters import Chapter, ChapterError, did_you_mean, discover
from minirepro.core.params import show
from minirepro.core.scale import SCALES


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _fail(message: str) -> int:
    print(f"minirepro: error: {message}", file=sys.stderr)
    return 2


def _parse_pairs(pairs: list[list[str]] | None, chapter: Chapter, single: bool) -> dict:
    out: dict = {}
    for item in pairs or []:
        name, values = item[0], item[1:]
        if name not in chapter.parameters and "=" in name:  # -p seed=3: the shell's habit, not ours
            key, _, value = name.partition("=")
            raise ChapterError(f"write -p NAME VALUE, with a space: -p {key} {' '.join([value, *values])}"
                               f" (not {show(name)}); {chapter.name}'s parameters: "
                               f"{', '.join(chapter.parameters)}")
        if name not in chapter.parameters:
            raise ChapterError(f"chapter {chapter.name!r} has no parameter {show(name)}"
                               f"{did_you_mean(name, list(chapter.parameters))}; "
                               f"its parameters: {', '.join(chapter.parameters)}")
        if name in out:
            raise ChapterError(f"-p {name} is given twice; give it once" +
                               (" (a run takes one value)" if single else
                                f", with all its values: -p {name} VALUE [VALUE ...]"))
        if not values:
            raise ChapterError(f"-p {name} needs a value")
        is_list = chapter.parameters[name].type.startswith("list[")
        if single:
            if len(values) > 1 and not is_list:
                raise ChapterError(f"-p {name} takes one value in `run` (got {len(values)}); "
                                   f"use `minirepro sweep` for several")
            out[name] = values if is_list else values[0]
        else:
            out[name] = [values] if is_list else values
    return out


def _cmd_list(args) -> int:
    listed = [chapters.get(args.chapter)] if args.chapter else discover()
    presets = {c.name: c.presets() for c in listed} if args.chapter else {}
    if args.json:
        print(json.dumps([{"name": c.name, "folder": c.slug, "title": c.title,
                           "parameters": {k: {"type": p.type, "default": p.default,
                                              "optional": p.optional, "choices": p.choices,
                                              "range": _json_range(p),
                                              "path": p.is_path, "help": p.comment,
                                              **({"presets": presets[c.name][k]}
                                                 if k in presets.get(c.name, {}) else {})}
                                          for k, p in c.parameters.items()}}
                          for c in listed], indent=2, default=str))
        return 0
    for c in listed:
        print(f"{c.name}  ({c.slug})  {c.title}")
        for p in c.parameters.values():
            print(f"    {p.describe():48s}  {p.help}")
            if p.name in presets.get(c.name, {}):
                at = presets[c.name][p.name]
                print(f"    {'':48s}  presets: " + ", ".join(f"{k} {v!r}" for k, v in at.items()))
    if not args.chapter:
        print("(`minirepro list <chapter>` adds each parameter's value at every scale's preset)")
    return 0


def _json_range(p) -> list | None:
    """A parameter's enforced range for ``list --json``: ``[lo, hi]``, ``null`` for no bound."""
    import math

    b = p.bounds()
    if b is None or p.type not in ("int", "float", "list[int]", "list[float]"):
        return None
    return [None if math.isinf(x) else x for x in b]


def _cmd_run(args) -> int:
    from minirepro.run import RunFailed, run_chapter
    from minirepro.run.folder import reported_seeds
    from minirepro.run.progress import enabled
    from minirepro.run.summary import headline_metric, smoke_caveat, verdict_counts

    chapter = chapters.get(args.chapter)
    params = _parse_pairs(args.p, chapter, single=True)
    try:
        run = run_chapter(chapter, params, scale=args.scale,
                          runs_dir=Path(args.runs_dir) if args.runs_dir else None,
                          threads=args.threads, quiet_bars=args.quiet,
                          progress=not args.quiet and enabled())
    except RunFailed as exc:
        print(f"minirepro: {exc}", file=sys.stderr)
        return 1
    res = run.results
    row = {"ok": True, "metrics": res["metrics"], "headline": res.get("headline"),
           "verdicts": {c["id"]: c.get("verdict") for c in res["claims"]}}
    metric, why = headline_metric([row], chapter=chapter)
    print(f"finished {res['chapter']} in {res['seconds']:.1f} s: {run.folder}")
    if metric is not None:
        value = res["metrics"][metric]
        print(f"  {metric} = {value:.4g}  ({why})")
    print(f"  verdicts: {verdict_counts([row])}")
    caveat = smoke_caveat(res["params"].get("scale"), reported_seeds(res))
    if caveat:
        print(f"  {caveat}")
    by_verdict: dict[str, list[str]] = {}
    for c in res["claims"]:
        if c.get("verdict") != "reproduced":
            by_verdict.setdefault(str(c.get("verdict") or "pending"), []).append(c["id"])
    for verdict, ids in by_verdict.items():
        print(f"  {verdict}: " + ", ".join(ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else ""))
    print(f"  every metric and claim: {run.folder / 'results.json'}")
    return 0


def _cmd_sweep(args) -> int:
    from minirepro.run import sweep
    from minirepro.run.progress import enabled

    chapter = chapters.get(args.chapter)
    grid = _parse_pairs(args.p, chapter, single=False)
    if not grid:
        return _fail("sweep needs at least one -p NAME VALUE [VALUE ...]")
    # every value, -j, --timeout, --runs-dir and --metric are checked by sweep() before any run
    folder = sweep(chapter, grid, jobs=args.jobs, scale=args.scale, backend=args.backend,
                   runs_dir=Path(args.runs_dir) if args.runs_dir else None, metric=args.metric,
                   scheduler=args.scheduler, timeout=args.timeout, progress=enabled())
    print((folder / "summary.txt").read_text(encoding="utf-8"), end="")
    failed = sum(1 for r in json.loads((folder / "summary.json").read_text()) if not r["ok"])
    if failed:
        print(f"minirepro: {failed} run(s) failed; their partial notebooks are named in the table",
              file=sys.stderr)
        return 1
    return 0


def _cmd_claims(args) -> int:
    from minirepro.claims import plan, tables
    from minirepro.run import replicate

    names = args.only or args.update or [c.name for c in discover()]
    resolved = [(n, chapters.get(n)) for n in names]  # every name checked, once, before anything runs
    ran = False
    if args.update is not None:
        for _, ch in resolved:
            print(f"updated {replicate.update(ch)}")
        ran = True
    if args.robustness is not None:
        if args.robustness < 1:
            return _fail(f"--robustness needs K >= 1, got {args.robustness}")
        for n, ch in resolved:
            pol = plan.policy(ch.name)
            if "fixed" in pol:
                print(f"{n}: skipped, not re-seeded ({plan.POLICY_FILE}): {pol['fixed']}")
                continue
            path = replicate.replicate(ch, args.robustness, scale=args.scale or "book", jobs=args.jobs,
                                       scheduler=args.scheduler)
            print(f"replications over {args.robustness} values of {pol['param']}: {path}")
        ran = True
    if args.pilot:
        for _, ch in resolved:
            if "fixed" in plan.policy(ch.name):
                continue
            print(f"pilot: {replicate.pilot(ch)}")
        ran = True
    if args.trend:
        for _, ch in resolved:
            if "trend" not in plan.policy(ch.name):
                continue
            print(f"trend: {replicate.trend(ch, jobs=args.jobs, scheduler=args.scheduler)}")
        ran = True
    if args.full:
        for _, ch in resolved:
            print(f"full scale: {replicate.full(ch)}")
        ran = True
    if args.pool:
        for n, ch in resolved:
            path = replicate.repool(ch)
            print(f"pooled {path}" if path else f"{n}: no ledger entry to pool")
        ran = True
    if ran:
        return 0
    if args.all or args.format != "md" or not sys.stdout.isatty():
        print(tables.markdown(fmt=args.format))
    else:
        print(tables.summary_text())
    return 0


def _cmd_goldens(args) -> int:
    from minirepro.goldens import make_golden
    from minirepro.run import RunFailed

    names = args.chapters or [c.name for c in discover()]
    for n in names:
        chapters.get(n)
    status = 0
    for n in names:
        try:
            print(f"golden: {make_golden(n)}")
        except RunFailed as exc:
            print(f"minirepro: {exc}", file=sys.stderr)
            status = 1
    return status


def _cmd_book(args) -> int:
    from minirepro.book import build

    try:
        index = build(args.scale, strict=not args.no_strict, jobs=args.jobs)
    except RuntimeError as exc:
        print(f"minirepro: {exc}", file=sys.stderr)
        return 1
    print(f"the book ({args.scale or 'book'} scale): {index}")
    return 0


def _cmd_bench(args) -> int:
    from minirepro import bench

    scales = [s.strip() for s in args.scales.split(",") if s.strip()]
    bad = [s for s in scales if s not in SCALES]
    if bad or not scales:
        return _fail(f"unknown scale(s) {', '.join(bad) or '(none)'}; expected some of {', '.join(SCALES)}")
    names = [c for item in (args.chapters or []) for c in item.split(",") if c]
    for n in names:
        chapters.get(n)
    if args.estimate and "full" not in scales:
        return _fail("--estimate estimates the full preset: add full to --scales (e.g. --scales full)")
    path = bench.bench(scales, names or None, cap=args.cap, estimate=args.estimate)
    print(path.with_suffix(".md").read_text(), end="")
    print(f"cost table: {path} and {path.with_suffix('.md')}")
    return 0


def _cmd_lab(args) -> int:
    import time

    from minirepro import labs

    words = list(args.args)
    known = ", ".join(c.name for c in discover())
    if words[:1] == ["grade"]:
        if args.jobs is not None and args.jobs < 1:
            return _fail(f"-j must be at least 1, got {args.jobs}")
        if args.all or len(words) != 3:
            return _fail("usage: minirepro lab grade CHAPTER SUBMISSION (a notebook, an otter zip, "
                         f"a student's folder or a class folder); chapters: {known}")
        grades = labs.grade(words[1], Path(words[2]), out=Path(args.out) if args.out else None,
                            autograder=Path(args.autograder) if args.autograder else None,
                            jobs=args.jobs)
        print(labs.write_json_summary(grades) if args.json else labs.report(words[1], grades), end="")
        if args.json:
            for entry, why in getattr(grades, "skipped", []):
                print(f"skipped {entry}: {why}", file=sys.stderr)
        out = Path(args.out) if args.out else labs.default_out() / "grades" / chapters.get(words[1]).name
        print(f"grades: {out / 'grades.csv'}, report: {out / 'report.md'}", file=sys.stderr)
        return 0 if all(not g.error for g in grades) else 1
    if args.autograder or args.json or args.jobs is not None:
        return _fail("--autograder, --json and -j go with `minirepro lab grade`")
    if args.all == bool(words) or len(words) > 1:
        return _fail(f"give one chapter or --all (chapters: {known}); to grade: "
                     "minirepro lab grade CHAPTER SUBMISSION")
    names = labs.all_chapters() if args.all else [chapters.get(words[0]).name]
    start = time.perf_counter()
    built = labs.build_labs(names, Path(args.out) if args.out else None)
    for name, parts in built.items():
        print(f"{name}: student edition {parts['student']}, autograder {parts['autograder']}")
    print(f"built {len(built)} lab(s) in {time.perf_counter() - start:.1f} s")
    return 0


def _cmd_artifacts(args) -> int:
    from minirepro.core import artifacts

    names = [args.name] if getattr(args, "name", None) else list(artifacts.registry())
    for n in names:
        artifacts.get(n)  # an unknown name: one line naming the valid ones, exit 2
    if args.action == "list":
        root = artifacts.artifacts_root()
        for n, rec in artifacts.registry().items():
            try:
                man = artifacts.read_manifest(artifacts.home(rec, root))
            except artifacts.ArtifactError:
                how = artifacts.optional_note(n) or f"`{rec.command}`"
                print(f"{n}  (not built: {how})  {rec.description}")
                continue
            size = sum(f.get("bytes", 0) for f in man["files"].values()) / 2**20
            quality = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in man.get("quality", {}).items())
            print(f"{n}  {size:.2f} MB  built {man.get('built_at', '?')} "
                  f"in {man.get('train_seconds', '?')} s  {rec.description}")
            if quality:
                print(f"    {quality}")
        total = artifacts.total_bytes(root)
        print(f"{len(names)} artifact(s) in {root}: {total / 2**20:.2f} MB of "
              f"{artifacts.BUDGET_BYTES / 2**20:.0f} MB")
        return 0
    if args.action == "build":
        cached = artifacts.get(args.name).location == "cache"  # made in the cache when needed
        if not cached and not args.force and not artifacts.verify(args.name):
            folder = artifacts.artifacts_root() / args.name
            print(f"{args.name} is up to date: {folder} (--force re-makes it)")
            return 0
        try:
            folder = artifacts.build(args.name, force=args.force or not cached)
        except artifacts.ArtifactError as exc:
            print(f"minirepro: {exc}", file=sys.stderr)
            return 1
        man = artifacts.read_manifest(folder)
        print(f"{args.name}: {folder}, built {man['built_at']} in {man['train_seconds']} s")
        return 0
    return _verify_artifacts(names, everything=not args.name)


def _verify_artifacts(names: list[str], everything: bool) -> int:
    """``minirepro artifacts verify``: problems on stderr; a line on stdout for each artifact
    converted into the cache from an installed input, and each optional one not built."""
    from minirepro.core import artifacts

    root, problems, notes = artifacts.artifacts_root(), [], []
    for n in names:
        found, how = artifacts.verify(n), artifacts.optional_note(n)
        if found and how and not (root / n).exists():
            notes.append(f"{n}: not built, optional ({how}); not counted")
            continue
        problems += found
        if not found and artifacts.get(n).location == "cache":
            notes.append(artifacts.describe(n))
    if everything:
        problems += artifacts.orphans()
    for p in problems:
        print(p, file=sys.stderr)
    for line in notes:
        print(line)
    print(f"verified {len(names)} artifact(s): " +
          (f"{len(problems)} problem(s)" if problems else "all fine"))
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minirepro", description="Run the chapters of the minirepro book.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                metavar="{list,run,sweep,claims,goldens,book,bench,artifacts,lab,"
                                        "arena,conservationbench}")
    _add_run_commands(sub)
    _add_ledger_commands(sub)
    _add_build_commands(sub)
    _add_lab_commands(sub)
    _add_app_commands(sub)
    return parser


def _add_lab_commands(sub: argparse._SubParsersAction) -> None:
    """``lab``: student editions and grading (otter-grader; see book/teaching.md)."""
    p = sub.add_parser("lab", help="course labs: student editions (otter-grader) and grading",
                       description="minirepro lab CHAPTER [--out DIR] | lab --all [--out DIR] | "
                                   "lab grade CHAPTER SUBMISSION [--out DIR] [--autograder ZIP]")
    p.add_argument("args", nargs="*", metavar="CHAPTER | grade CHAPTER SUBMISSION",
                   help="a chapter (its student edition and autograder), or `grade` with a "
                        "chapter and a notebook, an otter zip, a student's folder or a class folder")
    p.add_argument("--all", action="store_true", help="every chapter in _toc.yml: the course pack")
    p.add_argument("--out", help="output folder (default: _build/labs in the current folder, as "
                                 "`run` writes runs/ there; grades in _build/labs/grades/CHAPTER)")
    p.add_argument("--autograder", help="with grade: an autograder zip (default: built from the spec)")
    p.add_argument("--json", action="store_true", help="with grade: print the grades as JSON")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="with grade: submissions graded at once (default: the cores)")
    p.set_defaults(func=_cmd_lab)


def _add_run_commands(sub: argparse._SubParsersAction) -> None:
    """``list``, ``run`` and ``sweep``: the chapters, one run of a chapter, a grid of runs."""
    p = sub.add_parser("list", help="chapters, their parameters and defaults")
    p.add_argument("chapter", nargs="?", help="one chapter, with its parameters' preset values")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list)

    for name, helptext in (("run", "run one chapter with parameters"),
                           ("sweep", "run a chapter over a grid of parameters")):
        p = sub.add_parser(name, help=helptext, description=helptext.capitalize() + ". " + (
            "Each run is a folder runs/CHAPTER/RUN-ID/ (its notebook, params.json, results.json, "
            "figures) under --runs-dir, by default runs/ in the current folder. On a terminal a bar "
            "shows " + ("the notebook's cells; " if name == "run" else "the runs, with a line per "
                        "finished run; ") + "at the end, a short summary of the headline metric "
            "and the verdicts."))
        p.add_argument("chapter", help="chapter name, e.g. caffnet (see `minirepro list`)")
        p.add_argument("-p", nargs="+", action="append", metavar=("NAME", "VALUE"),
                       help="a parameter and its value" + (" (or values)" if name == "sweep" else ""))
        p.add_argument("--scale", choices=SCALES, help="size preset (default: MINIREPRO_SCALE or book)")
        p.add_argument("--runs-dir", help="where run folders go (default: runs/ in the current "
                                          "folder, so a run started in a lab's folder lands "
                                          "beside its notebook)")
        if name == "run":
            p.add_argument("--threads", type=int, help="torch threads in the kernel")
            p.add_argument("--quiet", action="store_true", help="no progress bars")
            p.set_defaults(func=_cmd_run)
        else:
            p.add_argument("-j", "--jobs", type=int, default=1, help="runs in parallel")
            p.add_argument("--backend", default="loky",
                           help="joblib backend: loky (local processes), or dask/ray if registered")
            p.add_argument("--metric", help="the metric to summarise and plot (default: the "
                                            "chapter's headline metric, else its first recorded)")
            p.add_argument("--scheduler", metavar="ADDRESS",
                           help="run on Dask (the cluster extra): tcp://HOST:PORT of a running "
                                "scheduler, or local:N for N local worker processes")
            p.add_argument("--timeout", type=float, metavar="SECONDS",
                           help="with --scheduler: report runs not done by then as FAILED")
            p.set_defaults(func=_cmd_sweep)


def _add_ledger_commands(sub: argparse._SubParsersAction) -> None:
    """``claims`` and ``goldens``: the claims ledger and the smoke-scale goldens."""
    p = sub.add_parser("claims", help="the claims ledger")
    p.add_argument("--format", choices=("md", "csv", "json"), default="md",
                   help="the whole table as markdown, CSV or JSON (a terminal gets a summary first)")
    p.add_argument("--all", action="store_true", help="the whole table, also in a terminal")
    p.add_argument("--update", nargs="*", metavar="CHAPTER",
                   help="re-run chapters (all if none named) at book scale, store their claims and pool")
    p.add_argument("--robustness", type=int, metavar="K",
                   help="run each chapter's K replications (a sweep), store every run's claims and pool")
    p.add_argument("--pilot", action="store_true",
                   help="run each chapter's pilot (seeds never reported: the spread behind each power)")
    p.add_argument("--trend", action="store_true",
                   help="run each chapter's scale trend (its plan's sizes) and record the claims' effects")
    p.add_argument("--full", action="store_true",
                   help="run each chapter's full preset once and record its verdicts (the full-scale column)")
    p.add_argument("--pool", action="store_true",
                   help="decide every claim again on the stored records (runs nothing)")
    p.add_argument("--only", nargs="+", metavar="CHAPTER", help="with --robustness/--pilot/--trend/--full/--pool: these chapters")
    p.add_argument("--scale", choices=SCALES, help="with --robustness (default: book)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="with --robustness: runs in parallel")
    p.add_argument("--scheduler", metavar="ADDRESS", help="with --robustness: a Dask scheduler (see sweep)")
    p.set_defaults(func=_cmd_claims)

    p = sub.add_parser("goldens", help="re-make the smoke-scale goldens")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER", help="chapters (default: all)")
    p.set_defaults(func=_cmd_goldens)


def _add_build_commands(sub: argparse._SubParsersAction) -> None:
    """``book``, ``bench`` and ``artifacts``: the whole book, its timings, its trained models."""
    p = sub.add_parser("book", help="build the whole book")
    p.add_argument("--scale", choices=SCALES, help="default: MINIREPRO_SCALE or book")
    p.add_argument("--no-strict", action="store_true", help="do not treat warnings as errors")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="notebooks executed at once before rendering (default: the cores, at most "
                        "the notebooks; 0: Sphinx executes them one after another)")
    p.set_defaults(func=_cmd_book)

    p = sub.add_parser("bench", help="measure each chapter's time and peak memory per scale")
    p.add_argument("--scales", default="smoke,book", help="comma-separated (default: smoke,book)")
    p.add_argument("--chapters", nargs="*", metavar="CHAPTER", help="chapters (default: all)")
    p.add_argument("--cap", type=float, default=1800.0,
                   help="seconds after which a full-scale run is stopped and recorded as a lower bound")
    p.add_argument("--estimate", action="store_true",
                   help="estimate full from two runs with fewer seeds (n_seeds = the smoke preset's, and one "
                        "more) instead of timing it whole; labelled est. in the table")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("artifacts", help="trained models committed under artifacts/")
    acts = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    acts.add_parser("list", help="each artifact: size, when built, training time, quality")
    a = acts.add_parser("build", help="(re-)make an artifact from its recipe")
    a.add_argument("name", help="artifact name (see `minirepro artifacts list`)")
    a.add_argument("--force", action="store_true", help="re-make it even if it verifies")
    a = acts.add_parser("verify", help="check checksums, config and code against the manifests")
    a.add_argument("name", nargs="?", help="one artifact (default: all)")
    p.set_defaults(func=_cmd_artifacts)


def _add_app_commands(sub: argparse._SubParsersAction) -> None:
    """``arena`` and ``conservationbench``: apps that parse their own options."""
    p = sub.add_parser("arena", help="the SpreadsheetArena web app (serve, export)", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_arena)

    p = sub.add_parser("conservationbench", help="ConservationBench: export, answer, score",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_conservationbench)


def _cmd_arena(args) -> int:
    import sqlite3

    try:
        from minirepro.papers.spreadsheet_arena.cli import main as arena_main
    except ImportError as exc:
        return _fail(f"the arena is not available: {exc}")
    db = _arena_db(list(args.rest))
    problem = _unopenable_db(db) if db is not None else None
    if problem:
        return _fail(f"arena: the votes database {show(db, 80)} cannot be opened: {problem}")
    try:
        return int(arena_main(list(args.rest)) or 0)
    except sqlite3.Error as exc:  # e.g. an unwritable --db: one line, not a traceback
        where = f" {show(db, 80)}" if db is not None else ""
        return _fail(f"arena: the votes database{where} cannot be used: {exc}")
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        return _fail(f"arena: {exc.strerror or exc}" + (f": {show(exc.filename, 80)}" if exc.filename else ""))


def _arena_db(rest: list[str]) -> str | None:
    """The ``--db`` given to ``minirepro arena`` (``--db PATH`` or ``--db=PATH``), if any."""
    for i, word in enumerate(rest):
        if word == "--db" and i + 1 < len(rest):
            return rest[i + 1]
        if word.startswith("--db="):
            return word[len("--db="):]
    return None


def _unopenable_db(db: str) -> str | None:
    """Why the votes database ``db`` can be neither opened nor made (``None``: it may be):
    a folder in its place, or a file where a folder of its path should be (``--db /dev/null/x``)."""
    try:
        path = Path(db).expanduser().absolute()
        if path.is_dir():
            return "it is a folder"
        parent = path.parent  # `arena serve` makes missing folders; a file on the way it cannot
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            return f"{show(str(parent), 80)} is not a folder"
    except (OSError, ValueError) as exc:
        return getattr(exc, "strerror", None) or type(exc).__name__
    return None


def _cmd_conservationbench(args) -> int:
    from minirepro.papers.conservationbench.cli import main as bench_main

    return int(bench_main(list(args.rest)) or 0)


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["arena"]:  # the arena parses its own options (--help included)
        return _cmd_arena(argparse.Namespace(rest=argv[1:]))
    if argv[:1] == ["conservationbench"]:  # parses its own options (--help included)
        return _cmd_conservationbench(argparse.Namespace(rest=argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ChapterError as exc:
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``minirepro`` console script."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        status = _dispatch(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:  # `minirepro list | head`: the reader has gone; end quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP during a run (run.Interrupted)
        signum = getattr(exc, "signum", signal.SIGINT)
        folder = getattr(exc, "folder", None)
        print(f"minirepro: interrupted ({signal.Signals(signum).name})" +
              (f"; the unfinished run is marked FAILED in {folder}" if folder else ""),
              file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
