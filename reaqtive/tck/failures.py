"""Exceptions the kit raises or signals, and the Python stand-ins for Java's null/argument exceptions."""

from __future__ import annotations

__all__ = [
    "ExpectedClosedLatchError",
    "ExpectedOpenLatchError",
    "ILLEGAL_ARGUMENT_ERRORS",
    "NULL_ERRORS",
    "SubscriberBufferOverflowError",
    "TestException",
]

NULL_ERRORS: tuple[type[BaseException], ...] = (TypeError,)
"""What ``subscribe(None)``, ``on_subscribe(None)``, ``on_next(None)`` and ``on_error(None)`` must raise: Java's
NullPointerException (rules 1.9 and 2.13). A verification class may widen this with its ``null_error_types``."""

ILLEGAL_ARGUMENT_ERRORS: tuple[type[BaseException], ...] = (ValueError,)
"""What ``on_error`` must carry after ``request(n <= 0)``: Java's IllegalArgumentException (rule 3.9)."""


class TestException(RuntimeError):  # noqa: N818 - the JVM kit's name, kept so reports can be compared
    """The error the kit sends into subscribers under test; its message is fixed so reports can be searched."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self) -> None:
        super().__init__("Test Exception: Boom!")


class SubscriberBufferOverflowError(RuntimeError):
    """A kit subscriber received more unconsumed elements than its buffer holds: the publisher over-emitted."""


class ExpectedOpenLatchError(RuntimeError):
    """A signal arrived that a still-open latch should have excluded (for example a second ``on_subscribe``)."""


class ExpectedClosedLatchError(RuntimeError):
    """A signal arrived before the signal that should precede it (for example ``on_error`` before ``on_subscribe``)."""
