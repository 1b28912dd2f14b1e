"""Verdict rules: objects that state a claim's test in words and decide it from the data.

A chapter declares each claim with a rule object *before* the experiment runs
(``results.declare_claim(..., rule=Better(...))``) and settles it with the data
(``claim.settle(method=..., baseline=...)``). The rule writes the sentence shown on
the page and computes the verdict, so each threshold exists in exactly one place.

The kinds:

:class:`Better`
    paired superiority across seeds: the interval of the mean paired improvement
    (Student t or percentile bootstrap) must lie above 0 and the mean improvement
    must reach a stated minimum effect, in the metric's own units.
:class:`Equivalent`
    "on par": two one-sided tests (TOST) with a stated margin, plus a power check:
    the method must differ from a trivial or start-point baseline by more than the
    margin, or the comparison cannot tell "on par" from "did nothing".
:class:`NonInferior`
    "on par or better": one-sided, the interval of the improvement must lie above
    ``-margin``, with the same power check as ``Equivalent``.
:class:`Threshold`
    a bound that must hold on every seed (``over="every"``) or for the interval
    of the mean (``over="interval"``), with an optional looser bound that defines "partly".
:class:`AllOf`
    a claim with several parts: reproduced when every part is; partly when at least
    ``partly_min`` parts are, which must be a majority, never "any one of many".

Every rule gives one of the four verdicts in :data:`VERDICTS` and a ``measured``
text with the interval it used. ``design_problem(n_seeds)`` says, at declaration,
when a rule cannot give "reproduced" in the chapter's setting.

Two more kinds complete protocol v3 (``shared/VERDICT_PROTOCOL.md``):

:class:`Correlation`
    a correlation over units (rows of ``x``, ``y``) with a bootstrap interval that must
    lie above 0, and a minimum correlation.
:class:`Given`
    a rule with preconditions: each precondition (a rule on the baseline or the
    substrate, e.g. "the raw reward model is above chance") must be reproduced, or the
    claim is *not testable at this scale*, naming the skill and its measured level.

Every rule has a :meth:`Rule.spec` (its kind and fields, as JSON) that
:func:`rule_from_spec` turns back into the rule, so that the ledger can decide a
claim again on the units of every replication (:mod:`minirepro.claims.pool`), and a
power at its planned number of units (:mod:`minirepro.claims.power`).

The rules live in :mod:`.base` (verdicts, :class:`Outcome`, :class:`Rule`), :mod:`.paired`
(``Better``, ``Equivalent``, ``NonInferior``), :mod:`.threshold`, :mod:`.correlation` and
:mod:`.composite` (``AllOf``, ``Given``, :func:`rule_from_spec`); this package names them all.
"""

from minirepro.claims.rules.base import (
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    REPRODUCED,
    VERDICTS,
    Outcome,
    Rule,
)
from minirepro.claims.rules.composite import AllOf, Given, rule_from_spec
from minirepro.claims.rules.correlation import Correlation
from minirepro.claims.rules.paired import Better, Equivalent, NonInferior
from minirepro.claims.rules.threshold import Threshold

__all__ = ["NOT_REPRODUCED", "NOT_TESTABLE", "PARTLY", "REPRODUCED", "VERDICTS", "AllOf", "Better",
           "Correlation", "Equivalent", "Given", "NonInferior", "Outcome", "Rule", "Threshold",
           "rule_from_spec"]
