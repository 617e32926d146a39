"""The ``reaqtive`` command: ``demo``, ``checkpoint``, ``inspect`` and the demos it runs (:mod:`reaqtive.cli.demos`)."""

from reaqtive.cli.main import main

__all__ = ["main"]
