"""Helpers shared by the adversarial checkpoint-anywhere sweeps (tests/operators/test_adversarial_*.py): drawn
bounded demand, drawn input scripts and the ticks to restart at."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from reaqtive.testing import on_completed, on_error, on_next
from reaqtive.testing.checkpoint import Demand


def scripts(gaps: list[int], tail: tuple[int, int]) -> st.SearchStrategy[list[Any]]:
    """Up to 8 elements (0, 1, ...) at increasing ticks after the subscription (200), each ``gaps`` after the one
    before (0: several at one tick), then, ``tail`` ticks after the last, a completion, an error or nothing."""

    @st.composite
    def drawn(draw: st.DrawFn) -> list[Any]:
        tick, script = 200, []
        for value in range(draw(st.integers(0, 8))):
            tick += draw(st.sampled_from(gaps))
            script.append(on_next(max(tick, 201), value))
        end = draw(st.sampled_from(["complete", "error", "none"]))
        tick = max(tick, 201) + draw(st.integers(*tail))
        if end == "complete":
            script.append(on_completed(tick))
        elif end == "error":
            script.append(on_error(tick, ValueError("boom")))
        return script

    return drawn()


def demands(last_request: int) -> st.SearchStrategy[Demand | None]:
    """Unbounded (``None``), or a drawn bounded demand: an initial request, a batch after each element and up to
    three scripted requests at ticks from the subscription (200) to ``last_request``."""
    return st.one_of(
        st.none(),
        st.builds(Demand, initial=st.integers(0, 2), batch=st.integers(0, 2),
                  requests=st.lists(st.tuples(st.integers(200, last_request), st.integers(1, 3)), max_size=3)
                  .map(lambda pairs: tuple(sorted(pairs)))),
    )


def restarts(script: list[Any], demand: Demand | None) -> set[int]:
    """Where to restart: the subscription, every input and scripted request, and the tick after each (not every
    output: a short span over a long silence emits hundreds, and a restart at each costs quadratic time)."""
    ticks = {200} | {m.time for m in script} | {t for t, _ in (demand.requests if demand is not None else ())}
    return ticks | {t + 1 for t in ticks}
