"""Variants of the keyed differential test for the misc family (see ``_keyed_cases.py``): ``distinct_until_changed``,
``distinct``, ``any``, ``all``, ``contains``, ``is_empty``, ``default_if_empty``, ``ignore_elements``, ``do``,
``buffer`` by count, ``map_indexed`` and ``filter_indexed``.

An earlier variant may hand these strings, tuples, lists (``buffer``) or bools (``any``), so every function
tolerates any value.
"""

from __future__ import annotations

from typing import Any

from tests.operators._keyed_cases import Variant, fails_on, small


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def bucket(x: Any, n: int) -> Any:
    """``x % n`` for ints, else the first characters of ``repr(x)`` (a hashable key for any value)."""
    return x % n if is_int(x) else repr(x)[:2]


def near(a: Any, b: Any) -> bool:
    """A comparer: ints at most 1 apart, other values equal."""
    if is_int(a) and is_int(b):
        return abs(a - b) <= 1
    return bool(a == b)


def compare_fails_on(bad: int) -> Any:
    """A comparer (equal buckets mod 3) that raises when the new key is ``bad``."""

    def compare(a: Any, b: Any) -> bool:
        if b == bad:
            raise ArithmeticError(f"cannot compare {b!r}")
        return bool(bucket(a, 3) == bucket(b, 3))

    return compare


def unhashable_on(bad: int) -> Any:
    """A key selector whose key is a list (unhashable) for the element ``bad``."""
    return lambda x: [x] if x == bad else x


def fails_at_index(bad: int) -> Any:
    """An indexed function returning its element (truthy for ``filter_indexed``), raising at index ``bad``."""

    def indexed(x: Any, i: int) -> Any:
        if i == bad:
            raise IndexError(f"bad index {i}")
        return x

    return indexed


def _complete_fails_for_key_1(g: Any) -> Any:
    def on_complete() -> None:
        if g.key == 1:
            raise RuntimeError("on_complete failed for key 1")

    return g.do(on_complete=on_complete)


VARIANTS: list[Variant] = [
    # distinct_until_changed
    Variant("distinct_until_changed()", "distinct_until_changed", lambda g: g.distinct_until_changed()),
    Variant(
        "distinct_until_changed(x%3)",
        "distinct_until_changed",
        lambda g: g.distinct_until_changed(lambda x: bucket(x, 3)),
    ),
    Variant(
        "distinct_until_changed(None key for odd)",
        "distinct_until_changed",
        lambda g: g.distinct_until_changed(lambda x: None if is_int(x) and x % 2 else x),
    ),
    Variant(
        "distinct_until_changed(comparer near)",
        "distinct_until_changed",
        lambda g: g.distinct_until_changed(comparer=near),
    ),
    Variant(
        "distinct_until_changed(x//4, comparer ==)",
        "distinct_until_changed",
        lambda g: g.distinct_until_changed(lambda x: x // 4 if is_int(x) else x, lambda a, b: a == b),
    ),
    Variant(
        "distinct_until_changed(key fails on 8)",
        "distinct_until_changed",
        lambda g: g.distinct_until_changed(fails_on(8)),
    ),
    Variant(
        "distinct_until_changed(comparer fails on 3)",
        "distinct_until_changed",
        lambda g: g.distinct_until_changed(comparer=compare_fails_on(3)),
    ),
    # distinct
    Variant("distinct()", "distinct", lambda g: g.distinct()),
    Variant("distinct(x%4)", "distinct", lambda g: g.distinct(lambda x: bucket(x, 4))),
    Variant(
        "distinct(None key for odd)", "distinct", lambda g: g.distinct(lambda x: None if is_int(x) and x % 2 else x)
    ),
    Variant("distinct(key fails on 6)", "distinct", lambda g: g.distinct(fails_on(6))),
    Variant("distinct(unhashable key for 12)", "distinct", lambda g: g.distinct(unhashable_on(12))),
    Variant("distinct(comparer near)", "distinct", lambda g: g.distinct(comparer=near)),
    Variant(
        "distinct(x%5, comparer same bucket)",
        "distinct",
        lambda g: g.distinct(lambda x: bucket(x, 5), lambda a, b: bucket(a, 2) == bucket(b, 2)),
    ),
    Variant("distinct(comparer fails on 10)", "distinct", lambda g: g.distinct(comparer=compare_fails_on(10))),
    # any, all, contains, is_empty
    Variant("any()", "any", lambda g: g.any()),
    Variant("any(x>10)", "any", lambda g: g.any(lambda x: is_int(x) and x > 10)),
    Variant("any(fails on 2)", "any", lambda g: g.any(lambda x: fails_on(2)(x) == 99)),
    Variant("all(x<15)", "all", lambda g: g.all(lambda x: not is_int(x) or x < 15)),
    Variant("all(fails on 9)", "all", lambda g: g.all(lambda x: fails_on(9)(x) is not None)),
    Variant("all(key-dependent)", "all", lambda g: g.all(lambda x: g.key != 2)),
    Variant("contains(4)", "contains", lambda g: g.contains(4)),
    Variant("contains('3')", "contains", lambda g: g.contains("3")),
    Variant("is_empty()", "is_empty", lambda g: g.is_empty()),
    # default_if_empty, ignore_elements
    Variant("default_if_empty(-1)", "default_if_empty", lambda g: g.default_if_empty(-1)),
    Variant("default_if_empty(('d',))", "default_if_empty", lambda g: g.default_if_empty(("d",))),
    Variant("ignore_elements()", "ignore_elements", lambda g: g.ignore_elements()),
    # do (never with on_error: that keeps the general path)
    Variant("do(nothing)", "do", lambda g: g.do(lambda x: None)),
    Variant("do(fails on 5)", "do", lambda g: g.do(fails_on(5))),
    Variant("do(on_complete nothing)", "do", lambda g: g.do(lambda x: None, on_complete=lambda: None)),
    Variant("do(on_complete fails for key 1)", "do", _complete_fails_for_key_1),
    # buffer by count
    Variant("buffer(1)", "buffer", lambda g: g.buffer(1)),
    Variant("buffer(3)", "buffer", lambda g: g.buffer(3)),
    Variant("buffer(2, 1)", "buffer", lambda g: g.buffer(2, 1)),
    Variant("buffer(3, 2)", "buffer", lambda g: g.buffer(3, 2)),
    Variant("buffer(2, 3)", "buffer", lambda g: g.buffer(2, 3)),
    # the indexed forms
    Variant(
        "map_indexed(x+i)",
        "map_indexed",
        lambda g: g.map_indexed(lambda x, i: small(x + i) if is_int(x) else (i, x)),
    ),
    Variant("map_indexed(fails at 2)", "map_indexed", lambda g: g.map_indexed(fails_at_index(2))),
    Variant("map_indexed(None at 3)", "map_indexed", lambda g: g.map_indexed(lambda x, i: None if i == 3 else x)),
    Variant("filter_indexed(even index)", "filter_indexed", lambda g: g.filter_indexed(lambda x, i: i % 2 == 0)),
    Variant("filter_indexed(fails at 4)", "filter_indexed", lambda g: g.filter_indexed(fails_at_index(4))),
]
