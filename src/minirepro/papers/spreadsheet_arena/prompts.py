"""Templated spreadsheet requests in four categories, standing in for the arena's user prompts.

Each prompt is a short natural-language request plus the structured parameters a
programmatic generator needs (a real model would read only ``text``). The
categories follow the kinds of request the paper reports: a finance model, a
household budget, a tracker and a plain table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

CATEGORIES: tuple[str, ...] = ("finance", "budget", "tracker", "table")

_COMPANIES = ("Alder Bikes", "Brightline Cafe", "Cobalt Software", "Dune Outfitters", "Ember Foods",
              "Fjord Analytics", "Granite Tools", "Harbor Clinic", "Iris Studio", "Juniper Farms")
_BUDGET_ITEMS = ("Rent", "Groceries", "Utilities", "Transport", "Insurance", "Phone", "Childcare",
                 "Dining out", "Savings", "Gym", "Streaming", "Gifts")
_TRACK_TOPICS = ("website relaunch", "office move", "wedding planning", "grant application",
                 "product launch", "kitchen renovation", "thesis", "hiring round")
_TASK_WORDS = ("Draft", "Review", "Book", "Order", "Test", "Approve", "Send", "Plan", "Design", "Fix")
_TASK_OBJECTS = ("budget", "venue", "copy", "supplier", "prototype", "contract", "schedule", "slides",
                 "invitations", "layout", "survey", "report")
_TABLE_TOPICS = ("inventory", "sales by region", "price list", "parts order", "stock count")
_REGIONS = ("North", "South", "East", "West", "Central")
_PRODUCTS = ("Widget", "Gadget", "Sprocket", "Bracket", "Gizmo", "Lever", "Valve", "Hinge", "Clamp",
             "Spindle", "Pulley", "Gear", "Bolt", "Nozzle", "Socket")


@dataclass(frozen=True)
class Prompt:
    """One request: an id, its category, the text a model would read, and the template values."""

    id: str
    category: str
    text: str
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


def _finance(rng: np.random.Generator, i: int) -> Prompt:
    company = _COMPANIES[rng.integers(len(_COMPANIES))]
    years = int(rng.integers(3, 6))
    p = {"company": company, "years": years,
         "revenue": float(rng.integers(5, 50) * 20_000), "growth": float(rng.integers(3, 16)) / 100,
         "cogs": float(rng.integers(35, 70)) / 100, "opex": float(rng.integers(2, 12) * 10_000),
         "tax": float(rng.choice([0.2, 0.21, 0.25, 0.3]))}
    text = (f"Build a {years}-year profit and loss projection for {company}: starting revenue "
            f"${p['revenue']:,.0f}, {p['growth']:.0%} annual growth, cost of sales {p['cogs']:.0%} of "
            f"revenue, fixed operating costs ${p['opex']:,.0f} a year, tax rate {p['tax']:.0%}.")
    return Prompt(f"finance-{i:04d}", "finance", text, p)


def _budget(rng: np.random.Generator, i: int) -> Prompt:
    n_items = int(rng.integers(4, 8))
    months = int(rng.integers(3, 7))
    items = [str(x) for x in rng.choice(_BUDGET_ITEMS, size=n_items, replace=False)]
    amounts = [[float(rng.integers(2, 60) * 10) for _ in range(months)] for _ in items]
    income = float(np.ceil(sum(map(sum, amounts)) / months * rng.uniform(1.05, 1.4) / 100) * 100)
    p = {"items": items, "months": months, "amounts": amounts, "income": income,
         "save_rate": float(rng.choice([0.05, 0.1, 0.15, 0.2]))}
    text = (f"Make a household budget for {months} months with {', '.join(items)}; monthly income "
            f"${income:,.0f} and a savings target of {p['save_rate']:.0%} of income.")
    return Prompt(f"budget-{i:04d}", "budget", text, p)


def _tracker(rng: np.random.Generator, i: int) -> Prompt:
    topic = _TRACK_TOPICS[rng.integers(len(_TRACK_TOPICS))]
    n = int(rng.integers(5, 10))
    tasks = [f"{rng.choice(_TASK_WORDS)} {rng.choice(_TASK_OBJECTS)}" for _ in range(n)]
    owners = [str(x) for x in rng.choice(["Ana", "Ben", "Chen", "Dara", "Eli"], size=n)]
    status = [str(x) for x in rng.choice(["Done", "In progress", "Not started"], size=n)]
    done = [1.0 if s == "Done" else (float(rng.integers(1, 9)) / 10 if s == "In progress" else 0.0)
            for s in status]
    due = [int(rng.integers(1, 90)) for _ in range(n)]
    p = {"topic": topic, "tasks": tasks, "owners": owners, "status": status, "done": done, "due": due}
    text = f"Create a task tracker for a {topic} with {n} tasks, owners, due dates, status and % complete."
    return Prompt(f"tracker-{i:04d}", "tracker", text, p)


def _table(rng: np.random.Generator, i: int) -> Prompt:
    topic = _TABLE_TOPICS[rng.integers(len(_TABLE_TOPICS))]
    n = int(rng.integers(5, 13))
    rows = [(str(rng.choice(_PRODUCTS)), str(rng.choice(_REGIONS)), int(rng.integers(1, 200)),
             float(rng.integers(100, 5000)) / 100) for _ in range(n)]
    p = {"topic": topic, "rows": rows, "discount": float(rng.choice([0.0, 0.05, 0.1]))}
    text = f"Put this {topic} in a table with units, unit price and revenue per line ({n} lines)."
    return Prompt(f"table-{i:04d}", "table", text, p)


_MAKERS = {"finance": _finance, "budget": _budget, "tracker": _tracker, "table": _table}


def make_prompts(n_per_category: int, seed: int = 0,
                 categories: tuple[str, ...] = CATEGORIES) -> list[Prompt]:
    """``n_per_category`` templated prompts for each category, in a fixed order given ``seed``.

    Returns:
        ``len(categories) * n_per_category`` prompts, ids ``"<category>-<nnnn>"``.
    """
    if not isinstance(n_per_category, (int, np.integer)) or n_per_category < 1:
        raise ValueError(f"n_per_category must be a positive integer, got {n_per_category!r}")
    unknown = [c for c in categories if c not in _MAKERS]
    if unknown or not categories:
        raise ValueError(f"unknown categories {unknown}; expected a subset of {CATEGORIES}")
    rng = np.random.default_rng([seed, 5])
    return [_MAKERS[c](rng, i) for c in categories for i in range(int(n_per_category))]
