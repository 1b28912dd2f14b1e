"""The unit stage: hypothesis profiles, and the fixtures shared with the integration stage
(tests/fixtures.py: the toy book, the pretrained model converted once per run, its tiny
stand-in)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis profiles. ``ci`` (the default, and what ``make test`` runs): derandomized, so
# every clone and every run draws the same examples and a commit that passed cannot fail
# on a new draw; no example database (nothing carried between runs); no deadline (a slow
# shared CI core is not a bug). ``dev`` (``make fuzz``): random search with more examples
# and a local database, to find new counterexamples, which then become ``@example``s.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", derandomize=False, deadline=None, max_examples=400, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if HYPOTHESIS_PROFILE not in ("ci", "dev"):
    raise pytest.UsageError(f"HYPOTHESIS_PROFILE must be 'ci' or 'dev', got {HYPOTHESIS_PROFILE!r}")
settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed", None)
    how = ("derandomized: each test's examples are fixed by its name, the same on every run"
           if settings.default.derandomize else f"random search, seed {seed if seed is not None else 'new each run'}")
    return f"hypothesis profile {HYPOTHESIS_PROFILE!r}: {how}"

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared fixtures
from fixtures import DATA, ROOT, smollm2, tiny_gguf, toy_book  # noqa: E402, F401
