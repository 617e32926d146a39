"""``scan``: a running accumulation, emitting every intermediate result (with or without a seed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from reaqtive.core.arguments import ArgsRecord, arguments
from reaqtive.core.describe import shown
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.operators._seed import NO_SEED  # shared with the fluent methods' defaults
from reaqtive.operators.keyed_steps import KeyedStep, TemplateStep, is_immutable_value, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["NO_SEED", "Scan", "ScanArgs", "ScanSeed", "ScanSeedArgs", "bind_scan", "scan"]

T = TypeVar("T")
A = TypeVar("A")




@overload
def scan(accumulator: Callable[[T, T], T], /) -> OperatorCall[T]: ...


@overload
def scan(seed: A, accumulator: Callable[[A, T], A], /) -> OperatorCall[A]: ...


@overload
def scan(accumulator: Callable[[A, T], A], /, *, seed: A) -> OperatorCall[A]: ...


def scan(*args: Any, seed: Any = NO_SEED) -> OperatorCall[Any]:
    """A running accumulation: emit each intermediate result of ``acc = accumulator(acc, element)``.

    Three forms: ``scan(accumulator)`` (no seed), ``scan(seed, accumulator)`` (the order of Reaqtive's
    ``Scan(seed, func)``), and ``scan(accumulator, seed=seed)`` (RxPY's keyword).

    >>> import operator
    >>> from_iterable([1, 2, 3]).scan(operator.add).run(print)  # doctest: +ELLIPSIS
    1
    3
    6
    <...>
    >>> from_iterable([1, 2, 3]).scan(10, operator.add).run(print)  # doctest: +ELLIPSIS
    11
    13
    16
    <...>

    Without a seed the first element becomes the accumulator and **is emitted** (Rx semantics; Reaqtive's
    ``Scan(func)`` does not emit it, a deviation we do not copy). With a seed, every element emits
    ``accumulator(acc, element)`` and the seed itself is not emitted. An exception from ``accumulator`` (or a
    ``None`` result) becomes ``on_error``, or, under a skip policy, skips the element: the accumulation stays as
    it was (unless the accumulator changed it in place before it raised).

    **State.** The accumulator (and, without a seed, whether there is one yet); it must be a value the state
    codec can write (plain data, or a type registered with ``register_state_type``).

    **Demand.** Passed upstream unchanged.

    Reaqtive: Scan.
    """
    if len(args) == 1:
        (accumulator,) = args
        has_seed = seed is not NO_SEED
    elif len(args) == 2:
        if seed is not NO_SEED:
            raise TypeError("scan: give the seed once, either scan(seed, accumulator) or scan(accumulator, seed=)")
        seed, accumulator = args
        has_seed = True
    else:
        raise TypeError(f"scan: takes (accumulator) or (seed, accumulator), got {len(args)} arguments")
    if not callable(accumulator):
        raise TypeError(
            f"scan: accumulator must be callable, got {type(accumulator).__name__} (the seed comes first: "
            "scan(seed, accumulator), or scan(accumulator, seed=seed))"
        )
    if not has_seed:
        return OperatorCall("scan", (accumulator,))
    if seed is None:
        raise TypeError("scan: the seed must not be None (None is never an element)")
    return OperatorCall("scan", (seed, accumulator))


class ScanArgs(ArgsRecord, source="source", accumulator="function"):
    """The arguments of a ``scan`` node without a seed: ``(source, accumulator)``; a node with a seed reads as a
    :class:`ScanSeedArgs` (the one record the registry knows for ``scan`` reads either form)."""


class ScanSeedArgs(ArgsRecord, source="source", seed="element", accumulator="function"):
    """The arguments of a ``scan`` node with a seed: ``(source, seed, accumulator)``."""


ScanArgs.alternatives = (ScanSeedArgs,)


class Scan(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`scan` without a seed: the field is the accumulation, ``None`` before the
    first element (saved as two fields: whether an accumulation exists, then the accumulation). Its ``on_next``,
    its step in a fused run and its keyed step (:class:`ScanStep`) are compiled from one template,
    :attr:`fused_step` (:mod:`reaqtive.operators._fusion`), which keeps the field in the stage, where a
    checkpoint finds it."""

    timeless = True
    name = "reaqtive:scan"
    version: Version = (1,)
    state_fields = ("has_value", "accumulator")

    __slots__ = ("_accumulator", "_source", "_value")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = ScanArgs.read_any(query)
        if not isinstance(args, ScanArgs):  # a node with a seed: bind_scan binds it to ScanSeed
            arguments(query, "source", "accumulator")  # raises: the wrong number of arguments for this stage
        assert isinstance(args, ScanArgs)
        self._source: Subscribable[T] = args.source
        self._accumulator: Callable[[T, T], T] = args.accumulator
        self._value: T | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._value is not None)
        writer.write(self._value)

    def load_state_core(self, reader: StateReader) -> None:
        has_value = reader.read_bool("has value")
        value = reader.read()  # the user's accumulation
        self._value = value if has_value else None

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    fused_step = FusedStep(
        "_accumulator",
        """
        if {state} is not None:
            try:
                {result} = {fn}({state}, {value})
            except Exception as error:
                {stage}._user_error(error, {value})
                {stop}
            if {result} is None:
                {stage}._accumulator_returned_none({value})
                {stop}
        else:
            {result} = {value}
        {state} = {result}
        {changed}
        """,
        state="_value",
    )
    """The per-element logic: the stage's ``on_next``, its fused step and its keyed step are compiled from it."""

    on_next = fused_step.stage_on_next()

    def _accumulator_returned_none(self, value: object) -> None:
        self._user_error(_none_error(value), value)


class ScanSeed(StatefulUnaryOperatorBase[T, A], Generic[T, A]):
    """The running stage of :func:`scan` with a seed (state: the accumulator). Its ``on_next``, its step in a
    fused run and its keyed step (:class:`ScanSeedStep`) are compiled from one template, :attr:`fused_step`."""

    timeless = True
    name = "reaqtive:scan+seed"
    version: Version = (1,)
    state_fields = ("accumulator",)

    __slots__ = ("_accumulator", "_source", "_value")

    def __init__(self, query: Expression[Any], downstream: Subscriber[A]) -> None:
        super().__init__(downstream)
        args = ScanSeedArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._accumulator: Callable[[A, T], A] = args.accumulator
        self._value: A = args.seed

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._value)

    def load_state_core(self, reader: StateReader) -> None:
        self._value = reader.read()  # the user's accumulation

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    fused_step = FusedStep(
        "_accumulator",
        """
        try:
            {result} = {fn}({state}, {value})
        except Exception as error:
            {stage}._user_error(error, {value})
            {stop}
        if {result} is None:
            {stage}._accumulator_returned_none({value})
            {stop}
        {state} = {result}
        {changed}
        """,
        state="_value",
    )
    """The per-element logic: the stage's ``on_next``, its fused step and its keyed step are compiled from it."""

    on_next = fused_step.stage_on_next()
    _accumulator_returned_none = Scan._accumulator_returned_none


def _none_error(value: object) -> TypeError:
    return TypeError(f"scan: the accumulator returned None for {shown(value)}; None is never an element")


@fusible("scan", frames=2, builder=scan, args=ScanArgs)
def bind_scan(query: Expression[Any], downstream: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of ``scan``: ``(source, accumulator)`` without a seed, ``(source, seed, accumulator)`` with."""
    if isinstance(ScanArgs.read_any(query), ScanSeedArgs):
        return ScanSeed(query, downstream)
    return Scan(query, downstream)


class ScanStep(TemplateStep):
    """:class:`Scan` for one key of a keyed chain, from its template: the field is the accumulation, ``None``
    before the first element (never an element, nor an accumulation)."""

    __slots__ = ()

    in_place = True  # an accumulator may change the accumulation in place and return it: the record is saved again
    next = Scan.fused_step.keyed_next()
    _accumulator_returned_none = Scan._accumulator_returned_none

    def check(self, state: Any) -> bool:
        return True  # the user's accumulation, or None before the first element


class ScanSeedStep(TemplateStep):
    """:class:`ScanSeed` for one key of a keyed chain, from its template: the field is the accumulation, the
    seed at first."""

    __slots__ = ()

    in_place = True  # as ScanStep
    next = ScanSeed.fused_step.keyed_next()
    _accumulator_returned_none = Scan._accumulator_returned_none

    def check(self, state: Any) -> bool:
        return state is not None


@register_keyed_step("scan")
def scan_step(query: Expression[Any]) -> KeyedStep | None:
    """The keyed step of a ``scan`` node; ``None`` (the general path) for a seed every group must own (mutable)."""
    args = ScanArgs.read_any(query)
    if isinstance(args, ScanSeedArgs):
        return ScanSeedStep(args.accumulator, args.seed) if is_immutable_value(args.seed) else None
    assert isinstance(args, ScanArgs)
    return ScanStep(args.accumulator)
