"""Queries are data: encoding, decoding, errors for what cannot be persisted, templates."""

from __future__ import annotations

import json
import math
import operator
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import Query, from_iterable, return_value, throw
from reaqtive.engine.expressions import (
    FunctionRegistry,
    MalformedExpressionError,
    UnpersistableQueryError,
    decode_query,
    encode_query,
    expression_from_json,
    expression_to_json,
    instantiate,
    template_id,
    templatize,
)


def above_30(reading: float) -> bool:
    return reading > 30


def double(x: int) -> int:
    return x * 2


def round_trip(query: Query[object], functions: FunctionRegistry | None = None) -> Query[object]:
    registry = functions or FunctionRegistry()
    text = expression_to_json(encode_query(query, registry))
    return decode_query(expression_from_json(text), registry)


def test_a_query_round_trips_through_json_to_an_equal_query() -> None:
    query = (
        Query.stream("iot://sensors")
        .filter(above_30)
        .map(double)
        .buffer(timedelta(minutes=1), 100)
        .take_until(datetime(2026, 1, 1, tzinfo=UTC))
    )
    restored = round_trip(query)
    assert restored == query
    assert restored.op == "take_until_time" and restored.args[1] == datetime(2026, 1, 1, tzinfo=UTC)


def test_the_encoded_form_holds_no_python_type_names() -> None:
    encoded = encode_query(from_iterable(range(3)).scan(0, operator.add).map(double))
    text = json.dumps(encoded)
    assert "Query" not in text and "builtins" not in text and "class" not in text
    assert '"fn": "_operator:add"' in text or '"fn": "operator:add"' in text


def test_functions_by_import_path_or_registered_name() -> None:
    registry = FunctionRegistry()
    threshold = partial(operator.lt, 40)  # no import path: must be registered
    with pytest.raises(UnpersistableQueryError, match="register it"):
        encode_query(Query.stream("s").filter(threshold), registry)
    registry.register("above_40", threshold)
    encoded = encode_query(Query.stream("s").filter(threshold), registry)
    assert encoded["args"][1] == {"fn": "@above_40"}
    assert decode_query(encoded, registry).args[1] is threshold


def test_a_lambda_is_refused_at_encoding_naming_the_operator_and_argument() -> None:
    with pytest.raises(UnpersistableQueryError) as failure:
        encode_query(Query.stream("s").map(double).filter(lambda x: x > 1))
    message = str(failure.value)
    assert "argument 1 of 'filter'" in message and "lambda" in message


def test_live_objects_are_refused_with_a_hint() -> None:
    from reaqtive import SimpleSubject

    with pytest.raises(UnpersistableQueryError, match=r"Query\.stream"):
        encode_query(SimpleSubject[int]().as_query().map(double))
    with pytest.raises(UnpersistableQueryError, match="naive datetime"):
        encode_query(return_value(datetime(2026, 1, 1)))


def test_throw_persists_its_exception_by_class_and_args() -> None:
    restored = round_trip(throw(KeyError("missing")))
    error = restored.args[0]
    assert isinstance(error, KeyError) and error.args == ("missing",)


constants = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
    | st.binary(max_size=10)
    | st.timedeltas()
    | st.datetimes(timezones=st.just(UTC)),
    lambda children: st.lists(children, max_size=3)
    | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(constants)
def test_any_constant_round_trips(value: object) -> None:
    restored = round_trip(return_value(value) if value is not None else return_value(0))
    assert restored.args[0] == (value if value is not None else 0)


def test_non_finite_floats_and_big_ints_round_trip() -> None:
    value = [float("inf"), float("-inf"), 2**100, -(2**90)]
    assert round_trip(return_value(value)).args[0] == value
    nan = round_trip(return_value(float("nan"))).args[0]
    assert isinstance(nan, float) and math.isnan(nan)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"op": "map", "args": [{"nope": 1}]}', "unknown tag 'nope'"),
        ('{"op": "map", "args": [{"fn": "no.such.module:f"}]}', "cannot be imported"),
        ('{"op": "map", "args": [{"fn": "@unknown"}]}', "not registered"),
        ('{"op": "map"}', "expected a query node"),
        ('{"op": "map", "args": [{"td": [1]}]}', "cannot decode 'td'"),
        ("[1, 2]", "not a query node"),
        ("{broken", "not valid JSON"),
    ],
)
def test_malformed_expressions_name_what_is_wrong(text: str, where: str) -> None:
    with pytest.raises(MalformedExpressionError, match=where):
        decode_query(expression_from_json(text))


def test_queries_differing_only_in_constants_share_a_template() -> None:
    registry = FunctionRegistry()
    first = encode_query(Query.stream("iot://sensors/7").map(double).take(5), registry)
    second = encode_query(Query.stream("iot://sensors/8").map(double).take(9), registry)
    template_a, constants_a = templatize(first)
    template_b, constants_b = templatize(second)
    assert template_id(template_a) == template_id(template_b)
    assert constants_a == [{"stream": "iot://sensors/7"}, 5]
    assert constants_b == [{"stream": "iot://sensors/8"}, 9]
    assert instantiate(template_a, constants_b) == second
    other = encode_query(Query.stream("iot://sensors/7").map(double).skip(5), registry)
    assert template_id(templatize(other)[0]) != template_id(template_a)


def test_template_parameter_out_of_range_is_malformed() -> None:
    with pytest.raises(MalformedExpressionError, match="out of range"):
        instantiate({"op": "take", "args": [{"p": 3}]}, [1])


def test_registry_refuses_conflicting_names() -> None:
    registry = FunctionRegistry()
    registry.register("f", double)
    registry.register("f", double)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("f", above_30)
    with pytest.raises(ValueError, match="':'"):
        registry.register("a:b", double)


def test_a_registered_bound_method_is_found_again() -> None:
    received: list[int] = []
    registry = FunctionRegistry()
    registry.register("collect", received.append)
    assert registry.name_of(received.append) == "collect", "a new bound method object, the same method"
    assert registry.name_of([].append) is None
