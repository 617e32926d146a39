"""``python -m reaqtive``: the ``reaqtive`` command (:func:`reaqtive.cli.main`), for an environment whose scripts
directory is not on ``PATH``."""

import sys

from reaqtive.cli import main

if __name__ == "__main__":
    sys.exit(main())
