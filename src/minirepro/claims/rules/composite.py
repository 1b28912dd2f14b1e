"""Rules made of rules: :class:`AllOf` (a claim of several parts) and :class:`Given` (a rule
with preconditions), and :func:`rule_from_spec`, which rebuilds any rule from its spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import NOT_REPRODUCED, NOT_TESTABLE, PARTLY, REPRODUCED, Outcome, Rule
from .correlation import Correlation
from .paired import Better, Equivalent, NonInferior
from .threshold import Threshold


@dataclass(frozen=True)
class AllOf(Rule):
    """A claim of several parts, each with its own rule.

    ``decide(part_a={...}, part_b={...})``: one keyword per part, holding that part's
    data as a dict. Reproduced when every part is reproduced; partly when at least
    ``partly_min`` parts are (``partly_min`` must be a strict majority of the parts,
    or ``None`` for no "partly"); otherwise not reproduced when a part was tested and
    failed (not reproduced or partly), and not testable when no part failed but some
    part could not be tested (a claim cannot be refuted by a part that was not tested).
    """

    parts: Mapping[str, Rule]
    partly_min: int | None = None

    def __post_init__(self) -> None:
        if len(self.parts) < 2:
            raise ValueError("AllOf needs at least two parts; use the part's rule directly")
        k = len(self.parts)
        if self.partly_min is not None and not (k / 2 < self.partly_min < k):
            raise ValueError(f"partly_min must be a strict majority below all ({k // 2 + 1}..{k - 1}) "
                             f"of {k} parts, got {self.partly_min}")

    def sentence(self) -> str:
        inner = " ".join(f"[{name}] {rule.sentence()}" for name, rule in self.parts.items())
        k = len(self.parts)
        partly = (f"partly if at least {self.partly_min} of the {k} parts are reproduced"
                  if self.partly_min else "no partial verdict")
        return (f"Reproduced if all {k} parts are reproduced; {partly}; not testable if no part failed "
                f"but one could not be tested; not reproduced otherwise. {inner}")

    def design_problem(self, n_seeds: int | None) -> str | None:
        probs = [f"{n}: {p}" for n, r in self.parts.items() if (p := r.design_problem(n_seeds))]
        return "; ".join(probs) or None

    def decide(self, **parts: Mapping[str, Any]) -> Outcome:
        unknown, missing = set(parts) - set(self.parts), set(self.parts) - set(parts)
        if unknown or missing:
            raise TypeError(f"AllOf.decide: parts {sorted(self.parts)} expected; "
                            f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        return self.combine({name: rule.decide(**parts[name]) for name, rule in self.parts.items()})

    def combine(self, outs: Mapping[str, Outcome]) -> Outcome:
        """The claim's outcome from its parts' outcomes (see the class docstring)."""
        n_rep = sum(o.verdict == REPRODUCED for o in outs.values())
        failed = any(o.verdict in (PARTLY, NOT_REPRODUCED) for o in outs.values())
        text = "; ".join(f"{name}: {o.verdict} ({o.measured})" for name, o in outs.items())
        details = {name: {"verdict": o.verdict, **o.details} for name, o in outs.items()}
        if n_rep == len(outs):
            return Outcome(REPRODUCED, text, details)
        if self.partly_min is not None and n_rep >= self.partly_min:
            return Outcome(PARTLY, text, details)
        return Outcome(NOT_REPRODUCED if failed else NOT_TESTABLE, text, details)

    def n_units(self, **parts: Any) -> int:
        return min(rule.n_units(**parts[name]) for name, rule in self.parts.items() if name in parts)


@dataclass(frozen=True)
class Given(Rule):
    """A rule with preconditions: what the miniature must be able to show at all.

    ``decide(preconditions={name: data, ...}, **rule_data)``. Each precondition is a rule
    (usually a :class:`Threshold` on the baseline or the substrate: "the raw reward model's
    accuracy is above chance, with its interval"). If any precondition is not reproduced
    the verdict is *not testable at this scale*, naming the precondition and its
    measurement; otherwise the verdict is ``rule``'s.
    """

    rule: Rule
    preconditions: Mapping[str, Rule]

    def __post_init__(self) -> None:
        if not self.preconditions:
            raise ValueError("Given needs at least one precondition")
        if isinstance(self.rule, Given):
            raise ValueError("nest preconditions in one Given, not a Given in a Given")

    def sentence(self) -> str:
        pre = "; ".join(f"[{name}] {r.sentence()}" for name, r in self.preconditions.items())
        return (f"{self.rule.sentence()} Not testable unless every precondition is reproduced: {pre}")

    def design_problem(self, n_seeds: int | None) -> str | None:
        return self.rule.design_problem(n_seeds)

    def check(self, preconditions: Mapping[str, Mapping[str, Any]]) -> tuple[bool, str, dict[str, Any]]:
        """``(met, text, details)`` of the preconditions on their data."""
        unknown, missing = set(preconditions) - set(self.preconditions), set(self.preconditions) - set(preconditions)
        if unknown or missing:
            raise TypeError(f"Given.decide: preconditions {sorted(self.preconditions)} expected; "
                            f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        outs = {name: r.decide(**preconditions[name]) for name, r in self.preconditions.items()}
        unmet = [f"{name} ({o.measured})" for name, o in outs.items() if o.verdict != REPRODUCED]
        details = {name: {"verdict": o.verdict, **o.details} for name, o in outs.items()}
        text = ("precondition not met: " + "; ".join(unmet)) if unmet else \
            "preconditions met: " + "; ".join(f"{n} ({o.measured})" for n, o in outs.items())
        return not unmet, text, details

    def decide(self, preconditions: Mapping[str, Mapping[str, Any]], **data: Any) -> Outcome:
        met, text, pre_details = self.check(preconditions)
        out = self.rule.decide(**data)
        details = {**out.details, "preconditions": pre_details, "preconditions_met": met}
        if not met:
            return Outcome(NOT_TESTABLE, f"{text}; measured: {out.measured}", details)
        return Outcome(out.verdict, f"{out.measured}; {text}", details)

    def n_units(self, **data: Any) -> int:
        return self.rule.n_units(**{k: v for k, v in data.items() if k != "preconditions"})


RULE_KINDS: dict[str, type[Rule]] = {c.__name__: c for c in (Better, Equivalent, NonInferior, Threshold, AllOf,
                                                              Correlation, Given)}


def rule_from_spec(spec: Mapping[str, Any]) -> Rule:
    """The rule that :meth:`Rule.spec` wrote (parts and preconditions rebuilt)."""
    spec = dict(spec)
    kind = spec.pop("kind", None)
    if kind not in RULE_KINDS:
        raise ValueError(f"unknown rule kind {kind!r}; expected one of {', '.join(sorted(RULE_KINDS))}")
    if kind == "AllOf":
        spec["parts"] = {k: rule_from_spec(v) for k, v in spec["parts"].items()}
    if kind == "Given":
        spec["rule"] = rule_from_spec(spec["rule"])
        spec["preconditions"] = {k: rule_from_spec(v) for k, v in spec["preconditions"].items()}
    return RULE_KINDS[kind](**spec)
