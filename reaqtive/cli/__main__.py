"""``python -m reaqtive.cli``: the ``reaqtive`` command."""

import sys

from reaqtive.cli.main import main

sys.exit(main())
