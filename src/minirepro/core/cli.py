"""The small command lines of the chapters (``minirepro conservationbench``, ``minirepro arena``).

Each is an :class:`argparse` parser with subcommands; bad input (argparse's own complaints
and a command's :class:`UsageError`) is one line ``PROG: error: ...`` on stderr and exit
status 2, never argparse's usage block; ``--help`` returns its status instead of exiting.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence


class UsageError(Exception):
    """Bad input on a chapter's command line: one line on stderr, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors raise :class:`UsageError` (one line, not the usage block)."""

    def error(self, message: str):
        raise UsageError(message)


def subcommands(prog: str, description: str) -> tuple[Parser, argparse._SubParsersAction]:
    """A :class:`Parser` named ``prog`` and its subcommand table (``args.command``)."""
    parser = Parser(prog=prog, description=description)
    return parser, parser.add_subparsers(dest="command", parser_class=Parser)


def run(parser: argparse.ArgumentParser, commands: Mapping[str, Callable[[argparse.Namespace], int]],
        argv: Sequence[str] | None = None, errors: tuple[type[Exception], ...] = ()) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the chosen command; returns its exit status.

    No command, a :class:`UsageError` or one of ``errors`` is one line naming ``parser.prog``
    on stderr and status 2; ``--help`` returns 0.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            *first, last = commands
            raise UsageError(f"choose a command: {', '.join(first)} or {last}")
        return commands[args.command](args)
    except (UsageError, *errors) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
