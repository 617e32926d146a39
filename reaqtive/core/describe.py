"""Naming a user's value or error in the message of an operator's error, without failing.

The error an operator builds for a user function's mistake (a selector that returned ``None``, a key that cannot
be hashed) names the value. A user's value may not describe itself: its ``__repr__`` (or an error's ``__str__``)
may raise. Describing a failure must not fail, or the description's error would escape the error policy (a skip
not skipped, a query ended by the wrong error or, from a fused run, an exception thrown back at the source). So
these fall back to the value's type, as :mod:`traceback` does for an unprintable exception.
"""

from __future__ import annotations

from typing import Final

__all__ = ["error_text", "shown"]

LIMIT: Final = 200
"""The most characters of a value's ``repr`` a message holds (a large element would make every message large)."""


def shown(value: object) -> str:
    """``repr(value)`` cut to :data:`LIMIT` characters, or its type when its ``repr`` raises."""
    try:
        text = repr(value)
    except Exception as error:  # a user's __repr__: anything
        return f"<{_type_name(value)} object (its repr raised {type(error).__name__})>"
    if type(text) is not str:  # (a __repr__ of a str subclass: keep the characters only)
        text = str.__str__(text)
    return text if len(text) <= LIMIT else text[: LIMIT - 3] + "..."


def error_text(error: BaseException) -> str:
    """``str(error)``, or a placeholder naming its type when its ``__str__`` raises."""
    try:
        return str(error)
    except Exception:  # a user's __str__: anything
        return f"<unprintable {type(error).__name__}>"


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
