"""``named``: a stable identity for a part of a query, so that an upgrade of the query finds its state again.

``query.named("counts")`` computes exactly what ``query`` computes: binding it binds ``query`` and wraps the handle
in a :class:`NamedHandle` that carries the name, and no operator is added to the running tree (the paths and the
saved state are those of ``query``). It does split a fused run of per-element stages around it (``map``,
``filter``, ``scan`` on either side run as stages of their own: the same results, a frame more per element). The
name lives in the stored expression, so a store written before names existed loads unchanged, and an engine's
``update_subscription`` (:mod:`reaqtive.engine.upgrade`) matches the stateful operators under a name in the new
definition with those under the same name in the old one, wherever each sits in its tree.
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeVar

from reaqtive.core.arguments import ArgsRecord, Arguments
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscriptions import HandleVisitor, SubscriptionHandle

__all__ = ["NamedArgs", "NamedHandle", "bind_named", "named"]

T = TypeVar("T")

_NAME: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")


def named(name: str) -> OperatorCall[Any]:
    """Give this part of the query the stable identity ``name`` (letters, digits, ``_.:-``, at most 100), under
    which an upgraded definition of the query finds its state (``Engine.update_subscription``): the stateful
    operators under it are matched by the name and their place below it, not by their place in the whole tree.
    Elements, demand and state pass unchanged: it adds no stage.

    >>> from reaqtive import from_iterable
    >>> seen = []
    >>> _ = from_iterable([1, 2]).scan(0, lambda a, x: a + x).named("sums").run(seen.append)
    >>> seen
    [1, 3]

    **State.** None: the operators under it save theirs.

    **Demand.** That of the query it names.
    """
    _check_name(name, "named")
    return OperatorCall("named", (name,))


def _check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: a name must be a str of 1 to 100 letters, digits or '_.:-', got {name!r:.60}")
    return name


class NamedArgs(ArgsRecord, source="source", name="text"):
    """The arguments of a ``named`` node: ``(source, name)``."""

    def validate(self, args: Arguments) -> None:
        if not _NAME.fullmatch(self.name):
            args.fail(1, "a name of 1 to 100 letters, digits or '_.:-'")


class NamedHandle(SubscriptionHandle):
    """The handle of a named part: the named query's own handle, with its name (see the module)."""

    __slots__ = ("handle", "name")

    def __init__(self, handle: SubscriptionHandle, name: str) -> None:
        self.handle = handle
        self.name = name

    def dispose(self) -> None:
        self.handle.dispose()

    def accept(self, visitor: HandleVisitor) -> None:
        self.handle.accept(visitor)

    def __repr__(self) -> str:
        return f"<NamedHandle {self.name!r} {self.handle!r}>"


@register_operator("named", frames=1, builder=named, args=NamedArgs)
def bind_named(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`named`: the source's handle, carrying the name."""
    args = NamedArgs.read(query)
    return NamedHandle(args.source.subscribe(subscriber), args.name)
