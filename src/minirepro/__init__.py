"""minirepro: ICML 2026 papers reproduced in miniature.

The package behind the book. ``minirepro.core`` holds what two or more chapters
share (seeding, progress bars, plotting style, timing, scales, datasets, the tiny
language-model substrate); ``minirepro.papers`` holds one module or subpackage per
paper; ``minirepro.claims.results`` records metrics and claim verdicts; ``minirepro.cli``
is the ``minirepro`` command.
"""

__version__ = "0.1.0"
