"""Votes and blind pairings in SQLite (WAL journal, synchronous commits).

A pairing is created when a battle is shown: a random token maps to the prompt
and the two generators, kept only on the server. A vote names the token and the
choice; it is written in one ``BEGIN IMMEDIATE`` transaction that also marks the
token used, so a token is voted at most once even with concurrent voters. Every
committed vote is on disk (``synchronous=FULL``), so a restart loses nothing.

Unvoted pairings do not pile up (a crawler fetching ``/`` would otherwise grow
the database without bound): a pairing expires ``pairing_ttl_s`` seconds after
it was shown, each client (the address that asked) holds at most
``max_open_per_client`` unvoted pairings, and the whole arena at most
``max_open``; past a cap, the oldest unvoted pairing goes first. Votes are never
deleted.
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
    model_a TEXT NOT NULL, model_b TEXT NOT NULL, created REAL NOT NULL, voted INTEGER NOT NULL DEFAULT 0,
    client TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, token TEXT NOT NULL UNIQUE REFERENCES pairings(token),
    prompt_id TEXT NOT NULL, category TEXT NOT NULL, model_a TEXT NOT NULL, model_b TEXT NOT NULL,
    winner TEXT NOT NULL, created REAL NOT NULL);
"""
_INDEXES = """
CREATE INDEX IF NOT EXISTS pairings_open ON pairings (voted, created);
CREATE INDEX IF NOT EXISTS pairings_client ON pairings (client, voted, created);
"""
EXPORT_COLUMNS = ("prompt_id", "category", "model_a", "model_b", "winner")
PAIRING_TTL_S = 3600.0
MAX_OPEN_PER_CLIENT = 20
MAX_OPEN = 100_000


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

    def __init__(self, path: str | Path, pairing_ttl_s: float = PAIRING_TTL_S,
                 max_open_per_client: int = MAX_OPEN_PER_CLIENT, max_open: int = MAX_OPEN) -> None:
        if not pairing_ttl_s > 0 or max_open_per_client < 1 or max_open < 1:
            raise ValueError("pairing_ttl_s must be > 0 and the caps >= 1, got "
                             f"{pairing_ttl_s}, {max_open_per_client}, {max_open}")
        self.path = str(path)
        self.pairing_ttl_s, self.max_open_per_client, self.max_open = (
            float(pairing_ttl_s), int(max_open_per_client), int(max_open))
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)
            columns = {row[1] for row in con.execute("PRAGMA table_info(pairings)")}
            if "client" not in columns:  # a database from before pairings had an owner
                con.execute("ALTER TABLE pairings ADD COLUMN client TEXT NOT NULL DEFAULT ''")
            con.executescript(_INDEXES)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA busy_timeout=30000")
            yield con
        finally:
            con.close()

    def new_pairing(self, prompt_id: str, category: str, model_a: str, model_b: str,
                    client: str | None = None) -> str:
        """Store a blind pairing shown to ``client`` and return its unguessable token.

        Expired unvoted pairings are deleted first; if ``client`` (when given: the web
        app passes the requester's address) or the whole arena is at its cap of unvoted
        pairings, its oldest unvoted one makes room.
        """
        if model_a == model_b:
            raise ValueError("a pairing needs two different models")
        token, now = secrets.token_urlsafe(18), time.time()
        owner = "" if client is None else str(client)[:200]
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("DELETE FROM pairings WHERE voted=0 AND created<?",
                            (now - self.pairing_ttl_s,))
                if client is not None:
                    con.execute("DELETE FROM pairings WHERE token IN (SELECT token FROM pairings "
                                "WHERE voted=0 AND client=? ORDER BY created DESC LIMIT -1 OFFSET ?)",
                                (owner, self.max_open_per_client - 1))
                con.execute("DELETE FROM pairings WHERE token IN (SELECT token FROM pairings WHERE "
                            "voted=0 ORDER BY created DESC LIMIT -1 OFFSET ?)", (self.max_open - 1,))
                con.execute("INSERT INTO pairings (token,prompt_id,category,model_a,model_b,created,"
                            "voted,client) VALUES (?,?,?,?,?,?,0,?)",
                            (token, prompt_id, category, model_a, model_b, now, owner))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return token

    def n_open(self, client: str | None = None) -> int:
        """Unvoted pairings stored (expired ones not yet deleted included), for ``client`` or all."""
        with self._connect() as con:
            if client is None:
                return int(con.execute("SELECT COUNT(*) FROM pairings WHERE voted=0").fetchone()[0])
            return int(con.execute("SELECT COUNT(*) FROM pairings WHERE voted=0 AND client=?",
                                   (str(client),)).fetchone()[0])

    def pairing(self, token: str) -> Pairing | None:
        """The pairing for ``token``, or None if there is none (or it expired unvoted)."""
        with self._connect() as con:
            row = con.execute("SELECT token,prompt_id,category,model_a,model_b,voted,created "
                              "FROM pairings WHERE token=?", (str(token),)).fetchone()
        if row is None or (not row[5] and self._expired(row[6])):
            return None
        return Pairing(*row[:5], bool(row[5]))

    def _expired(self, created: float) -> bool:
        return created < time.time() - self.pairing_ttl_s

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
                row = con.execute("SELECT prompt_id,category,model_a,model_b,voted,created "
                                  "FROM pairings WHERE token=?", (str(token),)).fetchone()
                if row is None or (not row[4] and self._expired(row[5])):
                    raise VoteError("unknown or expired battle token")
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
