"""The runs behind the ledger: the recorded run, its replications and its pilot.

``minirepro claims --update`` runs a chapter at book scale and stores its claims (rules,
per-unit data, this run's verdicts) in ``book/claims/<slug>.json``;
``--robustness K`` runs the chapter's K replications (:mod:`minirepro.claims.plan`)
through the sweep machinery and stores every run's claims in
``book/claims/replications/<slug>.json``; ``--pilot`` runs the pilot (seeds never
reported) into ``book/claims/pilot/<slug>.json``. After each, the pooled verdicts are
computed again from the records (:func:`minirepro.claims.pool.pool_entry`) and written
into the ledger entry. These runs are recorded once; no build re-runs them.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
from pathlib import Path
from typing import Any

from minirepro.chapters import Chapter, repo_root
from minirepro.claims import plan
from minirepro.claims.ledger import claims_path, notebook_sha, pilot_path, replications_path
from minirepro.claims.pool import pool_entry
from minirepro.run.folder import run_chapter
from minirepro.run.sweep import sweep


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def _claim_data(claims: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["id"]: {"verdict": c.get("verdict"), "data": c.get("data")} for c in claims}


def update(chapter: Chapter, root: Path | None = None, scale: str = "book") -> Path:
    """Run a chapter at ``scale``, store its claims in ``book/claims/<slug>.json``, and pool."""
    root = (root or repo_root()).resolve()
    run = run_chapter(chapter, {}, scale=scale, root=root, quiet_bars=True)
    claims = [{**c, "run_verdict": c.get("verdict"), "run_measured": c.get("measured")}
              for c in run.results["claims"]]
    entry = {"chapter": chapter.name, "slug": chapter.slug, "title": chapter.title,
             "scale": scale, "notebook_sha": notebook_sha(chapter),
             "commit": git_commit(root), "date": _dt.date.today().isoformat(),
             "seconds": run.results["seconds"], "cpu_seconds": run.results.get("cpu_seconds"),
             "load": run.results.get("load"), "params": run.results["params"],
             "seeds": run.results.get("seeds", {}), "metrics": run.results["metrics"],
             "claims": claims}
    return _write(claims_path(chapter, root), pool_entry(entry, root))


def repool(chapter: Chapter, root: Path | None = None) -> Path | None:
    """Decide the stored entry's claims again from the records (nothing is run)."""
    root = (root or repo_root()).resolve()
    path = claims_path(chapter, root)
    if not path.is_file():
        return None
    entry = json.loads(path.read_text(encoding="utf-8"))
    return _write(path, pool_entry(entry, root))


def replicate(chapter: Chapter, k: int | None = None, root: Path | None = None, scale: str = "book",
              jobs: int = 1, scheduler: str | None = None) -> Path:
    """Run the chapter's replications (its plan's parameter at K values) and store every run's
    claims in ``book/claims/replications/<slug>.json``; then pool the ledger entry again."""
    root = (root or repo_root()).resolve()
    pol = plan.policy(chapter.name, root)
    if "fixed" in pol:
        raise ValueError(f"chapter {chapter.name!r} is not re-seeded ({plan.POLICY_FILE}): {pol['fixed']}")
    if k is not None and k < 1:
        raise ValueError(f"--robustness needs K >= 1, got {k}")
    values = plan.replication_values(chapter, k, root)
    param = pol["param"]
    folder = sweep(chapter, {param: values}, jobs=jobs, scale=scale, root=root, scheduler=scheduler)
    rows = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    runs = []
    for row in rows:
        value = row["params"][param]
        rec: dict[str, Any] = {"value": value, "ok": row["ok"], "seconds": row.get("seconds")}
        res = Path(row["folder"]) / "results.json"
        if row["ok"] and res.is_file():
            rec["claims"] = _claim_data(json.loads(res.read_text(encoding="utf-8"))["claims"])
        else:
            rec["error"] = row.get("error", "")
        runs.append(rec)
    record = {"chapter": chapter.name, "slug": chapter.slug, "scale": scale, "k": len(values),
              "param": param, "values": values, "notebook_sha": notebook_sha(chapter),
              "commit": git_commit(root), "date": _dt.date.today().isoformat(),
              "failed": sum(1 for r in runs if not r["ok"]), "runs": runs}
    path = _write(replications_path(chapter.slug, root), record)
    repool(chapter, root)
    return path


def pilot(chapter: Chapter, root: Path | None = None, scale: str = "book") -> Path:
    """Run the chapter's pilot (its plan's parameter at the pilot value: seeds never reported)
    and store each claim's data in ``book/claims/pilot/<slug>.json``; then pool again."""
    root = (root or repo_root()).resolve()
    pol = plan.policy(chapter.name, root)
    value = plan.pilot_value(chapter, root)
    run = run_chapter(chapter, {pol["param"]: value}, scale=scale, root=root, quiet_bars=True)
    record = {"chapter": chapter.name, "slug": chapter.slug, "scale": scale, "param": pol["param"],
              "value": value, "notebook_sha": notebook_sha(chapter), "commit": git_commit(root),
              "date": _dt.date.today().isoformat(), "seconds": run.results["seconds"],
              "claims": {c["id"]: c.get("data") for c in run.results["claims"]}}
    path = _write(pilot_path(chapter.slug, root), record)
    repool(chapter, root)
    return path


def trend(chapter: Chapter, root: Path | None = None, jobs: int = 1, scheduler: str | None = None) -> Path:
    """Run the chapter at each size of its plan's trend (book scale otherwise) and record each
    named claim's effect per size in ``book/claims/trend/<slug>.json``."""
    from minirepro.claims.trend import effect_of

    root = (root or repo_root()).resolve()
    spec = plan.policy(chapter.name, root).get("trend")
    if not spec:
        raise ValueError(f"chapter {chapter.name!r} has no trend in {plan.POLICY_FILE}")
    param, values = spec["param"], list(spec["values"])
    if len(values) < 3:
        raise ValueError(f"a trend needs at least 3 sizes; {chapter.name!r} has {values}")
    folder = sweep(chapter, {param: values}, jobs=jobs, scale="book", root=root, scheduler=scheduler)
    rows = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    out: dict[str, list[dict[str, Any]]] = {key: [] for key in spec["claims"]}
    seconds = {}
    for row in rows:
        value = row["params"][param]
        seconds[str(value)] = row.get("seconds")
        res = Path(row["folder"]) / "results.json"
        if not (row["ok"] and res.is_file()):
            continue
        claims = {c["id"]: c for c in json.loads(res.read_text(encoding="utf-8"))["claims"]}
        for key in spec["claims"]:
            cid, _, part = key.partition("/")
            if cid in claims:
                eff = effect_of(claims[cid], part or None)
                out[key].append({"value": value, "verdict": claims[cid].get("verdict"), **(eff or {})})
    record = {"chapter": chapter.name, "slug": chapter.slug, "param": param, "values": values,
              "spec": spec, "notebook_sha": notebook_sha(chapter), "commit": git_commit(root),
              "date": _dt.date.today().isoformat(), "seconds": seconds, "claims": out}
    return _write(root / "book" / "claims" / "trend" / f"{chapter.slug}.json", record)


def full(chapter: Chapter, root: Path | None = None) -> Path:
    """Run the chapter's ``full`` preset once and record its verdicts (and its time) in
    ``book/claims/full/<slug>.json``: the ledger's column "at full scale"."""
    root = (root or repo_root()).resolve()
    run = run_chapter(chapter, {}, scale="full", root=root, quiet_bars=True)
    record = {"chapter": chapter.name, "slug": chapter.slug, "scale": "full",
              "notebook_sha": notebook_sha(chapter), "commit": git_commit(root),
              "date": _dt.date.today().isoformat(), "seconds": run.results["seconds"],
              "cpu_seconds": run.results.get("cpu_seconds"), "params": run.results["params"],
              "claims": {c["id"]: {"verdict": c.get("verdict"), "measured": c.get("measured"),
                                   "n_units": c.get("n_units")} for c in run.results["claims"]}}
    return _write(root / "book" / "claims" / "full" / f"{chapter.slug}.json", record)


__all__ = ["full", "git_commit", "pilot", "replicate", "repool", "trend", "update"]
