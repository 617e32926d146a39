"""A one-input stage run by its operator's keyed step: the step is the operator's per-element logic, written
once, and this stage, the keyed table (:mod:`reaqtive.operators.keyed_groups`) and, for a fusible operator, the
fused run (:mod:`reaqtive.operators._fusion`, from the step's template) all run it.

The stage holds the step's field for its one stream (:attr:`StepStage._field`, ``step.initial`` at first) and,
per element, calls ``step.next(field, value)`` under one ``try``: a
:class:`~reaqtive.operators.keyed_steps.StepOperatorError` (the operator's own error: a limit, a missing element)
stops the stage whatever the query's error policy; any other exception is the user's (``_user_error``: the policy
skips the element, the field stays, or stops the query). A new field marks the state changed; the output goes
downstream unless it is :data:`~reaqtive.operators.keyed_steps.SKIP`, and a field
:data:`~reaqtive.operators.keyed_steps.DONE` completes the stage after it (the stage keeps
:meth:`StepStage.field_at_end`). A stage whose step drops elements (``drops``) asks its upstream for one more in
place of each dropped one while the downstream's demand is bounded.

By default the field is saved as it is (nothing for a :class:`~reaqtive.operators.keyed_steps.StatelessStep`); a
stage whose saved layout differs (or whose field needs a check when read) overrides ``save_state_core`` /
``load_state_core``. A step whose ``next`` is plain is compiled into its stage's ``on_next`` (:func:`runs_inline`),
so the stage runs it with no call per element.

An operator author writes the step (:class:`~reaqtive.operators.keyed_steps.KeyedStep`) and registers it
(:func:`~reaqtive.operators.keyed_steps.register_keyed_step`); the stage is a few lines over it
(``docs/writing-operators.md``).
"""

from __future__ import annotations

import ast
import inspect
import linecache
import re
import textwrap
import types
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast

from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.error_policy import NO_ELEMENT
from reaqtive.core.operator import StateReader, StateWriter
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._aggregate import AggregateStage
from reaqtive.operators._take_skip import DroppingStage
from reaqtive.operators.keyed_steps import (
    DONE,
    SKIP,
    KeyedStep,
    StatelessStep,
    StepOperatorError,
    is_immutable_value,
    register_keyed_step,
)
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["StepAggregate", "StepStage", "inlinable", "runs_inline", "step_operator"]


class _RunsStep(StatefulUnaryOperatorBase[Any, Any]):
    """What :class:`StepStage` and :class:`StepAggregate` share (see the module): the step and its field (slots
    of theirs), the step's limits, the field saved after the base's state, and the ``on_next`` that calls a step
    that is not inlined (:func:`runs_inline`), whose ``(field, output)`` the stage's :meth:`_took` handles."""

    __slots__ = ()

    _field: Any
    _in_place: bool
    _next: Callable[[Any, Any], tuple[Any, Any]]
    _step: KeyedStep

    def _init_step(self, step: KeyedStep) -> None:
        self._step = step  # type: ignore[misc]  # (slots of the subclass)
        self._field = step.initial
        self._next = step.next
        self._in_place = step.in_place  # type: ignore[misc]

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._step.set_context(context)  # (the host's limits)

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        if not isinstance(self._step, StatelessStep):
            self.write_field(writer, self._field)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        if not isinstance(self._step, StatelessStep):
            self._field = self.read_field(reader)

    def read_field(self, reader: StateReader) -> Any:
        """The field, read after the base's state (any value by default)."""
        return reader.read()

    def write_field(self, writer: StateWriter, field: Any) -> None:
        """Save the field, after the base's state (as it is by default)."""
        writer.write(field)

    def on_next(self, value: Any) -> None:
        old = self._field
        try:
            field, output = self._next(old, value)
        except StepOperatorError as error:
            self._signal_error(error.error)
            return
        except Exception as error:  # the user's: the policy skips the element (the field stays) or stops
            self._user_error(error, value)
            return
        self._took(old, field, output)

    def _took(self, old: Any, field: Any, output: Any) -> None:
        """What the stage does with the step's ``(field, output)`` for an element (``old``: the field before)."""
        raise NotImplementedError


class StepStage(_RunsStep, DroppingStage[Any]):
    """The stage of an operator whose keyed step is its per-element logic (see the module). A subclass builds
    its step from the query's checked arguments and passes it, with the source, to ``__init__``."""

    timeless = True
    drops: ClassVar[bool] = False
    """Whether an element the step puts nothing out for is replaced upstream (``request(1)``) while the
    downstream's demand is bounded (``filter``, ``skip_while``), as is an element the error policy skips."""

    __slots__ = ("_field", "_in_place", "_next", "_skip_keeps", "_source", "_step")

    @staticmethod
    def inline_tail(step: type[KeyedStep], ends: bool) -> list[str]:
        """What :meth:`on_next` does with the step's ``(field, output)``, as lines of an inlined ``on_next``,
        less what cannot happen: the end when the step never ends the stream (``ends``), the in-place test for
        a step whose field never changes in place."""
        tail = ["    if field is DONE:", "        self._end(state, output)", "        return"] if ends else []
        changed = "field is not state"
        if step.in_place:  # (changed in place: saved again, unless an element with no output leaves it as it was)
            changed = "field is not state or output is not SKIP" if step.skip_keeps_field else "True"
        return [*tail, f"    if {changed}:", "        self._field = field", "        self._state.changed = True",
                "    if output is not SKIP:", "        self._downstream.on_next(output)", "    elif self.drops:",
                "        self._replace_dropped()"]

    inline_skips: ClassVar[bool] = True
    """Whether an element with no output and no end is handled inline, where the stage owes nothing for it (a
    stage that ``drops`` asks for a replacement in its tail)."""

    def __init__(self, downstream: Subscriber[Any], source: Subscribable[Any], step: KeyedStep) -> None:
        super().__init__(downstream)
        self._source = source
        self._init_step(step)
        self._skip_keeps = step.skip_keeps_field

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def _took(self, old: Any, field: Any, output: Any) -> None:
        if field is DONE:
            self._end(old, output)
            return
        if field is not old or (self._in_place and (output is not SKIP or not self._skip_keeps)):
            self._field = field
            self._state.changed = True
        if output is not SKIP:
            self._downstream.on_next(output)
        elif self.drops:
            self._replace_dropped()

    def _end(self, old: Any, output: Any) -> None:
        """The step ended the stream (:data:`~reaqtive.operators.keyed_steps.DONE`): ``output`` (if any) goes
        downstream, then the completion."""
        self._field = self.field_at_end(old)
        self._state.changed = True
        if output is not SKIP:
            self._downstream.on_next(output)
        self._signal_complete()

    def field_at_end(self, field: Any) -> Any:
        """The field the stage keeps (and a checkpoint of the completed stage saves) when the step ended the
        stream (:data:`~reaqtive.operators.keyed_steps.DONE`) from ``field``: ``field`` by default."""
        return field

    def _element_skipped(self) -> None:
        if self.drops:
            self._replace_dropped()  # as a dropped element
        else:
            StatefulUnaryOperatorBase._element_skipped(self)  # (not DroppingStage's: nothing is owed for it)


class StepAggregate(_RunsStep, AggregateStage[Any, Any]):
    """An aggregate (:class:`~reaqtive.operators._aggregate.AggregateStage`) run by its keyed step: per element
    as :class:`StepStage` (an output with :data:`~reaqtive.operators.keyed_steps.DONE` is the result, decided
    early); at completion the step's ``complete``, whose one output is the result (a
    :class:`~reaqtive.operators.keyed_steps.StepOperatorError` stops the stage, the user's error goes through the
    policy, which may skip the result). Saved: the base's held result, then the field (none for a stateless step)."""

    __slots__ = ("_field", "_in_place", "_next", "_step")

    @staticmethod
    def inline_tail(step: type[KeyedStep], ends: bool) -> list[str]:
        """As :meth:`StepStage.inline_tail`."""
        changed = "True" if step.in_place else "field is not state"
        tail = ["    if field is DONE:", "        self._finish(output)", f"    elif {changed}:"] if ends else [
            f"    if {changed}:"]
        return [*tail, "        self._field = field", "        self._state.changed = True"]

    inline_skips: ClassVar[bool] = True
    """Whether an element with no output and no end is handled inline (nothing is owed for it)."""

    def __init__(self, downstream: Subscriber[Any], source: Subscribable[Any], step: KeyedStep) -> None:
        super().__init__(source, downstream)  # (AggregateStage's, after _RunsStep)
        self._init_step(step)

    def _took(self, old: Any, field: Any, output: Any) -> None:
        if field is DONE:
            self._finish(output)
        elif field is not old or self._in_place:
            self._field = field
            self._state.changed = True

    def on_complete(self) -> None:
        self._upstream_terminated()
        try:
            outputs = self._step.complete(self._field)
        except StepOperatorError as error:  # the operator's own (no element): not the user's
            self._signal_error(error.error)
            return
        except Exception as error:
            if self._user_error(error, NO_ELEMENT):  # skipped: the result, and the stage completes without it
                self._signal_complete()
            return
        self._finish(outputs[0], upstream_live=False)


S = TypeVar("S", bound=type[KeyedStep])
G = TypeVar("G", bound=type[StepStage] | type[StepAggregate])


def step_operator(
    op: str,
    step: Callable[[Any], KeyedStep],
    *,
    keyed: Callable[[Any], KeyedStep | None] | None = None,
    owned: str | None = None,
    when: Callable[[Any], bool] | None = None,
    **registration: Any,
) -> Callable[[G], G]:
    """Class decorator of a :class:`StepStage` or :class:`StepAggregate` made from its node: registers it for
    ``op`` (``registration``: ``register_operator``'s ``builder``, ``args`` (an argument record, required) and
    ``frames``), gives it the constructor ``(query, downstream)`` (unless it has one of its own), which runs the
    step ``step`` builds from the node's checked record, and registers the same ``step`` (or ``keyed``, which
    returns ``None`` where the general path must run) as ``op``'s keyed step: the step is built in one place for
    the stage and the keyed chain. ``owned`` names a field of the record (a seed, a default) that every key would
    share: one that may change in place keeps the general path, which makes it anew per group. Stacked, one stage
    serves several ops (``first``, ``first_or_default``), each with its record and step. With ``when``, one op has
    several stages (forms persisted under different names: ``distinct`` with and without a comparer), each
    decorated with the test of the record that picks it, the registration on the first: the op's binder and its
    keyed step take the first form whose ``when`` holds."""
    record = registration["args"]

    def decorate(stage: G) -> G:
        ops: dict[str, tuple[Any, Callable[[Any], KeyedStep]]] = vars(stage).get("_step_ops") or {}
        if "_step_ops" not in vars(stage):
            stage._step_ops = ops  # type: ignore[union-attr]  # (a class attribute: the ops the stage serves)
            if "__init__" not in vars(stage):
                def construct(self: Any, query: Any, downstream: Subscriber[Any]) -> None:
                    node_record, make = ops[query.op]
                    args = node_record.read(query)
                    super(cast("type[Any]", stage), self).__init__(downstream, args.source, make(args))

                stage.__init__ = construct  # type: ignore[assignment]
        ops[op] = (record, step)
        keyed_step = step if keyed is None else keyed

        def keyed_factory(query: Any) -> KeyedStep | None:
            args = record.read(query)
            if owned is not None and not is_immutable_value(getattr(args, owned)):
                return None
            return keyed_step(args)

        if when is None:
            register_operator(op, **registration)(stage)
            keyed_factory.__module__ = stage.__module__  # (the operator's, as a factory written in its module)
            keyed_factory.__qualname__ = f"{stage.__qualname__}.keyed_step"
            register_keyed_step(op)(keyed_factory)
        else:
            _add_form(op, when, stage, keyed_factory, registration)
        return stage

    return decorate


_FORMS: dict[str, list[tuple[Callable[[Any], bool], Any, Callable[[Any], KeyedStep | None]]]] = {}
"""The stages of an op with several (:func:`step_operator`'s ``when``), in the order decorated."""


def _add_form(op: str, when: Callable[[Any], bool], stage: Any, keyed_factory: Callable[[Any], KeyedStep | None],
              registration: dict[str, Any]) -> None:
    """Add a form of ``op``; the first registers the op's binder and keyed step, which pick a form by its test."""
    forms = _FORMS.setdefault(op, [])
    forms.append((when, stage, keyed_factory))
    if len(forms) > 1:
        return
    record = registration["args"]

    def pick(query: Any) -> tuple[Any, Callable[[Any], KeyedStep | None]]:
        args = record.read(query)
        return next((form, factory) for test, form, factory in forms if test(args))

    def bind(query: Any, downstream: Subscriber[Any]) -> SubscriptionHandle:
        return cast("SubscriptionHandle", pick(query)[0](query, downstream))

    def keyed_factory_of_form(query: Any) -> KeyedStep | None:
        return pick(query)[1](query)

    for function, name in ((bind, "bind"), (keyed_factory_of_form, "keyed_step")):
        function.__module__ = stage.__module__  # (the operator's, as written in its module)
        function.__qualname__ = f"{op}.{name}"
    register_operator(op, **registration)(bind)
    register_keyed_step(op)(keyed_factory_of_form)


def runs_inline(*stages: type[StepStage] | type[StepAggregate]) -> Callable[[S], S]:
    """Decorator of a step class whose ``next`` is plain (see :func:`inlinable`): each of ``stages`` gets an
    ``on_next`` that runs the step's ``next`` inline (:func:`_inlined_on_next`), with no call per element; the
    step stays the one source of the logic. A ``next`` of another shape (or without its source) is called."""

    def decorate(step: S) -> S:
        function = inlinable(step)
        if function is None:
            return step
        for stage in stages:
            stage.on_next = _inlined_on_next(step, stage, function)  # type: ignore[method-assign]
        return step

    return decorate


# What a ``next`` may not hold to be inlined: a ``return`` in a loop would leave the loop, not the step; nested
# functions and generators change what ``return`` and the names mean.
_NOT_INLINED = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal)
# The locals the inlined ``on_next`` uses for itself: a step that uses them is called instead.
_INLINE_NAMES = frozenset({"step", "field", "output"})


def inlinable(step: type[KeyedStep]) -> tuple[ast.FunctionDef, list[str]] | None:
    """The parsed ``next`` of ``step`` and its source lines when it can be inlined: parameters ``(self, state,
    value)`` that it does not assign; every ``return field, output`` on a line of its own; ``self`` only as in
    ``self.name``; no loop, nested function, generator or string of several lines; none of the locals the inlined
    code uses. ``None`` otherwise (the stage then calls the step)."""
    try:
        source = textwrap.dedent(inspect.getsource(step.next))
    except (OSError, TypeError):  # no source (a build without .py files)
        return None
    function = ast.parse(source).body[0]
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return None
    arguments = function.args
    if ([argument.arg for argument in arguments.args] != ["self", "state", "value"] or arguments.vararg
            or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs):
        return None
    lines = source.splitlines()
    attribute_values = {id(node.value) for node in ast.walk(function) if isinstance(node, ast.Attribute)}
    first = function.body[0]
    docstring = first.value if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else None
    for node in ast.walk(function):
        if node is function or node is docstring:
            continue
        if isinstance(node, _NOT_INLINED):
            return None
        if isinstance(node, ast.Return) and (node.value is None or node.lineno != node.end_lineno
                                             or lines[node.lineno - 1][: node.col_offset].strip()):
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.lineno != node.end_lineno:
            return None  # (its lines would be read as code lines)
        if isinstance(node, ast.Name) and (
            node.id in _INLINE_NAMES
            or (node.id == "self" and id(node) not in attribute_values)
            or (node.id in ("state", "value", "self") and not isinstance(node.ctx, ast.Load))
        ):
            return None
    return function, lines


def _inlined_return(expression: str, skips_inline: bool, in_place: bool) -> list[str]:
    """The lines an inlined ``return field, output`` becomes: leave the ``try`` with the two (the stage's tail
    then handles them), or, for a plain new field with no output in a stage that owes nothing for it
    (``skips_inline``), store it and return at once (nothing that may raise runs under the ``try``); the same
    field unchanged returns at once, unless the step changes its field in place (``in_place``: marked changed)."""
    node = ast.parse(expression, mode="eval").body
    if skips_inline and isinstance(node, ast.Tuple) and len(node.elts) == 2:
        field, output = (ast.unparse(element) for element in node.elts)
        if output == "SKIP" and field == "state" and not in_place:
            return ["return"]
        if output == "SKIP" and field != "DONE":
            return [f"self._field = {field}", "self._state.changed = True", "return"]
    return [f"field, output = {expression}", "break"]


def _inlined_on_next(step: type[KeyedStep], stage: type[StepStage] | type[StepAggregate],
                     parsed: tuple[ast.FunctionDef, list[str]]) -> Any:
    """``on_next`` for a stage of ``step``: the step's ``next`` (its source, checked by :func:`inlinable`) run
    inline, each ``return field, output`` of it leaving the ``try`` with the two, then what the stage's
    ``on_next`` does with them (``inline_tail``). The same code as the call, less the call: the step stays the
    one source of the logic."""
    function, lines = parsed
    statements = function.body
    if isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]  # the docstring
    body: list[str] = []
    marks = step.in_place and not step.skip_keeps_field  # a skip with the same field changed it in place
    for line in lines[statements[0].lineno - 1 : function.end_lineno]:
        line = re.sub(r"\bself\.", "step.", line)  # noqa: PLW2901  (the step's fields, through the stage's step)
        stripped = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        if stripped.startswith("return "):
            skips = stage.inline_skips and not getattr(stage, "drops", False)
            body += [indent + line for line in _inlined_return(stripped[7:], skips, marks)]
        else:
            body.append(line)
    code = [
        "def on_next(self, value, DONE=DONE, SKIP=SKIP, StepOperatorError=StepOperatorError):",
        *(["    step = self._step"] if any(re.search(r"\bstep\.", line) for line in body) else []),
        "    state = self._field",
        "    while True:",
        "        try:",
        *("        " + line if line.strip() else "" for line in body),
        "        except StepOperatorError as error:",
        "            self._signal_error(error.error)",
        "            return",
        "        except Exception as error:",
        "            self._user_error(error, value)",
        "            return",
        *stage.inline_tail(step, any(isinstance(node, ast.Name) and node.id == "DONE" for node in ast.walk(function))),
    ]
    source = "\n".join(code) + "\n"
    filename = f"<reaqtive inlined {step.__qualname__}.next>"
    namespace: dict[str, Any] = {"DONE": DONE, "SKIP": SKIP, "StepOperatorError": StepOperatorError}
    exec(compile(source, filename, "exec"), namespace)  # the step's own source: no user value becomes code
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = inspect.getmodule(step)
    assert module is not None
    function = namespace["on_next"]  # re-made over the step's module's globals (the names its next uses)
    return types.FunctionType(function.__code__, vars(module), "on_next", (DONE, SKIP, StepOperatorError))
