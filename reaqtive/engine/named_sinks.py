"""Sinks attached in one step: a sink carries the name the store keeps for it.

A store is data, never code, so an observer definition names its function by reference, and every process that
opens the store must provide the function under that name before recovery resolves it. A *named sink* carries the
name itself: the connectors take ``name=`` (or derive one from their configuration), and any callable object with
a ``str`` attribute ``name``, or a function (by its registered name, else its ``__name__``), is one. So::

    sink = JsonLinesSink("alerts.jsonl")                        # named "alerts" (the file's stem)
    engine = Engine("app.db", sinks=[sink])                     # known by name before recovery, in every process
    engine.create_subscription("hot", query, observer=sink)     # defines obs://alerts on first use

The observer definition is ``obs://<name>``, its function stored as ``@<name>``. Attaching the same sink again is a
no-op; a different object under a name already taken is refused (:class:`SinkNameError`), as is an object that is
no sink (``TypeError``, saying what is accepted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from reaqtive.engine.engine_errors import ArtifactExistsError
from reaqtive.engine.expressions import FunctionRegistry, MalformedExpressionError

__all__ = [
    "OBSERVER_PREFIX",
    "MissingSinkError",
    "SinkNameError",
    "check_sink_name",
    "missing_sink",
    "observer_uri",
    "register_sink",
    "sink_name",
    "sink_reference",
]

OBSERVER_PREFIX: Final = "obs://"
"""The observer definition of a sink named ``n`` is ``obs://n``."""

ACCEPTED_OBSERVERS: Final = (
    "an observer URI (a str: 'obs://...' from define_observer, DURABLE_SINK or DISCARD_SINK), a sink carrying its "
    "name (JsonLinesSink, WebhookSink, PostgresSink, or any callable object with a str attribute 'name'), or a "
    "named function (def name(output): ...)"
)


class SinkNameError(ArtifactExistsError):
    """A sink's name is taken by another sink or function, or its observer URI by another definition."""


class MissingSinkError(MalformedExpressionError):
    """An observer definition names a sink this process did not provide (recovery fails it, under the policy)."""


def check_sink_name(name: object, where: str) -> str:
    """``name`` if it can name a sink (a non-empty ``str`` without ``:``, which import paths use), else
    ``ValueError`` saying so, prefixed by ``where``."""
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise ValueError(f"{where}: a sink's name must be a non-empty str without ':' or surrounding spaces, "
                         f"got {name!r} (pass name=...)")
    return name


def sink_name(sink: object, functions: FunctionRegistry) -> str:
    """The name the store keeps for ``sink``: its ``name`` attribute, or a function's registered name, else its
    ``__name__``. ``TypeError`` for what cannot be a sink or has no name."""
    if isinstance(sink, str) or not callable(sink):
        raise TypeError(f"observer must be {ACCEPTED_OBSERVERS}; got {_describe(sink)}")
    name = getattr(sink, "name", None)
    if isinstance(name, str):
        return check_sink_name(name, f"the sink {_describe(sink)}")
    registered = functions.name_of(sink)
    if registered is not None:
        return registered
    function_name = getattr(sink, "__name__", None)
    if isinstance(function_name, str) and function_name.isidentifier() and not hasattr(sink, "__self__"):
        return function_name
    raise TypeError(
        f"observer {_describe(sink)} has no name for the store to keep (a lambda, a bound method, or an object "
        "without a str attribute 'name'): give it one (a connector's name=..., a 'name' attribute, or a def), "
        "or register it (FunctionRegistry.register(name, fn)) and pass observer='obs://...' after define_observer"
    )


def observer_uri(name: str) -> str:
    """The URI of the observer definition of the sink named ``name``."""
    return OBSERVER_PREFIX + name


def register_sink(functions: FunctionRegistry, sink: Callable[..., Any]) -> str:
    """Register ``sink`` in ``functions`` under its name (again with the same object: a no-op); returns the name.
    :class:`SinkNameError` if another object has the name."""
    name = sink_name(sink, functions)
    try:
        existing: Callable[..., Any] | None = functions.resolve(name)
    except MalformedExpressionError:  # not registered yet
        existing = None
    if existing is not None and existing is not sink and not (hasattr(existing, "__self__") and existing == sink):
        raise SinkNameError(
            f"sink name {name!r} is already taken by {_describe(existing)}, so {_describe(sink)} cannot have it: "
            "two sinks need two names (pass name=... to one of them)"
        )
    functions.register(name, sink)
    return name


def sink_reference(name: str) -> dict[str, str]:
    """How an observer definition's record stores the function of the sink named ``name``."""
    return {"fn": "@" + name}


def missing_sink(uri: str, stored: object, functions: FunctionRegistry) -> MissingSinkError | None:
    """The error for observer definition ``uri`` whose stored function (``{"fn": "@name"}``) names a sink that
    is not registered, saying how to provide it; ``None`` if it stores something else."""
    reference = stored.get("fn") if isinstance(stored, dict) else None
    if not isinstance(reference, str) or not reference.startswith("@") or reference[1:] in functions.names():
        return None
    name = reference[1:]
    return MissingSinkError(
        f"observer definition {uri!r} sends outputs to the sink {name!r}, which this process did not provide. "
        f"Sinks are code, not data: the store keeps only the name, so pass the sink before the store opens, in "
        f"every process: Engine(path, sinks=[sink]) with a sink named {name!r} (e.g. JsonLinesSink(path, "
        f"name={name!r})), or FunctionRegistry.register({name!r}, sink) in the registry given to the engine"
    )


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
