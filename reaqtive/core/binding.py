"""The operator registry: binding turns a query expression node into a running operator.

Each operator module registers its stage under the operator name used in query expressions (``"map"``,
``"filter"``, ...), together with what makes the operator one unit: its **builder** (the function that checks
the arguments where a query is written and returns an :class:`~reaqtive.core.expression.OperatorCall`; the fluent
method ``Query.<builder name>`` delegates to it), its **argument record** (a ``NamedTuple`` whose ``read(query)``
checks a node's arguments when it is bound), and the **frames** one stage adds to the deepest per-element path.
A binder is any callable ``(query, subscriber) -> SubscriptionHandle``; a stage class whose constructor takes
``(query, subscriber)`` is one. The engine re-creates persisted queries through the same registry, which is why an
expression holds names, not classes.

**Operators of other packages.** Names without a namespace belong to reaqtive. Any other package registers its
operators under its own namespace, ``"<namespace>:<name>"`` (``"signals:ewma"``), either by calling
:func:`register_operator` when its module is imported, or by declaring the module in the entry point group
:data:`ENTRY_POINT_GROUP` so that a stored query finds it without being imported first::

    [project.entry-points."reaqtive.operators"]
    signals = "reaqtive_signals"

A query that names an operator nobody registered raises :class:`~reaqtive.core.errors.UnknownOperatorError`, after
the entry points were loaded; it names the namespace whose package is missing.

**Frames.** :meth:`reaqtive.core.expression.Expression.subscribe` adds them up along the query and refuses, with
:class:`~reaqtive.core.errors.QueryTooDeepError`, a query that could not run within Python's recursion limit.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeAlias, TypeVar

from reaqtive.core.errors import OperatorPluginError, UnknownOperatorError
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscriptions import SubscriptionHandle

__all__ = [
    "DEFAULT_FRAMES",
    "ENTRY_POINT_GROUP",
    "Binder",
    "OperatorSpec",
    "QueryNode",
    "bind",
    "frames_of",
    "is_registered",
    "load_builtin_operators",
    "load_operator_plugins",
    "operator_spec",
    "operator_specs",
    "register_operator",
    "registered_operators",
]


class QueryNode(Protocol):
    """What the registry and the argument checks (:mod:`reaqtive.core.arguments`) read of a query node: its
    operator name and its arguments. The nodes are :class:`~reaqtive.core.expression.Expression`; the expression
    layer is built on this module, so the node is named here by what is read of it."""

    @property
    def op(self) -> str: ...

    @property
    def args(self) -> tuple[object, ...]: ...


Binder: TypeAlias = Callable[[Any, Subscriber[Any]], SubscriptionHandle]
"""``binder(query, subscriber)``: the query is the :class:`~reaqtive.core.expression.Expression` node being bound
(``Any`` here: a binder may declare the node class, which this module, below it, does not name)."""

B = TypeVar("B", bound=Callable[..., SubscriptionHandle])

DEFAULT_FRAMES: Final = 3
"""The frames of a stage that passes an element down in one call and a request up in two (its own ``request``,
then the base's): most one-input stages. Stages that only pass both through (``map``) take 2; stages that hand
elements through a queue, a subject or an inner subscription take more."""

ENTRY_POINT_GROUP: Final = "reaqtive.operators"
"""The entry point group through which installed packages declare the modules that register their operators."""

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")
_NAMESPACED: Final = re.compile(r"([a-z][a-z0-9_]*):([a-z][a-z0-9_]*)")


@dataclass(frozen=True)
class OperatorSpec:
    """Everything the registry knows about one expression operator."""

    op: str
    """The name in query expressions: ``"take"``, or ``"<namespace>:<name>"`` for another package's."""
    binder: Callable[..., SubscriptionHandle]
    """Makes the running stage: ``binder(query, subscriber)`` (usually the stage class)."""
    frames: int
    """Nested Python frames one stage adds to the deepest per-element path."""
    builder: Callable[..., Any] | None
    """The function a query is written with (the fluent method ``Query.<builder.__name__>`` delegates to it)."""
    args: type | None
    """The argument record: a ``NamedTuple`` with a ``read(query)`` class method."""
    internal: bool
    """Made by reaqtive itself (an inner stream's source, an engine stream), never written by users."""

    @property
    def namespace(self) -> str:
        """``""`` for reaqtive's operators, else the part before ``:``."""
        return self.op.partition(":")[0] if ":" in self.op else ""

    @property
    def method(self) -> str | None:
        """The fluent method (or static constructor) of ``Query`` that writes this operator."""
        return None if self.builder is None or self.namespace else self.builder.__name__


_SPECS: dict[str, OperatorSpec] = {}
_BINDERS: dict[str, Callable[..., SubscriptionHandle]] = {}
_FRAMES: dict[str, int] = {}
_ORIGINS: dict[str, str] = {}  # operator name -> the module whose import registered it
_HOOKS: list[Callable[[OperatorSpec], None]] = []
_PLUGINS_LOCK = threading.Lock()
_PLUGINS_LOADED: list[bool] = []  # one True once the entry points were loaded


def register_operator(
    op: str,
    *,
    frames: int = DEFAULT_FRAMES,
    builder: Callable[..., Any] | None = None,
    args: type | None = None,
    internal: bool = False,
) -> Callable[[B], B]:
    """Class or function decorator: register a binder (usually the stage class) for the expression operator ``op``.

    ``frames``: the nested Python frames one stage adds to the deepest per-element path (measure it: the
    deepest chain of the stage that runs at a given recursion limit). ``builder``: the function users write the
    operator with. ``args``: its argument record. Names without a ``namespace:`` prefix are reaqtive's; another
    package's operator must be named ``"<namespace>:<name>"`` (lower case letters, digits, ``_``). Registering a
    name twice is a programming error and raises :class:`ValueError`.
    """
    if not isinstance(frames, int) or frames < 1:
        raise ValueError(f"operator {op!r}: frames must be an int >= 1, got {frames!r}")
    if not isinstance(op, str) or not (_NAME.fullmatch(op) or _NAMESPACED.fullmatch(op)):
        raise ValueError(f"operator name {op!r} must be 'name' (reaqtive's) or 'namespace:name' (lower case letters, "
                         "digits and '_', starting with a letter)")
    if args is not None and not callable(getattr(args, "read", None)):
        raise TypeError(f"operator {op!r}: the argument record {args!r} needs a read(query) class method")

    def decorate(binder: B) -> B:
        existing = _BINDERS.get(op)
        if existing is not None and existing is not binder:
            raise ValueError(f"operator {op!r} is already registered by {existing!r}")
        module = getattr(binder, "__module__", "") or ""
        if ":" not in op and not module.startswith("reaqtive."):
            raise ValueError(f"operator {op!r} registered by {module}: an operator outside reaqtive must be named "
                             f"'<namespace>:{op}' (its package's namespace), so that its name never collides")
        spec = OperatorSpec(op, binder, frames, builder, args, internal)
        _SPECS[op] = spec
        _BINDERS[op] = binder
        _FRAMES[op] = frames
        _ORIGINS[op] = _importing_module()
        for hook in _HOOKS:
            hook(spec)
        return binder

    return decorate


def frames_of(op: str) -> int:
    """The nested Python frames one stage of ``op`` adds to the deepest per-element path (see the module)."""
    frames = _FRAMES.get(op)
    if frames is None:
        _load_builtin(op)  # a node read back from a store names an operator whose module may not be loaded yet
        frames = _FRAMES.get(op, DEFAULT_FRAMES)
    return frames


def bind(query: QueryNode, subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """Create the operator for ``query``'s top node, subscribed by ``subscriber`` (not started)."""
    binder = _BINDERS.get(query.op)
    if binder is None:
        binder = _binder_of_plugin(query.op)
    return binder(query, subscriber)


def _importing_module() -> str:
    """The module whose body is running (the innermost ``<module>`` frame): the module that registers an operator,
    even when a helper of another module makes the binder."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back  # type: ignore[assignment]
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


_BUILTIN: Final = "reaqtive.operators"

BUILTIN_OPERATORS: Final[dict[str, str]] = {
    # Generated, then checked by tests/test_imports.py: each built-in operator name -> the module of
    # reaqtive.operators whose import registers it. Binding imports that module on first use of the name, so that
    # ``import reaqtive`` need not import the whole operator library.
    "aggregate": "aggregate",
    "aggregate_by_key": "keyed_window",
    "all": "any_all_contains",
    "any": "any_all_contains",
    "average": "math_aggregates",
    "buffer": "buffer",
    "buffer_time": "buffer_time",
    "buffer_time_or_count": "buffer_time",
    "combine_latest": "merge",
    "contains": "any_all_contains",
    "count": "math_aggregates",
    "debounce": "debounce",
    "default_if_empty": "default_if_empty",
    "delay_subscription": "delay_subscription",
    "distinct": "distinct",
    "distinct_until_changed": "distinct",
    "do": "do",
    "element_at": "first_last_single",
    "element_at_or_default": "first_last_single",
    "empty": "fixed_sources",
    "filter": "filter",
    "filter_indexed": "filter",
    "finally_action": "do",
    "first": "first_last_single",
    "first_or_default": "first_last_single",
    "flat_map": "flat_map",
    "from_iterable": "from_iterable",
    "group_by": "group_by",
    "ignore_elements": "ignore_elements",
    "interval": "timer",
    "is_empty": "any_all_contains",
    "last": "first_last_single",
    "last_or_default": "first_last_single",
    "map": "map",
    "map_indexed": "map",
    "max": "math_aggregates",
    "merge": "merge",
    "merge_all": "flat_map",
    "min": "math_aggregates",
    "never": "fixed_sources",
    "retry": "retry",
    "return_value": "fixed_sources",
    "sample": "sample",
    "scan": "scan",
    "sequence_equal": "sequence_equal",
    "single": "first_last_single",
    "single_or_default": "first_last_single",
    "skip": "take",
    "skip_duration": "take",
    "skip_until": "skip_until",
    "skip_until_time": "skip_until",
    "skip_while": "take_while",
    "skip_while_indexed": "take_while",
    "start_with": "start_with",
    "sum": "math_aggregates",
    "switch_latest": "flat_map",
    "take": "take",
    "take_duration": "take",
    "take_until": "take_until",
    "take_until_time": "take_until",
    "take_while": "take_while",
    "take_while_indexed": "take_while",
    "throw": "fixed_sources",
    "timer": "timer",
    "to_list": "aggregate",
    "named": "named",
    "trace": "do",
    "window": "window",
    "window_time": "window_time",
    "window_time_or_count": "window_time",
}
"""Each built-in operator (by name) to the module of :mod:`reaqtive.operators` that registers it when imported."""


def _load_builtin(op: str) -> bool:
    """Import the built-in module that registers ``op``, if it is one; whether ``op`` is registered now."""
    module = BUILTIN_OPERATORS.get(op)
    if module is not None:
        import importlib

        importlib.import_module(f"{_BUILTIN}.{module}")
    return op in _BINDERS


def load_builtin_operators() -> None:
    """Import every built-in operator module, so that every reaqtive operator is registered: for what needs the
    complete list (``registered_operators``, ``operator_specs``, documentation, coverage checks). Binding imports
    each module on the first use of one of its operators."""
    import importlib

    for module in sorted(set(BUILTIN_OPERATORS.values())):
        importlib.import_module(f"{_BUILTIN}.{module}")


def add_registration_hook(hook: Callable[[OperatorSpec], None]) -> None:
    """Call ``hook(spec)`` for every operator registered so far and for every one registered later (the fluent
    facade adopts each builder's docstring this way, as its module is imported)."""
    _HOOKS.append(hook)
    for spec in list(_SPECS.values()):
        hook(spec)


def registering_module(op: str) -> str:
    """The module whose import registered ``op`` (``""`` if it is not registered)."""
    return _ORIGINS.get(op, "")


def _binder_of_plugin(op: str) -> Callable[..., SubscriptionHandle]:
    """The binder of an operator not registered yet: import the built-in module that defines it, else load the
    installed packages' entry points, then look again."""
    if _load_builtin(op):
        return _BINDERS[op]
    load_operator_plugins()
    binder = _BINDERS.get(op)
    if binder is not None:
        return binder
    namespace = op.partition(":")[0] if ":" in op else ""
    if namespace:
        known = sorted(name for name in _BINDERS if name.startswith(f"{namespace}:"))
        if known:
            hint = f"; namespace {namespace!r} has {', '.join(known)} (is the installed package older?)"
        else:
            hint = (f"; no installed package registers namespace {namespace!r}: install the package that provides "
                    f"it (it declares the entry point group {ENTRY_POINT_GROUP!r}) or import its module first")
        raise UnknownOperatorError(op, hint=hint)
    load_builtin_operators()  # the error lists every known name
    raise UnknownOperatorError(op, list(_BINDERS))


def load_operator_plugins() -> list[str]:
    """Import every module declared in the entry point group :data:`ENTRY_POINT_GROUP` (once per process), so
    that their operators are registered; returns the entry point names loaded. A module that fails to import
    raises :class:`~reaqtive.core.errors.OperatorPluginError` naming it (and is tried again on the next call)."""
    with _PLUGINS_LOCK:
        if _PLUGINS_LOADED:
            return []
        from importlib import metadata  # imported on first use: importlib.metadata costs ~20 ms

        loaded: list[str] = []
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                entry.load()
            except Exception as error:
                raise OperatorPluginError(entry.name, entry.value, error) from error
            loaded.append(entry.name)
        _PLUGINS_LOADED.append(True)
        return loaded


def is_registered(op: str) -> bool:
    """Whether a binder exists for ``op`` (a built-in operator's module is imported to tell)."""
    return op in _BINDERS or _load_builtin(op)


def registered_operators() -> list[str]:
    """All registered expression operator names (every built-in one included), sorted."""
    load_builtin_operators()
    return sorted(_BINDERS)


def operator_spec(op: str) -> OperatorSpec:
    """The registration of ``op``; :class:`~reaqtive.core.errors.UnknownOperatorError` if there is none."""
    spec = _SPECS.get(op)
    if spec is None:
        _binder_of_plugin(op)
        spec = _SPECS[op]
    return spec


def operator_specs() -> list[OperatorSpec]:
    """Every registration (every built-in operator's included), sorted by operator name."""
    load_builtin_operators()
    return [_SPECS[op] for op in sorted(_SPECS)]
