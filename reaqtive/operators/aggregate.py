"""``aggregate`` and ``to_list``: fold the source with an accumulator (with or without a seed), or into a list, and emit
the final accumulation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord, args_record, require_callable
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import no_elements_error, none_result_error, optional_callable
from reaqtive.operators._seed import NO_SEED  # shared with the fluent methods' defaults
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError
from reaqtive.operators.settings import MAX_LIST_SIZE, UNLIMITED, read_limit
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = [
    "Aggregate", "AggregateArgs", "AggregateSeed", "AggregateSeedArgs", "NO_SEED", "ToList", "ToListArgs",
    "aggregate", "to_list",
]

T = TypeVar("T")


def aggregate(
    accumulator: Callable[[Any, Any], Any],
    seed: object = NO_SEED,
    result_selector: Callable[[Any], Any] | None = None,
) -> OperatorCall[Any]:
    """Fold the elements with ``accumulator(accumulation, element)`` and emit the final accumulation (passed
    through ``result_selector``, if given) when the source completes, as ``functools.reduce``.

    >>> from_iterable([1, 2, 3, 4]).aggregate(lambda acc, x: acc + x).run(print)  # doctest: +ELLIPSIS
    10
    <...>
    >>> from_iterable("abc").aggregate(lambda acc, x: acc + [x], [], len).run(print)  # doctest: +ELLIPSIS
    3
    <...>

    Without ``seed`` the first element starts the accumulation, and an empty source is a ``ValueError``; with
    ``seed``, an empty source gives the seed (through the result selector, if any).
    An exception from ``accumulator`` or ``result_selector`` becomes ``on_error``; under a skip policy, the element
    the accumulator raised on is skipped (the accumulation stays), and a result selector that raises skips the
    result: the stage completes without one.

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``has_value: bool,
    accumulation`` (``reaqtive:aggregate``) or ``accumulation`` (``reaqtive:aggregate+seed``). Inside a keyed
    ``group_by``, one field per key: ``()`` then ``(accumulation,)`` without a seed, the accumulation with one
    (a seed that may change in place, such as a list, keeps the general path).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: Aggregate (``Aggregate(seed, accumulator, selector)``; the accumulator comes first here, as in
    ``functools.reduce``).
    """
    require_callable(accumulator, "aggregate", "accumulator")
    optional_callable(result_selector, "aggregate", "result_selector")
    if seed is NO_SEED:
        return OperatorCall("aggregate", (accumulator, result_selector))
    return OperatorCall("aggregate", (accumulator, result_selector, seed))


class AggregateArgs(ArgsRecord, source="source", accumulator="function", result_selector="optional_function"):
    """The arguments of an ``aggregate`` node without a seed: ``(source, accumulator, result_selector)``; a node
    with a seed reads as an :class:`AggregateSeedArgs` (one op, two shapes)."""


class AggregateSeedArgs(ArgsRecord, source="source", accumulator="function", result_selector="optional_function",
                        seed="value"):
    """The arguments of an ``aggregate`` node with a seed: ``(source, accumulator, result_selector, seed)``."""


AggregateArgs.alternatives = (AggregateSeedArgs,)


@step_operator("aggregate", lambda args: AggregateStep(args.accumulator, args.result_selector),
               when=lambda args: isinstance(args, AggregateArgs), frames=4, builder=aggregate, args=AggregateArgs)
class Aggregate(StepAggregate):
    """The running stage of :func:`aggregate` without a seed, run by its keyed step (:class:`AggregateStep`) (one
    op, two stages: the number of arguments picks the stage); saved as ``has_value, accumulation``."""

    name = "reaqtive:aggregate"
    version: Version = (1,)
    state_fields = ("held", "?result", "has_value", "accumulation")

    __slots__ = ()

    def write_field(self, writer: StateWriter, field: Any) -> None:
        writer.write(bool(field))
        writer.write(field[0] if field else None)

    def read_field(self, reader: StateReader) -> Any:
        has_value = reader.read_bool("has value")
        accumulation = reader.read()  # the user's accumulation
        return (accumulation,) if has_value else ()


@step_operator("aggregate", lambda args: AggregateSeedStep(args.seed, args.accumulator, args.result_selector),
               owned="seed", when=lambda args: isinstance(args, AggregateSeedArgs), frames=4, builder=aggregate,
               args=AggregateArgs)
class AggregateSeed(StepAggregate):
    """The running stage of :func:`aggregate` with a seed, run by its keyed step (:class:`AggregateSeedStep`); a
    mutable seed keeps the general path (every group owns its accumulation)."""

    name = "reaqtive:aggregate+seed"
    version: Version = (1,)
    state_fields = ("held", "?result", "accumulation")

    __slots__ = ()


def _result(name: str, accumulation: Any, selector: Callable[[Any], Any] | None) -> tuple[Any, ...]:
    result = accumulation if selector is None else selector(accumulation)
    if result is None:
        raise none_result_error(name)
    return (result,)


@runs_inline(Aggregate)
class AggregateStep(KeyedStep):
    """:class:`Aggregate` for one key of a keyed chain: the field is ``()`` before the first element, then
    ``(accumulation,)`` (an accumulation may be any value, ``None`` and ``()`` too)."""

    __slots__ = ("_accumulator", "_result_selector")

    initial = ()

    def __init__(self, accumulator: Callable[[Any, Any], Any], result_selector: Callable[[Any], Any] | None) -> None:
        self._accumulator = accumulator
        self._result_selector = result_selector

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state:
            return (self._accumulator(state[0], value),), SKIP
        return (value,), SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        if not state:
            raise StepOperatorError(no_elements_error("aggregate"))
        return _result(Aggregate.name, state[0], self._result_selector)

    def check(self, state: Any) -> bool:
        return type(state) is tuple and len(state) <= 1


@runs_inline(AggregateSeed)
class AggregateSeedStep(KeyedStep):
    """:class:`AggregateSeed` for one key of a keyed chain: the field is the accumulation, the seed at first."""

    __slots__ = ("_accumulator", "_result_selector", "initial")

    # An accumulator may change a (mutable) accumulation in place and return it: the record is then saved again.
    in_place = True

    def __init__(
        self, seed: object, accumulator: Callable[[Any, Any], Any], result_selector: Callable[[Any], Any] | None
    ) -> None:
        self.initial = seed
        self._accumulator = accumulator
        self._result_selector = result_selector

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return self._accumulator(state, value), SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return _result(AggregateSeed.name, state, self._result_selector)

    def check(self, state: Any) -> bool:
        return True  # the user's accumulation (the seed may be None)


def to_list() -> OperatorCall[list[Any]]:
    """All the elements as one list, when the source completes.

    >>> from_iterable(range(3)).to_list().run(print)  # doctest: +ELLIPSIS
    [0, 1, 2]
    <...>

    The host setting ``MAX_LIST_SIZE`` (``reaqtive.operators.settings``) bounds the list: one element more
    is a ``LimitExceededError``.

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``items: list``. Inside a keyed
    ``group_by``, one field per key: ``None`` before the first element, then the list.

    **Demand.** Everything once asked; the list is held until demanded.

    Reaqtive: ToList.
    """
    return OperatorCall("to_list")


ToListArgs = args_record("ToListArgs", source="source")


@step_operator("to_list", lambda args: ToListStep(), frames=4, builder=to_list, args=ToListArgs)
class ToList(StepAggregate):
    """The running stage of :func:`to_list`, run by :class:`ToListStep` (the limit is read from the context,
    which arrives after the constructor)."""

    name = "reaqtive:to_list"
    version: Version = (1,)
    state_fields = ("held", "?result", "items")

    __slots__ = ()

    def write_field(self, writer: StateWriter, field: Any) -> None:
        writer.write([] if field is None or self._decided else field)  # a decided list moved into the result

    def read_result(self, reader: StateReader) -> list[Any]:
        return reader.read_list("result")

    def read_field(self, reader: StateReader) -> list[Any]:
        return reader.read_list("items")  # a list of the user's elements


@runs_inline(ToList)
class ToListStep(KeyedStep):
    """The per-element logic of :class:`ToList` (the stage and a keyed chain run it): the field is ``None``
    before the first element, then the list, which the step owns and appends to (in place: the stage marks it
    changed, the keyed stage saves the record again, after each element)."""

    __slots__ = ("_limit",)

    in_place = True

    def __init__(self) -> None:
        self._limit = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        self._limit = read_limit(context, MAX_LIST_SIZE)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        size = 0 if state is None else len(state)
        if size >= self._limit:
            raise StepOperatorError(LimitExceededError(ToList.name, MAX_LIST_SIZE, self._limit))
        if state is None:
            return [value], SKIP
        state.append(value)
        return state, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return ([] if state is None else state,)

    def check(self, state: Any) -> bool:
        return state is None or type(state) is list
