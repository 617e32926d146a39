"""Queries are data: encoding, decoding, errors for what cannot be persisted, templates, what a registry allows,
deep queries. (Hostile stores through the engine and the CLI: test_hostile_store.py.)"""

from __future__ import annotations

import json
import math
import operator
import re
import sys
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import Query, from_iterable, return_value, throw
from reaqtive.engine.expressions import (
    STANDARD_FUNCTIONS,
    ForbiddenReferenceError,
    FunctionRegistry,
    MalformedExpressionError,
    UnpersistableQueryError,
    decode_query,
    encode_query,
    expression_from_json,
    expression_to_json,
    instantiate,
    referenced_modules,
    template_id,
    templatize,
)


def above_30(reading: float) -> bool:
    return reading > 30


def double(x: int) -> int:
    return x * 2


class SensorError(Exception):
    """A host's own exception type (registered by name to be persisted)."""


def round_trip(query: Query[object], functions: FunctionRegistry | None = None) -> Query[object]:
    registry = functions or FunctionRegistry(allow_modules=[__name__])
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
    assert f'"fn": "{__name__}:double"' in text


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


def test_error_types_are_named_through_the_registry_never_imported() -> None:
    from reaqtive.core.errors import BufferOverflowError

    assert encode_query(throw(ValueError("x")))["args"][0] == {"error": ["builtins:ValueError", ["x"]]}
    assert encode_query(throw(BufferOverflowError("full")))["args"][0] == {
        "error": ["reaqtive:BufferOverflowError", ["full"]]
    }
    # the import path stores written before error names existed still reads
    legacy = decode_query({"op": "throw", "args": [{"error": ["reaqtive.errors:BufferOverflowError", ["full"]]}]})
    assert isinstance(legacy.args[0], BufferOverflowError)
    with pytest.raises(UnpersistableQueryError, match="register_error"):
        encode_query(throw(SensorError("hot")))
    registry = FunctionRegistry()
    registry.register_error("myapp:SensorError", SensorError)
    encoded = encode_query(throw(SensorError("hot")), registry)
    assert encoded["args"][0] == {"error": ["myapp:SensorError", ["hot"]]}
    restored = decode_query(encoded, registry).args[0]
    assert type(restored) is SensorError and restored.args == ("hot",)
    with pytest.raises(ForbiddenReferenceError, match="'myapp:SensorError'") as refused:
        decode_query(encoded)  # another process that did not register it
    assert refused.value.kind == "error type" and refused.value.reference == "myapp:SensorError"
    with pytest.raises(ValueError, match="reserved"):
        registry.register_error("builtins:ValueError", SensorError)


def test_standard_functions_need_no_allowed_module() -> None:
    query = Query.stream("s").map(len).scan(0, operator.add).map(math.sqrt).map(str)
    encoded = encode_query(query, FunctionRegistry())
    assert decode_query(expression_from_json(expression_to_json(encoded))) == query
    assert "builtins:eval" not in STANDARD_FUNCTIONS and "builtins:getattr" not in STANDARD_FUNCTIONS
    assert referenced_modules(encoded) == set()


def test_an_import_path_the_registry_would_refuse_is_refused_at_encoding() -> None:
    query = Query.stream("s").filter(above_30)
    with pytest.raises(UnpersistableQueryError) as refused:
        encode_query(query, FunctionRegistry())
    message = str(refused.value)
    assert f"'{__name__}:above_30'" in message and "argument 1 of 'filter'" in message
    assert "register_function" in message and f"allow_modules=['{__name__}']" in message
    encoded = encode_query(query)  # no registry: encoded, not checked
    assert referenced_modules(encoded) == {__name__}
    with pytest.raises(ForbiddenReferenceError, match=re.escape(f"'{__name__}:above_30'")):
        decode_query(encoded)
    assert decode_query(encoded, FunctionRegistry(allow_modules=[__name__])) == query


def test_allowed_modules_exact_or_every_submodule() -> None:
    registry = FunctionRegistry(allow_modules=["myapp.rules", "tests.*"])
    assert registry.allows_module("myapp.rules") and not registry.allows_module("myapp")
    assert not registry.allows_module("myapp.rules.extra") and not registry.allows_module("myapp.rulesx")
    assert registry.allows_module("tests.engine") and registry.allows_module(__name__)
    assert not registry.allows_module("tests") and not registry.allows_module("testsuite.x")
    assert registry.allowed_modules() == ["myapp.rules", "tests.*"]
    registry.allow_module("myapp")
    assert registry.allows_module("myapp")
    assert registry.allowing(["other.*"]) is registry and registry.allows_module("other.x")
    for refused in ("builtins", "__main__", "builtins.*"):
        with pytest.raises(ValueError, match="never allowed"):
            registry.allow_module(refused)
    for malformed in ("", "*", "my app", "a..b", "os:system"):
        with pytest.raises(ValueError, match="not a module name"):
            registry.allow_module(malformed)
    assert FunctionRegistry(allow_modules="myapp").allowed_modules() == ["myapp"]  # one module, not its letters


def test_a_module_that_is_not_allowed_is_never_imported() -> None:
    assert "xml.dom.minidom" not in sys.modules  # a standard module nothing here imports
    text = '{"op": "map", "args": [{"stream": "s"}, {"fn": "xml.dom.minidom:parseString"}]}'
    with pytest.raises(ForbiddenReferenceError, match=re.escape("'xml.dom.minidom:parseString'")) as refused:
        decode_query(expression_from_json(text), FunctionRegistry(allow_modules=["xml.dom"]))
    assert refused.value.module == "xml.dom.minidom"
    assert "xml.dom.minidom" not in sys.modules


def chain(length: int) -> Query[Any]:
    query: Query[Any] = Query.stream("s")
    for _ in range(length):
        query = query.map(double)
    return query


@pytest.mark.parametrize("length", [400, 2_000])
def test_a_deep_chain_encodes_decodes_and_round_trips_through_templates_and_json(length: int) -> None:
    registry = FunctionRegistry(allow_modules=[__name__])
    query = chain(length)
    encoded = encode_query(query, registry)
    text = expression_to_json(encoded)
    assert text.count('"op":"map"') == length
    template, constants = templatize(expression_from_json(text))
    assert constants == [{"stream": "s"}]
    assert expression_to_json(instantiate(template, [{"stream": "t"}])) == text.replace('"s"', '"t"')
    restored = decode_query(instantiate(template, constants), registry)
    assert expression_to_json(encode_query(restored, registry)) == text
    depth = 0
    while restored.op == "map":
        assert restored.args[1] is double
        restored, depth = restored.args[0], depth + 1  # type: ignore[assignment]
    assert depth == length and restored == Query.stream("s")


def test_a_deep_chain_names_both_ends_of_where_it_is_wrong() -> None:
    text = expression_to_json(encode_query(chain(2_000)))
    with pytest.raises(ForbiddenReferenceError) as refused:
        decode_query(expression_from_json(text), where="subscription 'q://deep'")
    message = str(refused.value)
    assert message.startswith("subscription 'q://deep' > map argument 0 > ")
    assert "levels" in message and f"'{__name__}:double'" in message and len(message) < 600


def test_canonical_json_is_the_same_text_at_any_depth() -> None:
    from reaqtive.engine.expressions import _dump_iteratively, _load_iteratively

    value = {"b": [1, 2.5, None, True, "é\"", {"z": {}, "a": []}], "a": -(2**70), "c": 1e300}
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert _dump_iteratively(value) == text
    assert _load_iteratively(text) == value and _load_iteratively(text.encode()) == value
    for broken in ("{", "[1,]", '{"a" 1}', "[1 2]", "1 2", "", '{"a":1,}'):
        with pytest.raises(json.JSONDecodeError):
            _load_iteratively(broken)


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
        ('{"op": "map", "args": [{"fn": "no.such.module:f"}]}', "'no.such.module' is not allowed"),
        ('{"op": "throw", "args": [{"error": ["os:error", []]}]}', "error type 'os:error' is refused"),
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
    registry = FunctionRegistry(allow_modules=[__name__])
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


def test_an_allowed_module_that_cannot_be_imported_is_malformed() -> None:
    text = '{"op": "map", "args": [{"fn": "no_such_module_here:f"}]}'
    with pytest.raises(MalformedExpressionError, match="cannot be imported"):
        decode_query(expression_from_json(text), FunctionRegistry(allow_modules=["no_such_module_here"]))


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
