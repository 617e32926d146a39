"""Checking a query node's arguments when an operator is bound: one checker, used by every stage constructor.

The fluent builders (:mod:`reaqtive.fluent`) check arguments where a query is written. A query can also reach
the binder without them: decoded from a store (the engine re-creating a standing query after a restart), or
built by hand with ``Query(op, args)``. A stage constructor therefore reads ``query.args`` through
:func:`arguments`, which checks the number of arguments and, one accessor per argument, its type and range,
with the same rules as the builder. A bad argument raises :class:`~reaqtive.core.errors.OperatorArgumentError`
naming the operator, the argument (its index in ``query.args`` and its name), what was expected and what was
found. Unlike an ``assert``, the check also runs under ``python -O``.

>>> from reaqtive import Query, from_iterable
>>> args = arguments(from_iterable([1]).take(3), "source", "count")
>>> args.integer(1)
3
>>> args = arguments(Query("take", (from_iterable([1]), -1)), "source", "count")
>>> args.integer(1)
Traceback (most recent call last):
...
reaqtive.core.errors.OperatorArgumentError: operator 'take': args[1] (count) must be an int >= 0, got int -1

A stage constructor reads every argument it uses through an accessor, in any order::

    def __init__(self, query, downstream):
        super().__init__(downstream)
        args = arguments(query, "source", "selector")
        self._source = args.source(0)
        self._selector = args.function(1)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, NoReturn, Self, TypeVar, cast

from reaqtive.core.binding import QueryNode
from reaqtive.core.errors import OperatorArgumentError
from reaqtive.core.subscribable import Subscribable

__all__ = [
    "ArgsRecord",
    "args_record",
    "Arguments",
    "arguments",
    "require_callable",
    "require_duration",
    "require_int",
    "require_non_negative_int",
    "require_positive_duration",
    "require_positive_int",
    "require_time",
    "variadic_arguments",
]

X = TypeVar("X")

_ZERO: Final = timedelta(0)


_SUBSCRIBABLE_CLASSES: dict[type, bool] = {}


def _is_subscribable(cls: type) -> bool:
    """``issubclass(cls, Subscribable)``, remembered per class: an ABC check costs microseconds, and a keyed
    query binds its stages again for every new key."""
    known = _SUBSCRIBABLE_CLASSES.get(cls)
    if known is None:
        known = _SUBSCRIBABLE_CLASSES[cls] = issubclass(cls, Subscribable)
    return known


def arguments(query: QueryNode, *shape: str | tuple[str, ...]) -> Arguments:
    """The arguments of ``query``, checked to be exactly the ones named in ``shape``.

    ``arguments(query, "source", "selector")``: exactly two. Several shapes, as tuples, allow alternative
    lengths (each a different length): ``arguments(query, ("source", "acc"), ("source", "seed", "acc"))``.
    Raises :class:`~reaqtive.core.errors.OperatorArgumentError` when the number of arguments matches no shape.
    """
    values = query.args
    if len(shape) == len(values) and (not shape or type(shape[0]) is str):
        # The common case: one shape (names, not tuples of names), met. No per-name check: a stage passes
        # either names or tuples of them, never both.
        return Arguments(query.op, values, shape)  # type: ignore[arg-type]
    if all(isinstance(name, str) for name in shape):
        shapes: tuple[tuple[str, ...], ...] = (tuple(str(name) for name in shape),)
    else:
        shapes = tuple(name if isinstance(name, tuple) else (name,) for name in shape)
    for names in shapes:
        if len(names) == len(values):
            return Arguments(query.op, values, names)
    expected = " or ".join(
        f"{len(names)} arguments ({', '.join(names)})" if names else "no arguments" for names in shapes
    )
    raise OperatorArgumentError(query.op, None, "", expected, _count(values))


def variadic_arguments(
    query: QueryNode, name: str, *, minimum: int = 1, trailing: tuple[str, ...] = ()
) -> Arguments:
    """The arguments of ``query``: at least ``minimum`` named ``name`` (``"source 0"``, ``"source 1"``, ...),
    then the ones named in ``trailing`` (``merge``: sources; ``combine_latest``: sources, then the selector)."""
    values = query.args
    repeated = len(values) - len(trailing)
    if repeated < minimum:
        tail = f", then {', '.join(trailing)}" if trailing else ""
        raise OperatorArgumentError(
            query.op, None, "", f"at least {minimum + len(trailing)} ({minimum} or more {name}s{tail})",
            _count(values),
        )
    names = tuple(f"{name} {i}" for i in range(repeated)) + trailing
    return Arguments(query.op, values, names)


class Arguments:
    """A query node's arguments, each read through an accessor that checks it (see the module).

    Accessors take the argument's index in ``query.args`` and return it typed, or raise
    :class:`~reaqtive.core.errors.OperatorArgumentError`. Ranges follow the fluent builders: counts ``>= 0`` unless
    a ``minimum`` says otherwise, durations ``>= 0`` or, with ``positive=True``, ``> 0``.
    """

    __slots__ = ("_names", "_op", "_values")

    def __init__(self, op: str, values: tuple[object, ...], names: tuple[str, ...]) -> None:
        self._op = op
        self._values = values
        self._names = names

    def __len__(self) -> int:
        return len(self._values)

    def fail(self, index: int, expected: str) -> NoReturn:
        """Raise the error for argument ``index``, which is not ``expected`` (for checks of one's own)."""
        raise OperatorArgumentError(self._op, index, self._names[index], expected, _describe(self._values[index]))

    def value(self, index: int) -> object:
        """Argument ``index``, any value."""
        return self._values[index]

    def element(self, index: int) -> object:
        """Argument ``index``, a value that may become a stream element: anything but ``None``."""
        value = self._values[index]
        if value is None:
            self.fail(index, "a value other than None (None is never an element)")
        return value

    def elements(self, index: int) -> tuple[object, ...]:
        """Argument ``index``, a tuple or list of elements, none of them ``None``."""
        value = self._values[index]
        if not isinstance(value, tuple | list) or any(item is None for item in value):
            self.fail(index, "a tuple of elements, none of them None")
        return tuple(value)

    def source(self, index: int) -> Subscribable[Any]:
        """Argument ``index``, a source: a query or another :class:`~reaqtive.core.subscribable.Subscribable`."""
        value = self._values[index]
        if not _is_subscribable(type(value)):
            self.fail(index, "a query (a Subscribable)")
        return value  # type: ignore[return-value]  # checked above

    def sources(self, start: int, stop: int) -> list[Subscribable[Any]]:
        """Arguments ``start`` to ``stop`` (excluded), each a source."""
        return [self.source(index) for index in range(start, stop)]

    def function(self, index: int) -> Callable[..., Any]:
        """Argument ``index``, a callable."""
        value = self._values[index]
        if not callable(value):
            self.fail(index, "callable")
        return value

    def optional_function(self, index: int) -> Callable[..., Any] | None:
        """Argument ``index``, a callable or ``None``."""
        value = self._values[index]
        if value is not None and not callable(value):
            self.fail(index, "callable or None")
        return value

    def integer(self, index: int, *, minimum: int = 0) -> int:
        """Argument ``index``, an ``int`` (not a ``bool``) ``>= minimum``."""
        value = self._values[index]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(index, f"an int >= {minimum}")
        return value

    def optional_integer(self, index: int, *, minimum: int = 1) -> int | None:
        """Argument ``index``, ``None`` or an ``int`` ``>= minimum``."""
        if self._values[index] is None:
            return None
        value = self._values[index]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(index, f"None or an int >= {minimum}")
        return value

    def flag(self, index: int) -> bool:
        """Argument ``index``, a ``bool``."""
        value = self._values[index]
        if not isinstance(value, bool):
            self.fail(index, "a bool")
        return value

    def text(self, index: int, *, non_empty: bool = False) -> str:
        """Argument ``index``, a ``str`` (not empty, with ``non_empty``)."""
        value = self._values[index]
        if not isinstance(value, str) or (non_empty and not value):
            self.fail(index, "a non-empty str" if non_empty else "a str")
        return value

    def duration(self, index: int, *, positive: bool = False) -> timedelta:
        """Argument ``index``, a :class:`~datetime.timedelta` ``>= 0`` (``> 0`` with ``positive``)."""
        value = self._values[index]
        if not isinstance(value, timedelta) or value < _ZERO or (positive and value == _ZERO):
            self.fail(index, "a positive timedelta" if positive else "a timedelta >= 0")
        return value

    def optional_duration(self, index: int, *, positive: bool = True) -> timedelta | None:
        """Argument ``index``, ``None`` or a duration as :meth:`duration` checks it."""
        if self._values[index] is None:
            return None
        value = self._values[index]
        if not isinstance(value, timedelta) or value < _ZERO or (positive and value == _ZERO):
            self.fail(index, "None or a positive timedelta" if positive else "None or a timedelta >= 0")
        return value

    def time(self, index: int) -> datetime:
        """Argument ``index``, a timezone-aware :class:`~datetime.datetime`."""
        value = self._values[index]
        if isinstance(value, datetime) and _is_aware(value):
            return value
        self.fail(index, "a timezone-aware datetime")

    def due(self, index: int) -> timedelta | datetime:
        """Argument ``index``, a due time: a :class:`~datetime.timedelta` (any sign) or an aware datetime."""
        value = self._values[index]
        if isinstance(value, timedelta) or (isinstance(value, datetime) and _is_aware(value)):
            return value
        self.fail(index, "a timedelta or a timezone-aware datetime")

    def duration_or_function(self, index: int) -> timedelta | Callable[..., Any]:
        """Argument ``index``, a duration as :meth:`duration` checks it, or a callable (``debounce``)."""
        value = self._values[index]
        if isinstance(value, timedelta):
            return self.duration(index)
        if not callable(value):
            self.fail(index, "a timedelta >= 0, or a function returning a query")
        return value

    def instance(self, index: int, kind: type[X], expected: str) -> X:
        """Argument ``index``, an instance of ``kind`` (``expected`` describes it in the error)."""
        value = self._values[index]
        if not isinstance(value, kind):
            self.fail(index, expected)
        return value

    def iterable(self, index: int) -> Iterable[Any]:
        """Argument ``index``, an iterable."""
        value = self._values[index]
        if not isinstance(value, Iterable):
            self.fail(index, "an iterable")
        return value


_CHECKS: Final[dict[str, Callable[[Arguments, int], object]]] = {
    "source": Arguments.source,
    "function": Arguments.function,
    "optional_function": Arguments.optional_function,
    "value": Arguments.value,
    "element": Arguments.element,
    "elements": Arguments.elements,
    "count": Arguments.integer,
    "positive_count": lambda args, index: args.integer(index, minimum=1),
    "optional_positive_count": Arguments.optional_integer,
    "flag": Arguments.flag,
    "text": Arguments.text,
    "duration": Arguments.duration,
    "positive_duration": lambda args, index: args.duration(index, positive=True),
    "optional_positive_duration": Arguments.optional_duration,
    "time": Arguments.time,
    "due": Arguments.due,
    "iterable": Arguments.iterable,
    "exception": lambda args, index: args.instance(index, BaseException, "an exception instance"),
    "duration_or_function": Arguments.duration_or_function,
}
"""The checks an :class:`ArgsRecord` names, each an accessor of :class:`Arguments` (``count``: an int >= 0;
``positive_``: > 0; ``optional_``: or ``None``); besides them, ``sources`` names a field that gathers a variable
number of sources (see :class:`ArgsRecord`)."""


class ArgsRecord:
    """The checked arguments of an operator's query node, declared once, in one line: the class keywords name the
    node's arguments in order (their names name them in errors), each with its check (a key of :data:`_CHECKS`);
    :meth:`read` checks a node's arguments and makes the record, a frozen dataclass of those fields
    (:func:`args_record` declares one whose docstring is the usual one in one line).

    >>> class TakeArgs(ArgsRecord, source="source", count="count"):
    ...     'The arguments of a ``take`` node.'
    >>> from reaqtive import from_iterable
    >>> TakeArgs.read(from_iterable([1]).take(3)).count
    3

    A record may also be written as a frozen dataclass with typed fields and a ``checks`` tuple (the checks in
    field order), where its fields' static types matter.
    """

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()  # the fields' names, in order (set by the dataclass)
    checks: ClassVar[tuple[str, ...]] = ()
    alternatives: ClassVar[tuple[type[ArgsRecord], ...]] = ()
    """Records of the same op for nodes with another number of arguments (``aggregate`` with a seed): :meth:`read`
    makes the one whose fields are as many as the node's arguments."""
    least_sources: ClassVar[int] = 1
    """With a ``sources`` field (the check ``"sources"``: a tuple of sources, as many as the node has, after the
    fields before it and before those after it), how many sources the node needs at least, the fields before it
    counted (``merge``: 1, ``combine_latest``: 2)."""

    if TYPE_CHECKING:
        # A record declared by keywords has its fields made at run time: typed as Any for the stages reading them.
        def __getattr__(self, name: str) -> Any: ...

    def __init_subclass__(cls, **fields: str) -> None:
        super().__init_subclass__()
        if fields:
            cls.checks = tuple(fields.values())
            cls.__annotations__ = dict.fromkeys(fields, "Any")
            dataclass(frozen=True)(cls)
        unknown = [check for check in cls.checks if check not in _CHECKS and check != "sources"]
        if unknown:
            raise ValueError(f"{cls.__qualname__}: unknown checks {unknown} (known: {sorted(_CHECKS)})")

    @classmethod
    def read(cls, query: QueryNode) -> Self:
        """The checked arguments of ``query`` (:class:`~reaqtive.core.errors.OperatorArgumentError` if they do not
        fit): this record, or the one of :attr:`alternatives` that fits the node (see :meth:`read_any`)."""
        record_class: type[ArgsRecord] = cls
        if "sources" in cls.checks:
            at = cls.checks.index("sources")
            trailing = cls.__match_args__[at + 1 :]
            args = variadic_arguments(query, "source", minimum=cls.least_sources, trailing=trailing)
            stop = len(args) - len(trailing)
            values = [_CHECKS[check](args, index) for index, check in enumerate(cls.checks[:at])]
            values.append(tuple(args.sources(at, stop)))
            values += [_CHECKS[check](args, stop + index) for index, check in enumerate(cls.checks[at + 1 :])]
        else:
            if cls.alternatives:
                records: tuple[type[ArgsRecord], ...] = (cls, *cls.alternatives)
                args = arguments(query, *(record.__match_args__ for record in records))
                record_class = next(record for record in records if len(record.__match_args__) == len(args))
            else:
                args = arguments(query, *cls.__match_args__)
            values = [_CHECKS[check](args, index) for index, check in enumerate(record_class.checks)]
        record = cast("Self", cast("Any", record_class)(*values))
        record.validate(args)
        return record

    @classmethod
    def read_any(cls, query: QueryNode) -> ArgsRecord:
        """:meth:`read`, typed as what it is for a record with :attr:`alternatives`: one of them or this one."""
        return cls.read(query)

    def validate(self, args: Arguments) -> None:
        """Checks across the fields, or beyond the named ones, after those (``args.fail(index, expected)`` for a
        bad argument): none by default."""


def args_record(name: str, /, **fields: str) -> type[ArgsRecord]:
    """An :class:`ArgsRecord` declared in one line: ``FilterArgs = args_record("FilterArgs", source="source",
    predicate="function")`` makes the record of a ``filter`` node (the op follows from the name), its docstring
    naming the op and the fields. A record with a docstring of its own, or with ``validate``, is a class.

    >>> SkipArgs = args_record("SkipArgs", source="source", count="count")
    >>> SkipArgs.__doc__
    'The arguments of a ``skip`` node: ``(source, count)``.'
    """
    op = re.sub(r"(?<!^)(?=[A-Z])", "_", name.removesuffix("Args")).lower()
    article = "an" if op[0] in "aeiou" else "a"
    shown = f"``({', '.join(fields)}{',' if len(fields) == 1 else ''})``" if fields else "none"
    namespace = {
        "__doc__": f"The arguments of {article} ``{op}`` node: {shown}.",
        "__module__": sys._getframe(1).f_globals.get("__name__", __name__),  # the declaring module, as a class's
        "__qualname__": name,
    }
    record = cast("type[ArgsRecord]", type(name, (ArgsRecord,), namespace, **fields))
    return record if fields else dataclass(frozen=True)(record)  # (keywords make the dataclass; none, here)


def _is_aware(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() is not None


def _count(values: tuple[object, ...]) -> str:
    return f"{len(values)}: ({', '.join(_describe(value) for value in values)})"


def _describe(value: object) -> str:
    if value is None:
        return "None"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


# -- checks of the builders: where a query is written, TypeError / ValueError naming the operator --------------------

def require_callable(value: object, op: str, name: str) -> None:
    """Raise :class:`TypeError` unless ``value`` is callable."""
    if not callable(value):
        raise TypeError(f"{op}: {name} must be callable, got {type(value).__name__}")


def require_int(value: object, op: str, name: str) -> int:
    """Return ``value`` if it is an ``int`` (not a ``bool``), else raise :class:`TypeError`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    return value


def require_non_negative_int(value: object, op: str, name: str) -> int:
    """Return ``value`` if it is an ``int >= 0``; raise :class:`TypeError` / :class:`ValueError` otherwise."""
    number = require_int(value, op, name)
    if number < 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {number}")
    return number


def require_positive_int(value: object, op: str, name: str) -> int:
    """Return ``value`` if it is an ``int > 0``; raise :class:`TypeError` / :class:`ValueError` otherwise."""
    number = require_int(value, op, name)
    if number <= 0:
        raise ValueError(f"{op}: {name} must be > 0, got {number}")
    return number


def require_duration(value: object, op: str, name: str) -> timedelta:
    """Return ``value`` if it is a :class:`~datetime.timedelta`, else raise :class:`TypeError`."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{op}: {name} must be a timedelta, got {type(value).__name__}")
    return value


def require_positive_duration(value: object, op: str, name: str) -> timedelta:
    """Return ``value`` if it is a positive :class:`~datetime.timedelta`."""
    duration = require_duration(value, op, name)
    if duration <= timedelta(0):
        raise ValueError(f"{op}: {name} must be positive, got {duration}")
    return duration


def require_time(value: object, op: str, name: str) -> datetime:
    """Return ``value`` if it is an aware :class:`~datetime.datetime` (all times are aware, UTC-comparable)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{op}: {name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{op}: {name} must be timezone-aware (e.g. datetime.now(timezone.utc)), got {value}")
    return value
