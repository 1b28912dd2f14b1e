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
