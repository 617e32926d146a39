"""Keyed steps: how a first-order operator runs for one key of a keyed chain, and the switch for keyed execution.

``xs.group_by(k).flat_map(lambda g: g.map(f).scan(acc, 0))`` runs, on the general path, one inner subscription
per key: a subject, a ``map`` stage and a ``scan`` stage per group, each group a checkpoint unit of its own. When
every operator of the inner query has a **keyed step**, :mod:`reaqtive.operators.keyed_groups` runs the whole
``group_by ... flat_map`` as one stage instead, whose per-key state is a record in a keyed state table: one field
per step. A step is the operator's ``on_next`` and ``on_complete`` for one key, as a function of that key's field:

* ``next(state, value) -> (state, output)``: the new field and what goes on to the next step (:data:`SKIP` for
  nothing). A new field :data:`DONE` ends the key's chain after ``output`` went on (``take`` reached its count):
  the steps after it complete, those before it see nothing more, and later elements of the key are dropped, as
  a completed inner subscription drops them.
* ``complete(state) -> outputs``: what it emits when its input completes (a tuple, usually empty), or raises.

**Errors.** A step raises what the stage would fail with. An error of the user's code (a function, arithmetic or
a comparison on the user's values, a ``None`` result) is raised as it is: the keyed stage hands it to the query's
error policy, which may skip the element at that step (the step's field stays as it was, the steps before it keep
what they did with the element, as the stages before a skipping stage do) or, at the end, that step's outputs.
An error of the operator itself (a limit, an aggregate without elements, a second element of ``single``), which
stops the query whatever the policy, is raised wrapped in :class:`StepOperatorError`.
* ``check(state) -> bool``: whether a field read from a store can be this step's (a forged store fails the load
  with a clear error instead of failing later).
* ``initial``: the field of a new key (immutable: every new key shares it).

A step may put out several values for one element (a window step: the results of several windows) as a
:class:`Several`, which may end in a failure that stops the query after them. A step may stand for more than one
node (``source_of``: a window and the ``flat_map`` over its windows are one step, ``keyed_window_steps``), and a
**timed** step (``timed``, :class:`~reaqtive.operators.keyed_timed.TimedStep`) needs the clock: its chain runs in
the stage with a timer queue. Each step says the keyed form it came with (``since``, see :data:`KEYED_FORM`).

Each operator module declares its step next to its stage (:func:`register_keyed_step`), written from the same
rules and with the same error messages as the stage: the keyed path must give the results of the general path,
which ``tests/operators/test_keyed_groups.py`` checks against it on random queries. A factory returns ``None``
when a node's arguments make it unfit (a mutable seed, which the general path re-creates per group by calling
the selector again): the query then keeps the general path.

**The switch.** Keyed execution is on by default. :func:`set_keyed_execution` turns it off or on for the whole
process and :func:`keyed_execution` for a block; a query is bound in the form in force when it is bound, and a
stage that binds inner queries later (``flat_map``) binds them in the form it was bound in, so that a query keeps
one form for its life. The engine records the form with each subscription and recovers it in that form (stores
written before keyed execution existed keep the general path).

**Forms.** What runs keyed grew over releases, and a subscription must keep the path its stored state was written
by: the form is a number (:func:`keyed_form`), recorded with each subscription. 0: the general path for everything;
1: chains of keyed steps, with ``flat_map``'s ``result_selector`` and ``max_concurrent`` on the general path (the
release before issue 32); 2: those two run keyed too; 3 (:data:`KEYED_FORM`, bound now): windows and time
buffers inside groups too (a step says the form it came with, :attr:`KeyedStep.since`). :func:`in_keyed_form`
binds a block in a recorded form.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

from reaqtive.core.binding import is_registered
from reaqtive.core.error_policy import NO_ELEMENT

if TYPE_CHECKING:
    from reaqtive.core.context import OperatorContext
    from reaqtive.core.expression import Expression

__all__ = [
    "DONE",
    "KEYED_FORM",
    "NO_OUTPUTS",
    "SKIP",
    "KeyedStep",
    "Several",
    "KeyedStepFactory",
    "StatelessStep",
    "TemplateStep",
    "StepOperatorError",
    "complete_steps",
    "feed_steps",
    "is_immutable_value",
    "in_keyed_form",
    "keyed_execution",
    "keyed_execution_enabled",
    "keyed_form",
    "keyed_form_record",
    "keyed_step_factory",
    "recorded_keyed_form",
    "register_keyed_step",
    "set_keyed_execution",
    "stopping_error",
]


class _Marker:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


SKIP: Final[Any] = _Marker("SKIP")
"""A step's output when nothing goes on to the next step."""

DONE: Final[Any] = _Marker("DONE")
"""A step's new field when it ended the key's chain (its output, if any, still goes on first)."""

NO_OUTPUTS: Final[tuple[Any, ...]] = ()
"""``complete`` of a step that emits nothing when its input completes."""


class Several(list[Any]):
    """A step's output of several values (a window step: the results of several windows for one element), each
    going on to the next step in order. ``failure``, when set, stops the query after them: an error (what the
    stage fails with) raised once the values before it went on, as the general path delivers the results
    produced before an error."""

    __slots__ = ("failure",)

    def __init__(self, values: Iterable[Any] = (), failure: Exception | None = None) -> None:
        super().__init__(values)
        self.failure = failure


class StepOperatorError(Exception):
    """An error of the operator itself, raised by a step (a limit, an aggregate without elements, a second element of
    ``single``): the keyed stage fails with :attr:`error`, what the stage would signal, whatever the query's error
    policy. The user's errors are raised as they are (see the module)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def stopping_error(error: Exception) -> Exception:
    """What a keyed stage fails with when a step raised ``error`` that is not skipped: the error of the operator
    that a :class:`StepOperatorError` carries, or the user's error itself."""
    return error.error if isinstance(error, StepOperatorError) else error


class KeyedStep:
    """One operator of a keyed chain, for one key at a time (see the module). Subclasses set ``initial`` and
    implement ``next``; ``complete`` emits nothing and ``check`` accepts only ``initial`` unless overridden."""

    __slots__ = ()

    initial: Any = None
    """The field of a new key."""

    in_place: bool = False
    """Whether ``next`` may change its field in place (a list it appends to) and return the same object: the
    stage then writes the key's record back after every element, so that its page is saved at the next
    checkpoint. A step that returns a new field for every change leaves it ``False``."""

    skip_keeps_field: bool = False
    """With ``in_place``: whether an element with no output returned with the same field left it unchanged (a
    ``distinct`` key seen before), so that a stage of one stream does not save its field again for it."""

    several: bool = False
    """Whether ``next`` may output :class:`Several` values (a window step)."""

    since: int = 1
    """The keyed form (:data:`KEYED_FORM`) the step came with: a query bound in an earlier one keeps the general
    path."""

    timed: bool = False
    """Whether the step needs the clock: a :class:`~reaqtive.operators.keyed_timed.TimedStep`, which only the
    timed keyed stage runs."""

    def set_context(self, context: OperatorContext) -> None:
        """The stage's context arrived (read the host's limits here, as the stage does in ``set_context``)."""

    def attach(self, stage: Any) -> None:
        """The stage that runs the step, given at its ``set_context``: a step running the user's code of a nested
        chain (a window's inner query) asks the stage's error policy through it."""

    def bind_stage(self, binding: Any, subscriber: Any) -> Any:
        """The stage of a keyed chain holding this timed step (the stage with a timer queue), given its
        :class:`~reaqtive.operators.keyed_groups.KeyedBinding`. Only a timed step has one."""
        raise NotImplementedError

    def general_reason(self, binding: Any) -> str | None:
        """Why a chain holding this timed step keeps the general path (``None``: it runs keyed); asked by the
        keyed decision (:func:`~reaqtive.operators.keyed_groups.plan_keyed_groups`)."""
        return None

    def chain_name(self, node: Expression[Any]) -> str:
        """The name the step has in the chain's operator names, which the stage saves and checks on load."""
        return node.op

    def source_of(self, node: Expression[Any]) -> object:
        """The node the step reads from: ``node``'s source, or further down when the step stands for several
        nodes (a window and the ``flat_map`` over its windows)."""
        return node.args[0]

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        """One element: ``(new field or DONE, output or SKIP)``; raises what the stage would fail with."""
        raise NotImplementedError

    def complete(self, state: Any) -> Sequence[Any]:
        """The input completed: what goes on before the completion (a tuple, or a :class:`Several` that may end in
        a failure); raises what the stage would fail with."""
        return NO_OUTPUTS

    def check(self, state: Any) -> bool:
        """Whether ``state``, read from a store, can be a field of this step."""
        return state is None


class StatelessStep(KeyedStep):
    """A step with no field of its own (``None``): ``map``, ``filter``."""

    __slots__ = ()


class TemplateStep(KeyedStep):
    """The keyed step of a fusible operator, whose ``next`` is compiled from the stage's template
    (:meth:`~reaqtive.operators._fusion.FusedStep.keyed_next`): ``_fn`` is the user's function, ``initial`` the
    field of a new key; the user's errors are raised for the keyed stage's error policy."""

    __slots__ = ("_fn", "initial")

    def __init__(self, fn: Callable[..., Any], initial: Any = None) -> None:
        self._fn = fn
        self.initial = initial

    def _user_error(self, error: Exception, value: object) -> None:
        raise error


KeyedStepFactory = Callable[["Expression[Any]"], KeyedStep | None]
"""Makes the step of one node of an inner query, or returns ``None`` when its arguments keep the general path."""

_FACTORIES: dict[str, KeyedStepFactory] = {}


def register_keyed_step(op: str) -> Callable[[KeyedStepFactory], KeyedStepFactory]:
    """Declare the keyed step of operator ``op`` (a decorator on the factory, in the operator's module)."""

    def decorate(factory: KeyedStepFactory) -> KeyedStepFactory:
        if op in _FACTORIES and _FACTORIES[op] is not factory:
            raise ValueError(f"a keyed step is already registered for {op!r}")
        _FACTORIES[op] = factory
        return factory

    return decorate


_DECLARED_ELSEWHERE: Final = {"flat_map": "reaqtive.operators.keyed_window_steps"}
"""Operators whose keyed step is declared beside other steps rather than in their own module (``flat_map``'s: a
window and the ``flat_map`` over its windows are one step, beside the window steps), imported on first use."""


def keyed_step_factory(op: str) -> KeyedStepFactory | None:
    """The factory of ``op``'s keyed step, or ``None`` when it has none (the general path runs it). A built-in
    operator's module is imported first (operator modules load on first use): whether a query runs keyed must not
    depend on which operators the process happened to use before."""
    factory = _FACTORIES.get(op)
    if factory is None and is_registered(op):
        factory = _FACTORIES.get(op)
        if factory is None and op in _DECLARED_ELSEWHERE:
            importlib.import_module(_DECLARED_ELSEWHERE[op])
            factory = _FACTORIES.get(op)
    return factory


_IMMUTABLE_SCALARS: Final = (int, float, complex, str, bytes, bool, type(None))


def is_immutable_value(value: object) -> bool:
    """Whether ``value`` can be shared by every key (a seed): scalars, dates and times, and tuples and
    frozensets of such. Anything else may be changed in place by a user's function, and the general path gives
    each group its own (the selector is called again per group)."""
    from datetime import date, time, timedelta  # (local: a rare path, at bind time)
    from decimal import Decimal

    if isinstance(value, (*_IMMUTABLE_SCALARS, date, time, timedelta, Decimal)):
        return True
    if type(value) in (tuple, frozenset):
        return all(is_immutable_value(item) for item in value)  # type: ignore[attr-defined]
    return False


# -- the switch --------------------------------------------------------------------------------------------------

KEYED_FORM: Final = 3
"""The keyed form queries are bound in now (see the module): chains of keyed steps, with ``flat_map``'s
``result_selector`` and ``max_concurrent``, and windows and time buffers inside groups."""

FORM_BEFORE_WINDOWS: Final = 2
"""The form before windows ran keyed (issue 32, windows inside groups): a window or a time buffer in the inner
query kept the general path (each step says the form it came with: :attr:`KeyedStep.since`)."""

FORM_BEFORE_SELECTORS: Final = 1
"""The form of the release before issue 32: ``result_selector`` and ``max_concurrent`` kept the general path."""

_enabled = True
_override: ContextVar[int | None] = ContextVar("reaqtive_keyed_execution", default=None)


def keyed_execution_enabled() -> bool:
    """Whether a keyed chain bound now runs keyed (the block's setting, else the process's)."""
    return keyed_form() > 0


def keyed_form() -> int:
    """The keyed form a query bound now is bound in (see the module): 0 when keyed execution is off."""
    override = _override.get()
    if override is None:
        return KEYED_FORM if _enabled else 0
    return override


def set_keyed_execution(enabled: bool) -> bool:
    """Run keyed chains bound from now on keyed (``True``, the default) or on the general path (``False``), in
    the whole process. Returns the previous setting. Queries already bound keep their form."""
    global _enabled  # the process-wide default, read once per bind
    if not isinstance(enabled, bool):
        raise TypeError(f"set_keyed_execution: enabled must be a bool, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


@contextmanager
def keyed_execution(enabled: bool) -> Iterator[None]:
    """Within the block (this thread or task), bind keyed chains keyed (``True``) or on the general path
    (``False``), whatever the process's setting.

    >>> from reaqtive import from_iterable
    >>> with keyed_execution(False):
    ...     handle = from_iterable([1, 2, 3]).group_by(lambda x: x % 2).flat_map(lambda g: g.count()).run(print)
    2
    1
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"keyed_execution: enabled must be a bool, got {enabled!r}")
    with in_keyed_form(KEYED_FORM if enabled else 0):
        yield


def keyed_form_record() -> dict[str, object]:
    """The fields a host records with a query bound now, for :func:`recorded_keyed_form` to read back."""
    form = keyed_form()
    return {"keyed": True, "keyed_form": form} if form else {"keyed": False}


def recorded_keyed_form(record: Mapping[str, object]) -> int:
    """The keyed form of a host's record of a query (the engine's subscription record): ``"keyed"`` (absent:
    written before keyed execution existed, form 0) and ``"keyed_form"`` (absent: written before result selectors
    ran keyed, form 1)."""
    if not record.get("keyed", False):
        return 0
    form = record.get("keyed_form", FORM_BEFORE_SELECTORS)
    if type(form) is not int or not 0 < form <= KEYED_FORM:
        raise ValueError(f"the record's keyed_form must be an int from 1 to {KEYED_FORM}, got {form!r}")
    return form


@contextmanager
def in_keyed_form(form: int) -> Iterator[None]:
    """Within the block (this thread or task), bind queries in keyed form ``form`` (see the module): how a host
    re-creates a query in the form it was recorded in, and how a higher-order stage binds its inner queries in the
    form it was bound in."""
    if type(form) is not int or not 0 <= form <= KEYED_FORM:
        raise ValueError(f"in_keyed_form: form must be an int from 0 to {KEYED_FORM}, got {form!r}")
    token = _override.set(form)
    try:
        yield
    finally:
        _override.reset(token)


Skips = Callable[[Exception, Any], bool]
"""How a chain's runner decides a step's error on a value (``NO_ELEMENT`` at the end): ``True`` skips the value
at that step; ``False`` (or raising) stops the query."""


def feed_steps(steps: Sequence[KeyedStep], fields: list[Any], index: int, value: Any, outputs: list[Any], *,
               skips: Skips, leave: Callable[[Any], Any] | None = None) -> bool:
    """Feed ``value`` into ``steps`` from ``index`` (changing ``fields``), appending what leaves the chain (through
    ``leave``, a result selector, if any) to ``outputs``: the one runner of a keyed chain's steps, the keyed
    stage's and a window's inner chain's alike. ``True``: a step ended the chain (it completed the steps after
    it; those before it are cancelled, as a ``take`` cancels its source). A step's error goes to ``skips``:
    skipped, the value is dropped at that step (its field stays, the chain goes on); otherwise it is raised."""
    while index < len(steps):
        try:
            state, value = steps[index].next(fields[index], value)
        except Exception as error:
            if skips(error, value):
                return False
            raise
        if state is DONE:
            if value is SKIP or not feed_steps(steps, fields, index + 1, value, outputs, skips=skips, leave=leave):
                complete_steps(steps, fields, index + 1, outputs, skips=skips, leave=leave)
            return True
        fields[index] = state
        if value is SKIP:
            return False
        if type(value) is Several:
            for item in value:
                if feed_steps(steps, fields, index + 1, item, outputs, skips=skips, leave=leave):
                    return True
            if value.failure is not None:
                raise value.failure  # (decided already: a window step's inner query failed after these)
            return False
        index += 1
    if leave is not None:
        try:
            value = leave(value)
        except Exception as error:
            if skips(error, value):
                return False  # the result is dropped: the fields stay as the steps left them
            raise
    outputs.append(value)
    return False


def complete_steps(steps: Sequence[KeyedStep], fields: list[Any], index: int, outputs: list[Any], *,
                   skips: Skips, leave: Callable[[Any], Any] | None = None) -> None:
    """Complete ``steps`` from ``index`` in order, each one's final outputs going through the steps after it (see
    :func:`feed_steps`); a step's error at the end is skipped (its final outputs are, the steps after it still
    complete) or raised."""
    while index < len(steps):
        try:
            final = steps[index].complete(fields[index])
        except Exception as error:
            if not skips(error, NO_ELEMENT):
                raise
            final = ()
        for value in final:
            if feed_steps(steps, fields, index + 1, value, outputs, skips=skips, leave=leave):
                return  # a later step ended the chain: it completed the rest
        if type(final) is Several and final.failure is not None:
            raise final.failure
        index += 1
