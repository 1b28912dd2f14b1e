"""SpreadsheetArena's local arena: SQLite store, Flask app over real HTTP, and the CLI."""

from __future__ import annotations

import io
import json
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager

import openpyxl
import pytest
from werkzeug.serving import make_server

from minirepro.papers.spreadsheet_arena import cli
from minirepro.papers.spreadsheet_arena.app import create_app
from minirepro.papers.spreadsheet_arena.generators import CallableGenerator, default_generators
from minirepro.papers.spreadsheet_arena.prompts import make_prompts
from minirepro.papers.spreadsheet_arena.store import VoteError, VoteStore, read_votes

TOKEN = re.compile(r"name='token' value='([^']+)'")
GENS = default_generators()[:3]
PROMPTS = make_prompts(1, seed=0)


@contextmanager
def serving(db, **kw):
    app = create_app(db, generators=kw.pop("generators", GENS), prompts=kw.pop("prompts", PROMPTS),
                     n_boot=50, **kw)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        t.join(timeout=10)
        server.server_close()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def post(url, data, json_body=False):
    body = json.dumps(data).encode() if json_body else urllib.parse.urlencode(data).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json" if json_body else "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_store_votes_once_and_survives_reopen(tmp_path):
    db = tmp_path / "v.sqlite"
    s = VoteStore(db)
    t = s.new_pairing("finance-0000", "finance", "gen-a", "gen-b")
    with pytest.raises(VoteError, match="choice"):
        s.record_vote(t, "left")
    assert s.record_vote(t, "model_a").model_a == "gen-a"
    with pytest.raises(VoteError, match="already"):
        s.record_vote(t, "tie")
    with pytest.raises(VoteError, match="unknown"):
        s.record_vote("nope", "tie")
    with pytest.raises(ValueError):
        s.new_pairing("p", "c", "x", "x")
    again = VoteStore(db)
    assert again.n_votes() == 1 and list(again.votes()["winner"]) == ["model_a"]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_concurrent_voters_and_races(tmp_path):
    s = VoteStore(tmp_path / "v.sqlite")
    tokens = [s.new_pairing(f"p{i}", "table", "gen-a", "gen-b") for i in range(200)]
    race = s.new_pairing("race", "table", "gen-a", "gen-b")
    wins, errors = [], []

    def voter(chunk):
        for t in chunk:
            s.record_vote(t, "tie")
        try:
            s.record_vote(race, "model_b")
            wins.append(1)
        except VoteError:
            errors.append(1)

    threads = [threading.Thread(target=voter, args=(tokens[i::8],)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert s.n_votes() == 201 and len(wins) == 1 and len(errors) == 7
    con = sqlite3.connect(tmp_path / "v.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_arena_over_http_blind_vote_reveal_and_errors(tmp_path):
    with serving(tmp_path / "a.sqlite") as url:
        code, page = get(url + "/")
        assert code == 200 and page.count("<table class=\"sheet\">") >= 2
        assert all(g.name not in page for g in GENS), "the battle page names a generator"
        assert all(v in page for v in ("value='a'", "value='b'", "value='tie'", "value='both_bad'"))
        token = TOKEN.search(page).group(1)
        assert post(url + "/vote", {"token": token, "choice": "zzz"})[0] == 400
        assert post(url + "/vote", {"choice": "a"})[0] == 400
        assert post(url + "/vote", {"token": "forged", "choice": "a"})[0] == 404
        code, reveal = post(url + "/vote", {"token": token, "choice": "a"})
        assert code == 200 and sum(g.name in reveal for g in GENS) == 2
        assert post(url + "/vote", {"token": token, "choice": "b"})[0] == 409
        token2 = TOKEN.search(get(url + "/")[1]).group(1)
        code, js = post(url + "/vote", {"token": token2, "choice": "both_bad"}, json_body=True)
        assert code == 200 and json.loads(js)["winner"] == "both_bad"
        assert post(url + "/vote", [1, 2], json_body=True)[0] == 400
        req = urllib.request.Request(url + "/vote", data=b"{not json", method="POST",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 400 and "Traceback" not in e.value.read().decode()
        assert get(url + "/no-such-page")[0] == 404
        assert post(url + "/", {"x": 1})[0] == 405
        assert post(url + "/vote", {"token": "t" * 20000, "choice": "a"})[0] == 413
        code, board = get(url + "/leaderboard")
        assert code == 200 and "95% interval" in board
        rows = json.loads(get(url + "/api/leaderboard")[1])
        assert rows["votes"] == 2 and len(rows["rows"]) >= 2


def test_cell_contents_are_escaped(tmp_path):
    def evil(_text: str) -> bytes:
        wb = openpyxl.Workbook()
        wb.active.title = "<b>sheet"
        wb.active["A1"] = "<script>alert('x')</script>"
        wb.active["A2"] = '"><img src=x onerror=alert(1)>'
        buf = io.BytesIO()
        wb.save(buf)
        return buf.getvalue()

    def broken(_text: str) -> bytes:
        raise RuntimeError("model offline")

    gens = [CallableGenerator("evil-1", evil), CallableGenerator("evil-2", evil)]
    with serving(tmp_path / "e.sqlite", generators=gens) as url:
        code, page = get(url + "/")
    with serving(tmp_path / "f.sqlite", generators=[CallableGenerator("x", broken),
                                                    CallableGenerator("y", broken)]) as url:
        down = get(url + "/")
    assert down[0] == 503 and "Traceback" not in down[1]
    assert code == 200
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    assert "<img" not in page and "<b>sheet" not in page


def test_concurrent_http_voters(tmp_path):
    db = tmp_path / "c.sqlite"
    with serving(db) as url:
        get(url + "/")  # warm the workbook cache

        def voter(n):
            for _ in range(n):
                tok = TOKEN.search(get(url + "/")[1]).group(1)
                assert post(url + "/vote", {"token": tok, "choice": "tie"})[0] == 200

        threads = [threading.Thread(target=voter, args=(4,)) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
    assert VoteStore(db).n_votes() == 24


def test_cli_main_bad_input_and_export(tmp_path, capsys):
    assert cli.main([]) == 2
    assert cli.main(["bogus"]) == 2
    assert cli.main(["serve", "--port", "70000"]) == 2
    assert cli.main(["serve", "--port", "abc"]) == 2
    assert cli.main(["export", "--db", str(tmp_path / "missing.sqlite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5 and all(line.startswith("minirepro arena: error:") for line in err)
    db = tmp_path / "v.sqlite"
    s = VoteStore(db)
    for w in ("model_a", "tie", "model_b"):
        s.record_vote(s.new_pairing("finance-0000", "finance", "gen-minimal", "gen-stylish"), w)
    out = tmp_path / "votes.csv"
    assert cli.main(["export", "--db", str(db), "--out", str(out)]) == 0
    assert list(read_votes(out)["winner"]) == ["model_a", "tie", "model_b"]
    assert cli.main(["export", "--db", str(db), "--out", str(tmp_path / "no" / "x.csv")]) == 2
    assert cli.main(["leaderboard", "--db", str(db), "--n-boot", "20"]) == 0
    assert "gen-stylish" in capsys.readouterr().out
    assert cli.main(["--help"]) == 0


def _start_cli_server(db):
    code = ("import sys; from minirepro.papers.spreadsheet_arena.cli import main; "
            f"sys.exit(main(['serve', '--port', '0', '--db', {str(db)!r}, '--prompts', '1']))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert m, f"server did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    return proc, f"http://127.0.0.1:{m.group(1)}"


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        proc.wait(timeout=5)


def test_cli_serve_subprocess_votes_survive_restart(tmp_path):
    db = tmp_path / "s.sqlite"
    proc, url = _start_cli_server(db)
    try:
        for choice in ("a", "b", "tie"):
            tok = TOKEN.search(get(url + "/")[1]).group(1)
            assert post(url + "/vote", {"token": tok, "choice": choice})[0] == 200
    finally:
        _stop(proc)
    assert proc.returncode is not None  # the server process is gone; the votes are on disk
    with serving(db) as url2:  # a restarted arena on the same database
        assert json.loads(get(url2 + "/api/leaderboard")[1])["votes"] == 3
    out = tmp_path / "v.csv"
    assert cli.main(["export", "--db", str(db), "--out", str(out)]) == 0
    assert len(read_votes(out)) == 3


# ---------------------------------------------------------------- hardening (issue 29, item 11)

def _open(url, data=None):
    """``(status, headers)`` of a GET (or a form POST with ``data``), 4xx and 5xx included."""
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30) as r:
            r.read()
            return r.status, r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def _guarded(headers) -> None:
    csp = headers.get("Content-Security-Policy", "")
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, csp
    assert "script-src" not in csp and "form-action 'self'" in csp
    assert headers.get("X-Content-Type-Options") == "nosniff"
    assert headers.get("X-Frame-Options") == "DENY"


def test_security_headers_on_every_response(tmp_path):
    with serving(tmp_path / "h.sqlite") as url:
        page = get(url + "/")[1]
        token = TOKEN.search(page).group(1)
        for path, data, code in (("/", None, 200), ("/leaderboard", None, 200),
                                 ("/api/leaderboard", None, 200), ("/no-such-page", None, 404),
                                 ("/vote", {"token": "forged", "choice": "a"}, 404),
                                 ("/vote", {"choice": "a"}, 400), ("/", {"x": "1"}, 405),
                                 ("/vote", {"token": token, "choice": "tie"}, 200)):
            status, headers = _open(url + path, data)
            assert status == code, (path, status)
            _guarded(headers)
    assert "<script" not in page  # what the policy allows is all the page needs


def test_cli_server_names_no_software_even_on_its_own_error_pages(tmp_path):
    proc, url = _start_cli_server(tmp_path / "n.sqlite")
    try:
        status, headers = _open(url + "/")
        assert status == 200 and headers.get_all("Server") == ["minirepro-arena"]
        _guarded(headers)
        host, port = url.rsplit("/", 1)[-1].split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET / x HTTP/1.1\r\n\r\n")  # bad syntax: never reaches the app
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        assert head.split()[1] == "400" and "Server: minirepro-arena" in head
        assert "X-Frame-Options: DENY" in head and "nosniff" in head
        assert "werkzeug" not in raw.decode("latin-1").lower()
        assert "python" not in raw.decode("latin-1").lower()
    finally:
        _stop(proc)


def test_crawler_pairings_are_capped_per_client(tmp_path):
    db = tmp_path / "c.sqlite"
    with serving(db, max_open_per_client=5) as url:
        tokens = [TOKEN.search(get(url + "/")[1]).group(1) for _ in range(9)]
        store = VoteStore(db)
        assert store.n_open("127.0.0.1") == 5 and store.n_open() == 5
        assert post(url + "/vote", {"token": tokens[0], "choice": "a"})[0] == 404  # the oldest went
        assert post(url + "/vote", {"token": tokens[-1], "choice": "a"})[0] == 200
        assert store.n_open() == 4 and store.n_votes() == 1


def test_unvoted_pairings_expire(tmp_path, monkeypatch):
    # The store's clock, advanced by the test: with the wall clock, the three battles and the
    # first vote had to fit in the 1 s TTL however loaded the machine was, and a sleep stood
    # in for the time passing.
    import types

    from minirepro.papers.spreadsheet_arena import store as store_module

    now = [time.time()]
    monkeypatch.setattr(store_module, "time", types.SimpleNamespace(time=lambda: now[0]))
    db = tmp_path / "t.sqlite"
    with serving(db, pairing_ttl_s=1.0) as url:
        tokens = [TOKEN.search(get(url + "/")[1]).group(1) for _ in range(3)]
        assert post(url + "/vote", {"token": tokens[0], "choice": "b"})[0] == 200
        now[0] += 1.3  # 1.3 s later on the store's clock
        code, page = post(url + "/vote", {"token": tokens[1], "choice": "a"})
        assert code == 404 and "expired" in page
        get(url + "/")  # showing a battle sweeps the expired ones out
        store = VoteStore(db)
        assert store.n_open() == 1 and store.n_votes() == 1  # votes are never swept


def test_store_pairing_caps_and_old_database_migration(tmp_path):
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)  # the schema before pairings had an owner
    con.executescript("""
        CREATE TABLE pairings (token TEXT PRIMARY KEY, prompt_id TEXT NOT NULL, category TEXT NOT NULL,
            model_a TEXT NOT NULL, model_b TEXT NOT NULL, created REAL NOT NULL,
            voted INTEGER NOT NULL DEFAULT 0);
        INSERT INTO pairings VALUES ('old', 'p', 'c', 'gen-a', 'gen-b', 1.0, 0);""")
    con.commit()
    con.close()
    s = VoteStore(db, pairing_ttl_s=60, max_open_per_client=3, max_open=5)
    assert s.pairing("old") is None  # created in 1970: long expired
    for i in range(4):
        s.new_pairing(f"p{i}", "c", "gen-a", "gen-b", client="10.0.0.1")
    for i in range(3):
        s.new_pairing(f"q{i}", "c", "gen-a", "gen-b", client="10.0.0.2")
    assert s.n_open("10.0.0.1") == 2 and s.n_open("10.0.0.2") == 3 and s.n_open() == 5
    with pytest.raises(VoteError, match="expired"):
        s.record_vote("old", "tie")
    with pytest.raises(ValueError):
        VoteStore(db, pairing_ttl_s=0)


# ---------------------------------------------------------------- sessions behind one address (issue 50)

def test_store_owner_votes_address_ceiling_and_repeat_votes(tmp_path):
    from minirepro.papers.spreadsheet_arena.store import AlreadyVoted, NotYourBattle, UnknownBattle

    s = VoteStore(tmp_path / "o.sqlite", max_open_per_client=3, max_open_per_address=5)
    mine = [s.new_pairing(f"p{i}", "c", "gen-a", "gen-b", client="session:a", address="10.0.0.1")
            for i in range(4)]
    assert s.n_open(client="session:a") == 3  # a session keeps its 3 newest
    theirs = [s.new_pairing(f"q{i}", "c", "gen-a", "gen-b", client=f"session:{i}", address="10.0.0.1")
              for i in range(4)]
    assert s.n_open(address="10.0.0.1") == 5 and s.n_open() == 5  # the address's 5 newest
    s.new_pairing("r", "c", "gen-a", "gen-b", client="session:z", address="10.0.0.2")
    assert s.n_open(address="10.0.0.2") == 1 and s.n_open() == 6  # another address is apart
    for gone in mine[:3]:  # mine[0] to its session's cap, then two to the address's ceiling
        with pytest.raises(UnknownBattle, match="unknown or expired"):
            s.record_vote(gone, "tie", client="session:a")
    with pytest.raises(NotYourBattle):
        s.record_vote(theirs[-1], "tie", client="session:a")
    with pytest.raises(NotYourBattle):
        s.record_vote(theirs[-1], "tie", client="10.0.0.1")
    assert s.record_vote(theirs[-1], "model_b", client="session:3").model_b == "gen-b"
    with pytest.raises(AlreadyVoted) as again:
        s.record_vote(theirs[-1], "model_b", client="session:3")
    assert again.value.winner == "model_b" and again.value.pairing.token == theirs[-1]
    with pytest.raises(NotYourBattle):  # who may not vote learns nothing about the vote
        s.record_vote(theirs[-1], "model_b", client="session:a")
    assert s.record_vote(mine[-1], "tie").model_a == "gen-a"  # no client given: not checked
    assert s.n_votes() == 2
    with pytest.raises(ValueError):
        VoteStore(tmp_path / "o.sqlite", max_open_per_address=0)


def test_cached_sides_make_the_same_page_as_pair_html():
    from collections import Counter

    from minirepro.papers.spreadsheet_arena.app import _rendered, pair_page
    from minirepro.papers.spreadsheet_arena.render import pair_html

    p = PROMPTS[0]
    data = {g.name: g.generate(p, 0) for g in GENS[:2]}
    calls = Counter()

    def workbook(prompt, name):
        calls[name] += 1
        return data[name]

    side = _rendered(workbook, threading.Lock())
    a, b = list(data)
    assert pair_page(p.text, side(p, a, "A"), side(p, b, "B")) == pair_html(data[a], data[b], p.text)
    assert pair_page(p.text, side(p, b, "A"), side(p, a, "B")) == pair_html(data[b], data[a], p.text)
    assert calls == Counter({a: 1, b: 1})  # each workbook rendered once, for either side
