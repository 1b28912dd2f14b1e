"""Votes and blind pairings in SQLite (WAL journal, synchronous commits).

A pairing is created when a battle is shown: a random token maps to the prompt
and the two generators, kept only on the server. A vote names the token and the
choice; it is written in one ``BEGIN IMMEDIATE`` transaction that also marks the
token used, so a token is voted at most once even with concurrent voters. Every
committed vote is on disk (``synchronous=FULL``), so a restart loses nothing.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from minirepro.papers.spreadsheet_arena.voters import OUTCOMES

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pairings (
    token TEXT PRIMARY KEY, prompt_id TEXT NOT NULL, category TEXT NOT NULL,
    model_a TEXT NOT NULL, model_b TEXT NOT NULL, created REAL NOT NULL, voted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, token TEXT NOT NULL UNIQUE REFERENCES pairings(token),
    prompt_id TEXT NOT NULL, category TEXT NOT NULL, model_a TEXT NOT NULL, model_b TEXT NOT NULL,
    winner TEXT NOT NULL, created REAL NOT NULL);
"""
EXPORT_COLUMNS = ("prompt_id", "category", "model_a", "model_b", "winner")


class VoteError(ValueError):
    """A vote that cannot be recorded (unknown token, already voted, bad choice)."""


@dataclass(frozen=True)
class Pairing:
    token: str
    prompt_id: str
    category: str
    model_a: str
    model_b: str
    voted: bool


class VoteStore:
    """SQLite-backed pairings and votes; safe to share across threads (one connection per call)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA busy_timeout=30000")
            yield con
        finally:
            con.close()

    def new_pairing(self, prompt_id: str, category: str, model_a: str, model_b: str) -> str:
        """Store a blind pairing and return its unguessable token."""
        if model_a == model_b:
            raise ValueError("a pairing needs two different models")
        token = secrets.token_urlsafe(18)
        with self._connect() as con:
            con.execute("INSERT INTO pairings VALUES (?,?,?,?,?,?,0)",
                        (token, prompt_id, category, model_a, model_b, time.time()))
        return token

    def pairing(self, token: str) -> Pairing | None:
        """The pairing for ``token``, or None if there is none."""
        with self._connect() as con:
            row = con.execute("SELECT token,prompt_id,category,model_a,model_b,voted FROM pairings "
                              "WHERE token=?", (str(token),)).fetchone()
        return Pairing(*row[:5], bool(row[5])) if row else None

    def record_vote(self, token: str, winner: str) -> Pairing:
        """Record ``winner`` (one of ``OUTCOMES``) for ``token``; returns the revealed pairing.

        Raises:
            VoteError: the choice is invalid, the token unknown, or already voted.
        """
        if winner not in OUTCOMES:
            raise VoteError(f"choice must be one of {', '.join(OUTCOMES)}, got {winner!r}")
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                row = con.execute("SELECT prompt_id,category,model_a,model_b,voted FROM pairings "
                                  "WHERE token=?", (str(token),)).fetchone()
                if row is None:
                    raise VoteError("unknown battle token")
                if row[4]:
                    raise VoteError("this battle has already been voted on")
                con.execute("UPDATE pairings SET voted=1 WHERE token=?", (token,))
                con.execute("INSERT INTO votes (token,prompt_id,category,model_a,model_b,winner,created)"
                            " VALUES (?,?,?,?,?,?,?)", (token, *row[:4], winner, time.time()))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return Pairing(token, *row[:4], True)

    def votes(self) -> pd.DataFrame:
        """All votes in export format (columns ``EXPORT_COLUMNS``), oldest first."""
        with self._connect() as con:
            rows = con.execute(f"SELECT {','.join(EXPORT_COLUMNS)} FROM votes ORDER BY id").fetchall()
        return pd.DataFrame(rows, columns=list(EXPORT_COLUMNS))

    def n_votes(self) -> int:
        with self._connect() as con:
            return int(con.execute("SELECT COUNT(*) FROM votes").fetchone()[0])

    def export_csv(self, out: str | Path) -> int:
        """Write the votes to ``out`` as CSV (the chapter's analysis reads it); returns the count."""
        df = self.votes()
        df.to_csv(out, index=False)
        return len(df)


def read_votes(path: str | Path) -> pd.DataFrame:
    """Read an exported votes CSV and check its columns and values."""
    from minirepro.papers.spreadsheet_arena.ratings import check_battles

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no votes file at {p}")
    df = pd.read_csv(p, dtype=str)
    missing = [c for c in EXPORT_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}; expected {list(EXPORT_COLUMNS)}")
    if len(df):
        check_battles(df)
    return df
