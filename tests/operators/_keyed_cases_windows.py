"""Variants of the keyed differential test for windows inside groups (see ``_keyed_cases.py``):
``window(count[, skip]).flat_map(...)`` and ``window(duration).flat_map(...)`` with inner queries of keyed steps
(their op is ``flat_map``, whose keyed step is the window and the ``flat_map`` over it), and ``buffer(duration)``.

Elements come every 3 ticks (a tick is a second); the time windows last a few ticks, so idle keys close empty
windows (an empty window's ``average()`` fails the query, its ``count()`` is 0). An earlier variant may hand
these any value, so every function tolerates any value. :data:`TIMED` are the variants with a clock: a chain
holds at most one of them (two keep the general path, as does ``expire_after`` with one).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.operators._keyed_cases import Variant, add_ints, fails_on, small


def _secs(n: int) -> timedelta:
    return timedelta(seconds=n)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _tally(acc: Any, x: Any) -> Any:
    return (acc[0] + 1, small(acc[1] + x) if _is_int(x) else acc[1])


COUNT_VARIANTS: list[Variant] = [
    Variant("window(2).flat_map(to_list)", "flat_map", lambda g: g.window(2).flat_map(lambda w: w.to_list())),
    Variant("window(3).flat_map(count)", "flat_map", lambda g: g.window(3).flat_map(lambda w: w.count())),
    Variant("window(2, 1).flat_map(scan)", "flat_map", lambda g: g.window(2, 1).flat_map(lambda w: w.scan(add_ints))),
    Variant("window(1, 3).flat_map(map)", "flat_map", lambda g: g.window(1, 3).flat_map(lambda w: w.map(small))),
    Variant("window(3, 2).flat_map(first)", "flat_map", lambda g: g.window(3, 2).flat_map(lambda w: w.first())),
    Variant(
        "window(2).flat_map(map fails on 7)", "flat_map", lambda g: g.window(2).flat_map(lambda w: w.map(fails_on(7)))
    ),
    Variant(
        "window(4).flat_map(window(2).flat_map(count))",
        "flat_map",
        lambda g: g.window(4).flat_map(lambda w: w.window(2).flat_map(lambda v: v.count())),
    ),
    Variant(
        "window(2).flat_map(with key)",
        "flat_map",
        lambda g: g.window(2).flat_map(lambda w: w.map(lambda x: (g.key, x)).take(1)),
    ),
]

TIMED: list[Variant] = [
    Variant("window(5s).flat_map(count)", "flat_map", lambda g: g.window(_secs(5)).flat_map(lambda w: w.count())),
    Variant(
        "window(7s).flat_map(tally).filter(non-empty)",
        "flat_map",
        lambda g: g.window(_secs(7)).flat_map(lambda w: w.aggregate(_tally, (0, 0))).filter(lambda t: t[0] > 0),
    ),
    Variant(
        "window(10s).flat_map(to_list)", "flat_map", lambda g: g.window(_secs(10)).flat_map(lambda w: w.to_list())
    ),
    Variant("window(4s).flat_map(average)", "flat_map", lambda g: g.window(_secs(4)).flat_map(lambda w: w.average())),
    Variant(
        "window(6s).flat_map(scan fails on 4 .take(2))",
        "flat_map",
        lambda g: g.window(_secs(6)).flat_map(
            lambda w: w.scan(0, lambda a, x: 1 // 0 if x == 4 else a + 1).take(2)
        ),
    ),
    Variant("buffer(4s)", "buffer_time", lambda g: g.buffer(_secs(4))),
    Variant("buffer(7s).map(len)", "buffer_time", lambda g: g.buffer(_secs(7)).map(len)),
    Variant(
        "window(9s).flat_map(first_or_default with key)",
        "flat_map",
        lambda g: g.window(_secs(9)).flat_map(lambda w: w.map(lambda x: (g.key, x)).first_or_default(-1)),
    ),
]

VARIANTS: list[Variant] = [*COUNT_VARIANTS, *TIMED]
