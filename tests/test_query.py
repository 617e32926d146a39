"""Query expressions: immutable data, validated on construction, bound through the registry."""

from __future__ import annotations

import pytest

from reaqtive import (
    CallbackSubscriber,
    Query,
    SimpleSubject,
    UnknownOperatorError,
    from_iterable,
    register_operator,
    registered_operators,
)
from tests.support import Recorder


def double(x: int) -> int:
    return x * 2


def test_building_a_query_runs_nothing_and_records_names_and_arguments() -> None:
    consumed: list[int] = []

    def numbers() -> object:
        for n in range(3):
            consumed.append(n)
            yield n

    source = numbers()
    query = from_iterable(source).map(double)
    assert consumed == []
    assert query.op == "map" and query.args == (Query("from_iterable", (source,)), double)
    assert query.args[0].op == "from_iterable"  # type: ignore[attr-defined]


def test_queries_built_the_same_way_are_equal() -> None:
    data = [1, 2]
    assert from_iterable(data).map(double) == from_iterable(data).map(double)
    assert hash(from_iterable(data).map(double)) == hash(from_iterable([1, 2]).map(double))
    assert from_iterable(data).map(double) != from_iterable(data).filter(double)


def test_repr_reads_like_the_fluent_code() -> None:
    assert repr(from_iterable([1, 2]).map(double)) == "from_iterable([1, 2]).map(<double>)"


def test_a_query_can_be_run_many_times() -> None:
    query = from_iterable(range(3)).map(double)
    first, second = Recorder(initial=10), Recorder(initial=10)
    query.run(first)
    query.run(second)
    assert first.values == second.values == [0, 2, 4]


def test_run_accepts_callbacks() -> None:
    seen: list[int] = []
    done: list[bool] = []
    from_iterable([1, 2]).run(seen.append, on_complete=lambda: done.append(True), batch_size=1)
    assert seen == [1, 2] and done == [True]


def test_run_with_callback_subscriber_reports_errors_to_on_error() -> None:
    errors: list[BaseException] = []
    from_iterable([1, 0]).map(lambda x: 1 // x).run(CallbackSubscriber(on_error=errors.append))
    assert isinstance(errors[0], ZeroDivisionError)


def test_callback_subscriber_cancels_when_on_next_raises() -> None:
    subject = SimpleSubject[int]()
    errors: list[BaseException] = []

    def on_next(x: int) -> None:
        raise ValueError(f"cannot handle {x}")

    subject.as_query().run(on_next, on_error=errors.append)
    subject.on_next(1)
    subject.on_next(2)
    assert len(errors) == 1 and "1" in str(errors[0]) and subject.subscriber_count == 0


def test_unknown_operator_is_a_clear_error() -> None:
    with pytest.raises(UnknownOperatorError, match="'teleport'"):
        Query("teleport", ()).subscribe(Recorder())


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_operator("map")(lambda q, s: None)  # type: ignore[arg-type,return-value]


def test_registry_lists_the_operators() -> None:
    assert {"from_iterable", "map", "filter", "subscribable", "trace"} <= set(registered_operators())


def test_bad_arguments_fail_where_the_query_is_written() -> None:
    with pytest.raises(TypeError, match="iterable"):
        from_iterable(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Subscribable"):
        Query.from_subscribable([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="op must be"):
        Query("", ())


def test_top_level_functions_build_the_same_queries_as_the_static_methods() -> None:
    import reaqtive

    xs, ys = from_iterable([1, 2]), from_iterable([10])
    assert reaqtive.merge(xs, ys) == Query.merge(xs, ys)
    assert reaqtive.return_value(3) == Query.return_value(3)
    seen: list[int] = []
    reaqtive.combine_latest(xs, ys, selector=lambda a, b: a + b).run(seen.append)
    assert seen == [12]
    with pytest.raises(TypeError):
        reaqtive.merge()
