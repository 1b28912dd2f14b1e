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
arena only, not Werkzeug or Python. Unvoted pairings expire and are capped per
client (see :mod:`.store`), so crawling ``/`` cannot grow the database without
bound.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flask import Flask, abort, jsonify, request
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from minirepro.papers.spreadsheet_arena.features import WorkbookError
from minirepro.papers.spreadsheet_arena.generators import WorkbookGenerator, default_generators
from minirepro.papers.spreadsheet_arena.prompts import Prompt, make_prompts
from minirepro.papers.spreadsheet_arena.ratings import leaderboard
from minirepro.papers.spreadsheet_arena.render import CSS, pair_html
from minirepro.papers.spreadsheet_arena.store import (
    MAX_OPEN_PER_CLIENT,
    PAIRING_TTL_S,
    VoteError,
    VoteStore,
)

CHOICES = {"a": "model_a", "b": "model_b", "tie": "tie", "both_bad": "both_bad"}
_LABELS = {"a": "A is better", "b": "B is better", "tie": "Tie", "both_bad": "Both are bad"}
SERVER_NAME = "minirepro-arena"
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


def create_app(db_path: str | Path, seed: int = 0, n_per_category: int = 25,
               generators: list[WorkbookGenerator] | None = None,
               prompts: list[Prompt] | None = None, n_boot: int = 200,
               pairing_ttl_s: float = PAIRING_TTL_S,
               max_open_per_client: int = MAX_OPEN_PER_CLIENT) -> Flask:
    """The arena app over a vote database at ``db_path`` (created if missing).

    A battle not voted within ``pairing_ttl_s`` seconds expires; a client holds at most
    ``max_open_per_client`` unvoted battles (its oldest goes when it asks for more).
    """
    gens, plist = _generators_and_prompts(generators, prompts, n_per_category, seed)
    store = VoteStore(db_path, pairing_ttl_s=pairing_ttl_s, max_open_per_client=max_open_per_client)
    rng = np.random.default_rng(seed)
    lock = threading.Lock()
    workbook = _workbook_cache({g.name: g for g in gens}, seed, lock)

    app = Flask("minirepro-spreadsheet-arena")
    app.config.update(MAX_CONTENT_LENGTH=16 * 1024, PROPAGATE_EXCEPTIONS=False)
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


def _add_battle_route(app: Flask, store: VoteStore, gens: list[WorkbookGenerator], plist: list[Prompt],
                      rng: np.random.Generator, lock: threading.Lock,
                      workbook: Callable[[Prompt, str], bytes]) -> None:
    """``GET /``: a random prompt with two random generators' workbooks, blind, and the vote buttons."""

    @app.get("/")
    def battle():
        for _ in range(5):
            with lock:
                prompt = plist[int(rng.integers(len(plist)))]
                a, b = rng.choice(len(gens), size=2, replace=False)
            ma, mb = gens[int(a)].name, gens[int(b)].name
            try:
                body = pair_html(workbook(prompt, ma), workbook(prompt, mb), prompt.text)
            except Exception as exc:  # noqa: BLE001 - a plugged-in model may fail in any way
                app.logger.warning("skipping a pair: %s", exc if isinstance(exc, WorkbookError)
                                   else type(exc).__name__)
                continue  # an unusable workbook or a failing model: show another pair
            token = store.new_pairing(prompt.id, prompt.category, ma, mb,
                                      client=request.remote_addr or "")
            buttons = "".join(f"<button type='submit' name='choice' value='{k}'>{v}</button>"
                              for k, v in _LABELS.items())
            form = (f"<form method='post' action='/vote'><input type='hidden' name='token' "
                    f"value='{html.escape(token, quote=True)}'>{buttons}</form>")
            return _page("SpreadsheetArena", f"<h1>Which workbook is better?</h1>{body}{form}")
        abort(503, "could not produce a valid pair of workbooks")


def _add_vote_route(app: Flask, store: VoteStore, by_prompt: dict[str, Prompt]) -> None:
    """``POST /vote``: record the vote on a battle token, then reveal the two generators."""

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
        if store.pairing(token) is None:
            abort(404, "unknown or expired battle token")
        try:
            p = store.record_vote(token, CHOICES[choice])
        except VoteError as exc:
            abort(409, str(exc))
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
