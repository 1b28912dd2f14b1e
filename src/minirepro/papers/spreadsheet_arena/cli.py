"""``minirepro arena ...``: serve the local arena, export its votes, print its leaderboard.

    minirepro arena serve [--host 127.0.0.1] [--port 8000] [--db arena.sqlite] [--seed 0]
                          [--max-open-per-address 2000] [--secret-file arena.sqlite.secret]
    minirepro arena export [--db arena.sqlite] [--out votes.csv]
    minirepro arena leaderboard [--db arena.sqlite] [--n-boot 200]

Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from minirepro.core.cli import UsageError, run, subcommands

DEFAULT_DB = "arena.sqlite"
# Kept in step with app.py and store.py (imported lazily there, so --help stays quick).
MAX_OPEN_PER_CLIENT, MAX_OPEN_PER_ADDRESS, SECRET_ENV = 20, 2000, "MINIREPRO_ARENA_SECRET"


def _parser() -> argparse.ArgumentParser:
    p, sub = subcommands("minirepro arena", "The SpreadsheetArena chapter's local arena.")
    s = sub.add_parser("serve", help="start the web app on this machine")
    s.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one")
    s.add_argument("--db", default=DEFAULT_DB, help="SQLite vote database (created if missing)")
    s.add_argument("--seed", type=int, default=0, help="seed for prompts and pairings")
    s.add_argument("--prompts", type=int, default=25, help="prompts per category")
    s.add_argument("--max-open-per-address", type=int, default=MAX_OPEN_PER_ADDRESS, metavar="N",
                   help="unvoted battles kept per remote address, all its browser sessions together "
                        f"(default {MAX_OPEN_PER_ADDRESS}: a class of 100 behind one address, each "
                        f"session holding its {MAX_OPEN_PER_CLIENT})")
    s.add_argument("--secret-file", default=None, metavar="PATH",
                   help="file with the key that signs session cookies, made if missing (default: "
                        f"the database's path + .secret; ${SECRET_ENV}, when set, is used instead)")
    e = sub.add_parser("export", help="write the votes as CSV for the chapter's analysis")
    e.add_argument("--db", default=DEFAULT_DB, help="SQLite vote database")
    e.add_argument("--out", default="-", help="CSV file to write ('-' for stdout)")
    b = sub.add_parser("leaderboard", help="print the ratings from the stored votes")
    b.add_argument("--db", default=DEFAULT_DB, help="SQLite vote database")
    b.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples for intervals")
    return p


def _existing_db(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no vote database at {p} (start one with `minirepro arena serve --db {p}`)")
    return p


def _serve(args: argparse.Namespace) -> int:
    from minirepro.papers.spreadsheet_arena.app import create_app, make_arena_server

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.seed < 0 or args.prompts < 1:
        raise UsageError("--seed must be >= 0 and --prompts >= 1")
    if args.max_open_per_address < 1:
        raise UsageError(f"--max-open-per-address must be >= 1, got {args.max_open_per_address}")
    try:
        app = create_app(args.db, seed=args.seed, n_per_category=args.prompts,
                         max_open_per_address=args.max_open_per_address, secret_file=args.secret_file)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    try:
        server = make_arena_server(args.host, args.port, app, threaded=True)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None

    def stop(*_):
        raise KeyboardInterrupt

    if hasattr(signal, "SIGTERM"):
        try:
            signal.signal(signal.SIGTERM, stop)
        except ValueError:  # not the main thread (tests run the server in a thread)
            pass
    print(f"SpreadsheetArena on http://{args.host}:{server.server_port}/ (votes in {args.db}); "
          "Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _export(args: argparse.Namespace) -> int:
    from minirepro.papers.spreadsheet_arena.store import VoteStore

    store = VoteStore(_existing_db(args.db))
    if args.out == "-":
        store.votes().to_csv(sys.stdout, index=False)
        return 0
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"folder {out.parent} does not exist")
    n = store.export_csv(out)
    print(f"wrote {n} votes to {out}", file=sys.stderr)
    return 0


def _leaderboard(args: argparse.Namespace) -> int:
    import numpy as np

    from minirepro.papers.spreadsheet_arena.ratings import leaderboard
    from minirepro.papers.spreadsheet_arena.store import VoteStore

    if args.n_boot < 1:
        raise UsageError(f"--n-boot must be positive, got {args.n_boot}")
    df = VoteStore(_existing_db(args.db)).votes()
    if len(df) == 0:
        print("no votes yet")
        return 0
    models = sorted(set(df["model_a"]) | set(df["model_b"]))
    anchor = "gen-minimal" if "gen-minimal" in models else models[0]
    fr = leaderboard(df, models, args.n_boot, np.random.default_rng(0), anchor=anchor).frame()
    print(fr.round(1).to_string(index=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``minirepro arena``; returns the exit status (2 on bad input)."""
    return run(_parser(), {"serve": _serve, "export": _export, "leaderboard": _leaderboard}, argv)


if __name__ == "__main__":
    sys.exit(main())
