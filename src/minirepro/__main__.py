"""``python -m minirepro``: the same as the ``minirepro`` command."""

import sys

from minirepro.cli import main

if __name__ == "__main__":
    sys.exit(main())
