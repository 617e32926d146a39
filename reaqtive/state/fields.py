"""Typed reads of an operator's own state fields: what ``load_state_core`` uses instead of a bare ``read()``.

A store file can be damaged or forged behind a valid checksum (a checksum detects damage, not forgery). A field
the operator itself defines — a count, a flag, an index, a sequence number, a deadline, the shape of its records —
is therefore checked when it is loaded, for its type *and* its range: ``True`` is not a count, ``-1`` is not
what is left of ``take(3)``, and ``'false'`` is not a flag. A bad one raises :class:`StateFormatError` naming
the operator, where it is (its path, the store key), the field and what was found, instead of loading silently
and computing wrong results, or failing later with an untyped error::

    def load_state_core(self, reader: StateReader) -> None:
        self._remaining = reader.read_int("remaining", maximum=self._count)

Records inside a field (a list of ``[number, done, element, queue]``) are read the same way, one record at a
time, in the order they were written::

    for slot in reader.read_records("slots", 4):
        number = slot.read_int("number", maximum=counter - 1)
        done = slot.read_bool("done")
        element = slot.read()              # the user's value: not checked
        queue = slot.read_list("queue")

The *user's* values (an accumulator, buffered elements, group keys) are read with plain ``read()``: their type
is the user's, and a wrong one fails in the user's function. A check of several fields together raises
``reader.invalid(field, expected, found)``.

A deadline's range needs the host, which says when the query first started and by when the state it loads was
saved (the settings :data:`STARTED_AT` and :data:`SAVED_BY`); :func:`time_bounds` makes them the bounds of
``read_datetime``. Without them only the type of a deadline is checked.

:class:`CheckedReader` implements these reads over ``read()``; :class:`~reaqtive.state.framing.SegmentReader`
(a node's segment) and :class:`RecordReader` (a record inside a field) are checked readers. The interface
operators see is :class:`reaqtive.core.operator.StateReader`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from reaqtive.core.errors import InvalidSettingError
from reaqtive.core.scheduler_interface import deadline
from reaqtive.core.streams import LONG_MAX
from reaqtive.state.state_errors import StateFormatError

if TYPE_CHECKING:
    from reaqtive.core.context import OperatorContext

__all__ = ["SAVED_BY", "STARTED_AT", "CheckedReader", "RecordReader", "describe", "time_bounds"]

_SHOWN: Final = 60
"""How many characters of a bad value's ``repr`` a message shows (a forged list may be long)."""

STARTED_AT: Final = "reaqtive://state/settings/started_at"
"""Host setting (an aware ``datetime``): the clock when the query whose state is being loaded first started. No
time an operator of it computed from its clock (a deadline, the time of an element) is earlier."""

SAVED_BY: Final = "reaqtive://state/settings/saved_by"
"""Host setting (an aware ``datetime``): the latest clock at which the state being loaded can have been saved
(the clock of the checkpoint it comes from, or later). No deadline is later than this plus the longest time the
operator sets a timer ahead."""

_ZERO: Final = timedelta(0)


def time_bounds(context: OperatorContext, ahead: timedelta = _ZERO) -> tuple[datetime | None, datetime | None]:
    """The earliest and latest value a stage can have saved for a time it computed as its clock plus ``ahead``
    (a deadline; ``ahead`` may be negative, or zero for a time it read from its clock): ``STARTED_AT`` and
    ``SAVED_BY`` from the host's settings, moved by ``ahead``; ``None`` for a bound the host does not give.

    The clock when state is *loaded* bounds nothing: a query created after the last checkpoint is loaded on
    that checkpoint's clock, earlier than its state was saved, and one kept without running resumes on a later
    one, long after its deadlines."""
    started = _time_setting(context, STARTED_AT)
    saved = _time_setting(context, SAVED_BY)
    return (
        None if started is None else deadline(started, min(ahead, _ZERO)),
        None if saved is None else deadline(saved, max(ahead, _ZERO)),
    )


def _time_setting(context: OperatorContext, key: str) -> datetime | None:
    found, value = context.try_get_element(key)
    if not found:
        return None
    if type(value) is not datetime or value.utcoffset() is None:
        raise InvalidSettingError(f"setting {key!r} must be an aware datetime, got {value!r}")
    return value


def describe(value: object) -> str:
    """A bad value for a message: its type and the start of its ``repr`` (``int -1``, ``str 'false'``)."""
    if value is None:
        return "None"
    text = repr(value)
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    return f"{type(value).__name__} {text}"


def _span(minimum: int, maximum: int) -> str:
    return f"from {minimum}" if maximum >= LONG_MAX else f"from {minimum} to {maximum}"


class CheckedReader(ABC):
    """Typed reads over :meth:`read`: each reads the next value and checks it, or raises
    :class:`StateFormatError` (see the module). Subclasses provide :meth:`read` and :attr:`where`."""

    __slots__ = ()

    @property
    @abstractmethod
    def where(self) -> str:
        """Whose state this is, for messages: the store key, the operator and its path (and the record)."""

    @abstractmethod
    def read(self) -> Any:
        """The next value, unchecked."""

    def invalid(self, field: str, expected: str, found: object) -> StateFormatError:
        """The error of a field that is not what it must be (raise it): ``field`` must be ``expected``."""
        return StateFormatError(f"{self.where}: field {field!r} must be {expected}, found {describe(found)}")

    def read_int(self, field: str, minimum: int = 0, maximum: int = LONG_MAX) -> int:
        """An ``int`` (never a ``bool``) from ``minimum`` to ``maximum``, both included. The default maximum,
        ``2**63 - 1``, bounds every counter: no stage counts that far."""
        value = self.read()
        if type(value) is not int or not minimum <= value <= maximum:
            raise self.invalid(field, f"an int {_span(minimum, maximum)}", value)
        return value

    def read_optional_int(self, field: str, minimum: int = 0, maximum: int = LONG_MAX) -> int | None:
        """``None``, or an ``int`` as :meth:`read_int` reads it."""
        value = self.read()
        if value is not None and (type(value) is not int or not minimum <= value <= maximum):
            raise self.invalid(field, f"None or an int {_span(minimum, maximum)}", value)
        return value

    def read_bool(self, field: str) -> bool:
        """A ``bool`` (``0``, ``1`` and ``'false'`` are not)."""
        value = self.read()
        if type(value) is not bool:
            raise self.invalid(field, "a bool", value)
        return value

    def read_datetime(
        self, field: str, earliest: datetime | None = None, latest: datetime | None = None
    ) -> datetime:
        """An aware ``datetime``, not before ``earliest`` and not after ``latest`` when they are given."""
        value = self.read()
        self._check_datetime(field, value, earliest, latest, "")
        return value  # type: ignore[no-any-return]

    def read_optional_datetime(
        self, field: str, earliest: datetime | None = None, latest: datetime | None = None
    ) -> datetime | None:
        """``None``, or a ``datetime`` as :meth:`read_datetime` reads it."""
        value = self.read()
        if value is not None:
            self._check_datetime(field, value, earliest, latest, "None or ")
        return value  # type: ignore[no-any-return]

    def _check_datetime(
        self, field: str, value: object, earliest: datetime | None, latest: datetime | None, prefix: str
    ) -> None:
        if type(value) is not datetime or value.utcoffset() is None:
            raise self.invalid(field, f"{prefix}an aware datetime", value)
        if (earliest is not None and value < earliest) or (latest is not None and value > latest):
            span = f"from {earliest.isoformat() if earliest else '...'} to {latest.isoformat() if latest else '...'}"
            raise self.invalid(field, f"{prefix}an aware datetime {span}", value)

    def read_list(self, field: str, length: int | None = None, of: type | None = None) -> list[Any]:
        """A ``list``; of exactly ``length`` items when given, each of type ``of`` (exactly) when given."""
        value = self.read()
        if type(value) is not list:
            raise self.invalid(field, "a list", value)
        if length is not None and len(value) != length:
            raise self.invalid(field, f"a list of {length} items", value)
        if of is not None:
            for index, item in enumerate(value):
                if type(item) is not of:
                    raise self.invalid(f"{field}[{index}]", f"a {of.__name__}", item)
        return value

    def read_set(self, field: str) -> set[Any]:
        """A ``set`` (its members are not checked)."""
        value = self.read()
        if type(value) is not set:
            raise self.invalid(field, "a set", value)
        return value

    def read_records(self, field: str, length: int) -> list[RecordReader]:
        """A ``list`` of records, each a list (or tuple) of ``length`` items, as readers of their items."""
        records = self.read_list(field)
        readers = []
        for index, record in enumerate(records):
            name = f"{field}[{index}]"
            if type(record) not in (list, tuple) or len(record) != length:
                raise self.invalid(name, f"a record of {length} items", record)
            readers.append(RecordReader(record, f"{self.where}: {name}"))
        return readers


class RecordReader(CheckedReader):
    """Reads the items of one record found in a field, in order, with the same typed reads as a segment."""

    __slots__ = ("_items", "_position", "_where")

    def __init__(self, items: Sequence[Any], where: str) -> None:
        self._items = items
        self._position = 0
        self._where = where

    @property
    def where(self) -> str:
        return self._where

    def read(self) -> Any:
        position = self._position
        if position >= len(self._items):
            raise StateFormatError(f"{self._where}: read past the end of the record ({len(self._items)} items)")
        self._position = position + 1
        return self._items[position]
