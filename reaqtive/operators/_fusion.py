"""Stage fusion: a run of adjacent per-element stages handles each element in one Python frame (DESIGN 13).

A query such as ``source.map(f).filter(p).map(g)`` binds, as always, to one stage per operator (``Map``,
``Filter``, ``Map``), each with its own place in the tree, its own lifecycle and its own saved state. Fusion
changes only the way an element travels through them: instead of one ``on_next`` call per stage, the upstream
calls one generated ``on_next`` that runs the three steps in a row::

    def on_next(self, v0):
        try:
            v1 = self._f0(v0)                         # map(f), stage 0
        except Exception as error:
            self._s0._user_error(error, v0)
            return
        if v1 is None:
            self._s0._selector_returned_none(v0)
            return
        if self._s0._disposed:
            return
        try:
            drop = not self._f1(v1)                   # filter(p), stage 1
        ...
        self._s2._downstream.on_next(v2)

Each step is the stage's own ``on_next``, written as a template next to it (:class:`FusedStep`, e.g.
``Map.fused_step``): the user's function is called under the same ``try``, its failure goes through the same
stage's ``_user_error`` (the query's error policy decides: stop sends ``on_error`` down through the stages after
it and disposes the run and its upstream; skip drops the element at that step, the stage asks its upstream for
one more in its place as the unfused stage does, and the run goes on with the next element), a dropped element
is replaced upstream by the same stage, and after each step the element goes on only if that stage is still
live, which is when the unfused stage would have passed it on. Everything else
(``on_subscribe``, ``request``, ``cancel``, ``on_error``, ``on_complete``, dispose, save and load) still goes
through the stages themselves, unchanged.

**What does not change.** The query expression: fusion happens when a query is bound, never when it is built or
stored. The tree and its saved state: the stages of a run are the ordinary stage objects, linked by ``inputs``
as before, so checkpoint traversals see the same nodes at the same paths and save the same bytes, and state
saved by a fused run loads into an unfused one and the other way round. The frames a stage takes on the
deepest path (:func:`reaqtive.core.binding.frames_of`): an element takes one frame for the whole run, and a
completion, an error and a request take the path they took before.

**Which stages fuse.** Those registered with :func:`fusible`: stages that handle an element in a few lines and
save no state of their own (only the base's disposed flag): ``map``, ``filter``, ``do``; and ``scan`` (with or
without a seed), whose state is two fields of its own stage that its step reads and writes there, where a
checkpoint finds them, exactly as its ``on_next`` does. A run is every adjacent fusible stage (up to
:data:`MAX_RUN`). A source that emits in batches (``from_iterable``, see :func:`emits_batches`) hands the run
below it a batch at a time (:meth:`FusedEntry.on_next_batch`), with no call per element between the source and
the run; a run of one stage over any other source is bound as the plain stage (nothing to gain).

**The switch.** Fusion is on by default. :func:`set_stage_fusion` turns it off (or on) for the whole process, and
:func:`stage_fusion` for a block (``with stage_fusion(False): ...``); either applies to the stages bound while it
is in force, so set it before a query is bound and keep it until it has started (inner queries of higher-order
operators are bound later, while the query runs). Results, errors, demand and saved state are the same either
way; the tests run both ways and cross a checkpoint from one to the other.

The entry classes are generated (compiled once per sequence of stage classes, and cached) from the stages'
templates only: no user value ever becomes code. Their source is registered with :mod:`linecache`, so a
traceback through a fused run shows the lines it ran.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol, TypeVar, cast

from reaqtive.core.binding import DEFAULT_FRAMES, is_registered, register_operator
from reaqtive.core.expression import Expression
from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle

__all__ = [
    "MAX_RUN",
    "SOURCE_DISPOSED",
    "STOPPED_AT_NONE",
    "BatchEnd",
    "FusedEntry",
    "FusedStep",
    "FusibleStage",
    "emits_batches",
    "fusible",
    "fused_run",
    "set_stage_fusion",
    "stage_fusion",
    "stage_fusion_enabled",
]

MAX_RUN: Final = 32
"""The most stages one run takes; a longer chain of fusible stages binds as several runs, one after another."""


# --------------------------------------------------------------------------------------------------------------
# The switch
# --------------------------------------------------------------------------------------------------------------

_enabled = True


def stage_fusion_enabled() -> bool:
    """Whether stages bound now are fused (``True`` unless switched off)."""
    return _enabled


def set_stage_fusion(enabled: bool) -> bool:
    """Fuse (``True``) or do not fuse (``False``) the stages bound from now on, in the whole process. Returns
    the previous setting. Queries already bound keep the form they were bound in."""
    global _enabled  # the process-wide switch, read once per bind
    if not isinstance(enabled, bool):
        raise TypeError(f"set_stage_fusion: enabled must be a bool, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


@contextmanager
def stage_fusion(enabled: bool) -> Iterator[None]:
    """Within the block, bind stages fused (``True``) or not (``False``); the previous setting comes back after.

    >>> from reaqtive import from_iterable
    >>> with stage_fusion(False):
    ...     handle = from_iterable([1, 2, 3]).map(lambda x: x * 10).run(print)
    10
    20
    30
    """
    previous = set_stage_fusion(enabled)
    try:
        yield
    finally:
        set_stage_fusion(previous)


# --------------------------------------------------------------------------------------------------------------
# What a fusible stage declares
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FusedStep:
    """An operator's per-element logic, written once as a template, from which its three renditions are compiled:
    the stage's ``on_next`` (:meth:`stage_on_next`), its step in a fused run (:func:`_generate`) and its keyed step's
    ``next`` (:meth:`keyed_next`, for :class:`~reaqtive.operators.keyed_steps.TemplateStep`).

    ``function``: the attribute of the stage holding the user's function. ``state``: the attribute of the stage
    holding the operator's field (the keyed step's field), ``""`` for none. ``code``: the step, in Python, with
    placeholders: ``{value}`` (the element coming in), ``{result}`` (the element going on, for a step that
    makes a new one; a step without it passes ``{value}`` on), ``{fn}`` (the user's function), ``{state}`` (the
    field, read and written), ``{changed}`` (marks the field changed; nothing in a keyed step, whose stage writes
    what it returns), ``{stage}`` (the stage object: the rare paths, ``_user_error`` and a replacement request;
    in a keyed step, the step, whose ``_user_error`` raises the error for the keyed stage's policy), ``{stop}``
    (ends the element's trip: ``return`` in ``on_next``, ``continue`` in a batch, no output in a keyed step) and
    ``{bounded}`` (``True`` in ``on_next``, ``False`` in a batch and a keyed step, which run only under unbounded
    demand or have none: ``if {bounded}:`` keeps demand bookkeeping off those paths, and the compiler drops the
    test). It may use locals of its own (``error``, ``drop``, ...) and no other braces. Keep what is rare (an
    error message, a replacement request) in methods of the stage that the keyed step shares.
    """

    function: str
    code: str
    state: str = ""

    def __post_init__(self) -> None:
        # a template with a stray brace fails where it is declared
        self.render(value="v0", result="v1", fn="f", stage="s", stop="return", bounded=True, indent=0)

    @property
    def transforms(self) -> bool:
        """Whether the step makes a new element (``{result}``) rather than passing ``{value}`` on."""
        return "{result}" in self.code

    def render(
        self, *, value: str, result: str, fn: str, stage: str, stop: str, bounded: bool, indent: int,
        state: str | None = None, changed: str | None = None,
    ) -> list[str]:
        """The step's lines, over the local ``value`` (into ``result``), indented by ``indent`` spaces; the field
        is the stage's attribute unless ``state`` names another place."""
        text = textwrap.dedent(self.code).strip("\n")
        text = text.format(
            value=value, result=result, fn=fn, stage=stage, stop=stop, bounded=bounded,
            state=f"{stage}.{self.state}" if state is None else state,
            changed=f"{stage}._state.changed = True" if changed is None else changed,
        )
        return [" " * indent + line if line else line for line in text.splitlines()]

    def stage_on_next(self) -> Any:  # (a method of the stage class: Any, as mypy checks it against on_next)
        """The stage's ``on_next``: the template as a run of one stage."""
        lines = ["def on_next(self, v0):"]
        lines += self.render(value="v0", result="v1", fn=f"self.{self.function}", stage="self", stop="return",
                             bounded=True, indent=4)
        lines.append(f"    self._downstream.on_next({'v1' if self.transforms else 'v0'})")
        return _compiled(lines, "on_next", {})

    def keyed_next(self) -> Any:  # (a method of the step class, as stage_on_next)
        """The keyed step's ``next(state, value)``: the template over the key's field, raising the user's errors
        (the step's ``_user_error``) for the keyed stage, which applies the query's error policy."""
        from reaqtive.operators.keyed_steps import SKIP  # (local: keyed_steps imports this module's users)

        lines = ["def next(self, state, value):"]
        lines += self.render(value="value", result="result", fn="self._fn", stage="self", stop="return state, SKIP",
                             bounded=False, indent=4, state="state", changed="pass")
        lines.append(f"    return state, {'result' if self.transforms else 'value'}")
        return _compiled(lines, "next", {"SKIP": SKIP})


def _compiled(lines: list[str], name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """Function ``name`` compiled from ``lines`` (a template's rendition), its source registered with
    :mod:`linecache` so that a traceback shows the lines it ran."""
    source = "\n".join(lines) + "\n"
    filename = f"<reaqtive step {name} #{next(_GENERATED)}>"
    exec(compile(source, filename, "exec"), namespace)  # our templates only: no user value becomes code
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return cast("Callable[..., Any]", namespace[name])


class FusibleStage(Protocol):
    """What the fusion needs of a stage class registered with :func:`fusible` (``Map``, ``Filter``, ``Do``,
    ``Scan``, ``ScanSeed``)."""

    fused_step: ClassVar[FusedStep]
    _source: Subscribable[Any]
    _disposed: bool
    _downstream: Subscriber[Any]

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None: ...

    def on_subscribe(self, subscription: Subscription) -> None: ...

    def on_error(self, error: BaseException) -> None: ...

    def on_complete(self) -> None: ...


B = TypeVar("B", bound=Callable[..., Any])

_STAGES: dict[str, Callable[[Expression[Any], Subscriber[Any]], Any]] = {}
"""The fusible operators: how each creates its stage (a stage class, or a binder choosing one)."""

_BATCH_SOURCES: set[str] = set()
"""The operators whose stage hands a run batches (:meth:`FusedEntry.on_next_batch`), see :func:`emits_batches`."""


def emits_batches(op: str) -> None:
    """Declare that the stage of the source operator ``op`` hands a fused run directly below it batches of
    elements under unbounded demand (it calls :meth:`FusedEntry.on_next_batch` when its subscriber is an
    entry), so that even a run of one stage over it gets an entry."""
    _BATCH_SOURCES.add(op)


def fusible(
    op: str, *, frames: int = DEFAULT_FRAMES, builder: Callable[..., Any] | None = None, args: type | None = None
) -> Callable[[B], B]:
    """Decorator of a stage class, or of a function ``(query, downstream) -> stage`` that chooses one: register
    it as the binder of ``op`` (as :func:`~reaqtive.core.binding.register_operator` does, with the same ``frames``,
    ``builder`` and ``args``), bound fused with the fusible stages next to it.

    Each stage class it creates declares ``fused_step`` (a :class:`FusedStep`), takes ``(query, downstream)``,
    and subscribes its input as ``self._source.subscribe(self)``; a stage with state keeps it in its own fields,
    which the step reads and writes, so that fusion changes nothing in what it saves.
    """

    def decorate(create: B) -> B:
        if isinstance(create, type) and not isinstance(create.__dict__.get("fused_step"), FusedStep):
            raise TypeError(f"fusible({op!r}): {create.__qualname__} must declare fused_step = FusedStep(...)")

        def bind(query: Expression[Any], downstream: Subscriber[Any]) -> SubscriptionHandle:
            if _enabled:
                return _bind_run(query, downstream)
            return cast("SubscriptionHandle", create(query, downstream))

        bind.__name__ = bind.__qualname__ = f"bind_{op}"
        bind.__doc__ = f"The binder of ``{op}``: {create.__qualname__}, fused with its fusible neighbours."
        register_operator(op, frames=frames, builder=builder, args=args)(bind)
        _STAGES[op] = create
        return create

    return decorate


# --------------------------------------------------------------------------------------------------------------
# Binding a run
# --------------------------------------------------------------------------------------------------------------


def _fusible_source(query: Expression[Any]) -> Expression[Any] | None:
    """The first argument of ``query`` when it is a plain query node of a fusible operator, else ``None``."""
    args = query.args
    if not args:
        return None
    source = args[0]
    # is_registered imports a built-in operator's module (they load on first use): fusion must not depend on
    # which operators the process used before.
    if (isinstance(source, Expression) and is_registered(source.op) and source.op in _STAGES
            and type(source).subscribe_core is Expression.subscribe_core):
        return source
    return None


def _run_queries(query: Expression[Any]) -> list[Expression[Any]]:
    """The nodes a fusible ``query`` binds with in one run: it and the fusible nodes below it (top first)."""
    queries = [query]
    while len(queries) < MAX_RUN:
        source = _fusible_source(queries[-1])
        if source is None:
            break
        queries.append(source)
    return queries


def _entry_needed(stages: int, source: object) -> bool:
    """Whether a run of ``stages`` stages over ``source`` gets an entry (runs fused): not a run of one stage over
    a source that does not emit batches (an entry gains nothing there)."""
    return stages > 1 or (isinstance(source, Expression) and is_registered(source.op) and source.op in _BATCH_SOURCES)


def fused_run(query: Expression[Any]) -> tuple[list[Expression[Any]], str | None]:
    """How ``query`` binds if it is a fusible operator: the nodes of its run (top first), and ``None`` when they run
    fused, else why not (the binder's own decision, for ``explain``). ``([], reason)`` for an operator that does
    not fuse."""
    # (is_registered imports a built-in operator's module first: its stage registers there)
    if not is_registered(query.op) or query.op not in _STAGES:
        return [], "it does not fuse (not a per-element stage)"
    if not _enabled:
        return [query], "stage fusion is off"
    queries = _run_queries(query)
    if not _entry_needed(len(queries), queries[-1].args[0] if queries[-1].args else None):
        return queries, "a run of one stage over a source that does not emit batches (nothing to fuse)"
    return queries, None


def _bind_run(query: Expression[Any], downstream: Subscriber[Any]) -> SubscriptionHandle:
    """Bind ``query`` (a fusible operator) and the fusible stages below it as one run. Only the top stage is
    created now; each of the others when the stage above it subscribes its input, as unfused binding does, so
    every stage checks its arguments at the same point either way."""
    return _Run(_run_queries(query)).stage(0, downstream)


class _Run:
    """One run being bound: its query nodes (top first), and its stages as they are created. While it binds,
    each stage's ``_source`` is a stand-in (:class:`_NextStage`, :class:`_RunSource`); once the last stage
    subscribed, every stage gets its own source back and nothing refers to the run any more."""

    __slots__ = ("_queries", "_sources", "_stages")

    def __init__(self, queries: list[Expression[Any]]) -> None:
        self._queries = queries
        self._stages: list[FusibleStage] = []
        self._sources: list[Subscribable[Any]] = []

    def stage(self, index: int, downstream: Subscriber[Any]) -> SubscriptionHandle:
        """Create stage ``index`` (0: the top) for ``downstream``; its input is the next stage of the run, or,
        for the last one, its own source, subscribed with the run's entry."""
        query = self._queries[index]
        stage = cast("FusibleStage", _STAGES[query.op](query, downstream))
        del self._stages[index:]  # a stage subscribed again (a host's mistake) starts the rest of the run anew
        del self._sources[index:]
        self._stages.append(stage)
        self._sources.append(stage._source)
        last = index + 1 == len(self._queries)
        stage._source = _RunSource(self, stage._source) if last else _NextStage(self, index + 1)
        return cast("SubscriptionHandle", stage)

    def subscribe_source(self, source: Subscribable[Any], observer: Subscriber[Any]) -> SubscriptionHandle:
        """The last stage (``observer``) subscribes its source: with the run's entry, or, for a run of one stage
        over a source that does not emit batches, as the plain stage it is (an entry gains nothing there)."""
        stages = self._stages
        for stage, original in zip(stages, self._sources, strict=True):
            stage._source = original
        self._stages, self._sources = [], []
        if not _entry_needed(len(stages), source):
            return source.subscribe(observer)
        stages.reverse()  # in the order elements meet them
        return source.subscribe(_entry_class(tuple(type(stage) for stage in stages))(stages))


class _NextStage(Subscribable[Any]):
    """Stands in for the source of a stage inside a run: subscribing creates the next stage of the run."""

    __slots__ = ("_index", "_run")

    def __init__(self, run: _Run, index: int) -> None:
        self._run = run
        self._index = index

    def subscribe_core(self, observer: Subscriber[Any]) -> SubscriptionHandle:
        return self._run.stage(self._index, observer)


class _RunSource(Subscribable[Any]):
    """Stands in for the source of the run's last stage: subscribing subscribes the run's entry to it."""

    __slots__ = ("_run", "_source")

    def __init__(self, run: _Run, source: Subscribable[Any]) -> None:
        self._run = run
        self._source = source

    def subscribe_core(self, observer: Subscriber[Any]) -> SubscriptionHandle:
        return self._run.subscribe_source(self._source, observer)


# --------------------------------------------------------------------------------------------------------------
# The entry: the run's subscriber, with the generated per-element code
# --------------------------------------------------------------------------------------------------------------


class BatchEnd:
    """Why :meth:`FusedEntry.on_next_batch` stopped before its values ran out (see there)."""

    __slots__ = ("_label",)

    def __init__(self, label: str) -> None:
        self._label = label

    def __repr__(self) -> str:
        return self._label


STOPPED_AT_NONE: Final = BatchEnd("STOPPED_AT_NONE")
"""The next value was ``None``: taken from the values, not delivered (the source signals the error)."""
SOURCE_DISPOSED: Final = BatchEnd("SOURCE_DISPOSED")
"""The source was disposed: the next value was taken from the values, and not delivered."""


def run_one_by_one(  # noqa: PLR0917  (the run's state, as every run reader takes it)
    values: Sequence[Any], start: int, end: int, cursor: Any, pos0: int, source: OperatorBase[Any],
    on_next: Callable[[Any], None],
) -> int:
    """Elements ``values[start:end]`` of a logged run handed to ``on_next`` one at a time (the run contract of
    :meth:`FusedEntry.on_next_run`, for a stage that takes no runs of its own): ``cursor.pos`` stands at each
    element as it goes; returns the index of the first element not taken (``end``, or less once ``source`` was
    disposed, checked before each element)."""
    for i in range(start, end):
        if source._disposed:
            return i
        cursor.pos = pos0 + i
        on_next(values[i])
    return end


class FusedEntry:
    """The subscriber a run's upstream sees (one generated subclass per sequence of stage classes).

    ``on_next`` (generated) runs the steps of every stage of the run and hands the result to the last stage's
    downstream. ``on_subscribe``, ``on_error`` and ``on_complete`` are the first stage's own methods, held in
    slots so that calling them through the entry costs no extra frame. Stage ``i`` (in the order elements meet
    them) is ``_s{i}``, its function ``_f{i}``.
    """

    __slots__ = ("on_complete", "on_error", "on_subscribe")

    stage_count: ClassVar[int] = 0
    """How many stages the run has (set on each generated class)."""

    on_subscribe: Callable[[Subscription], None]
    on_error: Callable[[BaseException], None]
    on_complete: Callable[[], None]

    def __init__(self, stages: Sequence[FusibleStage]) -> None:
        first = stages[0]
        self.on_subscribe = first.on_subscribe
        self.on_error = first.on_error
        self.on_complete = first.on_complete
        for index, stage in enumerate(stages):
            setattr(self, f"_s{index}", stage)
            setattr(self, f"_f{index}", getattr(stage, type(stage).fused_step.function))

    def on_next(self, value: Any) -> None:
        """One element through every stage of the run (generated)."""
        raise NotImplementedError

    def on_next_batch(
        self, values: Iterator[Any], limit: int, source: OperatorBase[Any]
    ) -> tuple[int, BatchEnd | Exception | None]:
        """Up to ``limit`` elements of ``values`` from a source that emits in batches (generated), called only
        while the source's demand is unbounded: for each in turn, exactly what ``source`` would do before
        calling :meth:`on_next` with it (stop at ``None``, stop when ``source`` is disposed), then what
        :meth:`on_next` does, in one loop, less the demand bookkeeping that unbounded demand makes moot (a
        filter's replacement request, which would add nothing to ``LONG_MAX``). Nothing more is taken from
        ``values`` once ``limit`` elements were.

        Returns how many elements were delivered, and why it stopped: ``None`` (``limit`` elements were
        delivered, or the values ran out before), :data:`STOPPED_AT_NONE`, :data:`SOURCE_DISPOSED`, or the
        exception the values raised (the source signals it). An exception from downstream (a subscriber breaking
        rule 2.13) propagates.
        """
        raise NotImplementedError

    def on_next_run(  # noqa: PLR0917  (the loop's state, bound once per run)
        self, values: Sequence[Any], start: int, end: int, cursor: Any, pos0: int, source: OperatorBase[Any],
        emit: Callable[[Any], object],
    ) -> int:
        """Elements ``values[start:end]`` from a source that reads a run of logged events (the engine's stream
        reader, see :meth:`reaqtive.engine.readers.StreamReader.read_run`; generated), called only while the
        source's demand is unbounded: for each in turn, ``cursor.pos`` is set to its log position ``pos0 + i``
        (where a failure is recorded, and where a reader created meanwhile would start), then what :meth:`on_next`
        does, in one loop, less the demand bookkeeping that unbounded demand makes moot; what comes out of the
        last stage goes to ``emit`` (the caller collects a run's outputs there and hands them to the last
        stage's downstream, see :meth:`tail`). It stops before an element once ``source`` is disposed.

        Returns the index of the first element not delivered (``end`` when all were). An exception from the
        stages or from downstream propagates, ``cursor.pos`` then standing at the element in hand.
        """
        raise NotImplementedError

    def collect_run(  # noqa: PLR0917  (the loop's state, bound once per run)
        self, values: Sequence[Any], start: int, end: int, cursor: Any, pos0: int, source: OperatorBase[Any],
        collect: Callable[[Any], object],
    ) -> int:
        """:meth:`on_next_run` where ``collect`` is a list's ``append`` (the engine's egress gathers a run's
        outputs): it neither raises nor looks at the cursor, and the stages' steps look at it only on their rare
        paths (a user error, a ``None``), so ``cursor.pos`` is set to an element's position only before such a
        path runs, when an exception propagates (the element in hand), and at the end (the last element taken),
        instead of once per element. Where it stands whenever something can look is what :meth:`on_next_run`
        gives (generated; the same loop as :meth:`on_next_run` when a step's template calls its stage where a
        position cannot be set before the call)."""
        raise NotImplementedError

    @property
    def tail(self) -> Subscriber[Any]:
        """Where the run's elements go: the last stage's downstream."""
        stage: Any = getattr(self, f"_s{self.stage_count - 1}")
        return cast("Subscriber[Any]", stage._downstream)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


_GENERATED = itertools.count(1)


@functools.lru_cache(maxsize=256)
def _entry_class(shape: tuple[type[FusibleStage], ...]) -> type[FusedEntry]:
    """The entry class for stages of the classes ``shape`` (in the order elements meet them)."""
    steps = [cls.fused_step for cls in shape]
    label = "_".join(getattr(cls, "__name__", "stage") for cls in shape)
    source = _generate(steps)
    filename = f"<reaqtive fused {label} #{next(_GENERATED)}>"
    namespace: dict[str, Any] = {
        "STOPPED_AT_NONE": STOPPED_AT_NONE,
        "SOURCE_DISPOSED": SOURCE_DISPOSED,
    }
    try:
        code = compile(source, filename, "exec")
    except SyntaxError:  # a cursor line put inside a statement of several lines: collect_run is on_next_run
        source = source[: source.index(_COLLECT_HEADER)] + "\n".join(_COLLECT_FALLBACK)
        code = compile(source, filename, "exec")
    exec(code, namespace)  # our templates only: no user value becomes code
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    slots = tuple(name for index in range(len(shape)) for name in (f"_s{index}", f"_f{index}"))
    body = {
        "__slots__": slots,
        "__module__": __name__,
        "__doc__": f"The fused entry of {' -> '.join(label.split('_'))}.",
        "on_next": namespace["on_next"],
        "on_next_batch": namespace["on_next_batch"],
        "on_next_run": namespace["on_next_run"],
        "collect_run": namespace["collect_run"],
        "stage_count": len(shape),
    }
    return cast("type[FusedEntry]", type(f"Fused_{label}", (FusedEntry,), body))


def _generate(steps: Sequence[FusedStep]) -> str:
    """The source of ``on_next`` and ``on_next_batch`` for ``steps`` (see the module). The element is the local
    ``v0``; each step that makes a new element puts it in the next ``v{n}``, so nothing is copied."""
    last = len(steps) - 1
    names, made = ["v0"], 0
    for step in steps:
        if step.transforms:
            made += 1
        names.append(f"v{made}")
    lines = ["def on_next(self, v0):"]
    for index, step in enumerate(steps):
        value, result = names[index], names[index + 1]
        fn, stage = f"self._f{index}", f"self._s{index}"
        lines += step.render(value=value, result=result, fn=fn, stage=stage, stop="return", bounded=True, indent=4)
        if index < last:  # the unfused stage passes the element on only while it is live
            lines += [f"    if self._s{index}._disposed:", "        return"]
    lines += [f"    self._s{last}._downstream.on_next({names[-1]})", ""]

    lines.append("def on_next_batch(self, values, limit, source):")
    for index in range(len(steps)):
        lines += [f"    s{index} = self._s{index}", f"    f{index} = self._f{index}"]
    lines += [
        "    taken = -1",  # the index of the element in hand; counting with range's cached small ints
        "    failed = False",  # an exception from the stages or downstream, not from the values
        "    try:",
        "        for taken, v0 in zip(range(limit), values):",  # range first: at the limit, values is not touched
        "            if v0 is None:",
        "                return taken, STOPPED_AT_NONE",
        "            if source._disposed:",
        "                return taken, SOURCE_DISPOSED",
        "            try:",
    ]
    lines += _render_unbounded(steps, names, indent=16)
    lines += [
        f"                s{last}._downstream.on_next({names[-1]})",
        "            except BaseException:",
        "                failed = True",
        "                raise",
        "    except Exception as error:",
        "        if failed:",
        "            raise",
        "        return taken, error",
        "    return taken + 1, None",
        "",
    ]
    lines += _generate_run(steps, names)
    return "\n".join(lines)


def _generate_run(steps: Sequence[FusedStep], names: list[str]) -> list[str]:
    """The source of ``on_next_run`` (see :meth:`FusedEntry.on_next_run`)."""
    lines = ["def on_next_run(self, values, start, end, cursor, pos0, source, emit):"]
    for index in range(len(steps)):
        lines += [f"    s{index} = self._s{index}", f"    f{index} = self._f{index}"]
    lines += [
        "    for i in range(start, end):",
        "        if source._disposed:",
        "            return i",
        "        cursor.pos = pos0 + i",
        "        v0 = values[i]",
    ]
    lines += _render_unbounded(steps, names, indent=8)
    lines += [f"        emit({names[-1]})", "    return end", ""]
    return lines + _generate_collect(steps, names)


_STAGE_CALL = re.compile(r"\bs\d+\.\w+\(")
"""A call of a method of a run's stage in a rendered step (``s1._user_error(error, v1)``): the rare paths."""


def _generate_collect(steps: Sequence[FusedStep], names: list[str]) -> list[str]:
    """The source of ``collect_run`` (see :meth:`FusedEntry.collect_run`): ``on_next_run``'s loop with the cursor
    set before each statement that calls a stage's method instead of once per element, or ``on_next_run`` itself
    when such a call sits where no statement can go before it (an ``elif``'s condition, inside a statement of
    several lines: see :func:`_entry_class`, which compiles it apart)."""
    body: list[str] = []
    for line in _render_unbounded(steps, names, indent=12):
        if _STAGE_CALL.search(line):
            text = line.lstrip()
            if text.startswith(("elif ", "else", "except", "finally")):
                return _COLLECT_FALLBACK
            body.append(line[: len(line) - len(text)] + "cursor.pos = pos0 + i")
        body.append(line)
    lines = [_COLLECT_HEADER]
    for index in range(len(steps)):
        lines += [f"    s{index} = self._s{index}", f"    f{index} = self._f{index}"]
    return [
        *lines,
        "    i = start",
        "    try:",
        "        for i in range(start, end):",
        "            if source._disposed:",
        "                if i > start:",
        "                    cursor.pos = pos0 + i - 1",
        "                return i",
        "            v0 = values[i]",
        *body,
        f"            emit({names[-1]})",
        "    except BaseException:",
        "        cursor.pos = pos0 + i",  # the element in hand, as on_next_run leaves it
        "        raise",
        "    if end > start:",
        "        cursor.pos = pos0 + end - 1",
        "    return end",
        "",
    ]


_COLLECT_HEADER: Final = "def collect_run(self, values, start, end, cursor, pos0, source, emit):"
_COLLECT_FALLBACK: Final = [_COLLECT_HEADER,
                            "    return self.on_next_run(values, start, end, cursor, pos0, source, emit)", ""]


def _render_unbounded(steps: Sequence[FusedStep], names: list[str], *, indent: int) -> list[str]:
    """Every step of a loop over values handed under unbounded demand (``continue`` ends an element's trip), the
    element going on after a step only while that stage is live."""
    last = len(steps) - 1
    pad = " " * indent
    lines: list[str] = []
    for index, step in enumerate(steps):
        lines += step.render(value=names[index], result=names[index + 1], fn=f"f{index}", stage=f"s{index}",
                             stop="continue", bounded=False, indent=indent)
        if index < last:
            lines += [f"{pad}if s{index}._disposed:", f"{pad}    continue"]
    return lines
