"""The local arena: a Flask app that shows blind pairs, takes votes and keeps a live leaderboard.

``GET /`` shows a prompt and two anonymised workbooks (A and B) with four vote
buttons; which generator wrote which stays on the server under a random
pairing token until the vote is in. ``POST /vote`` records the vote and only
then reveals the two generators. ``GET /leaderboard`` (and ``/api/leaderboard``
as JSON) shows Bradley-Terry ratings with bootstrap intervals from all votes so
far. Bad requests get 4xx pages; an unexpected failure is a plain 500 page,
never a traceback.

Every response carries a Content-Security-Policy (no scripts, no frames, forms
post only here), ``X-Content-Type-Options: nosniff`` and ``X-Frame-Options:
DENY``; served by :func:`make_arena_server`, its ``Server`` header names the
arena only, not Werkzeug or Python.

A battle belongs to the browser session it was shown to: the first visit is
redirected once to set a signed, HttpOnly, SameSite=Lax session cookie (signed
with the key from :func:`arena_secret`), and a vote is taken only from the
session that got the battle. Each session holds at most ``max_open_per_client``
unvoted battles and each address at most ``max_open_per_address``, so a class
behind one address (a JupyterHub, a NAT) shares nothing but the address's
ceiling. A browser that keeps no cookie falls back to one bucket per address,
capped like a session, as before sessions. Unvoted battles also expire (see
:mod:`.store`), so crawling ``/``, with or without cookies, cannot grow the
database without bound. A vote on an expired battle gets a page that says so
and offers the next battle.
"""

from __future__ import annotations

import html
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flask import Flask, abort, jsonify, redirect, request, session
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from minirepro.papers.spreadsheet_arena.features import WorkbookError
from minirepro.papers.spreadsheet_arena.generators import WorkbookGenerator, default_generators
from minirepro.papers.spreadsheet_arena.prompts import Prompt, make_prompts
from minirepro.papers.spreadsheet_arena.ratings import leaderboard
from minirepro.papers.spreadsheet_arena.render import CSS, workbook_html
from minirepro.papers.spreadsheet_arena.store import (
    MAX_OPEN_PER_ADDRESS,
    MAX_OPEN_PER_CLIENT,
    PAIRING_TTL_S,
    AlreadyVoted,
    NotYourBattle,
    UnknownBattle,
    VoteError,
    VoteStore,
)

CHOICES = {"a": "model_a", "b": "model_b", "tie": "tie", "both_bad": "both_bad"}
_LABELS = {"a": "A is better", "b": "B is better", "tie": "Tie", "both_bad": "Both are bad"}
_CHOICE_OF = {v: k for k, v in CHOICES.items()}
SERVER_NAME = "minirepro-arena"
SECRET_ENV = "MINIREPRO_ARENA_SECRET"  # the cookie-signing key, instead of the file beside the database
SESSION_COOKIE = "arena_session"
_MIN_SECRET = 32
_SID = re.compile(r"[A-Za-z0-9_-]{22}")  # secrets.token_urlsafe(16)
# The pages have no scripts, images or frames; styles are inline; forms post to this origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class ArenaRequestHandler(WSGIRequestHandler):
    """Werkzeug's request handler with a ``Server`` header that names neither Werkzeug nor
    Python, and the security headers on every response, including the server's own error
    pages for requests that never reach the app (a malformed request line)."""

    def version_string(self) -> str:
        return SERVER_NAME

    def send_response_only(self, code, message=None):
        self._arena_sent: set[str] = set()
        super().send_response_only(code, message)

    def send_header(self, keyword, value):
        getattr(self, "_arena_sent", set()).add(keyword.lower())
        super().send_header(keyword, value)

    def end_headers(self):
        sent = getattr(self, "_arena_sent", set())
        for k, v in SECURITY_HEADERS.items():
            if k.lower() not in sent:
                super().send_header(k, v)
        self._arena_sent = set()
        super().end_headers()


def make_arena_server(host: str, port: int, app: Flask, threaded: bool = True) -> BaseWSGIServer:
    """A Werkzeug server for ``app`` that answers with :class:`ArenaRequestHandler`."""
    return make_server(host, port, app, threaded=threaded, request_handler=ArenaRequestHandler)


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif;margin:1.5em}}{CSS}"
            "button{margin:.3em;padding:.4em 1em}</style></head><body>"
            f"<nav><a href='/'>New battle</a> | <a href='/leaderboard'>Leaderboard</a></nav>{body}"
            "</body></html>")


def arena_secret(db_path: str | Path, secret_file: str | Path | None = None) -> bytes:
    """The key that signs the arena's session cookies.

    ``$MINIREPRO_ARENA_SECRET`` when set; else the contents of ``secret_file`` (default:
    the database's path plus ``.secret``), which is made on first use: 64 random
    characters, readable by its owner only. Keeping the file keeps the students' sessions
    across a restart; deleting it (or changing the variable) ends every session.

    Raises:
        ValueError: the key is shorter than 32 characters.
    """
    env = os.environ.get(SECRET_ENV, "")
    if env:
        if len(env) < _MIN_SECRET:
            raise ValueError(f"${SECRET_ENV} must be at least {_MIN_SECRET} characters")
        return env.encode()
    if secret_file is None and str(db_path) == ":memory:":
        return secrets.token_urlsafe(48).encode()
    path = Path(secret_file) if secret_file is not None else Path(f"{db_path}.secret")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(48) + "\n")
    for _ in range(50):
        key = path.read_text().strip()
        if len(key) >= _MIN_SECRET:
            return key.encode()
        time.sleep(0.02)  # another arena on this database is writing it right now
    raise ValueError(f"the arena's secret in {path} is shorter than {_MIN_SECRET} characters; "
                     "delete the file to make a new one")


def create_app(db_path: str | Path, seed: int = 0, n_per_category: int = 25,
               generators: list[WorkbookGenerator] | None = None,
               prompts: list[Prompt] | None = None, n_boot: int = 200,
               pairing_ttl_s: float = PAIRING_TTL_S,
               max_open_per_client: int = MAX_OPEN_PER_CLIENT,
               max_open_per_address: int = MAX_OPEN_PER_ADDRESS,
               secret_key: str | bytes | None = None,
               secret_file: str | Path | None = None) -> Flask:
    """The arena app over a vote database at ``db_path`` (created if missing).

    A battle not voted within ``pairing_ttl_s`` seconds expires; a browser session (or,
    for a browser that keeps no cookie, its address) holds at most ``max_open_per_client``
    unvoted battles and an address at most ``max_open_per_address`` (the oldest goes when
    more are asked for). Session cookies are signed with ``secret_key``, by default
    :func:`arena_secret` of ``db_path`` and ``secret_file``.
    """
    gens, plist = _generators_and_prompts(generators, prompts, n_per_category, seed)
    store = VoteStore(db_path, pairing_ttl_s=pairing_ttl_s, max_open_per_client=max_open_per_client,
                      max_open_per_address=max_open_per_address)
    if secret_key is None:
        secret_key = arena_secret(db_path, secret_file)
    elif len(secret_key) < _MIN_SECRET:
        raise ValueError(f"secret_key must be at least {_MIN_SECRET} characters")
    rng = np.random.default_rng(seed)
    lock = threading.Lock()
    workbook = _rendered(_workbook_cache({g.name: g for g in gens}, seed, lock), lock)

    app = Flask("minirepro-spreadsheet-arena")
    app.config.update(MAX_CONTENT_LENGTH=16 * 1024, PROPAGATE_EXCEPTIONS=False, SECRET_KEY=secret_key,
                      SESSION_COOKIE_NAME=SESSION_COOKIE, SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Lax")
    app.extensions["arena_store"] = store
    _add_battle_route(app, store, gens, plist, rng, lock, workbook)
    _add_vote_route(app, store, {p.id: p for p in plist})
    _add_leaderboard_routes(app, store, n_boot, seed)
    _add_error_pages_and_headers(app)
    return app


def _generators_and_prompts(generators: list[WorkbookGenerator] | None, prompts: list[Prompt] | None,
                            n_per_category: int, seed: int) -> tuple[list[WorkbookGenerator], list[Prompt]]:
    """The arena's generators and prompts (the defaults for ``None``), checked to make battles."""
    gens = list(generators) if generators is not None else default_generators()
    if len(gens) < 2 or len({g.name for g in gens}) != len(gens):
        raise ValueError("the arena needs at least two generators with distinct names")
    plist = list(prompts) if prompts is not None else make_prompts(n_per_category, seed)
    if not plist:
        raise ValueError("the arena needs at least one prompt")
    return gens, plist


def _workbook_cache(by_name: dict[str, WorkbookGenerator], seed: int,
                    lock: threading.Lock) -> Callable[[Prompt, str], bytes]:
    """``workbook(prompt, name)``: generator ``name``'s workbook for ``prompt``, made once, then cached."""
    cache: dict[tuple[str, str], bytes] = {}

    def workbook(prompt: Prompt, name: str) -> bytes:
        key = (prompt.id, name)
        if key not in cache:
            data = by_name[name].generate(prompt, seed)
            with lock:
                cache[key] = data
        return cache[key]

    return workbook


def _rendered(workbook: Callable[[Prompt, str], bytes],
              lock: threading.Lock) -> Callable[[Prompt, str, str], str]:
    """``side(prompt, name, label)``: ``workbook(prompt, name)`` as HTML titled "Workbook
    <label>". Each workbook is rendered once, by the first request that needs it while
    the others wait for it, then cached: rendering parses and evaluates the workbook (tens
    of milliseconds), and a class that clicks at once would otherwise render each many times.
    """
    cache: dict[tuple[str, str], str] = {}
    busy: dict[tuple[str, str], threading.Lock] = {}
    title = "<h3>Workbook A</h3>"

    def side(prompt: Prompt, name: str, label: str) -> str:
        key = (prompt.id, name)
        if key not in cache:
            with lock:
                one = busy.setdefault(key, threading.Lock())
            with one:
                if key not in cache:
                    cache[key] = workbook_html(workbook(prompt, name), "Workbook A")
        fragment = cache[key]
        return fragment if label == "A" else fragment.replace(
            title, f"<h3>Workbook {html.escape(label)}</h3>", 1)

    return side


def pair_page(prompt_text: str, side_a: str, side_b: str) -> str:
    """Two rendered workbooks under their prompt: :func:`.render.pair_html` from cached sides."""
    return (f"<style>{CSS}</style><p><b>Prompt:</b> {html.escape(prompt_text)}</p>"
            f'<div class="pair">{side_a}{side_b}</div>')


def _requester() -> tuple[str, str]:
    """``(client, address)`` of this request: the client is its browser session, or its
    address when it brings no valid session cookie."""
    address = request.remote_addr or ""
    sid = session.get("sid")
    if isinstance(sid, str) and _SID.fullmatch(sid):
        return f"session:{sid}", address
    return address, address


class _Handshakes:
    """One-use nonces of the redirects that set a session cookie, the newest ``size`` kept.

    A request that comes back from such a redirect without the cookie is from a browser
    that keeps none; a copied address with a used nonce in it is just a first visit.
    """

    def __init__(self, size: int = 10_000) -> None:
        self._nonces: OrderedDict[str, bool] = OrderedDict()
        self._lock, self._size = threading.Lock(), size

    def issue(self) -> str:
        nonce = secrets.token_urlsafe(12)
        with self._lock:
            self._nonces[nonce] = True
            while len(self._nonces) > self._size:
                self._nonces.popitem(last=False)
        return nonce

    def redeem(self, nonce: str) -> bool:
        with self._lock:
            return self._nonces.pop(nonce, False)


_NO_COOKIE = ("<p><b>Your browser does not keep this arena's cookie</b>, so your battles share one "
              "pool with everyone at your address who keeps none, and the oldest go first when it "
              "is full. Allow cookies for this address to keep your own.</p>")


def _add_battle_route(app: Flask, store: VoteStore, gens: list[WorkbookGenerator], plist: list[Prompt],
                      rng: np.random.Generator, lock: threading.Lock,
                      workbook: Callable[[Prompt, str, str], str]) -> None:
    """``GET /``: a random prompt with two random generators' workbooks, blind, and the vote buttons.

    A first visit (no session cookie) is redirected once to set one; a browser that comes
    back without it is served from its address's pool.
    """
    handshakes = _Handshakes()

    @app.get("/")
    def battle():
        client, address = _requester()
        came_back = handshakes.redeem(request.args.get("hello", ""))
        notice = ""
        if not client.startswith("session:"):
            if not came_back:
                session["sid"] = secrets.token_urlsafe(16)
                return redirect(f"/?hello={handshakes.issue()}", 302)
            notice = _NO_COOKIE
        for _ in range(5):
            with lock:
                prompt = plist[int(rng.integers(len(plist)))]
                a, b = rng.choice(len(gens), size=2, replace=False)
            ma, mb = gens[int(a)].name, gens[int(b)].name
            try:
                body = pair_page(prompt.text, workbook(prompt, ma, "A"), workbook(prompt, mb, "B"))
            except Exception as exc:  # noqa: BLE001 - a plugged-in model may fail in any way
                app.logger.warning("skipping a pair: %s", exc if isinstance(exc, WorkbookError)
                                   else type(exc).__name__)
                continue  # an unusable workbook or a failing model: show another pair
            token = store.new_pairing(prompt.id, prompt.category, ma, mb, client=client, address=address)
            buttons = "".join(f"<button type='submit' name='choice' value='{k}'>{v}</button>"
                              for k, v in _LABELS.items())
            form = (f"<form method='post' action='/vote'><input type='hidden' name='token' "
                    f"value='{html.escape(token, quote=True)}'>{buttons}</form>")
            return _page("SpreadsheetArena", f"<h1>Which workbook is better?</h1>{notice}{body}{form}")
        abort(503, "could not produce a valid pair of workbooks")


def _next_battle_page(code: int, title: str, text: str):
    """A page that says why the vote was not taken and offers the next battle."""
    body = (f"<h1>{html.escape(title)}</h1><p>{text}</p>"
            "<form method='get' action='/'><button type='submit'>Next battle</button></form>")
    return _page(title, body), code


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 120 else f"{seconds:.0f} seconds"


def _add_vote_route(app: Flask, store: VoteStore, by_prompt: dict[str, Prompt]) -> None:
    """``POST /vote``: record the vote on a battle token, then reveal the two generators.

    Only the session the battle was shown to may vote on it; sending the same vote again
    (a double click, a retry after a dropped connection) shows the reveal again and stores
    nothing more. An expired battle, or one shown to another session, gets a page that
    says so and offers the next battle.
    """

    @app.post("/vote")
    def vote():
        data = request.get_json(silent=True) if request.is_json else request.form
        if request.is_json and not isinstance(data, dict):
            abort(400, "send token and choice as a form or a JSON object")
        token, choice = data.get("token"), data.get("choice")
        if not isinstance(token, str) or not token or not isinstance(choice, str):
            abort(400, "both 'token' and 'choice' are required")
        if choice not in CHOICES:
            abort(400, f"choice must be one of {', '.join(CHOICES)}")
        try:
            p = store.record_vote(token, CHOICES[choice], client=_requester()[0])
        except UnknownBattle:
            return _next_battle_page(
                404, "This battle has expired",
                "Your vote was not recorded: this battle is unknown or has expired. A battle "
                f"stays open for {_minutes(store.pairing_ttl_s)}, and a browser keeps its "
                f"{store.max_open_per_client} most recent unvoted battles open.")
        except NotYourBattle:
            return _next_battle_page(
                403, "This battle was shown to someone else",
                "Your vote was not recorded: this battle was shown to another browser session "
                "(or before this browser's arena cookie was reset), and only that session can vote on it.")
        except AlreadyVoted as exc:
            if exc.winner != CHOICES[choice]:
                said = _LABELS.get(_CHOICE_OF.get(exc.winner, ""), exc.winner)
                return _next_battle_page(409, "This battle already has a vote",
                                         f"This battle has already been voted on ({html.escape(said)}); "
                                         "a vote cannot be changed.")
            p = exc.pairing  # the same vote again: show the reveal, store nothing
        except VoteError as exc:  # pragma: no cover - the choice is checked above
            abort(400, str(exc))
        if request.is_json:
            return jsonify(model_a=p.model_a, model_b=p.model_b, winner=CHOICES[choice])
        text = by_prompt[p.prompt_id].text if p.prompt_id in by_prompt else p.prompt_id
        body = (f"<h1>Thanks, vote recorded: {html.escape(_LABELS[choice])}</h1>"
                f"<p>Prompt: {html.escape(text)}</p><p>Workbook A was <b>{html.escape(p.model_a)}"
                f"</b>; workbook B was <b>{html.escape(p.model_b)}</b>.</p>"
                "<p><a href='/'>Next battle</a></p>")
        return _page("Vote recorded", body)


def _add_leaderboard_routes(app: Flask, store: VoteStore, n_boot: int, seed: int) -> None:
    """``GET /leaderboard`` (a page) and ``GET /api/leaderboard`` (JSON) over all votes so far."""

    def board():
        df = store.votes()
        if len(df) == 0:
            return None
        models = sorted(set(df["model_a"]) | set(df["model_b"]))
        anchor = "gen-minimal" if "gen-minimal" in models else models[0]
        return leaderboard(df, models, n_boot, np.random.default_rng(seed), anchor=anchor).frame()

    @app.get("/leaderboard")
    def leaderboard_page():
        fr = board()
        if fr is None:
            return _page("Leaderboard", "<h1>Leaderboard</h1><p>No votes yet.</p>")
        rows = "".join(f"<tr><td>{k + 1}</td><td>{html.escape(r.model)}</td><td>{r.rating:.0f}</td>"
                       f"<td>{r.lower:.0f} to {r.upper:.0f}</td><td>{r.battles}</td></tr>"
                       for k, r in enumerate(fr.itertuples()))
        body = ("<h1>Leaderboard</h1><table class='sheet'><tr><th>rank</th><th>model</th>"
                "<th>rating</th><th>95% interval</th><th>battles</th></tr>"
                f"{rows}</table><p>{store.n_votes()} votes; Bradley-Terry on the Elo scale, "
                "intervals from a bootstrap over votes.</p>")
        return _page("Leaderboard", body)

    @app.get("/api/leaderboard")
    def leaderboard_json():
        fr = board()
        return jsonify(votes=store.n_votes(), rows=[] if fr is None else fr.to_dict("records"))


def _add_error_pages_and_headers(app: Flask) -> None:
    """The security headers on every response; 4xx pages and a plain 500 page, never a traceback."""

    @app.after_request
    def security_headers(response):
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        msg = html.escape(exc.description or exc.name)
        return _page(f"{exc.code} {exc.name}", f"<h1>{exc.code} {html.escape(exc.name)}</h1>"
                                              f"<p>{msg}</p>"), exc.code

    @app.errorhandler(Exception)
    def server_error(exc: Exception):  # noqa: ARG001 - never show a traceback
        return _page("500", "<h1>500 Internal error</h1><p>Something went wrong.</p>"), 500
