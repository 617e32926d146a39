"""Variants of the keyed differential test for the aggregates family (see ``_keyed_cases.py``).

They emit only when their group completes: empty groups (after a ``filter``) test the completion-time errors
(``average``, ``min``, ``max``, ``aggregate`` without a seed), and accumulations or selectors that give ``None``
test the "result is None" error.
"""

from __future__ import annotations

from typing import Any

from tests.operators._keyed_cases import Variant, fails_on, small


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _add(a: Any, x: Any) -> Any:
    """``a + x`` for ints (kept small), else the newer value."""
    return small(a + x) if _is_int(a) and _is_int(x) else x


def _tie_key(x: Any) -> int:
    """A key with many ties (the first of equal elements must win)."""
    return x % 3 if _is_int(x) else len(repr(x)) % 3


VARIANTS: list[Variant] = [
    # count
    Variant("count()", "count", lambda g: g.count()),
    Variant("count(odd)", "count", lambda g: g.count(lambda x: not _is_int(x) or x % 2 == 1)),
    Variant("count(fails on 5)", "count", lambda g: g.count(lambda x: fails_on(5)(x) is not None)),
    Variant("count(key-dependent)", "count", lambda g: g.count(lambda x: g.key == 0)),
    # sum
    Variant("sum()", "sum", lambda g: g.sum()),
    Variant("sum(0.5)", "sum", lambda g: g.sum(0.5)),
    Variant("sum(())", "sum", lambda g: g.sum(())),  # adds up tuples; ints fail
    # average (no selector: an empty group fails at completion)
    Variant("average()", "average", lambda g: g.average()),
    # min / max
    Variant("min()", "min", lambda g: g.min()),
    Variant("max()", "max", lambda g: g.max()),
    Variant("min(key=repr)", "min", lambda g: g.min(repr)),
    Variant("max(tie key)", "max", lambda g: g.max(_tie_key)),
    Variant("min(tie key)", "min", lambda g: g.min(_tie_key)),
    Variant("max(key fails on 7)", "max", lambda g: g.max(lambda x: repr(fails_on(7)(x)))),
    # aggregate
    Variant("aggregate(add)", "aggregate", lambda g: g.aggregate(_add)),
    Variant("aggregate(add, 0)", "aggregate", lambda g: g.aggregate(lambda a, x: a + 1, 0)),
    Variant("aggregate(pairs, ())", "aggregate", lambda g: g.aggregate(lambda a, x: (*a, x)[-3:], ())),
    Variant("aggregate(add, 0, str)", "aggregate", lambda g: g.aggregate(lambda a, x: a + 1, 0, repr)),
    Variant("aggregate(add, result repr)", "aggregate", lambda g: g.aggregate(_add, result_selector=repr)),
    Variant("aggregate(fails on 4)", "aggregate", lambda g: g.aggregate(lambda a, x: 1 // 0 if x == 4 else x)),
    Variant(
        "aggregate(None on 6, 0)",
        "aggregate",
        lambda g: g.aggregate(lambda a, x: None if x == 6 else (0 if a is None else a) + 1, 0),
    ),
    Variant("aggregate(None on 6)", "aggregate", lambda g: g.aggregate(lambda a, x: None if x == 6 else x)),
    Variant("aggregate(last, None)", "aggregate", lambda g: g.aggregate(lambda a, x: x, None)),
    Variant(
        "aggregate(result fails on 3)",
        "aggregate",
        lambda g: g.aggregate(lambda a, x: x, result_selector=fails_on(3, ZeroDivisionError)),
    ),
    Variant(
        "aggregate(result None on 2, 0)",
        "aggregate",
        lambda g: g.aggregate(lambda a, x: x, 0, lambda a: None if a == 2 else a),
    ),
    Variant("aggregate(key-dependent, 0)", "aggregate", lambda g: g.aggregate(lambda a, x: (g.key, x), 0)),
    # to_list
    Variant("to_list()", "to_list", lambda g: g.to_list()),
]
