"""The inner operators of the keyed differential test (``test_keyed_groups.py``): variants of each operator with a
keyed step, some of whose functions fail on chosen elements (the error paths must match too).

Each variant is a function from the group (a query) to a query over it. The elements are small ints (0 to 20);
functions stay deterministic, return no ``None`` unless a variant means to, and keep the values small enough
that any chain stays cheap. One module per family adds its variants (``_keyed_cases_<family>.py``); this one has
``map``, ``filter`` and ``scan`` and the shared helpers.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reaqtive import Query


@dataclass(frozen=True)
class Variant:
    """One inner operator, as applied to a group: ``op`` is the operator name it writes."""

    label: str
    op: str
    apply: Callable[[Query[Any]], Query[Any]]

    def __repr__(self) -> str:
        return self.label


def fails_on(bad: int, error: type[Exception] = ValueError) -> Callable[[Any], Any]:
    """An identity that raises ``error`` on the element ``bad`` (ints only; other values pass)."""

    def identity(x: Any) -> Any:
        if x == bad:
            raise error(f"bad element {x!r}")
        return x

    return identity


def small(x: Any) -> Any:
    """Keep ints small (a chain of scans must not grow numbers without bound)."""
    return x % 97 if isinstance(x, int) and not isinstance(x, bool) else x


def add_ints(a: Any, x: Any) -> Any:
    """A sum of ints (kept small); any other value replaces the accumulation."""
    return small(a + x) if isinstance(a, int) and isinstance(x, int) else x


VARIANTS: list[Variant] = [
    Variant("map(x+1)", "map", lambda g: g.map(lambda x: small(x + 1) if isinstance(x, int) else x)),
    Variant("map(str)", "map", lambda g: g.map(repr)),
    Variant("map(fails on 7)", "map", lambda g: g.map(fails_on(7))),
    Variant("map(None on 9)", "map", lambda g: g.map(lambda x: None if x == 9 else x)),
    Variant("map(with key)", "map", lambda g: g.map(lambda x: (g.key, x))),
    Variant("filter(odd)", "filter", lambda g: g.filter(lambda x: not isinstance(x, int) or x % 2 == 1)),
    Variant("filter(fails on 5)", "filter", lambda g: g.filter(lambda x: fails_on(5)(x) is not None)),
    Variant("filter(key-dependent)", "filter", lambda g: g.filter(lambda x: g.key != 1)),
    Variant("scan(add)", "scan", lambda g: g.scan(add_ints)),
    Variant("scan(0, count)", "scan", lambda g: g.scan(0, lambda a, x: a + 1)),
    Variant("scan((), last three)", "scan", lambda g: g.scan((), lambda a, x: (*a, x)[-3:])),
    Variant("scan(fails on 4)", "scan", lambda g: g.scan(0, lambda a, x: operator.add(a, 1) if x != 4 else 1 // 0)),
    Variant("scan(None on 6)", "scan", lambda g: g.scan(0, lambda a, x: None if x == 6 else a + 1)),
]
