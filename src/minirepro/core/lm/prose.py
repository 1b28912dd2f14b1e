"""Natural text that ships offline: docstrings of Python's standard library.

The corpus's ``prose`` family reads ``data/stdlib_prose.txt``, a small text file
committed with the package (one paragraph per line, ASCII, normalised
whitespace). It was extracted once with :func:`extract_stdlib_prose` over the
fixed module list :data:`PROSE_MODULES`; shipping the file rather than
extracting at run time keeps the corpus byte-identical on every Python version
(docstrings change between 3.11, 3.12 and 3.13). :data:`PROSE_SHA256` pins the
file; :func:`load_prose` refuses a file that does not match it.

Re-extract (only when deliberately changing the text; the corpus fingerprint,
the tokenizer and the book models then change)::

    python -m minirepro.core.lm.prose > src/minirepro/core/lm/data/stdlib_prose.txt
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from functools import lru_cache
from pathlib import Path

PROSE_FILE = Path(__file__).with_name("data") / "stdlib_prose.txt"

# A fixed list of pure-Python standard-library modules with prose-rich docstrings.
PROSE_MODULES: tuple[str, ...] = (
    "argparse", "ast", "asyncio.events", "base64", "bisect", "calendar", "cmd", "codecs",
    "collections", "colorsys", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "doctest", "email.message", "enum", "filecmp",
    "fnmatch", "fractions", "ftplib", "functools", "getopt", "gettext", "glob", "gzip",
    "heapq", "hmac", "html.parser", "http.client", "http.cookiejar", "imaplib", "inspect",
    "ipaddress", "json", "locale", "logging", "mailbox", "mimetypes", "netrc", "numbers",
    "operator", "optparse", "os", "pathlib", "pdb", "pickle", "pkgutil", "platform",
    "plistlib", "poplib", "pprint", "profile", "pstats", "queue", "quopri", "random", "re",
    "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "smtplib", "socket",
    "socketserver", "statistics", "string", "subprocess", "tarfile", "tempfile",
    "textwrap", "threading", "timeit", "tokenize", "trace", "traceback", "turtle",
    "types", "typing", "unittest.case", "urllib.parse", "urllib.request", "uuid",
    "warnings", "wave", "weakref", "webbrowser", "xml.dom.minidom", "zipfile",
)

# The SHA-256 of the committed text file (see :func:`load_prose`).
PROSE_SHA256 = "7a6e8b74d59f15d48855c72790740240180ee44d43154fd0b0cd4481fbaa60f9"


def _paragraphs(doc: str) -> list[str]:
    """Prose paragraphs of a docstring: no code, no tables, no indented blocks."""
    out = []
    for block in re.split(r"\n\s*\n", doc):
        lines = block.split("\n")
        if any(ln.startswith((" ", "\t", ">>>", "...")) for ln in lines):
            continue  # code, examples, argument tables
        text = " ".join(ln.strip() for ln in lines)
        text = re.sub(r"\s+", " ", text).strip()
        if not text or not text.isascii() or len(text.split()) < 8:
            continue
        letters = sum(c.isalpha() or c == " " for c in text)
        if letters < 0.85 * len(text):  # mostly symbols: signatures, tables
            continue
        if any(s in text for s in ("::", "`", "http", "www.", "|", "==", "->", "{", "}")):
            continue
        out.append(text)
    return out


def extract_stdlib_prose(modules: tuple[str, ...] = PROSE_MODULES, max_words: int = 60) -> list[str]:
    """Docstring paragraphs of ``modules`` (module, classes, functions, methods), deduplicated.

    Paragraphs longer than ``max_words`` words are cut at sentence ends into
    pieces of at most ``max_words`` words (a longer single sentence is dropped).
    The order is the module list's, then ``inspect.getmembers`` order (sorted by name).
    """
    seen: set[str] = set()
    out: list[str] = []

    def add(doc: object) -> None:
        if not isinstance(doc, str) or not doc:
            return
        for para in _paragraphs(inspect.cleandoc(doc)):
            piece: list[str] = []
            for sent in re.split(r"(?<=[.!?])\s+", para):
                words = sent.split()
                if len(piece) + len(words) > max_words:
                    if 8 <= len(piece):
                        _keep(" ".join(piece))
                    piece = []
                if len(words) <= max_words:
                    piece += words
            if 8 <= len(piece) <= max_words:
                _keep(" ".join(piece))

    def _keep(text: str) -> None:
        if text not in seen:
            seen.add(text)
            out.append(text)

    for name in modules:
        mod = importlib.import_module(name)
        add(mod.__doc__)
        for _, obj in inspect.getmembers(mod):
            if getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                add(obj.__doc__)
            if inspect.isclass(obj):
                for _, meth in inspect.getmembers(obj, inspect.isfunction):
                    if getattr(meth, "__module__", None) == mod.__name__:
                        add(meth.__doc__)
    return out


@lru_cache(maxsize=1)
def load_prose() -> tuple[str, ...]:
    """The shipped paragraphs, one per line of ``data/stdlib_prose.txt`` (checked by SHA-256)."""
    data = PROSE_FILE.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != PROSE_SHA256:
        raise ValueError(f"{PROSE_FILE} has SHA-256 {digest[:16]}..., expected "
                         f"{PROSE_SHA256[:16]}...: the shipped text was modified; restore it "
                         "from git (or re-extract it and update PROSE_SHA256 on purpose)")
    return tuple(line for line in data.decode("ascii").split("\n") if line)


if __name__ == "__main__":  # pragma: no cover - the one-off extraction
    for line in extract_stdlib_prose():
        print(line)
