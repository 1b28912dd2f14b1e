"""Votes and blind pairings in SQLite (WAL journal, synchronous commits).

A pairing is created when a battle is shown: a random token maps to the prompt
and the two generators, kept only on the server. A vote names the token and the
choice; it is written in one ``BEGIN IMMEDIATE`` transaction that also marks the
token used, so a token is voted at most once even with concurrent voters. Every
committed vote is on disk (``synchronous=FULL``), so a restart loses nothing.

A pairing belongs to the client it was shown to (the web app passes the
browser session, or the address for a browser that keeps no cookie) and is
recorded with the address that asked. With ``client`` given, a vote is taken
only from that client, so no one votes on a battle shown to someone else.

Unvoted pairings do not pile up (a crawler fetching ``/`` would otherwise grow
the database without bound): a pairing expires ``pairing_ttl_s`` seconds after
it was shown, each client holds at most ``max_open_per_client`` unvoted
pairings, each address at most ``max_open_per_address`` (a class behind one
address shares it), and the whole arena at most ``max_open``; past a cap, the
oldest unvoted pairing goes first. Votes are never deleted.
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
    client TEXT NOT NULL DEFAULT '', address TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, token TEXT NOT NULL UNIQUE REFERENCES pairings(token),
    prompt_id TEXT NOT NULL, category TEXT NOT NULL, model_a TEXT NOT NULL, model_b TEXT NOT NULL,
    winner TEXT NOT NULL, created REAL NOT NULL);
"""
_INDEXES = """
CREATE INDEX IF NOT EXISTS pairings_open ON pairings (voted, created);
CREATE INDEX IF NOT EXISTS pairings_client ON pairings (client, voted, created);
CREATE INDEX IF NOT EXISTS pairings_address ON pairings (address, voted, created);
"""
EXPORT_COLUMNS = ("prompt_id", "category", "model_a", "model_b", "winner")
PAIRING_TTL_S = 3600.0
MAX_OPEN_PER_CLIENT = 20
MAX_OPEN_PER_ADDRESS = 2000  # a class of 100 behind one address, each holding the 20 a client may
MAX_OPEN = 100_000


class VoteError(ValueError):
    """A vote that cannot be recorded (unknown token, already voted, bad choice)."""


class UnknownBattle(VoteError):
    """No such pairing, or it expired (or was evicted) before the vote."""


class NotYourBattle(VoteError):
    """The pairing was shown to another client."""


class AlreadyVoted(VoteError):
    """The pairing has a vote; ``pairing`` and its ``winner`` say which."""

    def __init__(self, message: str, pairing: Pairing, winner: str) -> None:
        super().__init__(message)
        self.pairing, self.winner = pairing, winner


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
                 max_open_per_client: int = MAX_OPEN_PER_CLIENT, max_open: int = MAX_OPEN,
                 max_open_per_address: int = MAX_OPEN_PER_ADDRESS) -> None:
        if not pairing_ttl_s > 0 or min(max_open_per_client, max_open_per_address, max_open) < 1:
            raise ValueError("pairing_ttl_s must be > 0 and the caps >= 1, got "
                             f"{pairing_ttl_s}, {max_open_per_client}, {max_open_per_address}, {max_open}")
        self.path = str(path)
        self.pairing_ttl_s, self.max_open_per_client, self.max_open = (
            float(pairing_ttl_s), int(max_open_per_client), int(max_open))
        self.max_open_per_address = int(max_open_per_address)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)
            columns = {row[1] for row in con.execute("PRAGMA table_info(pairings)")}
            for column in ("client", "address"):  # a database from before pairings had an owner
                if column not in columns:
                    con.execute(f"ALTER TABLE pairings ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
            con.executescript(_INDEXES)
        # Held open, idle, for the store's life: closing the last connection to a WAL database
        # checkpoints it (one more fsync), which every request would otherwise pay while
        # holding the write lock; with this one open, checkpoints come every 1000 pages.
        self._keep: sqlite3.Connection | None = None
        if self.path != ":memory:":
            self._keep = sqlite3.connect(self.path, check_same_thread=False)
            self._keep.execute("SELECT COUNT(*) FROM votes").fetchall()

    def close(self) -> None:
        """Let go of the database (the store's calls open their own connections still)."""
        if self._keep is not None:
            self._keep.close()
            self._keep = None

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
                    client: str | None = None, address: str | None = None) -> str:
        """Store a blind pairing shown to ``client`` at ``address`` and return its unguessable token.

        Expired unvoted pairings are deleted first; if ``client`` (when given: the web app
        passes the browser session), ``address`` (when given: the requester's address) or
        the whole arena is at its cap of unvoted pairings, its oldest unvoted one makes room.
        """
        if model_a == model_b:
            raise ValueError("a pairing needs two different models")
        token, now = secrets.token_urlsafe(18), time.time()
        owner = "" if client is None else str(client)[:200]
        where = "" if address is None else str(address)[:200]
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("DELETE FROM pairings WHERE voted=0 AND created<?",
                            (now - self.pairing_ttl_s,))
                if client is not None:
                    con.execute("DELETE FROM pairings WHERE token IN (SELECT token FROM pairings "
                                "WHERE voted=0 AND client=? ORDER BY created DESC LIMIT -1 OFFSET ?)",
                                (owner, self.max_open_per_client - 1))
                if address is not None:
                    con.execute("DELETE FROM pairings WHERE token IN (SELECT token FROM pairings "
                                "WHERE voted=0 AND address=? ORDER BY created DESC LIMIT -1 OFFSET ?)",
                                (where, self.max_open_per_address - 1))
                con.execute("DELETE FROM pairings WHERE token IN (SELECT token FROM pairings WHERE "
                            "voted=0 ORDER BY created DESC LIMIT -1 OFFSET ?)", (self.max_open - 1,))
                con.execute("INSERT INTO pairings (token,prompt_id,category,model_a,model_b,created,"
                            "voted,client,address) VALUES (?,?,?,?,?,?,0,?,?)",
                            (token, prompt_id, category, model_a, model_b, now, owner, where))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return token

    def n_open(self, client: str | None = None, address: str | None = None) -> int:
        """Unvoted pairings stored (expired ones not yet deleted included): for ``client``,
        at ``address``, or all."""
        sql, args = "SELECT COUNT(*) FROM pairings WHERE voted=0", []
        for column, value in (("client", client), ("address", address)):
            if value is not None:
                sql, args = f"{sql} AND {column}=?", [*args, str(value)]
        with self._connect() as con:
            return int(con.execute(sql, args).fetchone()[0])

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

    def record_vote(self, token: str, winner: str, client: str | None = None) -> Pairing:
        """Record ``winner`` (one of ``OUTCOMES``) for ``token``; returns the revealed pairing.

        With ``client`` given, only the client the pairing was shown to may vote on it.

        Raises:
            VoteError: the choice is invalid; :class:`UnknownBattle`: the token is unknown
                or expired; :class:`NotYourBattle`: it was shown to another client;
                :class:`AlreadyVoted`: it has a vote (the exception carries it).
        """
        if winner not in OUTCOMES:
            raise VoteError(f"choice must be one of {', '.join(OUTCOMES)}, got {winner!r}")
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                row = con.execute("SELECT prompt_id,category,model_a,model_b,voted,created,client "
                                  "FROM pairings WHERE token=?", (str(token),)).fetchone()
                if row is None or (not row[4] and self._expired(row[5])):
                    raise UnknownBattle("unknown or expired battle token")
                if client is not None and row[6] != str(client)[:200]:
                    raise NotYourBattle("this battle was shown to another browser session")
                if row[4]:
                    stored = con.execute("SELECT winner FROM votes WHERE token=?", (token,)).fetchone()
                    raise AlreadyVoted("this battle has already been voted on",
                                       Pairing(token, *row[:4], True), stored[0] if stored else "")
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
