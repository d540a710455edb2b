"""`python -m hami` runs the same entry point as the `hami` console script."""

import sys

from hami.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
