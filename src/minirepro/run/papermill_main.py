"""``python -m minirepro.run.papermill_main``: papermill's command line, without one
false warning.

papermill reads the notebook's ``parameters`` cell only to warn about unknown
parameters (:func:`papermill.inspection._infer_parameters`), and its line parser
(``PythonTranslator.inspect``) counts every ``=`` of a line, comments included: a
parameter whose comment holds an ``=`` (caffnet's ``opt_ineq: int | None = None  #
inequality rows G y <= h ...``) makes it print "Unable to parse line 5 ...", although the
line is valid Python and the parameter is injected and used as it should be. The runner
has checked every parameter against the cell already (:func:`minirepro.run.request.check_run`,
with its own parser, :func:`minirepro.core.params.parse_parameters`), so that warning says
nothing true; it is dropped here, and only it: every other message of papermill is kept.
"""

from __future__ import annotations

import logging
import sys

FALSE_WARNING = "Unable to parse line "


class DropParseWarning(logging.Filter):
    """Drops papermill's "Unable to parse line N" (see the module's docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(FALSE_WARNING)


def main() -> None:
    logging.getLogger("papermill.translators").addFilter(DropParseWarning())
    from papermill.cli import papermill

    papermill.main(prog_name="papermill")


if __name__ == "__main__":
    sys.exit(main())
