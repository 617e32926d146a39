"""Variants of the keyed differential test for the take_skip family (see ``_keyed_cases.py``): ``take``,
``skip``, ``take_while``, ``skip_while`` (and their indexed forms), ``first``/``last``/``single`` (with their
``_or_default`` forms) and ``element_at`` (and ``element_at_or_default``).

Several of them end a key's chain early (``take``, ``first``, ``element_at``, ``take_while``), and several fail
at completion (``first``, ``last``, ``single`` and ``element_at`` of a key without the element) or at a second
element (``single``). Chains compose, so the predicates take any value (:func:`n`)."""

from __future__ import annotations

from typing import Any

from tests.operators._keyed_cases import Variant, fails_on


def n(x: Any) -> int:
    """A small int for any value: an int (or bool) itself, else the length of its ``repr``."""
    return int(x) if isinstance(x, int) else len(repr(x))


def passes(bad: int) -> Any:
    """A predicate that is always true but raises on the element ``bad`` (see :func:`fails_on`)."""
    return lambda x: fails_on(bad)(x) is not None


VARIANTS: list[Variant] = [
    # take (count; take(0) and durations keep the general path)
    Variant("take(1)", "take", lambda g: g.take(1)),
    Variant("take(2)", "take", lambda g: g.take(2)),
    Variant("take(5)", "take", lambda g: g.take(5)),
    # skip (count)
    Variant("skip(0)", "skip", lambda g: g.skip(0)),
    Variant("skip(1)", "skip", lambda g: g.skip(1)),
    Variant("skip(3)", "skip", lambda g: g.skip(3)),
    # take_while
    Variant("take_while(<15)", "take_while", lambda g: g.take_while(lambda x: n(x) < 15)),
    Variant(
        "take_while(%5!=4, inclusive)", "take_while", lambda g: g.take_while(lambda x: n(x) % 5 != 4, inclusive=True)
    ),
    Variant("take_while(fails on 8)", "take_while", lambda g: g.take_while(passes(8))),
    Variant("take_while(key-dependent)", "take_while", lambda g: g.take_while(lambda x: g.key != 2 or n(x) < 10)),
    # take_while_indexed
    Variant("take_while_indexed(i<3)", "take_while_indexed", lambda g: g.take_while_indexed(lambda x, i: i < 3)),
    Variant(
        "take_while_indexed(x+i<20, inclusive)",
        "take_while_indexed",
        lambda g: g.take_while_indexed(lambda x, i: n(x) + i < 20, inclusive=True),
    ),
    Variant(
        "take_while_indexed(fails on 10)",
        "take_while_indexed",
        lambda g: g.take_while_indexed(lambda x, i: passes(10)(x)),
    ),
    # skip_while
    Variant("skip_while(<8)", "skip_while", lambda g: g.skip_while(lambda x: n(x) < 8)),
    Variant("skip_while(even)", "skip_while", lambda g: g.skip_while(lambda x: n(x) % 2 == 0)),
    Variant("skip_while(fails on 3)", "skip_while", lambda g: g.skip_while(passes(3))),
    # skip_while_indexed
    Variant("skip_while_indexed(i<2)", "skip_while_indexed", lambda g: g.skip_while_indexed(lambda x, i: i < 2)),
    Variant(
        "skip_while_indexed(fails on 6, i<3)",
        "skip_while_indexed",
        lambda g: g.skip_while_indexed(lambda x, i: passes(6)(x) and i < 3),
    ),
    # first / first_or_default
    Variant("first()", "first", lambda g: g.first()),
    Variant("first(>10)", "first", lambda g: g.first(lambda x: n(x) > 10)),
    Variant("first(fails on 9, %4==3)", "first", lambda g: g.first(lambda x: passes(9)(x) and n(x) % 4 == 3)),
    Variant("first(key-dependent)", "first", lambda g: g.first(lambda x: g.key != 0 or n(x) > 5)),
    Variant("first_or_default(-1)", "first_or_default", lambda g: g.first_or_default(-1)),
    Variant(
        "first_or_default('none', %7==6)",
        "first_or_default",
        lambda g: g.first_or_default("none", lambda x: n(x) % 7 == 6),
    ),
    # last / last_or_default
    Variant("last()", "last", lambda g: g.last()),
    Variant("last(odd)", "last", lambda g: g.last(lambda x: n(x) % 2 == 1)),
    Variant("last(fails on 12)", "last", lambda g: g.last(passes(12))),
    Variant("last_or_default(-1, >15)", "last_or_default", lambda g: g.last_or_default(-1, lambda x: n(x) > 15)),
    Variant("last_or_default((0, 'd'))", "last_or_default", lambda g: g.last_or_default((0, "d"))),
    # single / single_or_default
    Variant("single()", "single", lambda g: g.single()),
    Variant("single(==3)", "single", lambda g: g.single(lambda x: n(x) == 3)),
    Variant("single(>18)", "single", lambda g: g.single(lambda x: n(x) > 18)),
    Variant("single(fails on 2, ==5)", "single", lambda g: g.single(lambda x: passes(2)(x) and n(x) == 5)),
    Variant("single_or_default(-2)", "single_or_default", lambda g: g.single_or_default(-2)),
    Variant(
        "single_or_default(-1, %10==7)",
        "single_or_default",
        lambda g: g.single_or_default(-1, lambda x: n(x) % 10 == 7),
    ),
    # element_at / element_at_or_default
    Variant("element_at(0)", "element_at", lambda g: g.element_at(0)),
    Variant("element_at(2)", "element_at", lambda g: g.element_at(2)),
    Variant("element_at_or_default(1, -1)", "element_at_or_default", lambda g: g.element_at_or_default(1, -1)),
    Variant("element_at_or_default(4, 'd')", "element_at_or_default", lambda g: g.element_at_or_default(4, "d")),
]
