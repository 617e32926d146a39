"""Which payload columns a keyed query reads, so that Spark ships only those to Python (a projection pushed into
Spark SQL).

By default the payload is every column besides the key, time and sequence, as a dict: on a wide table that is
most of the bytes Spark converts to Arrow and pandas and Python turns into dicts. A query's functions are opaque
Python, so reaqtive cannot see what they read, except when they say it: an :func:`operator.itemgetter` of field
names (``itemgetter("reading")``) reads exactly those fields, and so does a function whose code is nothing but
``return event["reading"]`` (``def reading(event): return event["reading"]``, the README's form: its bytecode is
compared with such a function's, so nothing else can hide in it). :func:`payload_fields` follows the payload from the
stream through the operators that pass it on unchanged (``filter``) to the first one that reads it and lets it
go (``map``, ``aggregate_by_key``, ``count``, ...). When every function on the way is a field getter, the payload
needs only their fields, and nothing else of it can reach an output; otherwise the answer is ``None`` and the
whole payload is shipped.

Filters are not pushed into Spark SQL: an event a query's ``filter`` drops still moves its key's clock (a late
event after it is delivered at that clock, and a window may close at it), so dropping it before the query could
change rows. Filter with ``events.where(...)`` before ``run_stream`` where that is what is meant.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from types import FunctionType
from typing import Any, Final

from reaqtive.core.expression import is_expression
from reaqtive.fluent.query import Query

__all__ = ["field_names", "payload_fields", "returns_none"]


# The code flags that change what a function is (varargs, generator, coroutine...); not the __future__ ones, nor
# "nested" (a lambda written inside a function)
_KIND_FLAGS: Final = 0x3FF & ~0x10


def _one_field(event: Any) -> Any:
    return event["field"]


def _nothing(event: Any) -> None:
    return None


def _same_code(function: object, reference: Any) -> tuple[Any, ...] | None:
    """The constants of ``function``'s code when it is a plain one-argument function whose bytecode is
    ``reference``'s (no names, no closure, no defaults in play), else ``None``."""
    if type(function) is not FunctionType or function.__closure__ is not None:
        return None
    code, expected = function.__code__, reference.__code__
    if code.co_code != expected.co_code or code.co_names or code.co_argcount != 1 or code.co_kwonlyargcount:
        return None
    if code.co_flags & _KIND_FLAGS != expected.co_flags & _KIND_FLAGS or len(code.co_consts) != len(
            expected.co_consts):
        return None
    return code.co_consts


def returns_none(function: object) -> bool:
    """Whether ``function`` is ``def f(event): return None`` (or the lambda), whatever its names: a key selector
    that puts every event under one key."""
    consts = _same_code(function, _nothing)
    return consts is not None and consts == _nothing.__code__.co_consts


def field_names(function: object) -> frozenset[str] | None:
    """The fields ``function`` reads if it is an ``itemgetter`` of strings or a function that only returns
    ``event["name"]`` (its bytecode that of :func:`_one_field`), else ``None``."""
    consts = _same_code(function, _one_field)
    if consts is not None:
        pairs = list(zip(consts, _one_field.__code__.co_consts, strict=True))
        names = [const for const, ref in pairs if ref == "field" and type(const) is str]
        same = all(type(const) is type(ref) and const == ref for const, ref in pairs if ref != "field")
        return frozenset(names) if same and len(names) == 1 else None
    if type(function) is not itemgetter:
        return None
    reduced: Any = function.__reduce__()  # (itemgetter, (item, ...))
    items = reduced[1]
    if not items or not all(type(item) is str for item in items):
        return None  # (an index or another key: not a column name)
    return frozenset(items)


def payload_fields(query: Query[Any], stream: str) -> frozenset[str] | None:
    """The payload fields ``query`` can read from ``Query.stream(stream)``, or ``None`` when that is not provable
    (see the module). An empty set: the query never looks inside the payload (``count()``)."""
    chain: list[Any] = []
    node: object = query
    while is_expression(node) and node.args:
        if node.op == "stream":
            if node.args != (stream,):
                return None
            break
        chain.append(node)
        node = node.args[0]
    else:
        return None
    fields: frozenset[str] = frozenset()
    for head in reversed(chain):  # from the stream outwards
        read = _reads(head)
        if read is None:
            return None
        names, passes_on = read
        fields |= names
        if not passes_on:
            return fields
    return None  # the payload itself reaches the outputs


def _reads(node: Any) -> tuple[frozenset[str], bool] | None:
    """What one operator reads of the payload it receives, and whether it passes the payload on unchanged."""
    args = node.args[1:]
    if node.op == "filter":
        names = _getter(args[0])
        return None if names is None else (names, True)
    if node.op == "map":
        names = _getter(args[0])
        return None if names is None else (names, False)
    if node.op == "count":
        if not args or args[0] is None:
            return frozenset(), False
        names = _getter(args[0])
        return None if names is None else (names, False)
    if node.op == "aggregate_by_key":
        key_selector, _, aggregate, value_selector = args[:4]
        keys = frozenset() if returns_none(key_selector) else _getter(key_selector)
        if keys is None:
            return None
        if aggregate == "count":
            return keys, False  # (the value selector is not called)
        values = _getter(value_selector)
        return None if values is None else (keys | values, False)
    return None


def _getter(function: Callable[..., Any] | None) -> frozenset[str] | None:
    return None if function is None else field_names(function)
