"""``scan``: a running accumulation, emitting every intermediate result (with or without a seed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Scan", "ScanSeed", "bind_scan"]

T = TypeVar("T")
A = TypeVar("A")


class Scan(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """``scan(accumulator)``, without a seed: the first element becomes the accumulator and is emitted as it is
    (Rx semantics; Reaqtive's ``Scan(func)`` swallowed it); each later element emits
    ``accumulator(acc, element)``.

    State: whether an accumulator exists, then the accumulator. Demand passes straight through. Fuses with
    adjacent fusible stages (:mod:`reaqtive.operators._fusion`): the fused step keeps the state in these fields.
    """

    name = "reaqtive:scan"
    version: Version = (1,)

    __slots__ = ("_accumulator", "_has_value", "_source", "_value")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "accumulator")
        self._source: Subscribable[T] = args.source(0)
        self._accumulator: Callable[[T, T], T] = args.function(1)
        self._has_value = False
        self._value: T | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._has_value)
        writer.write(self._value)

    def load_state_core(self, reader: StateReader) -> None:
        self._has_value = reader.read_bool("has value")
        self._value = reader.read()  # the user's accumulation

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        if self._has_value:
            try:
                result = self._accumulator(self._value, value)  # type: ignore[arg-type]
            except Exception as error:
                self._signal_error(error)
                return
            if result is None:
                self._accumulator_returned_none(value)
                return
        else:
            result = value
            self._has_value = True
        self._value = result
        self._state.changed = True
        self._downstream.on_next(result)

    fused_step = FusedStep(
        "_accumulator",
        """
        if {stage}._has_value:
            try:
                {result} = {fn}({stage}._value, {value})
            except Exception as error:
                {stage}._signal_error(error)
                {stop}
            if {result} is None:
                {stage}._accumulator_returned_none({value})
                {stop}
        else:
            {result} = {value}
            {stage}._has_value = True
        {stage}._value = {result}
        {stage}._state.changed = True
        """,
    )
    """:meth:`on_next` as a step of a fused run."""

    def _accumulator_returned_none(self, value: T) -> None:
        self._signal_error(_none_error(value))


class ScanSeed(StatefulUnaryOperatorBase[T, A], Generic[T, A]):
    """``scan(seed, accumulator)``: each element emits ``acc = accumulator(acc, element)``, starting from
    ``seed``; the seed itself is not emitted.

    State: the accumulator. Demand passes straight through. Fuses with adjacent fusible stages
    (:mod:`reaqtive.operators._fusion`): the fused step keeps the state in this field.
    """

    name = "reaqtive:scan+seed"
    version: Version = (1,)

    __slots__ = ("_accumulator", "_source", "_value")

    def __init__(self, query: Query[Any], downstream: Subscriber[A]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "seed", "accumulator")
        self._source: Subscribable[T] = args.source(0)
        self._accumulator: Callable[[A, T], A] = args.function(2)
        self._value: A = args.element(1)  # type: ignore[assignment]

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._value)

    def load_state_core(self, reader: StateReader) -> None:
        self._value = reader.read()  # the user's accumulation

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        try:
            result = self._accumulator(self._value, value)
        except Exception as error:
            self._signal_error(error)
            return
        if result is None:
            self._accumulator_returned_none(value)
            return
        self._value = result
        self._state.changed = True
        self._downstream.on_next(result)

    fused_step = FusedStep(
        "_accumulator",
        """
        try:
            {result} = {fn}({stage}._value, {value})
        except Exception as error:
            {stage}._signal_error(error)
            {stop}
        if {result} is None:
            {stage}._accumulator_returned_none({value})
            {stop}
        {stage}._value = {result}
        {stage}._state.changed = True
        """,
    )
    """:meth:`on_next` as a step of a fused run."""

    def _accumulator_returned_none(self, value: T) -> None:
        self._signal_error(_none_error(value))


def _none_error(value: object) -> TypeError:
    return TypeError(f"scan: the accumulator returned None for {value!r}; None is never an element")


@fusible("scan", frames=2)
def bind_scan(query: Query[Any], downstream: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of ``scan``: ``(source, accumulator)`` without a seed, ``(source, seed, accumulator)`` with."""
    if len(arguments(query, ("source", "accumulator"), ("source", "seed", "accumulator"))) == 2:
        return Scan(query, downstream)
    return ScanSeed(query, downstream)
