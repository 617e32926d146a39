"""``aggregate_by_key``'s ``sum`` and ``average`` over floats: exactly rounded (the exact sum of the window's values
rounded once), so the order of additions does not matter; ints stay exact ints; the special values' rules; the
state that holds an exact sum, and the state of the left fold before it (version 1)."""

from __future__ import annotations

import math
import operator
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import Engine
from reaqtive.operators import keyed_window
from reaqtive.operators.keyed_window import AggregateByKey, Hopping, Session, Tumbling
from reaqtive.operators.window_aggregates import ExactSum, add_exact, rounded, sum_exact
from reaqtive.state.codec import DEFAULT_CODEC
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from reaqtive.testing.notifications import OnNext

S: Final = timedelta(seconds=1)
INF: Final = math.inf
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def key_of(event: tuple[Any, Any]) -> Any:
    return event[0]


def value_of(event: tuple[Any, Any]) -> Any:
    return event[1]


def fold(values: list[Any]) -> Any:
    """The window's sum as the stage computes it: from the first value, ``add_exact`` each next one."""
    acc = values[0]
    for value in values[1:]:
        acc = add_exact(acc, value)
    return rounded(acc)


def reference(values: list[Any]) -> Any:
    """The exactly rounded sum, computed another way: with Fractions, the special values by their rules."""
    floats = [value for value in values if type(value) is float]
    if not floats:
        return sum(values)  # all ints: exact
    if any(math.isnan(value) for value in floats) or (INF in floats and -INF in floats):
        return math.nan
    if INF in floats or -INF in floats:
        return INF if INF in floats else -INF
    exact = sum((Fraction(value) for value in values), Fraction(0))
    if exact == 0:
        return -0.0 if all(type(value) is float and math.copysign(1.0, value) < 0 for value in values) else 0.0
    try:
        return float(exact)
    except OverflowError:
        return INF if exact > 0 else -INF


def same(a: Any, b: Any) -> bool:
    """Equal as the same value of the same type: NaN equals NaN, and zeros keep their sign."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    return bool(a == b)


any_floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
finite_floats = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)
# Values whose sum depends on the order of additions: magnitudes far apart, cancelling, subnormal, near overflow.
magnitudes = st.sampled_from([1.0, 0.1, 1e16, -1e16, 2.0**53, 1e308, -1e308, 5e-324, -5e-324, 2.0**-1022, 3.0,
                              -0.0, 0.0, 1e-16, 0.3])
values_lists = st.lists(st.one_of(magnitudes, finite_floats, any_floats, st.integers(-(2**70), 2**70)),
                        min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(values=values_lists, seed=st.integers(0, 2**32))
@example(values=[2**53 + 1, 1.0], seed=0)  # exact with big ints: not int-to-float first (that gives 2**53)
@example(values=[1e308, 1e308, -1e308], seed=0)  # an intermediate past the largest float: fsum's OverflowError
@example(values=[INF, -INF], seed=0)  # NaN, not fsum's ValueError
@example(values=[-0.0, -0.0], seed=0)  # -0.0, not fsum's 0.0
@example(values=[10**400, 1.0], seed=0)  # an int too large for a float, then a float: inf
@example(values=[INF, 10**400], seed=0)  # an infinity stays beside such an int
@example(values=[5e-324, 5e-324, 2.0**-1022], seed=0)  # subnormal
@example(values=[1e16, 1.0, 1.0], seed=0)  # the left fold gives 1e16
def test_the_sum_is_exact_then_rounded_once_in_any_order(values: list[Any], seed: int) -> None:
    expected = reference(values)
    assert same(fold(values), expected), (values, fold(values), expected)
    shuffled = values[:]
    random.Random(seed).shuffle(shuffled)
    assert same(fold(shuffled), expected), (shuffled, fold(shuffled), expected)
    floats = [float(value) for value in values if type(value) is float]
    if floats and len(floats) == len(values):
        assert same(rounded(sum_exact(floats, floats=True)), expected)  # the batch path's C sum
        if all(math.isfinite(value) for value in floats) and math.isfinite(expected) and expected != 0:
            try:
                with_fsum = math.fsum(floats)
            except OverflowError:
                return  # fsum's intermediate overflow: not a sum to compare
            assert with_fsum == expected  # CPython's fsum agrees where it does not raise


@pytest.mark.parametrize(("values", "expected"), [
    ([0.1] * 10, 1.0),  # the left fold gave 0.9999999999999999
    ([1, 2, 3], 6),
    ([2**64, 2**64], 2**65),
    ([1, 0.5], 1.5),
    ([-0.0], -0.0),
    ([-0.0, -0.0, -0.0], -0.0),
    ([-0.0, 0.0], 0.0),
    ([-0.0, 0], 0.0),
    ([1.0, -1.0], 0.0),
    ([math.nan, 1.0], math.nan),
    ([1.0, INF, 2.0], INF),
    ([-INF, 1, -INF], -INF),
    ([INF, 1.0, -INF, 3.0], math.nan),
    ([1.7e308, 1.7e308], INF),
    ([-1.7e308, -1.7e308, 1.7e308], -1.7e308),
])
def test_the_rules_of_each_case(values: list[Any], expected: Any) -> None:
    assert same(fold(values), expected)


def test_other_types_add_as_the_left_fold_did_and_fail_where_it_failed() -> None:
    assert fold([Decimal("0.1")] * 3) == Decimal("0.3")
    assert fold([Fraction(1, 3)] * 3) == 1
    assert fold(["a", "b"]) == "ab"
    exact = add_exact(0.1, 0.2)
    assert type(exact) is ExactSum
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'float' and 'NoneType'"):
        add_exact(exact, None)  # the same text as the left fold's ``0.30000000000000004 + None``
    with pytest.raises(TypeError, match=r"'NoneType' and 'float'"):
        add_exact(None, 1.0)


def test_an_exact_sum_is_saved_as_its_pair_and_a_forged_pair_is_refused() -> None:
    exact = add_exact(add_exact(1e16, 1.0), 1.0)
    loaded = DEFAULT_CODEC.decode_value(DEFAULT_CODEC.encode([exact]), "test")[0]
    assert type(loaded) is ExactSum and loaded == exact and rounded(loaded) == 1e16 + 2
    for forged in [ExactSum(1, 5), ExactSum(1, -2000)]:
        with pytest.raises(Exception, match="an exact sum must be"):
            DEFAULT_CODEC.decode_value(DEFAULT_CODEC.encode(forged), "test")


# -- in the stage ----------------------------------------------------------------------------------------------


def rows(window: Any, aggregate: str, values: list[Any]) -> list[Any]:
    scheduler = TestScheduler()
    script = [on_next(201 + index, ("k", value)) for index, value in enumerate(values)]
    xs = scheduler.create_hot_observable(*script, on_completed(201 + len(values)))
    messages = scheduler.start(lambda: xs.aggregate_by_key(key_of, window, aggregate, value_of)).messages
    return [message.value.value[3] for message in messages if isinstance(message.value, OnNext)]


ORDER_DEPENDENT: Final = [1e16, 1.0, 1.0, -1e16, 0.1, 0.2]


@pytest.mark.parametrize("window", [Tumbling(100 * S), Hopping(100 * S, 50 * S), Session(100 * S)],
                         ids=["tumbling", "hopping", "session"])
def test_every_window_kind_sums_and_averages_exactly(window: Any) -> None:
    expected = reference(ORDER_DEPENDENT)
    assert expected == 2.3 and sum(ORDER_DEPENDENT) == 0.30000000000000004  # the left fold lost the 2.0
    assert rows(window, "sum", ORDER_DEPENDENT)[0] == expected
    assert rows(window, "average", ORDER_DEPENDENT)[0] == expected / len(ORDER_DEPENDENT)  # the sum / count
    assert rows(window, "sum", [3, 4, 2**70])[0] == 7 + 2**70  # ints stay ints
    assert math.isnan(rows(window, "sum", [INF, 1.0, -INF])[0])


def test_a_window_holding_an_exact_sum_survives_a_checkpoint_anywhere() -> None:
    script = [on_next(201 + i, (k, v)) for i, (k, v) in enumerate(
        [("a", 1e16), ("b", 0.1), ("a", 1.0), ("b", 0.2), ("a", 1.0), ("b", 3), ("a", -1e16), ("b", INF)])]
    assert_checkpoint_anywhere(
        lambda xs: xs.aggregate_by_key(key_of, Tumbling(5 * S), "sum", value_of), [*script, on_completed(230)])


# -- version 1 (the left fold's state) -------------------------------------------------------------------------


def run_engine(path: Path, values: list[float], *, version_1: bool) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if version_1:  # version 1: the left fold (``acc + value``), its float sum saved as the float
            patch.setattr(AggregateByKey, "version", (1,))
            patch.setattr(keyed_window, "add_exact", operator.add)
        with Engine(path, allow_modules=[__name__], start=T0) as engine:
            if version_1:
                engine.create_stream("raw")
                query = Query.stream("raw").aggregate_by_key(key_of, Tumbling(timedelta(hours=1)), "sum", value_of)
                engine.create_subscription("q", query)
            engine.append_many("raw", [(("k", value), T0) for value in values])
            engine.process()
            engine.checkpoint()


def test_state_saved_by_version_1_loads_and_goes_on_from_its_float_sum(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    # Version 1 folded left: 1e16 + 1.0 + 1.0 is 1e16 (each 1.0 lost to rounding); saved as the float 1e16.
    run_engine(path, [1e16, 1.0, 1.0], version_1=True)
    with Engine(path, allow_modules=[__name__]) as engine:  # version 2 loads it
        engine.append("raw", ("k", -1e16), T0)
        engine.process()
        engine.advance_time(T0 + timedelta(hours=2))
        (output,) = engine.outputs("q")
    # It goes on exactly from the saved 1e16 (the values before are gone): 0.0, where a run of version 2 from the
    # start gives 2.0.
    assert output.value[3] == 0.0
    assert reference([1e16, 1.0, 1.0, -1e16]) == 2.0


def engine_sums(path: Path, stops: list[tuple[int, bool]]) -> list[tuple[int, Any]]:
    """The durable sink of a standing float ``average`` per key over 1,500 events whose sums are exact only as
    exact sums; at each ``(events, checkpoint)`` of ``stops`` the engine processes that many more events,
    checkpoints (or not: they are replayed) and is closed and reopened, as after a crash."""
    values = [1e16, 0.1, -1e16, 0.7, 3, 1.0, 2.0**-1070, -0.0]
    engine = Engine(path, allow_modules=[__name__], start=T0)
    engine.create_stream("raw")
    query = Query.stream("raw").aggregate_by_key(key_of, Tumbling(timedelta(seconds=20)), "average", value_of)
    engine.create_subscription("q", query)
    engine.append_many("raw", [((f"k{i % 7}", values[i * 5 % 8]), T0 + timedelta(seconds=i // 10))
                               for i in range(1500)])
    for events, checkpoint in stops:
        engine.process(max_events=events)
        if checkpoint:
            engine.checkpoint()
        engine.close()
        engine = Engine(path, allow_modules=[__name__])
    engine.process()
    engine.advance_time(T0 + timedelta(hours=1))
    rows = [(output.seq, output.value) for output in engine.outputs("q")]
    engine.close()
    return rows


def test_exact_sums_recover_from_two_crashes_as_an_uninterrupted_run(tmp_path: Path) -> None:
    expected = engine_sums(tmp_path / "oracle.db", [])
    assert len(expected) > 50 and any(value[3] not in (0.0, 1e16) for _, value in expected)
    assert engine_sums(tmp_path / "crashed.db", [(400, True), (333, False), (500, True), (7, False)]) == expected
