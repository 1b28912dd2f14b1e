"""What decides verdicts, in three rooms, each holding one concern.

**The record** (persistence): :mod:`.record` (a chapter's in-kernel state, its
``results.json`` and the one JSON sanitiser), :mod:`.ledger` (reading the stored records of
``book/claims/``: recorded runs, replications, pilots, withdrawals) and :mod:`.build_results`
(a build's own records).

**The decision**: :mod:`.rules` (the rule objects), :mod:`.plan` (each chapter's replication
plan), :mod:`.pool` (pooled verdicts), :mod:`.power`, :mod:`.why` (the cause of a verdict) and
:mod:`.trend` (scale trends).

**The display**: :mod:`.tables` (the ledger as rows, markdown, CSV and summary text),
:mod:`.page` (its HTML), :mod:`.chapter_view` and :mod:`.frame` (what a chapter's page shows
of its claims).

A notebook uses :mod:`.results`, which declares claims, seeds and metrics and names what the
page shows. This package reads records; the runs that write them belong to
:mod:`minirepro.run`.
"""
