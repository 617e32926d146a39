"""Keyed execution of ``group_by(k).flat_map(lambda g: <first-order chain over g>)``: one stage, one record per key.

On the general path every key of a ``group_by`` is a whole inner subscription: a subject, one stage per operator
of the inner query, and (hosted) a checkpoint unit of its own. When every operator of the inner query has a
keyed step (:mod:`reaqtive.operators.keyed_steps`: ``map``, ``filter``, ``scan``, the aggregates, ``take`` ...),
``flat_map``'s binder runs the ``group_by`` and the ``flat_map`` as one stage, :class:`KeyedGroups`, whose
per-key state is a record in a :class:`~reaqtive.state.keyed.KeyedStateTable` (a tuple, one field per step),
checkpointed in pages of keys. The choice is made when the query is bound and cannot be seen in its results:

* the selector is called once, at bind, on a stand-in group (:class:`KeyedGroupProbe`); its ``key`` read inside
  the chain's functions, while they run, is the key of the element at hand. A selector that reads the key while
  it builds the inner query (``lambda g: g.take(2) if g.key else g``), raises, returns something other than a
  chain of operators with keyed steps over the group, or a chain whose arguments hold another stream, keeps the
  general path. With ``group_by``'s ``expire_after`` the stage is :class:`KeyedGroupsExpiring`; with
  ``flat_map``'s ``max_concurrent`` it is :class:`KeyedGroupsBounded` (both together keep the general path: see
  :func:`plan_keyed_groups`). The decision and, when it is the general path, its reason are
  :func:`plan_keyed_groups`'s, which ``explain`` reports too.
* ``flat_map``'s **result selector** is called with each result leaving a key's chain, in the order of the general
  path, given a :class:`KeyedGroup` (``.key``) for the group; what it raises (or a ``None`` result) goes through the
  error policy as there: skipped, that result is dropped and the chain's fields stay as the steps left them.
* the rules of the general path hold: user code runs in the same order (key selector, element selector, the
  chain's functions), a new key is a group (``max_groups`` and ``MAX_GROUP_COUNT`` count it, whatever its chain
  did), a key whose chain ended (``take``) drops its later elements, the source's completion completes every
  key's chain in the order the keys first came (their final outputs, then the result's completion), and the
  first error (the source's, a selector's, a step's) ends the result.
* **User errors** go through the query's error policy as on the general path: skipped, an element whose key or
  element selector raised (or whose key cannot be hashed) is dropped before its key is seen (no new key opens
  for it); one that a step's function raised on is dropped at that step, and only its key's record changes: the
  fields of the steps before it (they saw the element, as the stages before a skipping stage do), never the
  failing step's own. A step's final outputs that raise at the end are skipped, and the steps after it still
  complete. The policy is asked under the stage's lock, with this stage as the operator (the general path names
  the inner operator that raised). The operator's own errors (limits, an aggregate without elements) stop the
  result whatever the policy (:class:`~reaqtive.operators.keyed_steps.StepOperatorError`).
* **Demand.** As ``group_by``: everything upstream once the result was asked for anything. Results beyond the
  outstanding demand wait, in the order they were produced, in one queue of at most ``MAX_QUEUE_SIZE`` (256 by
  default) results; one more fails the result with ``LimitExceededError``. On the general path each group has a
  queue of its own in ``flat_map`` (drained in turns) and a subject buffer, so under bounded demand the order
  *across* keys may differ between the two paths and the limits are not the same; every key's results, and
  their order, are the same.

**State.** The chain's operator names (checked on load: a query whose inner chain changed cannot read records
of another), the table (a key's record is its steps' fields, or ``()`` once its chain ended), the results
waiting for demand, whether the source completed, whether the source was asked. Its persisted name is its own
(``reaqtive:group_by+keyed``), so a store holding the general path's state never loads into it: the engine
records the form each subscription was created in (a keyed form number, see
:mod:`reaqtive.operators.keyed_steps`) and recovers it in that form, so a result selector's query made before
result selectors ran keyed recovers on the general path its state was written by.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from operator import itemgetter
from types import FunctionType
from typing import Any, Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, GroupedStreamNode, grouped_stream_class, is_expression
from reaqtive.core.operator import OperatorBase, StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import PullingEmitterBase, queue_capacity
from reaqtive.operators._inner_subjects import DEFAULT_MAX_WAITING
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._timing import add_safe
from reaqtive.operators.group_by import GroupByArgs, none_element_error, unhashable_key_error
from reaqtive.operators.keyed_steps import (
    DONE,
    KEYED_FORM,
    SKIP,
    KeyedStep,
    Several,
    StepOperatorError,
    complete_steps,
    feed_steps,
    keyed_execution,
    keyed_execution_enabled,
    keyed_form,
    keyed_step_factory,
    set_keyed_execution,
    stopping_error,
)
from reaqtive.operators.settings import MAX_CONCURRENT_INNER, MAX_GROUP_COUNT, MAX_QUEUE_SIZE, UNLIMITED, read_limit
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import RecordReader, time_bounds
from reaqtive.state.keyed import KeyedPage, KeyedStateTable

__all__ = [
    "KeyedBinding",
    "KeyedGroup",
    "KeyedGroupProbe",
    "KeyedGroups",
    "KeyedGroupsBounded",
    "KeyedGroupsExpiring",
    "bind_keyed_groups",
    "is_key_pair",
    "keyed_chain",
    "keyed_execution",
    "keyed_execution_enabled",
    "noting_general_groups",
    "plan_keyed_groups",
    "set_keyed_execution",
]

_FLAT_MAP: Final = "flat_map"
_PAGE: Final = KeyedPage.name  # named in the errors about a record, which a page unit holds


class _NoStream(Subscribable[Any]):
    """The subject behind the stand-in group: never subscribed (the keyed stage feeds the steps itself)."""

    __slots__ = ()

    def subscribe_core(self, observer: Subscriber[Any]) -> SubscriptionHandle:
        raise TypeError("the stand-in group of a keyed chain is not a stream")


class KeyedGroupProbe:
    """The stand-in group a keyed ``flat_map`` calls its selector on, once, at bind.

    It is a group like any other for the fluent methods; its ``key`` is the key of the element the keyed stage is
    running the chain for. Read while the selector builds the inner query, ``key`` marks the query as unfit for
    keyed execution (it may depend on the key) and returns ``None``.
    """

    _class: type[Any] | None = None

    @classmethod
    def new(cls) -> GroupedStreamNode[Any]:
        """A new stand-in (of a subclass of the facade's group class, made once)."""
        probe_class = cls._class
        if probe_class is None:
            probe_class = cls._class = _make_probe_class(grouped_stream_class())
        probe: GroupedStreamNode[Any] = probe_class(_NoStream(), None, None)
        return probe


class KeyedGroup(tuple[object]):
    """The group a keyed ``flat_map``'s ``result_selector`` is given with each result: its ``key``.

    A result selector reads the key (``lambda g, n: (g.key, n)``). The keyed stage keeps no object per key for
    it: each call gets a new small one (made in C, ``KeyedGroup((key,))``; no memory per key, no second table to
    look the key up in), equal to (and hashing as) any other of the same key, but not the same object, as the
    general path's group is for every result of its key. It is not a stream: a selector that would subscribe to
    its group has nothing to subscribe to on either path (the group's elements went into the inner query).
    """

    __slots__ = ()

    key = property(itemgetter(0), doc="The group's key.")

    def __repr__(self) -> str:
        return f"KeyedGroup(key={self[0]!r})"


_NONE_RESULT: Final = "flat_map: the result selector returned None (never an element)"  # as on the general path


# The code flags that change what a function is (varargs, generator, coroutine...); not the __future__ ones, nor
# "nested" (a function written inside another)
_KIND_FLAGS: Final = 0x3FF & ~0x10


def _key_pair(group: Any, value: Any) -> Any:
    return (group.key, value)


def is_key_pair(selector: object) -> bool:
    """Whether ``selector`` is ``lambda g, v: (g.key, v)`` (or the ``def``), whatever its names: its code is
    :func:`_key_pair`'s (no closure, nothing else read), so the keyed stage builds ``(key, value)`` itself, with
    no group made and no call per result (the tagged form a stored query writes: issue 32)."""
    if type(selector) is not FunctionType or selector.__closure__ is not None:
        return False
    code, expected = selector.__code__, _key_pair.__code__
    return (code.co_code == expected.co_code and code.co_names == expected.co_names
            and code.co_argcount == 2 and not code.co_kwonlyargcount
            and (code.co_flags ^ expected.co_flags) & _KIND_FLAGS == 0)


def _make_probe_class(base: type[Any]) -> type[Any]:
    class KeyedGroupProbeStream(base):  # type: ignore[misc]
        __slots__ = ("_key_read", "_selecting")
        __doc__ = KeyedGroupProbe.__doc__

        def __init__(self, subject: Subscribable[Any], stream_id: str | None, key: object) -> None:
            super().__init__(subject, stream_id, key)
            self._selecting = False
            self._key_read = False

        @property
        def key(self) -> object:
            """The key of the element at hand (see :class:`KeyedGroupProbe`)."""
            if self._selecting:
                self._key_read = True
                return None
            return self._key

        def __repr__(self) -> str:
            return "GroupedStream(<each key>)"

    return KeyedGroupProbeStream


Chain = tuple[tuple[KeyedStep, ...], tuple[str, ...]]
"""A keyed chain: its steps and their operator names."""


def keyed_chain(selector: Callable[[Any], Any], probe: Any) -> Chain | None:
    """The keyed steps of ``selector``'s inner query, called on ``probe``, with their operator names; ``None``
    when the query is not a chain of operators with keyed steps over the group (it keeps the general path)."""
    chain = _chain_or_reason(selector, probe)
    return None if isinstance(chain, str) else chain


def _chain_or_reason(selector: Callable[[Any], Any], probe: Any) -> Chain | str:
    """:func:`keyed_chain`, or why the inner query keeps the general path."""
    probe._selecting = True
    try:
        try:
            result = selector(probe)
        except Exception as error:
            # the general path calls it per group and fails there, as it always did
            return f"the selector raised {type(error).__name__} on a stand-in group (it runs per group)"
        chain = chain_or_reason(result, probe)  # (still selecting: a window step calls its own selector here)
    finally:
        probe._selecting = False
    if probe._key_read:
        return "the selector reads the group's key while it builds the inner query (the query may differ per key)"
    return chain


def chain_or_reason(result: object, probe: object) -> Chain | str:
    """The keyed steps of the query ``result`` over ``probe`` and their names, ``probe``'s first, or why it is
    not a chain of operators with keyed steps over ``probe`` (it keeps the general path). A step may stand for
    more than one node (a window and the ``flat_map`` over it: :meth:`KeyedStep.source_of`)."""
    nodes: list[Expression[Any]] = []
    node: object = result
    while node is not probe:  # the operators first, for the reason that names every one without a keyed step
        if not is_expression(node) or not node.args:
            return "the selector's query is not a chain of operators over the group"
        nodes.append(node)
        node = node.args[0]
    nodes.reverse()  # in the order elements meet them
    missing = list(dict.fromkeys(chain_node.op for chain_node in nodes if keyed_step_factory(chain_node.op) is None
                                 and not _inside_a_step(chain_node, nodes)))
    if len(missing) == 1:
        return f"the inner operator {missing[0]!r} has no keyed step"
    if missing:
        return f"the inner operators {', '.join(map(repr, missing))} have no keyed step"
    form = keyed_form()
    steps: list[KeyedStep] = []
    names: list[str] = []
    node = result
    while node is not probe:
        assert is_expression(node)
        if any(isinstance(argument, Subscribable) for argument in node.args[1:]):
            return f"the inner operator {node.op!r} reads another stream"
        factory = keyed_step_factory(node.op)
        if factory is None:
            return f"the inner operator {node.op!r} has no keyed step"
        try:
            step = factory(node)
        except Exception as error:
            # arguments the stage would refuse: the general path refuses them as it always did
            return f"the inner operator {node.op!r} refuses its arguments ({type(error).__name__})"
        if step is None:
            return (f"the arguments of the inner operator {node.op!r} have no keyed step (such as a mutable "
                    "seed or default, which each group needs a copy of, or a form of it that runs on the general "
                    "path)")
        if step.since > form:
            return (f"the inner operator {node.op!r}: the subscription was made before it ran keyed (it keeps the "
                    "form its stored state was written in)")
        steps.append(step)
        names.append(step.chain_name(node))
        node = step.source_of(node)
    steps.reverse()
    names.reverse()
    return tuple(steps), tuple(names)


def _inside_a_step(node: Expression[Any], nodes: list[Expression[Any]]) -> bool:
    """Whether ``node`` is the source of the node after it whose keyed step stands for both (a ``window`` under
    the ``flat_map`` over its windows), so that its own lack of a step is no reason."""
    index = nodes.index(node)
    return index + 1 < len(nodes) and keyed_step_factory(nodes[index + 1].op) is not None


@dataclass(frozen=True, slots=True)
class KeyedBinding:
    """How a keyed ``group_by ... flat_map`` binds: its chain, and what ``flat_map`` adds to it."""

    group_args: GroupByArgs
    steps: tuple[KeyedStep, ...]
    names: tuple[str, ...]
    probe: Any
    result_selector: Callable[[Any, Any], Any] | None
    max_concurrent: int | None

    @property
    def timed(self) -> KeyedStep | None:
        """The chain's step that needs the clock, if any (a window by time, a time buffer)."""
        return next((step for step in self.steps if step.timed), None)

    def stage(self, subscriber: Subscriber[Any]) -> KeyedGroups:
        """The running stage."""
        timed = self.timed
        if timed is not None:  # its stage has a timer queue (reaqtive.operators.keyed_timed)
            stage: KeyedGroups = timed.bind_stage(self, subscriber)
            return stage
        if self.group_args.expire_after is not None:
            return KeyedGroupsExpiring(self, subscriber)
        if self.max_concurrent is not None:
            return KeyedGroupsBounded(self, subscriber)
        return KeyedGroups(self, subscriber)


def plan_keyed_groups(
    source: object, selector: Callable[[Any], Any], result_selector: object, max_concurrent: object
) -> KeyedBinding | str:
    """The keyed binding of ``source.flat_map(selector, result_selector, max_concurrent=)`` in the keyed form
    bound now, or why it keeps the general path: the one decision, used by the binder and by ``explain``."""
    form = keyed_form()
    if form == 0:
        return "keyed execution is off (keyed_execution(False), or a subscription made before it existed)"
    if not is_expression(source) or source.op != "group_by":
        return "its source is not a group_by"
    if form < KEYED_FORM and (result_selector is not None or max_concurrent is not None):
        argument = "result_selector" if result_selector is not None else "max_concurrent"
        return (f"flat_map's {argument}: the subscription was made before it ran keyed (it keeps the form its "
                "stored state was written in)")
    try:
        group_args = GroupByArgs.read(source)
    except Exception as error:
        return f"group_by's arguments do not fit ({type(error).__name__}: the general path's binder reports it)"
    if max_concurrent is not None and group_args.expire_after is not None:
        return ("max_concurrent with group_by's expire_after: a group that expired while it waited for a slot "
                "and a new group of its key would be two groups of one key at once")
    if max_concurrent is not None and not (type(max_concurrent) is int and max_concurrent > 0):
        return "flat_map's max_concurrent does not fit (the general path's binder reports it)"
    if result_selector is not None and not callable(result_selector):
        return "flat_map's result_selector is not callable (the general path's binder reports it)"
    probe = KeyedGroupProbe.new()
    chain = _chain_or_reason(selector, probe)
    if isinstance(chain, str):
        return chain
    steps, names = chain
    binding = KeyedBinding(group_args, steps, names, probe, result_selector, max_concurrent)
    timed = binding.timed
    reason = None if timed is None else timed.general_reason(binding)
    return binding if reason is None else reason


def bind_keyed_groups(
    source: object,
    selector: Callable[[Any], Any],
    result_selector: object,
    max_concurrent: object,
    subscriber: Subscriber[Any],
) -> SubscriptionHandle | None:
    """The keyed stage for ``source.flat_map(selector)`` when it can run keyed (see the module), else ``None``
    (over a ``group_by``, the reason is noted for :func:`noting_general_groups`)."""
    binding = plan_keyed_groups(source, selector, result_selector, max_concurrent)
    if isinstance(binding, str):
        notes = _general_notes.get()
        if notes is not None and is_expression(source) and source.op == "group_by":
            notes.append(binding)
        return None
    return binding.stage(subscriber)


_general_notes: ContextVar[list[str] | None] = ContextVar("reaqtive_general_groups", default=None)


@contextmanager
def noting_general_groups() -> Iterator[list[str]]:
    """Within the block, why each ``group_by ... flat_map`` bound on the general path (a host binding a query
    reports them: the engine logs them at INFO). Inner queries bound later, while the query runs, are not noted."""
    notes: list[str] = []
    token = _general_notes.set(notes)
    try:
        yield notes
    finally:
        _general_notes.reset(token)


class _Outputs(list[Any]):
    """Several results of one element (a chain that ended and emitted its final results)."""

    __slots__ = ()


_stop_error = stopping_error  # what the stage fails with when a step raised an error that is not skipped


class KeyedGroups(PullingEmitterBase[Any, Any]):
    """The running stage of a keyed ``group_by ... flat_map`` (see the module)."""

    timeless = True
    name = "reaqtive:group_by+keyed"
    version: Version = (1,)
    group_by_name = "reaqtive:group_by"
    """The general path's ``group_by`` stage, named by the limit error as there."""

    __slots__ = (
        "_chain",
        "_deferred_error",
        "_element_selector",
        "_expiring",
        "_in_place",
        "_index",
        "_initial",
        "_key_pair",
        "_key_selector",
        "_limit_name",
        "_live",
        "_live_limit",
        "_max_groups",
        "_one_step",
        "_probe",
        "_result_selector",
        "_silent",
        "_source",
        "_steps",
        "_table",
    )

    def __init__(self, binding: KeyedBinding, downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        group_args, steps, chain, probe = binding.group_args, binding.steps, binding.names, binding.probe
        self._source: Subscribable[Any] = group_args.source
        self._key_selector = group_args.key_selector
        self._element_selector = group_args.element_selector
        max_groups = group_args.max_groups
        self._max_groups = UNLIMITED if max_groups is None else max_groups
        self._limit_name = "max_groups"
        self._live_limit = UNLIMITED  # keys whose chain is live at once (the host's MAX_CONCURRENT_INNER)
        self._steps = tuple(steps)
        self._chain = tuple(chain)
        self._initial = tuple(step.initial for step in self._steps) or (None,)
        self._in_place = any(step.in_place for step in self._steps)
        # No step overrides complete: a key's chain emits nothing and runs no user code when it completes
        self._silent = all(type(step).complete is KeyedStep.complete for step in self._steps)
        # The step of a one-step chain without an element selector: on_next's inlined path
        self._one_step = (
            self._steps[0]
            if len(self._steps) == 1 and self._element_selector is None and not self._steps[0].several
            else None
        )
        self._probe = probe
        self._result_selector = binding.result_selector
        self._key_pair = is_key_pair(self._result_selector)  # (key, result) built here, no call (see is_key_pair)
        # state
        self._table: KeyedStateTable[Any] = KeyedStateTable()
        self._index = self._table.index  # key -> page (the table keeps this dict for its life)
        # not state
        self._live = 0  # keys whose chain did not end
        self._deferred_error: Exception | None = None  # fails the result once the results before it went out
        self._expiring = False  # groups expire (KeyedGroupsExpiring): every element touches its key

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        setting = read_limit(context, MAX_GROUP_COUNT)
        if setting < self._max_groups:
            self._max_groups, self._limit_name = setting, MAX_GROUP_COUNT
        self._live_limit = read_limit(context, MAX_CONCURRENT_INNER)
        for step in self._steps:
            step.set_context(context)
            step.attach(self)
        self._table.attach(self, context)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    # -- elements --------------------------------------------------------------------------------------------------

    def on_next(self, value: Any) -> None:
        try:
            key = self._key_selector(value)
        except Exception as error:
            self._user_error(error, value)  # skipped: the element never reaches a key
            return
        self._keyed(key, value)

    def on_next_run(  # noqa: PLR0915, PLR0917  (the per-element path, inlined on purpose; bound once per run)
        self, values: Sequence[Any], start: int, end: int, cursor: Any, pos0: int, source: OperatorBase[Any],
        emit: Callable[[Any], object],
    ) -> int:
        """Elements ``values[start:end]`` from the engine's stream reader reading a run of logged events (see
        :meth:`reaqtive.engine.readers.StreamReader.read_run`; the same contract as a fused run's
        :meth:`~reaqtive.operators._fusion.FusedEntry.on_next_run`): ``cursor.pos`` set to each element's log
        position, then exactly what :meth:`on_next` does, with the results that :meth:`on_next` would hand
        downstream at once given to ``emit`` (the engine's egress collecting the run's outputs; it takes
        everything, so demand stays unbounded and nothing re-enters this stage). The common case (one step, a
        known key, one result) is inlined; anything else goes through :meth:`on_next`'s own path.

        Returns the index of the first element not handed (``end``, or less once ``source`` was disposed).
        """
        step = self._one_step
        key_selector = self._key_selector
        index = self._index
        in_place = self._in_place
        probe = self._probe
        tag = self._result_selector
        pair = self._key_pair
        calm = step is not None and self._calm()
        for i in range(start, end):
            if source._disposed:
                return i
            cursor.pos = pos0 + i
            value = values[i]
            try:
                key = key_selector(value)
            except Exception as error:
                self._user_error(error, value)
                continue
            if calm:
                try:
                    page = index.get(key)
                except TypeError:
                    page = None
                if page is not None:
                    records = page.records
                    record = records[key]
                    if record:  # the common case: a known key whose chain is live, one step, nothing waiting
                        probe._key = key
                        field = record[0]
                        try:
                            state, output = step.next(field, value)  # type: ignore[union-attr]  # calm: a step
                        except Exception as error:
                            self._step_failed(error, value)  # skipped: the key's record stays as it was
                            self._settle(direct=False)
                            calm = self._calm()
                            continue
                        if state is not field:
                            if state is DONE:
                                self._hand_on(self._ended(key, [field], 0, output), emit)
                                calm = self._calm()
                                continue
                            records[key] = (state,)
                            page.tracker.changed = True
                        elif in_place:
                            page.tracker.changed = True
                        if pair and output is not SKIP:
                            output = (key, output)  # (_tag's common case, inlined)
                        elif tag is not None and output is not SKIP:
                            output = self._tagged(output)
                        if output is not SKIP and type(output) is not _Outputs:
                            emit(output)
                            continue
                        self._hand_on(output, emit)
                        calm = self._calm()
                        continue
            self._keyed(key, value)  # anything else: on_next's own path
            calm = step is not None and self._calm()
        return end

    def _calm(self) -> bool:
        """Whether a result is handed on at once (see :meth:`on_next_run`): nothing waits, no error, the demand
        unbounded, the stage running."""
        return (self._error is None and not self._source_done and not self._pending and not self._emitting
                and self._running and self._demand == LONG_MAX and self._deferred_error is None)

    def _hand_on(self, output: Any, emit: Callable[[Any], object]) -> None:
        """What :meth:`_keyed` does with a step's result: handed on at once while nothing waits before it, else
        queued and drained."""
        if output is SKIP:
            self._settle(direct=False)
            return
        direct = (self._demand == LONG_MAX and not self._pending and not self._emitting and self._running
                  and type(output) is not _Outputs)
        if not direct:
            self._queue(output if type(output) is _Outputs else [output])
        self._settle(direct=direct)
        if direct:
            emit(output)
            if self._pending or self._error is not None or self._source_done:
                self._drain()

    def _settle(self, *, direct: bool) -> None:
        """What :meth:`_keyed` does once it let go of its lock: drain what waits (unless the result is handed on
        directly), then fail with an error deferred until the results before it went out."""
        if not direct and (self._pending or self._error is not None):
            self._drain()
        if self._deferred_error is not None:
            deferred, self._deferred_error = self._deferred_error, None
            self._fail(deferred)

    def _keyed(self, key: Any, value: Any) -> None:  # noqa: PLR0915  (the per-element path, inlined on purpose)
        """:meth:`on_next` once the element's key is known."""
        lock = self._lock
        lock.acquire()  # acquire/release: a third of the cost of ``with``
        direct = False
        try:
            if self._error is not None or self._source_done:
                return
            step = self._one_step
            try:
                page = self._index.get(key) if step is not None else None
            except TypeError:
                page = None  # an unhashable key: _element fails the stage
            if page is not None:
                # The common case, inlined: one step, a known key, no element selector (see _element).
                records = page.records
                record = records[key]
                if not record:
                    return  # the key's chain ended
                self._probe._key = key
                field = record[0]
                try:
                    state, output = step.next(field, value)  # type: ignore[union-attr]
                except Exception as error:
                    self._step_failed(error, value)  # skipped: the key's record stays as it was
                    return
                if state is not field:
                    if state is DONE:
                        output = self._ended(key, [field], 0, output)
                    else:
                        records[key] = (state,)
                        page.tracker.changed = True
                elif self._in_place:
                    page.tracker.changed = True
                if self._key_pair and state is not DONE and output is not SKIP:
                    output = (key, output)  # (_tag's common case, inlined)
                elif self._result_selector is not None and state is not DONE and output is not SKIP:
                    output = self._tagged(output)
            else:
                output = self._element(key, value)
            if output is SKIP:
                return
            if (
                self._demand == LONG_MAX
                and not self._pending
                and not self._emitting
                and self._running
                and type(output) is not _Outputs
            ):
                self._emitting = True  # the drainer role: deliver without the lock (see _emitter)
                direct = True
            else:
                self._queue(output if type(output) is _Outputs else [output])
        finally:
            lock.release()
            if not direct and (self._pending or self._error is not None):
                self._drain()
            if self._deferred_error is not None:
                deferred, self._deferred_error = self._deferred_error, None
                self._fail(deferred)
        if direct:
            self._downstream.on_next(output)
            self._emitting = False
            if self._pending or self._error is not None or self._source_done:
                self._drain()

    def _element(self, key: Any, value: Any) -> Any:
        """Run ``value`` through ``key``'s chain (lock held): its result (``SKIP``, one value or ``_Outputs``);
        a failure sets the error and returns ``SKIP``."""
        table = self._table
        try:
            record = table.get(key)
        except TypeError as error:
            self._step_failed(unhashable_key_error(key, error), value)
            return SKIP
        failure: Exception | None = None
        if self._element_selector is not None:  # (also for a key whose chain ended: group_by selects before it pushes)
            selected = self._select(value)
            if selected is None:
                return SKIP
            value, failure = selected
        if record is None:
            record = self._new_key(key, value, failure)
            if record is None:
                return SKIP
        if failure is not None:
            self._set_error(failure)
            return SKIP
        if self._expiring:
            self._touch(key)  # (the group lives on after its chain ended, as group_by's does)
        return self._run(key, record, value)

    def _new_key(self, key: Any, value: Any, failure: Exception | None) -> tuple[Any, ...] | None:
        """The record of a new key (lock held; ``value``, selected, is its first element, ``failure`` the element
        selector's error, raised once the key opened): ``None`` when a limit failed the stage."""
        table = self._table
        if len(table) >= self._max_groups:
            self._set_error(LimitExceededError(self.group_by_name, self._limit_name, self._max_groups))
            return None
        if self._live >= self._live_limit:
            self._set_error(LimitExceededError(_FLAT_MAP, MAX_CONCURRENT_INNER, self._live_limit))
            return None
        record = self._opened(key)
        table.put(key, record)
        self._live += 1
        return record

    def _run(self, key: Any, record: tuple[Any, ...], value: Any) -> Any:
        """Run ``value`` (selected) through the chain of ``key`` whose record is ``record`` (lock held): as
        :meth:`_element`."""
        if not record:
            return SKIP  # the key's chain ended: its later elements are dropped
        table = self._table
        self._probe._key = key
        steps = self._steps
        fields: list[Any] | None = None
        index = 0
        try:
            for step in steps:
                field = record[index] if fields is None else fields[index]
                state, value = step.next(field, value)
                if state is not field:
                    if state is DONE:
                        if fields is None:
                            fields = list(record)
                        return self._ended(key, fields, index, value)
                    if fields is None:
                        fields = list(record)
                    fields[index] = state
                if value is SKIP:
                    break
                if type(value) is Several:
                    return self._several(key, list(record) if fields is None else fields, index, value)
                index += 1
            else:
                if self._result_selector is not None:
                    value = self._tag(value)  # (raises: handled as a step's error on the chain's result)
        except Exception as error:
            # Step ``index`` raised on ``value``: skipped, the element stops there; the steps before it keep what
            # they did with it (``fields``), the failing step's field stays.
            if not self._step_failed(error, value):
                return SKIP
            value = SKIP
        if fields is not None:
            table.put(key, tuple(fields))
        elif self._in_place:
            table.put(key, record)  # a field changed in place: its page must be saved
        return value

    def _opened(self, key: Any) -> tuple[Any, ...]:
        """The record of a new key (lock held)."""
        return self._initial

    def _several(self, key: Any, fields: list[Any], index: int, values: Several) -> Any:
        """Step ``index`` put out several values (a window step): each goes through the steps after it, in order
        (lock held); ``fields`` holds the step's new field. The result as :meth:`_element`'s."""
        ended, outputs = self._feed_record(key, fields, index + 1, values)
        if ended is None or not outputs:
            return SKIP
        return outputs[0] if len(outputs) == 1 else outputs

    def _feed_record(self, key: Any, fields: list[Any], index: int, values: Several) -> tuple[bool | None, _Outputs]:
        """``values`` through the steps from ``index`` on, then the key's record saved (``fields``, or none once
        its chain ended; lock held): ``(ended, outputs)``, ``ended`` ``None`` when a step failed (the results
        before the failure are queued first, as the general path sends them, see _ended, and the error is
        deferred)."""
        outputs = _Outputs()
        ended = False
        try:
            ended = self._feed_several(fields, index, values, outputs)
        except Exception as error:
            if outputs:
                self._queue(outputs)
            self._deferred_error = _stop_error(error)
            return None, outputs
        finally:
            self._table.put(key, () if ended else tuple(fields))
            if ended:
                self._live -= 1
        return ended, outputs

    def _feed_several(self, fields: list[Any], index: int, values: Several, outputs: list[Any]) -> bool:
        """:meth:`_feed` for each of ``values``, then their failure, if any, is raised; ``True``: the chain ended."""
        for value in values:
            if self._feed(fields, index, value, outputs):
                return True
        if values.failure is not None:
            raise values.failure
        return False

    def _select(self, value: Any) -> tuple[Any, Exception | None] | None:
        """The element selector's element for ``value`` (lock held), before a new key opens, so that a skipped
        element opens nothing: ``(element, None)``; ``None`` when it raised (or returned ``None``) and the error
        policy skips ``value``; ``(value, error)`` when the query stops, which it does after a new key opened (a
        limit first), as on the general path."""
        selector = self._element_selector
        assert selector is not None
        try:
            element = selector(value)
            if element is None:
                raise none_element_error()
        except Exception as error:
            if self._skips(error, value):
                return None
            return value, error
        return element, None

    def _ended(self, key: Any, fields: list[Any], index: int, value: Any) -> Any:
        """Step ``index`` ended ``key``'s chain after emitting ``value``: the steps after it get ``value`` and
        complete; the key's record becomes ``()`` (its later elements are dropped)."""
        outputs = _Outputs()
        try:
            if value is SKIP or not self._feed(fields, index + 1, value, outputs):
                self._complete_from(fields, index + 1, outputs)
        except Exception as error:
            # The results before the failure go out first, as the general path sends them (see on_next).
            if outputs:
                self._queue(outputs)
            self._deferred_error = _stop_error(error)
            return SKIP
        self._table.put(key, ())
        self._live -= 1
        if not outputs:
            return SKIP
        return outputs[0] if len(outputs) == 1 else outputs

    def _feed(self, fields: list[Any], index: int, value: Any, outputs: list[Any]) -> bool:
        """Feed ``value`` into the steps from ``index`` (changing ``fields``), appending what leaves the chain to
        ``outputs`` (see :func:`~reaqtive.operators.keyed_steps.feed_steps`). ``True``: a step ended the chain."""
        return feed_steps(self._steps, fields, index, value, outputs, skips=self._user_skips,
                          leave=None if self._result_selector is None else self._tag)

    def _complete_from(self, fields: list[Any], index: int, outputs: list[Any]) -> None:
        """Complete the steps from ``index`` in order, each one's final outputs going through the steps after it."""
        complete_steps(self._steps, fields, index, outputs, skips=self._user_skips,
                       leave=None if self._result_selector is None else self._tag)

    def _user_skips(self, error: Exception, value: Any) -> bool:
        """Whether the query's error policy skips ``value`` after a step raised ``error`` on it (lock held);
        never for the operator's own errors (:class:`StepOperatorError`)."""
        return not isinstance(error, StepOperatorError) and self._skips(error, value)

    def _tag(self, value: Any) -> Any:
        """``value`` leaves the chain of the key at hand (lock held): the result selector's result, given a
        :class:`KeyedGroup` of the key; raises what the selector raised (a ``TypeError`` when it returned ``None``)."""
        selector = self._result_selector
        assert selector is not None  # (the callers look first)
        if self._key_pair:
            return (self._probe._key, value)
        result = selector(KeyedGroup((self._probe._key,)), value)
        if result is None:
            raise TypeError(_NONE_RESULT)
        return result

    def _tagged(self, value: Any) -> Any:
        """:meth:`_tag` on the one-step path: what it raises goes through the policy (lock held); ``SKIP`` when the
        policy skips it there (the result is dropped)."""
        try:
            return self._tag(value)
        except Exception as error:
            self._step_failed(error, value)
            return SKIP

    def _step_failed(self, error: Exception, value: Any) -> bool:
        """A step (or the key) raised ``error`` on ``value`` (lock held): ``True`` if the policy skips it there,
        else the stage fails with the error (``False``)."""
        if self._user_skips(error, value):
            return True
        self._set_error(_stop_error(error))
        return False

    # -- demand and the end ----------------------------------------------------------------------------------------

    def on_complete(self) -> None:
        self._upstream_terminated()
        failure: Exception | None = None
        with self._lock:
            if self._error is None and not self._source_done:
                failure = self._complete_keys(self._in_completion_order())
                if failure is None:
                    self._source_done = True
                    self._clear()
                self._state.changed = True
        self._drain()  # the final results (as far as demand goes), then the completion or the failure
        if failure is not None:
            self._fail(failure)

    def _in_completion_order(self) -> Iterable[tuple[Any, tuple[Any, ...]]]:
        """``(key, record)`` in the order group_by completes its groups: the order keys first came."""
        return self._table.items()

    def _clear(self) -> None:
        """Forget every key (the source completed)."""
        self._table.clear()
        self._live = 0

    def _touch(self, key: Any) -> None:
        """An element of ``key`` passed the selectors (expiry keeps its time)."""

    def _complete_keys(self, keys: Iterable[tuple[Any, tuple[Any, ...]]]) -> Exception | None:
        """Complete the chains of ``keys`` in order, queueing the final results (lock held); a step that fails
        stops there and is returned (the results before it go out first, as on the general path)."""
        if self._silent:
            return None  # no step does anything at the end (map, filter, scan, take...): nothing to run per key
        for key, record in keys:
            failure = self._finish(key, list(record)) if record else None
            if failure is not None:
                return failure
        return None

    def _finish(self, key: Any, fields: list[Any], held: Iterable[Any] = ()) -> Exception | None:
        """``key``'s chain (its ``fields``) takes the elements ``held`` for it, then completes, unless one of
        them ended it; its results queued (lock held). A step that fails stops there and is returned (the results
        before it are queued first)."""
        self._probe._key = key
        outputs = _Outputs()
        try:
            for value in held:
                if self._feed(fields, 0, value, outputs):
                    break  # its chain ended: it completed the steps after the one that ended it
            else:
                self._complete_from(fields, 0, outputs)
        except Exception as error:
            if outputs:
                self._queue(outputs)
            return _stop_error(error)
        if outputs:
            self._queue(outputs)
        return None

    def on_start(self) -> None:
        if self._source_done:  # recovered while emitting the last results: the source is not needed
            upstream = self._upstream
            self._upstream_terminated()
            if upstream is not None:
                upstream.cancel()
        else:
            self._ask_again()
        self._running = True
        self._drain()

    def on_dispose(self) -> None:
        self._table.dispose()

    # -- state -----------------------------------------------------------------------------------------------------

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(list(self._chain))
        self._table.save(writer)
        writer.write(list(self._pending))
        writer.write(self._source_done)
        writer.write(self._pulled)

    def load_state_core(self, reader: StateReader) -> None:
        chain = reader.read_list("chain", of=str)
        if tuple(chain) != self._chain:
            raise reader.invalid("chain", f"the inner query's operators {list(self._chain)}", chain)
        self._table.load(reader)  # hosted, the pages are back when it returns
        self._check_records(getattr(reader, "where", f"operator {self.name!r}"))
        self._pending.clear()
        self._pending.extend(reader.read_list("pending"))
        self._source_done = reader.read_bool("source done")
        self._load_pulled(reader.read_bool("pulled"))
        if self._source_done and len(self._table):
            raise reader.invalid("source done", "False while keys are held", True)

    def _check_records(self, where: str) -> None:
        """Every loaded record is the chain's: ``()`` or one field per step that the step accepts (a
        ``StateFormatError`` naming the key and the page unit otherwise)."""
        steps = self._steps
        width = len(self._initial)
        live = 0
        for key, record in self._table.items():
            if not record:
                continue
            context = f"{where}: the record of key {key!r:.60} (a {_PAGE!r} unit)"
            if len(record) != width:
                raise RecordReader(record, context).invalid("record", f"{width} fields, one per step", record)
            for index, (step, field) in enumerate(zip(steps, record, strict=False)):
                if not step.check(field):
                    raise RecordReader(record, context).invalid(
                        f"field {index} ({self._chain[index]})", "a field of that step", field
                    )
            live += 1
        self._live = live


class KeyedGroupsBounded(KeyedGroups):
    """:class:`KeyedGroups` for ``flat_map(..., max_concurrent=n)``: at most ``n`` keys' chains are live at once.

    As on the general path, where ``flat_map`` asks ``group_by`` for another group only while a slot is free: a
    new key beyond the bound waits, with the elements that come for it (selected), until a live key's chain
    ends (a ``take`` reached its count); then the key that waited longest opens and its elements run through its
    chain, after the results of the element that ended the other. Waiting keys and their elements count together
    against ``MAX_QUEUE_SIZE`` (256 by default; one more fails the result with ``LimitExceededError`` naming
    ``group_by``, as there), and ``max_groups`` counts waiting keys. The source's completion completes the live
    keys' chains (in the order they first came), then, in the order they began to wait, runs each waiting key's
    elements through its chain and completes it. The host's ``MAX_CONCURRENT_INNER``, when lower, is the bound.

    **State.** As :class:`KeyedGroups`, then the waiting keys in order, each with its elements.
    """

    name = "reaqtive:group_by+keyed+bounded"
    version: Version = (1,)

    __slots__ = ("_bound", "_held", "_max_waiting", "_waiting")

    def __init__(self, binding: KeyedBinding, downstream: Subscriber[Any]) -> None:
        super().__init__(binding, downstream)
        assert binding.max_concurrent is not None
        self._bound: int = binding.max_concurrent
        self._one_step = None  # an element may open a waiting key: no inlined path
        # state
        self._waiting: dict[Any, list[Any]] = {}  # key -> its elements, in the order the keys began to wait
        # not state
        self._held = 0  # waiting keys + their elements
        self._max_waiting = DEFAULT_MAX_WAITING

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._bound = min(self._bound, self._live_limit)
        self._max_waiting = queue_capacity(context)

    def _new_key(self, key: Any, value: Any, failure: Exception | None) -> tuple[Any, ...] | None:
        waiting = self._waiting
        held = waiting.get(key)
        if held is None:
            if len(self._table) + len(waiting) >= self._max_groups:
                self._set_error(LimitExceededError(self.group_by_name, self._limit_name, self._max_groups))
                return None
            if self._live < self._bound:
                return super()._new_key(key, value, failure)
            waiting[key] = held = []
            if not self._hold():
                return None
        if failure is not None:
            self._set_error(failure)
        elif self._hold():
            held.append(value)
        return None  # it waits

    def _hold(self) -> bool:
        """One more waiting key or element (lock held); ``False``: beyond ``MAX_QUEUE_SIZE`` (the stage failed)."""
        self._held += 1
        self._state.changed = True
        if self._held > self._max_waiting:
            self._set_error(LimitExceededError(self.group_by_name, MAX_QUEUE_SIZE, self._max_waiting))
            return False
        return True

    def _element(self, key: Any, value: Any) -> Any:
        output = super()._element(key, value)
        if not self._waiting or self._live >= self._bound:
            return output
        # A chain ended: the keys that wait take its slot, their results after this element's.
        if output is not SKIP:
            self._queue(output if type(output) is _Outputs else [output])
        self._promote()
        return SKIP

    def _next_waiting(self) -> tuple[Any, list[Any]]:
        """Open the key that waited longest (lock held): its key and its elements."""
        waiting = self._waiting
        key = next(iter(waiting))
        held = waiting.pop(key)
        self._held -= 1 + len(held)
        self._state.changed = True
        self._table.put(key, self._initial)
        self._live += 1
        return key, held

    def _promote(self) -> None:
        """Open waiting keys while slots are free, running their elements through their chains (lock held)."""
        table = self._table
        while self._waiting and self._live < self._bound and not self._stopping():
            key, held = self._next_waiting()
            for value in held:
                record = table.get(key)
                assert record is not None
                output = self._run(key, record, value)
                if output is not SKIP:
                    self._queue(output if type(output) is _Outputs else [output])
                if self._stopping():
                    error = self._error
                    if self._deferred_error is None and isinstance(error, Exception):
                        # The results queued before it (on the general path they went out as they came) first.
                        self._deferred_error, self._error = error, None
                    return

    def _stopping(self) -> bool:
        """Whether the stage failed, or fails once the results before the failure went out (lock held)."""
        return self._error is not None or self._deferred_error is not None

    def _complete_keys(self, keys: Iterable[tuple[Any, tuple[Any, ...]]]) -> Exception | None:
        failure = super()._complete_keys(keys)
        if failure is not None:
            return failure
        while self._waiting:  # (the source completed) each waiting key in turn: its elements, then its end
            key, held = self._next_waiting()
            failure = self._finish(key, list(self._initial), held)
            if failure is not None:
                return failure
        return None

    def _clear(self) -> None:
        super()._clear()
        self._waiting.clear()
        self._held = 0

    def on_start(self) -> None:
        with self._lock:  # recovered under a higher bound (the host's limit changed): the waiting keys open
            if not self._source_done and self._error is None:
                self._promote()
        super().on_start()
        self._settle(direct=False)

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write([[key, list(held)] for key, held in self._waiting.items()])

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        waiting: dict[Any, list[Any]] = {}
        for entry in reader.read_list("waiting"):
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
                raise reader.invalid("waiting", "[key, elements] per waiting key", entry)
            key, held = entry
            try:
                known = key in waiting or key in self._table
            except TypeError:
                raise reader.invalid("waiting", "a key that can be hashed", key) from None
            if known:
                raise reader.invalid("waiting", "a key neither open nor waiting twice", key)
            waiting[key] = held
        if self._source_done and waiting:
            raise reader.invalid("source done", "False while keys wait", True)
        self._waiting = waiting
        self._held = sum(1 + len(held) for held in waiting.values())


class KeyedGroupsExpiring(KeyedGroups):
    """:class:`KeyedGroups` for ``group_by(..., expire_after=)``: a key with no element for ``expire_after``
    completes its chain (its final results go out) and is forgotten; a later element opens it again, new.

    As on the general path (``GroupByExpiring``): one timer is pending at a time, for the key idle the longest;
    keys are kept in the order of their latest element, which is also the order the source's completion
    completes them in; an element at the very instant its key would expire keeps it (sources run before timers
    at equal times). Each key's latest time and a touch number (its place in that order) are a record of a
    second keyed table, so an element dirties the pages of its key, never the stage: a checkpoint writes the
    keys that changed, and recovery rebuilds the order from the touch numbers.
    """

    timeless = False  # its groups expire on timers
    name = "reaqtive:group_by+keyed+expiry"
    version: Version = (2,)
    older_versions = frozenset({(1,)})  # without the pending timer: re-armed at the restart's tick
    group_by_name = "reaqtive:group_by+expiry"

    __slots__ = (
        "_armed",
        "_expire_after",
        "_order",
        "_recovered",
        "_scheduler",
        "_timer",
        "_timer_due",
        "_times",
        "_touches",
    )

    def __init__(self, binding: KeyedBinding, downstream: Subscriber[Any]) -> None:
        super().__init__(binding, downstream)
        expire_after = binding.group_args.expire_after
        assert expire_after is not None
        self._expire_after: timedelta = expire_after
        self._expiring = True
        self._one_step = None  # every element touches its key: no inlined path
        # state
        self._times: KeyedStateTable[Any] = KeyedStateTable()  # key -> (latest element's time, touch number)
        # not state
        self._order: dict[Any, None] = {}  # the keys, in the order of their latest element
        self._touches = 0  # the next touch number
        self._timer_due: datetime | None = None
        # state: the pending timer's task (its number in its armed tick: read at a checkpoint, never per element)
        # and when it was armed: its place in line, which a recovered one keeps (as GroupByExpiring's)
        self._timer: ActionTask | None = None
        self._armed: datetime | None = None
        self._recovered: tuple[datetime, datetime, int | None] | None = None  # the loaded timer, until on_start
        self._scheduler: Scheduler | None = None

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: expiry needs a clock
        self._times.attach(self, context)

    def _schedule(self, due: datetime, armed: datetime | None = None, number: int | None = None) -> None:
        """Arm the timer at ``due`` (once per expiry, never per element); ``armed`` and ``number``: when a
        recovered timer was armed and its number in that tick (else now, and a new number)."""
        scheduler = self._scheduler
        assert scheduler is not None
        self._timer_due = due
        self._armed = scheduler.now if armed is None else armed
        task = self._timer = ActionTask(self._on_timer, armed=armed, arrival=number)
        scheduler.schedule(task, due=due)

    def _touch(self, key: Any) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        now = scheduler.now
        touch = self._touches
        self._touches = touch + 1
        self._times.put(key, (now, touch))
        order = self._order
        order.pop(key, None)
        order[key] = None  # re-inserted: the keys stay in the order of their latest element
        if self._timer_due is None:
            self._schedule(add_safe(now, self._expire_after))

    def _in_completion_order(self) -> Iterable[tuple[Any, tuple[Any, ...]]]:
        table = self._table
        return [(key, table.get(key) or ()) for key in self._order]

    def _clear(self) -> None:
        super()._clear()
        self._times.clear()
        self._order.clear()

    def _on_timer(self) -> None:
        if self._disposed:
            return  # a disposed operator's timer may still run
        scheduler = self._scheduler
        assert scheduler is not None
        failure: Exception | None = None
        due: datetime | None = None
        with self._lock:
            self._timer_due = self._timer = None
            if self._error is None and not self._source_done:
                failure, due = self._expire(scheduler.now)
                if due is not None:
                    self._timer_due = due
        if due is not None:
            self._schedule(due)  # (outside the lock, as before)
        self._drain()
        if failure is not None:
            self._fail(failure)

    def _expire(self, now: datetime) -> tuple[Exception | None, datetime | None]:
        """Complete and forget every key idle for ``expire_after`` (lock held): the failure of a chain's
        completion, if any, and when the next key is due."""
        order, times, table = self._order, self._times, self._table
        expire_after = self._expire_after
        while order:
            key = next(iter(order))
            record = times.get(key)
            assert record is not None
            due = add_safe(record[0], expire_after)
            if due > now:
                return None, due
            del order[key]
            times.pop(key)
            chain = table.pop(key)
            if chain:
                self._live -= 1
                failure = self._complete_keys([(key, chain)])
                if failure is not None:
                    return failure, None
        return None, None

    def on_start(self) -> None:
        recovered, self._recovered = self._recovered, None
        if self._source_done or self._timer_due is not None:
            pass
        elif recovered is not None:  # the timer as it stood, in its place in line
            self._schedule(*recovered)
        elif self._order:  # recovered with keys from a version 1 state: armed at the restart's tick
            first = self._times.get(next(iter(self._order)))
            assert first is not None
            self._schedule(add_safe(first[0], self._expire_after))
        super().on_start()

    def on_dispose(self) -> None:
        super().on_dispose()
        self._times.dispose()

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        self._times.save(writer)
        # (once the source completed or the stage failed, a pending timer only finds nothing to do)
        live = self._timer_due is not None and not self._source_done and self._error is None
        timer = self._timer if live else None
        writer.write(None if timer is None else self._timer_due)
        writer.write(None if timer is None else self._armed)
        writer.write(number_of(timer))  # (read here, never per element)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        self.load_state_core(reader, timer=False)  # (1,): no timer: it is re-armed at the restart's tick

    def load_state_core(self, reader: StateReader, *, timer: bool = True) -> None:
        super().load_state_core(reader)
        self._times.load(reader)
        self._recovered = self._read_timer(reader) if timer else None
        earliest, latest = time_bounds(self.context)
        touches: list[tuple[int, Any]] = []
        where = getattr(reader, "where", f"operator {self.name!r}")
        for key, record in self._times.items():
            if (
                len(record) != 2
                or not isinstance(record[0], datetime)
                or record[0].tzinfo is None
                or (earliest is not None and record[0] < earliest)
                or (latest is not None and record[0] > latest)
                or type(record[1]) is not int
                or record[1] < 0
            ):
                context = f"{where}: the expiry record of key {key!r:.60} (a {_PAGE!r} unit)"
                raise RecordReader(record, context).invalid(
                    "record", "(time within the checkpoint's bounds, touch number)", record
                )
            touches.append((record[1], key))
        if len(touches) != len(self._table) or any(key not in self._table for _, key in touches):
            raise reader.invalid("expiry", "one expiry record per key of the chains' table", len(touches))
        touches.sort(key=lambda pair: pair[0])
        if any(a[0] == b[0] for a, b in pairwise(touches)):
            raise reader.invalid("expiry", "distinct touch numbers", [touch for touch, _ in touches])
        self._order = {key: None for _, key in touches}
        self._touches = touches[-1][0] + 1 if touches else 0

    def _read_timer(self, reader: StateReader) -> tuple[datetime, datetime, int | None] | None:
        """The saved timer: ``(due, armed, number)`` (its number in the armed tick or ``None``), or ``None``. It
        was armed within the clock's bounds, at most ``expire_after`` before it is due."""
        due = reader.read_optional_datetime("timer due", *time_bounds(self.context, self._expire_after))
        armed = reader.read_optional_datetime("timer armed", *time_bounds(self.context))
        number = read_number(reader)
        if due is None and armed is None and number is None:
            return None
        if due is None or armed is None or not due - self._expire_after <= armed <= due or self._source_done:
            raise reader.invalid(
                "timer", "due, armed and number of a timer armed at most expire_after before it is due, or none "
                "of them (and none once the source completed)", [due, armed, number]
            )
        return due, armed, number
