"""``count``: how many elements the source had (optionally, how many satisfied a predicate)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._aggregate import AggregateStage, optional_callable
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, register_keyed_step

__all__ = ["Count", "CountArgs", "count"]

T = TypeVar("T")


def count(predicate: Callable[[Any], object] | None = None) -> OperatorCall[int]:
    """How many elements the source had (that satisfy ``predicate``, if given), when it completes.

    >>> from_iterable("hello").count().run(print)  # doctest: +ELLIPSIS
    5
    <...>
    >>> from_iterable(range(10)).count(lambda x: x % 3 == 0).run(print)  # doctest: +ELLIPSIS
    4
    <...>

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``count: int``. Inside a keyed
    ``group_by``, one field per key: the count.

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Count.
    """
    optional_callable(predicate, "count", "predicate")
    return OperatorCall("count", (predicate,))


@dataclass(frozen=True, slots=True)
class CountArgs(ArgsRecord):
    """The arguments of a ``count`` node: ``(source, predicate)``, the predicate ``None`` to count every element."""

    source: Subscribable[Any]
    predicate: Callable[[Any], object] | None
    checks = ("source", "optional_function")


@register_operator("count", frames=4, builder=count, args=CountArgs)
class Count(AggregateStage[T, int], Generic[T]):
    """The running stage of :func:`count`."""

    name = "reaqtive:count"
    version: Version = (1,)
    state_fields = ("held", "?result", "count")

    __slots__ = ("_count", "_predicate")

    def __init__(self, query: Expression[Any], downstream: Subscriber[int]) -> None:
        args = CountArgs.read(query)
        super().__init__(args.source, downstream)
        self._predicate: Callable[[T], object] | None = args.predicate
        self._count = 0

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._count)

    def read_result(self, reader: StateReader) -> int:
        return reader.read_int("result")

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._count = reader.read_int("count")

    def on_next(self, value: T) -> None:
        predicate = self._predicate
        if predicate is not None:
            try:
                if not predicate(value):
                    return
            except Exception as error:
                self._user_error(error, value)  # skipped: not counted
                return
        self._count += 1
        self._state.changed = True

    def result_at_completion(self) -> int:
        return self._count


class CountStep(KeyedStep):
    """:class:`Count` for one key of a keyed chain: the field is the count."""

    __slots__ = ("_predicate",)

    initial = 0

    def __init__(self, predicate: Callable[[Any], object] | None) -> None:
        self._predicate = predicate

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        predicate = self._predicate
        if predicate is not None and not predicate(value):
            return state, SKIP
        return state + 1, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return (state,)

    def check(self, state: Any) -> bool:
        return type(state) is int and state >= 0


@register_keyed_step("count")
def count_step(query: Expression[Any]) -> CountStep:
    """The keyed step of a ``count`` node."""
    return CountStep(CountArgs.read(query).predicate)
