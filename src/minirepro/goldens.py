"""Golden results that hold on any processor: metrics compared within declared tolerances.

A chapter's golden is two files in ``tests/goldens/``:

``NN-slug.ipynb``
    the chapter executed at smoke scale. nbval re-executes it and compares, as exact
    text, the cells marked ``# NBVAL_CHECK_OUTPUT``. Those print only what no processor
    can change: verdicts, counts, shapes.
``NN-slug.results.json``
    the ``results.json`` of that execution: metrics, their declared tolerances
    (``results.record_metric(name, value, rtol=..., atol=...)``) and the claims. While
    nbval re-executes the notebook, the kernel writes a fresh ``results.json``; the
    golden test compares the two with :func:`compare`.

Numbers that training computes differ in their last digits between processors (torch
picks other kernels), so they are compared within the tolerance the chapter declared
beside them, never as text.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from minirepro.chapters import get, repo_root
from minirepro.run.folder import RunFailed
from minirepro.run.notebook import execute, kernel_env, to_ipynb
from minirepro.run.process import stop_signals_raise

DEFAULT_RTOL = 1e-6  # a float recorded without a tolerance must agree to this


def results_path(golden_ipynb: Path) -> Path:
    """``tests/goldens/NN-slug.results.json`` beside ``NN-slug.ipynb``."""
    return golden_ipynb.with_name(golden_ipynb.stem + ".results.json")


def _close(expected: Any, actual: Any, tol: dict[str, float] | None) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool) or isinstance(expected, str) \
            or isinstance(actual, str):
        return expected == actual
    if isinstance(expected, int) and isinstance(actual, int) and tol is None:
        return expected == actual
    e, a = float(expected), float(actual)
    if math.isnan(e) or math.isnan(a):
        return math.isnan(e) and math.isnan(a)
    rtol = tol["rtol"] if tol else DEFAULT_RTOL
    atol = tol["atol"] if tol else 0.0
    return abs(a - e) <= atol + rtol * abs(e)


def compare(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Differences between a stored golden record and a fresh one, as readable lines.

    Metrics: every stored metric must be present and within the stored tolerance (or
    exact for ints, strings and bools without one); a metric that only the fresh run
    has, or a tolerance that changed, means the golden is stale. Claims: the same ids,
    and the same verdict for every claim not declared ``machine_dependent``.
    """
    problems: list[str] = []
    em, am = expected.get("metrics", {}), actual.get("metrics", {})
    et, at = expected.get("tolerances", {}), actual.get("tolerances", {})
    for name, value in em.items():
        if name not in am:
            problems.append(f"metric {name!r} is missing from the fresh run")
            continue
        tol = et.get(name)
        if not _close(value, am[name], tol):
            bound = (f"rtol {tol['rtol']:g}, atol {tol['atol']:g}" if tol
                     else f"rtol {DEFAULT_RTOL:g}" if isinstance(value, float) else "exact")
            problems.append(f"metric {name!r}: golden {value!r}, fresh {am[name]!r} (tolerance {bound})")
    for name in am:
        if name not in em:
            problems.append(f"metric {name!r} is new (not in the golden): re-make the golden")
    for name in set(et) | set(at):
        if name in em and name in am and et.get(name) != at.get(name):
            problems.append(f"metric {name!r}: tolerance changed from {et.get(name)} to {at.get(name)}")
    ec = {c["id"]: c for c in expected.get("claims", [])}
    ac = {c["id"]: c for c in actual.get("claims", [])}
    if set(ec) != set(ac):
        problems.append(f"claims differ: golden {sorted(ec)}, fresh {sorted(ac)}")
    for cid in sorted(set(ec) & set(ac)):
        if ec[cid].get("machine_dependent") or ac[cid].get("machine_dependent"):
            continue
        if ec[cid].get("verdict") != ac[cid].get("verdict"):
            problems.append(f"claim {cid!r}: golden verdict {ec[cid].get('verdict')!r}, "
                            f"fresh {ac[cid].get('verdict')!r}")
    return problems


def load(path: Path) -> dict[str, Any]:
    """Read a results record, with a clear error when it is missing or unreadable."""
    if not path.is_file():
        raise FileNotFoundError(f"no results record at {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc


GOLDEN_SCALE = "smoke"


def make_golden(name: str, root: Path | None = None) -> Path:
    """Execute a chapter at smoke scale and store it as ``tests/goldens/<slug>.ipynb``.

    Beside it goes ``<slug>.results.json``: the metrics (with their declared
    tolerances) and claims of that execution, which the golden test compares with a
    fresh execution (:mod:`minirepro.goldens`). Bars are off (``TQDM_DISABLE=1``) and
    one thread count is fixed, so the stored outputs are what nbval will see. A failed
    execution is kept in ``runs/goldens/<chapter>-FAILED/`` with its log.
    """
    import nbformat

    root = (root or repo_root()).resolve()
    chapter = get(name, root)
    target = root / "tests" / "goldens" / f"{chapter.slug}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        ipynb = to_ipynb(chapter, tmpdir / "source.ipynb")
        out = tmpdir / "golden.ipynb"
        record = tmpdir / "results.json"
        env = kernel_env({"MINIREPRO_SCALE": GOLDEN_SCALE, "TQDM_DISABLE": "1",
                          "MINIREPRO_ROOT": str(root), "MINIREPRO_RESULTS": str(record)})
        env.pop("MINIREPRO_FIGDIR", None)
        try:
            with stop_signals_raise():  # SIGTERM/SIGHUP: the kernel's tree is stopped, no golden
                execute(ipynb, out, {"scale": GOLDEN_SCALE} if "scale" in chapter.parameters else {},
                        env, cwd=target.parent, log=tmpdir / "papermill.log")
        except RuntimeError as exc:
            kept = root / "runs" / "goldens" / f"{chapter.name}-FAILED"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(tmpdir, kept)
            raise RunFailed(f"golden for {chapter.name!r} failed: {exc}; log and partial notebook "
                            f"in {kept}", kept) from exc
        nb = nbformat.read(out, as_version=4)
        recorded = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # timings would make every re-made golden differ
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    nbformat.write(nb, target)
    stored = {"chapter": chapter.name, "metrics": recorded.get("metrics", {}),
              "tolerances": recorded.get("tolerances", {}), "claims": recorded.get("claims", [])}
    results_path(target).write_text(json.dumps(stored, indent=2, default=str) + "\n", encoding="utf-8")
    return target


# --- The smoke book's own executions, compared with the goldens ------------------------------
#
# `make test` executes each chapter once per kernel set: the smoke book build executes every
# notebook natively (into its execution cache); :func:`compare_built` compares those executed
# notebooks with the goldens exactly as nbval would (the cells marked NBVAL_CHECK_OUTPUT, their
# text outputs after the sanitize rules) and the build's results records with the golden
# records (within the declared tolerances). The portable kernel set re-executes the goldens
# under nbval (`make goldens-portable`).

CHECK_MARK = "NBVAL_CHECK_OUTPUT"


def sanitize_rules(path: Path) -> list[tuple[str, str]]:
    """The ``(regex, replacement)`` pairs of an nbval sanitize file, in order."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    return [(parser.get(s, "regex"), parser.get(s, "replace")) for s in parser.sections()]


def _sanitize(text: str, rules: list[tuple[str, str]]) -> str:
    import re

    for rx, rep in rules:
        text = re.sub(rx, rep, text)
    return text


def checked_texts(cell: Any, rules: list[tuple[str, str]]) -> list[str]:
    """What nbval compares of a code cell: its streams joined per name, and the text/plain and
    text/html of its results and displays, each sanitized (images are not compared)."""
    streams: dict[str, str] = {}
    out: list[str] = []
    for o in cell.get("outputs", []):
        kind = o.get("output_type")
        if kind == "stream":
            streams[o.get("name", "stdout")] = streams.get(o.get("name", "stdout"), "") + "".join(o.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            data = o.get("data", {})
            for mime in ("text/plain", "text/html", "image/svg+xml"):
                if mime in data:
                    value = data[mime]
                    out.append(f"{mime}: " + _sanitize("".join(value) if isinstance(value, list) else value, rules))
        elif kind == "error":
            out.append(f"error: {o.get('ename')}: {o.get('evalue')}")
    return [f"{name}: " + _sanitize(text, rules) for name, text in sorted(streams.items())] + out


def compare_notebooks(golden: Any, executed: Any, rules: list[tuple[str, str]]) -> list[str]:
    """Where ``executed`` differs from ``golden`` in a checked cell (matched by code, in order)."""
    problems = []
    code = [c for c in executed.cells if c.cell_type == "code"]
    pos = 0
    for cell in golden.cells:
        if cell.cell_type != "code" or CHECK_MARK not in cell.source:
            continue
        while pos < len(code) and code[pos].source.strip() != cell.source.strip():
            pos += 1
        if pos == len(code):
            problems.append(f"checked cell not found in the executed notebook: {cell.source.splitlines()[0]!r}")
            pos = 0
            continue
        want, got = checked_texts(cell, rules), checked_texts(code[pos], rules)
        if want != got:
            problems.append(f"checked cell {cell.source.splitlines()[0]!r}… differs:\n"
                            f"    golden:   {want!r}\n    executed: {got!r}")
        pos += 1
    return problems


def compare_built(root: Path | None = None, scale: str = GOLDEN_SCALE) -> dict[str, list[str]]:
    """Per chapter (its slug), where the ``scale`` build's execution differs from its golden:
    checked cells (as nbval compares them) and the results record (as :func:`compare` does).

    Reads the build's execution cache (``_build/.jupyter_cache``) and results records
    (``_build/<scale>/results``); executes nothing. A chapter the build did not execute is a
    problem too.
    """
    import nbformat
    from jupyter_cache import get_cache

    from minirepro.book import _md_config, inputs_hash, read_notebook
    from minirepro.chapters import discover

    root = (root or repo_root()).resolve()
    cache_path = root / "_build" / ".jupyter_cache" / f"{scale}-{inputs_hash(root)}"
    rules = sanitize_rules(root / "tests" / "goldens" / "sanitize.cfg")
    md_config = _md_config(root)
    cache = get_cache(str(cache_path)) if cache_path.is_dir() else None
    out: dict[str, list[str]] = {}
    for ch in discover(root):
        golden_path = root / "tests" / "goldens" / f"{ch.slug}.ipynb"
        problems: list[str] = []
        if cache is None:
            out[ch.slug] = [f"no {scale} build of this code ({cache_path} is missing): run the {scale} book first"]
            continue
        try:
            hit = cache.match_cache_notebook(read_notebook(ch.path, md_config))
        except KeyError:
            out[ch.slug] = [f"the {scale} build did not execute {ch.path.name} (not in its cache)"]
            continue
        executed = cache.get_cache_bundle(hit.pk).nb
        problems += compare_notebooks(nbformat.read(golden_path, as_version=4), executed, rules)
        built = root / "_build" / scale / "results" / f"{ch.slug}.json"
        if not built.is_file():
            problems.append(f"the {scale} build recorded no results ({built})")
        else:
            problems += compare(load(results_path(golden_path)), load(built))
        out[ch.slug] = problems
    return out
