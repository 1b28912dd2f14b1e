"""SpreadsheetArena in miniature: blind pairwise evaluation of generated workbooks.

Modules, one concern each: :mod:`.prompts` (templated requests), :mod:`.generators`
(openpyxl stand-ins for LLMs and the adapter for real ones), :mod:`.evaluate`
(formula evaluation with ``formulas``), :mod:`.features` (features of any .xlsx),
:mod:`.voters` (simulated voters, the workbook pool), :mod:`.ratings` (Bradley-Terry,
bootstrap, online Elo, style control), :mod:`.expert` (finance checker),
:mod:`.render` (HTML), :mod:`.store` (SQLite votes), :mod:`.app` (Flask), :mod:`.cli`,
:mod:`.experiment` (the chapter's experiments), :mod:`.plots` (its figures).
"""

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("ratings", "expert")

__all__ = ["Config", "run_experiment", "run_seed"]


def __getattr__(name: str):
    """``Config``, ``run_experiment`` and ``run_seed`` of :mod:`.experiment`, imported on first
    use: the formula-evaluation workers import this package and must stay light."""
    if name in __all__:
        from minirepro.papers.spreadsheet_arena import experiment

        return getattr(experiment, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
