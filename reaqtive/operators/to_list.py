"""``to_list``: all the elements, as one list."""

from __future__ import annotations

from typing import Any, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError
from reaqtive.operators.settings import MAX_LIST_SIZE, UNLIMITED, read_limit
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = ["ToList", "ToListArgs", "to_list"]

T = TypeVar("T")


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
