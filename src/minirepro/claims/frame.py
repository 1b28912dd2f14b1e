"""The chapter's claims table as a pandas DataFrame whose HTML is the page's claims table.

Kept apart so that pandas is imported only when a page shows the table
(:func:`minirepro.claims.chapter_view.claims_table`).
"""

from __future__ import annotations

import pandas as pd

from minirepro.claims import ledger
from minirepro.claims.page import claims_table_html
from minirepro.claims.record import chapter

COLUMNS = ["claim", "paper", "measured here", "verdict", "rule", "id", "book"]


class FullTable(pd.DataFrame):
    """A DataFrame whose HTML (the rendered page) shows every cell in full: pandas
    cuts cells at ``display.max_colwidth`` (50) with "…", which hid the measured
    values and rules; the book's CSS wraps them. Its text form is pandas' own."""

    def _repr_html_(self):
        if list(self.columns) != COLUMNS:
            with pd.option_context("display.max_colwidth", None):
                return super()._repr_html_()
        return claims_table_html(self, ledger.current_entry(chapter()) or {})


__all__ = ["COLUMNS", "FullTable"]
