"""What decides verdicts: rule objects (:mod:`.rules`), the records a chapter writes
(:mod:`.results`), each chapter's replication plan (:mod:`.plan`), power (:mod:`.power`),
pooled verdicts (:mod:`.pool`), the ledger (:mod:`.ledger`), its page (:mod:`.page`) and a
build's own records (:mod:`.build_results`). This package reads records; the runs that
write them belong to :mod:`minirepro.run`."""
