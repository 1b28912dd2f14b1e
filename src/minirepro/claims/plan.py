"""Each chapter's replication plan: which parameter its replications vary, their values,
the pilot's value, and so how many runs a pooled verdict is planned on.

Read from ``book/claims/robustness_policy.yml``; a chapter not listed varies ``seed``.
A chapter whose models are checked artifacts trained on fixed seeds varies what a run
still draws (``param``: the test data) or cannot be re-seeded (``fixed``).

- The **replications** are ``k`` runs (default :data:`K`) at values ``base + i * step``
  (``base`` the parameter's default, or 0; ``step`` :data:`STEP`, far apart, so chapters
  that derive several seeds from the base share none).
- The **pooled verdict** is decided on the units of the recorded run and of every
  replication whose value differs from the recorded run's (for ``seed`` the first
  replication *is* the recorded run).
- ``pool: by-unit`` (for a plan that re-draws the test data of the same units, e.g. model
  seeds that are artifacts): the pooled verdict counts each unit once, with the mean over its
  draws, instead of joining the draws as if they were new units.
- The **pilot** is one run at ``base + PILOT_OFFSET``: its units are never reported; they
  give each rule's spread for its power (:mod:`minirepro.claims.power`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from minirepro import chapters
from minirepro.chapters import Chapter, repo_root

POLICY_FILE = Path("book") / "claims" / "robustness_policy.yml"
K = 5
STEP = 1000
PILOT_OFFSET = 900_000


def policy(name: str, root: Path | None = None) -> dict[str, Any]:
    """How the chapter called ``name`` is re-seeded: ``{"param": NAME, "k": K, ...}`` or
    ``{"fixed": REASON}`` (the plan's table is keyed by chapter name; nothing is resolved)."""
    root = (root or repo_root()).resolve()
    path = root / POLICY_FILE
    table = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    pol = dict((table or {}).get(name) or {"param": "seed"})
    if ("param" in pol) == ("fixed" in pol):
        raise ValueError(f"{path}: chapter {name!r} needs exactly one of 'param' or 'fixed'")
    if "param" in pol:
        pol.setdefault("k", K)
        if not isinstance(pol["k"], int) or pol["k"] < 1:
            raise ValueError(f"{path}: chapter {name!r}: k must be an int >= 1, got {pol['k']!r}")
    return pol


def _default(chapter: Chapter, param: str) -> Any:
    if param not in chapter.parameters:
        raise ValueError(f"chapter {chapter.name!r} has no `{param}` parameter")
    return chapter.parameters[param].default


def replication_values(chapter: Chapter, k: int | None = None, root: Path | None = None) -> list[int]:
    """The values of the varied parameter for ``k`` replications (the plan's ``k`` by default)."""
    pol = policy(chapter.name, root)
    if "fixed" in pol:
        raise ValueError(f"chapter {chapter.name!r} is not re-seeded ({POLICY_FILE}): {pol['fixed']}")
    base = int(_default(chapter, pol["param"]) or 0)
    return [base + i * STEP for i in range(k or pol["k"])]


def pilot_value(chapter: Chapter, root: Path | None = None) -> int:
    """The varied parameter's value for the pilot run (never a reported value)."""
    pol = policy(chapter.name, root)
    if "fixed" in pol:
        raise ValueError(f"chapter {chapter.name!r} is not re-seeded ({POLICY_FILE}): {pol['fixed']}")
    return int(_default(chapter, pol["param"]) or 0) + PILOT_OFFSET


def planned_runs(name: str | None, root: Path | None = None) -> int:
    """How many runs' units the chapter's pooled verdict is planned on (1 without a plan, and 1
    for a ``by-unit`` plan, whose draws average within each unit rather than add units).

    ``name`` comes from a notebook's kernel (``results.declare_claim``), a process of its own:
    the chapter is resolved here, once."""
    if not name:
        return 1
    try:
        pol = policy(name, root)
        if "fixed" in pol or pol.get("pool") == "by-unit":
            return 1
        chapter = chapters.get(name, root)
        default = _default(chapter, pol["param"])
        values = replication_values(chapter, root=root)
    except Exception:  # noqa: BLE001 - no book here (a test's toy, a student's copy): one run
        return 1
    return len(values) + (0 if default in values else 1)


__all__ = ["K", "PILOT_OFFSET", "POLICY_FILE", "STEP", "pilot_value", "planned_runs", "policy",
           "replication_values"]
