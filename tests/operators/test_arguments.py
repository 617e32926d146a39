"""Binding checks a query node's arguments: a forged or damaged expression (one that did not come through the
fluent builders, e.g. decoded from a store) gets an OperatorArgumentError naming the operator and the argument,
also under ``python -O``, never an empty AssertionError or a later, unrelated failure."""

from __future__ import annotations

import operator
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reaqtive.engine  # noqa: F401  (registers "stream" and "egress")
from reaqtive import OperatorArgumentError, Query, from_iterable
from reaqtive.core.binding import registered_operators
from reaqtive.core.subscribers import CallbackSubscriber
from reaqtive.operators.keyed_window import Fold, Hopping, Session, Tumbling

SOURCE = from_iterable([1, 2])


def reaqtive_operators() -> list[str]:
    """reaqtive's own operators (another package's, under a namespace, may be registered too: they test
    themselves)."""
    return [op for op in registered_operators() if ":" not in op]


SECOND = timedelta(seconds=1)
AT = datetime(2030, 1, 1, tzinfo=UTC)


def _fn(*args: object) -> object:
    return args[0] if args else 1


# One valid expression per shape of every registered operator, built by the fluent builders where there is one.
VALID: dict[str, Query[Any]] = {
    "aggregate": SOURCE.aggregate(operator.add),
    "aggregate+seed": SOURCE.aggregate(operator.add, 0),
    "aggregate_by_key": SOURCE.aggregate_by_key(_fn, Tumbling(SECOND)),
    "aggregate_by_key+hopping": SOURCE.aggregate_by_key(_fn, Hopping(2 * SECOND, SECOND), Fold(0, operator.add), _fn),
    "aggregate_by_key+session": SOURCE.aggregate_by_key(_fn, Session(SECOND), "average", origin=AT),
    "all": SOURCE.all(bool),
    "any": SOURCE.any(),
    "average": SOURCE.average(),
    "buffer": SOURCE.buffer(2),
    "buffer+skip": SOURCE.buffer(2, 1),
    "buffer_time": SOURCE.buffer(SECOND),
    "buffer_time+shift": SOURCE.buffer(SECOND, 2 * SECOND),
    "buffer_time_or_count": SOURCE.buffer(SECOND, 3),
    "combine_latest": SOURCE.combine_latest(SOURCE, _fn),
    "combine_latest+3": SOURCE.combine_latest(SOURCE, SOURCE, _fn),
    "contains": SOURCE.contains(1),
    "count": SOURCE.count(),
    "debounce": SOURCE.debounce(SECOND),
    "debounce+selector": SOURCE.debounce(lambda x: SOURCE),
    "default_if_empty": SOURCE.default_if_empty(0),
    "delay_subscription": SOURCE.delay_subscription(SECOND),
    "distinct": SOURCE.distinct(),
    "distinct+comparer": SOURCE.distinct(comparer=operator.eq),
    "distinct_until_changed": SOURCE.distinct_until_changed(),
    "do": SOURCE.do(print),
    "egress": Query("egress", (SOURCE, "reaqtive://out")),
    "element_at": SOURCE.element_at(1),
    "element_at_or_default": SOURCE.element_at_or_default(1, 0),
    "empty": Query.empty(),
    "filter": SOURCE.filter(bool),
    "filter_indexed": SOURCE.filter_indexed(_fn),
    "finally_action": SOURCE.finally_action(_fn),
    "first": SOURCE.first(),
    "first_or_default": SOURCE.first_or_default(0),
    "flat_map": SOURCE.flat_map(lambda x: SOURCE, max_concurrent=2),
    "from_iterable": SOURCE,
    "group_by": SOURCE.group_by(_fn, max_groups=3),
    "group_by+expire": SOURCE.group_by(_fn, expire_after=SECOND),
    "ignore_elements": SOURCE.ignore_elements(),
    "interval": Query.interval(SECOND),
    "is_empty": SOURCE.is_empty(),
    "last": SOURCE.last(),
    "last_or_default": SOURCE.last_or_default(0),
    "map": SOURCE.map(_fn),
    "map_indexed": SOURCE.map_indexed(_fn),
    "max": SOURCE.max(),
    "merge": SOURCE.merge(SOURCE),
    "merge+3": SOURCE.merge(SOURCE, SOURCE),
    "merge_all": SOURCE.map(lambda x: SOURCE).merge_all(2),
    "min": SOURCE.min(),
    "never": Query.never(),
    "retry": SOURCE.retry(),
    "retry+count": SOURCE.retry(2),
    "return_value": Query.return_value(1),
    "sample": SOURCE.sample(SOURCE),
    "scan": SOURCE.scan(operator.add),
    "scan+seed": SOURCE.scan(0, operator.add),
    "sequence_equal": SOURCE.sequence_equal(SOURCE),
    "single": SOURCE.single(),
    "single_or_default": SOURCE.single_or_default(0),
    "skip": SOURCE.skip(1),
    "skip_duration": SOURCE.skip(SECOND),
    "skip_until": SOURCE.skip_until(SOURCE),
    "skip_until_time": SOURCE.skip_until(AT),
    "skip_while": SOURCE.skip_while(bool),
    "skip_while_indexed": SOURCE.skip_while_indexed(_fn),
    "start_with": SOURCE.start_with(0, 1),
    "stream": Query.stream("reaqtive://in"),
    "subscribable": Query.from_subscribable(SOURCE),
    "sum": SOURCE.sum(),
    "switch_latest": SOURCE.switch_latest(lambda x: SOURCE),
    "take": SOURCE.take(1),
    "take_duration": SOURCE.take(SECOND),
    "take_until": SOURCE.take_until(SOURCE),
    "take_until_time": SOURCE.take_until(AT),
    "take_while": SOURCE.take_while(bool, inclusive=True),
    "take_while_indexed": SOURCE.take_while_indexed(_fn),
    "throw": Query.throw(ValueError("boom")),
    "timer": Query.timer(SECOND),
    "timer+period": Query.timer(AT, SECOND),
    "to_list": SOURCE.to_list(),
    "named": SOURCE.named("counts"),
    "trace": SOURCE.trace("label", _fn),
    "window": SOURCE.window(2),
    "window+skip": SOURCE.window(2, 1),
    "window_time": SOURCE.window(SECOND),
    "window_time+shift": SOURCE.window(SECOND, 2 * SECOND),
    "window_time_or_count": SOURCE.window(SECOND, 3),
}

# Arguments that take any value: no forged value is wrong there.
ANY_VALUE = {("aggregate+seed", 3)}

# Values a damaged or forged expression might hold where another belongs.
JUNK: list[object] = [
    object(),
    None,
    "junk",
    -1,
    0,
    True,
    2.5,
    timedelta(-1),
    timedelta(0),
    datetime(2030, 1, 1),  # naive
    _fn,
    SOURCE,
]


def _bind(query: Query[Any]) -> None:
    handle = query.subscribe(CallbackSubscriber(lambda value: None))
    handle.dispose()


def _ops_and_positions() -> list[tuple[str, int]]:
    return [(label, index) for label, query in VALID.items() for index in range(len(query.args))]


def test_the_examples_cover_every_registered_operator_and_bind() -> None:
    assert {query.op for query in VALID.values()} == set(reaqtive_operators())
    for query in VALID.values():
        _bind(query)


@pytest.mark.parametrize(("label", "index"), _ops_and_positions())
def test_a_forged_argument_is_refused_at_bind_with_an_error_naming_the_operator_and_the_argument(
    label: str, index: int
) -> None:
    valid = VALID[label]
    refused = 0
    for junk in JUNK:
        args = list(valid.args)
        args[index] = junk
        try:
            _bind(Query(valid.op, tuple(args)))
        except OperatorArgumentError as error:
            assert error.op == valid.op and error.index == index, str(error)
            assert str(error).startswith(f"operator {valid.op!r}: args[{index}] ({error.name}) must be ")
            refused += 1
    assert refused > 0 or (label, index) in ANY_VALUE


@pytest.mark.parametrize("label", list(VALID))
def test_a_wrong_number_of_arguments_is_refused_at_bind_naming_the_operator(label: str) -> None:
    valid = VALID[label]
    with pytest.raises(OperatorArgumentError, match=f"^operator {valid.op!r}") as raised:
        _bind(Query(valid.op, (*valid.args, object(), object())))  # more than the longest form takes
    assert raised.value.op == valid.op
    if valid.args:
        with pytest.raises(OperatorArgumentError, match=f"^operator {valid.op!r} takes ") as raised:
            _bind(Query(valid.op, ()))
        assert raised.value.index is None


_ANYTHING = st.one_of(
    st.sampled_from(JUNK),
    st.integers(-3, 3),
    st.text(max_size=3),
    st.timedeltas(),
    st.datetimes(timezones=st.just(UTC)),
    st.lists(st.integers(), max_size=2).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(sorted(reaqtive_operators())), args=st.lists(_ANYTHING, max_size=6))
def test_any_forged_expression_binds_or_gets_the_typed_error(op: str, args: list[object]) -> None:
    try:
        _bind(Query(op, tuple(args)))
    except OperatorArgumentError as error:
        assert error.op == op


def test_the_message_says_what_was_expected_and_what_was_found() -> None:
    cases: list[tuple[Query[Any], str]] = [
        (Query("take", (SOURCE, -1)), "operator 'take': args[1] (count) must be an int >= 0, got int -1"),
        (
            Query("take_duration", (SOURCE, "10s")),
            "operator 'take_duration': args[1] (duration) must be a timedelta >= 0, got str '10s'",
        ),
        (Query("map", (SOURCE, "f")), "operator 'map': args[1] (selector) must be callable, got str 'f'"),
        (
            Query("buffer_time", (SOURCE, SECOND, timedelta(0))),
            "operator 'buffer_time': args[2] (shift) must be a positive timedelta, got timedelta "
            "datetime.timedelta(0)",
        ),
        (Query("map", (SOURCE,)), "operator 'map' takes 2 arguments (source, selector), got 1: (Query "),
    ]
    for query, message in cases:
        with pytest.raises(OperatorArgumentError) as raised:
            _bind(query)
        assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (Query("do", (SOURCE, None, None, None)), "operator 'do': args[1] (on_next) must be callable when on_error"),
        (Query("named", (SOURCE, "a b")), "operator 'named': args[1] (name) must be a name of 1 to 100 letters"),
        (Query("window_time", (SOURCE, SECOND, timedelta(days=4_000_000))), "operator 'window_time': args[2] (shift)"),
        (Query("buffer_time", (SOURCE, SECOND, timedelta(days=4_000_000))), "operator 'buffer_time': args[2] (shift)"),
    ],
    ids=["do-no-callback", "named-pattern", "window-long-shift", "buffer-long-shift"],
)
def test_a_record_checks_across_its_fields_after_each_fields_own_check(query: Query[Any], message: str) -> None:
    with pytest.raises(OperatorArgumentError) as raised:
        _bind(query)
    assert str(raised.value).startswith(message)


def test_the_argument_error_is_a_type_error_and_a_value_error_like_the_builders_errors() -> None:
    with pytest.raises(TypeError):
        _bind(Query("map", (SOURCE, 3)))
    with pytest.raises(ValueError):
        _bind(Query("take", (SOURCE, -1)))


def test_forged_arguments_are_refused_under_python_dash_o() -> None:
    script = textwrap.dedent(
        """
        import reaqtive.engine
        from reaqtive import OperatorArgumentError, Query
        from reaqtive.core.binding import registered_operators
        from reaqtive.core.subscribers import CallbackSubscriber

        assert not __debug__, "run with -O"
        refused = []
        for op in registered_operators():
            try:
                Query(op, (object(),) * 7).subscribe(CallbackSubscriber(print))
            except OperatorArgumentError as error:
                assert error.op == op
                refused.append(op)
        print(len(refused), len(registered_operators()))
        """
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-O", "-c", script], capture_output=True, text=True, cwd=root, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    refused, total = result.stdout.split()
    assert refused == total
