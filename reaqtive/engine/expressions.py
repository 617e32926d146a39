"""Queries are data: encode a :class:`~reaqtive.query.Query` as a plain, language-neutral tree and back.

The encoded form holds only JSON types (``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``), so it
can be stored as JSON or msgpack, read by other tools, and it never names a Python class. A node is
``{"op": "filter", "args": [...]}``; an argument is a plain JSON scalar or a one-key tagged object:

=====================  =================================================================================
tag                    meaning
=====================  =================================================================================
``{"q": node}``        a nested query (a source)
``{"fn": "m.n:f"}``    a function by import path (module, then qualified name); re-imported on decoding
``{"fn": "@name"}``    a function registered by name with a :class:`FunctionRegistry` (the engine's)
``{"stream": uri}``    a stream of the engine, by URI (``Query.stream(uri)`` in Python)
``{"list": [...]}``    a list; also ``tuple``, ``dict`` (as ``[[k, v], ...]``), ``set``
``{"int": "123..."}``  an int outside the 64-bit range
``{"float": "nan"}``   a float JSON cannot hold (``nan``, ``inf``, ``-inf``)
``{"bytes": "b64"}``   bytes, base64
``{"td": [d, s, us]}``  a timedelta
``{"dt": "iso"}``      an aware datetime (ISO 8601 with its offset)
``{"range": [a,b,c]}`` a range
``{"error": ["m:C", [...]]}``  an exception (for ``throw``): its class by import path and its args
``{"p": i}``           template parameter ``i`` (only in templates, see :func:`templatize`)
=====================  =================================================================================

Anything else (a lambda, a closure, a bound method, a live object) cannot be persisted: encoding raises
:class:`UnpersistableQueryError` naming the operator and the argument, so a query that cannot survive a restart is
refused when it is created, not when it is recovered.

**Templates.** Thousands of standing queries often differ only in constants ("sensor 7 above 30", "sensor 8 above
31"). :func:`templatize` replaces every constant by a parameter and returns the template (hashed by content) and
the constants; the engine stores each template once, reference-counted, and each query as its template id plus its
constants.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import math
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.errors import ReaqtiveError
from reaqtive.query import Query

__all__ = [
    "ExpressionError",
    "FunctionRegistry",
    "MalformedExpressionError",
    "UnpersistableQueryError",
    "decode_query",
    "encode_query",
    "expression_from_json",
    "expression_to_json",
    "instantiate",
    "template_id",
    "templatize",
]

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**64 - 1  # msgpack's uint64 is fine too

Encoded = Any  # a JSON-compatible value


class ExpressionError(ReaqtiveError):
    """Base of the errors about persisted query expressions."""


class UnpersistableQueryError(ExpressionError, TypeError):
    """A query holds something that cannot be persisted; the message names the operator and the argument."""


class MalformedExpressionError(ExpressionError, ValueError):
    """A stored expression cannot be decoded (damaged, or written by an incompatible version); the message says
    where in the expression."""


class FunctionRegistry:
    """Functions known by a stable name (``"@name"`` in expressions): a host registers the functions its queries
    use, so that a query can use a function that has no importable path (a closure, a partial) and so that renaming
    a module does not break stored queries. Thread-safe."""

    def __init__(self) -> None:
        self._by_name: dict[str, Callable[..., Any]] = {}
        self._by_id: dict[int, str] = {}
        self._lock = threading.Lock()

    def register(self, name: str, function: Callable[..., Any]) -> None:
        """Register ``function`` as ``name``. A name can be registered once (again with the same function is a
        no-op); names must not be empty or contain ``:`` (reserved for import paths)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a function name must be a non-empty str without ':', got {name!r}")
        if not callable(function):
            raise TypeError(f"register_function({name!r}, ...) needs a callable, got {type(function).__name__}")
        with self._lock:
            existing = self._by_name.get(name)
            if existing is not None and existing is not function:
                raise ValueError(f"function name {name!r} is already registered for {existing!r}")
            self._by_name[name] = function
            self._by_id[id(function)] = name

    def name_of(self, function: Callable[..., Any]) -> str | None:
        """The registered name of ``function``, if any."""
        with self._lock:
            name = self._by_id.get(id(function))
            if name is not None and self._by_name.get(name) is function:
                return name
            if hasattr(function, "__self__"):  # each access makes a new bound method: compare (self, function)
                for candidate, registered in self._by_name.items():
                    if hasattr(registered, "__self__") and registered == function:
                        return candidate
            return None

    def resolve(self, name: str) -> Callable[..., Any]:
        """The function registered as ``name``; :class:`MalformedExpressionError` if there is none."""
        with self._lock:
            function = self._by_name.get(name)
        if function is None:
            raise MalformedExpressionError(f"the expression uses function '@{name}', which is not registered")
        return function

    def names(self) -> list[str]:
        """The registered names, sorted."""
        with self._lock:
            return sorted(self._by_name)


_NO_FUNCTIONS: Final = FunctionRegistry()


# -- encoding --------------------------------------------------------------------------------------------------


def encode_query(query: Query[Any], functions: FunctionRegistry = _NO_FUNCTIONS) -> dict[str, Any]:
    """The persisted form of ``query``; raises :class:`UnpersistableQueryError` naming what cannot be persisted."""
    if not isinstance(query, Query):
        raise TypeError(f"encode_query needs a Query, got {type(query).__name__}")
    return _Encoder(functions).query(query, query.op)


class _Encoder:
    def __init__(self, functions: FunctionRegistry) -> None:
        self._functions = functions

    def query(self, query: Query[Any], where: str) -> dict[str, Any]:
        if query.op == "subscribable":
            raise UnpersistableQueryError(
                f"{where}: the query reads from a live object ({_describe(query.args[0])}), which cannot be "
                "persisted; read engine streams by URI with Query.stream(uri)"
            )
        args = [self.value(arg, f"{where}: argument {i} of {query.op!r}") for i, arg in enumerate(query.args)]
        return {"op": query.op, "args": args}

    def value(self, value: object, where: str) -> Encoded:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value if _INT64_MIN <= value <= _INT64_MAX else {"int": str(value)}
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, Query):
            if value.op == "stream":
                return {"stream": value.args[0]}
            return {"q": self.query(value, f"{where} > {value.op}")}
        if isinstance(value, (list, tuple, set, frozenset)):
            kind = {list: "list", tuple: "tuple", set: "set", frozenset: "set"}.get(type(value))
            if kind is None:
                raise UnpersistableQueryError(f"{where} is a {type(value).__name__}, which cannot be persisted")
            items = sorted(value, key=repr) if kind == "set" else value
            return {kind: [self.value(item, f"{where}[{i}]") for i, item in enumerate(items)]}
        if type(value) is dict:
            return {
                "dict": [[self.value(k, f"{where} key"), self.value(v, f"{where}[{k!r}]")] for k, v in value.items()]
            }
        if isinstance(value, bytes):
            return {"bytes": base64.b64encode(value).decode("ascii")}
        if type(value) is timedelta:
            return {"td": [value.days, value.seconds, value.microseconds]}
        if type(value) is datetime:
            if value.tzinfo is None:
                raise UnpersistableQueryError(f"{where} is a naive datetime; use an aware one (timezone.utc)")
            return {"dt": value.isoformat()}
        if type(value) is range:
            return {"range": [value.start, value.stop, value.step]}
        if isinstance(value, BaseException):
            return self.error(value, where)
        if callable(value):
            return {"fn": self.function(value, where)}
        raise UnpersistableQueryError(
            f"{where} is a {type(value).__name__} ({_describe(value)}), which cannot be persisted"
        )

    def function(self, function: Callable[..., Any], where: str) -> str:
        name = self._functions.name_of(function)
        if name is not None:
            return f"@{name}"
        path = _import_path(function)
        if path is None:
            raise UnpersistableQueryError(
                f"{where} is {_describe(function)}, which has no import path (a lambda, a nested function, a bound "
                "method or a partial); define it at module level, or register it with engine.register_function"
            )
        return path

    def error(self, error: BaseException, where: str) -> Encoded:
        path = _import_path(type(error))
        if path is None:
            raise UnpersistableQueryError(f"{where}: the exception class {type(error).__name__} is not importable")
        return {"error": [path, [self.value(a, f"{where} args[{i}]") for i, a in enumerate(error.args)]]}


def _import_path(obj: Any) -> str | None:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname or module == "__main__":
        return None
    try:
        resolved = _resolve_path(module, qualname)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if resolved is obj else None


def _resolve_path(module: str, qualname: str) -> Any:
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _describe(value: object) -> str:
    name = getattr(value, "__qualname__", None) or type(value).__name__
    text = f"<{name}>" if callable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- decoding --------------------------------------------------------------------------------------------------


def decode_query(data: Mapping[str, Any], functions: FunctionRegistry = _NO_FUNCTIONS) -> Query[Any]:
    """Re-create the query encoded by :func:`encode_query`. Raises :class:`MalformedExpressionError` naming the
    place in the expression that is wrong. Functions are re-imported (or looked up in ``functions``)."""
    return _Decoder(functions).query(data, "expression")


class _Decoder:
    def __init__(self, functions: FunctionRegistry) -> None:
        self._functions = functions

    def query(self, data: object, where: str) -> Query[Any]:
        if not (isinstance(data, Mapping) and isinstance(data.get("op"), str) and isinstance(data.get("args"), list)):
            raise MalformedExpressionError(
                f"{where}: expected a query node {{'op': str, 'args': list}}, got {data!r:.80}"
            )
        op = data["op"]
        args = tuple(self.value(arg, f"{where} > {op} argument {i}") for i, arg in enumerate(data["args"]))
        return Query(op, args)

    def value(self, data: object, where: str) -> object:
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        if not isinstance(data, Mapping) or not data:
            raise MalformedExpressionError(f"{where}: unexpected {type(data).__name__} {data!r:.60}")
        tag = next(iter(data))
        body = data[tag]
        try:
            if tag == "q":
                return self.query(body, where)
            if tag == "stream":
                return Query("stream", (str(body),))
            if tag == "fn":
                return self.function(str(body), where)
            if tag in ("list", "tuple", "set"):
                items = [self.value(item, f"{where}[{i}]") for i, item in enumerate(body)]
                return {"list": list, "tuple": tuple, "set": set}[tag](items)
            if tag == "dict":
                return {self.value(k, f"{where} key"): self.value(v, f"{where} value") for k, v in body}
            if tag == "int":
                return int(body)
            if tag == "float":
                return float(body)
            if tag == "bytes":
                return base64.b64decode(body, validate=True)
            if tag == "td":
                days, seconds, micros = body
                return timedelta(days=days, seconds=seconds, microseconds=micros)
            if tag == "dt":
                return datetime.fromisoformat(body)
            if tag == "range":
                return range(*body)
            if tag == "error":
                path, encoded_args = body
                error_type = _resolve_path(*str(path).split(":", 1))
                if not (isinstance(error_type, type) and issubclass(error_type, BaseException)):
                    raise MalformedExpressionError(f"{where}: {path!r} is not an exception class")
                return error_type(*[self.value(a, f"{where} args") for a in encoded_args])
        except ExpressionError:
            raise
        except Exception as error:
            raise MalformedExpressionError(f"{where}: cannot decode {tag!r} value {body!r:.60}: {error}") from error
        raise MalformedExpressionError(f"{where}: unknown tag {tag!r}")

    def function(self, reference: str, where: str) -> Callable[..., Any]:
        if reference.startswith("@"):
            return self._functions.resolve(reference[1:])
        module, _, qualname = reference.partition(":")
        try:
            function = _resolve_path(module, qualname)
        except (ImportError, AttributeError, ValueError) as error:
            raise MalformedExpressionError(f"{where}: function {reference!r} cannot be imported: {error}") from error
        if not callable(function):
            raise MalformedExpressionError(f"{where}: {reference!r} is not callable")
        return function  # type: ignore[no-any-return]


# -- JSON and templates ----------------------------------------------------------------------------------------


def expression_to_json(expression: Mapping[str, Any]) -> str:
    """Canonical JSON of an encoded expression (sorted keys, no spaces): stable bytes to hash and store."""
    return json.dumps(expression, sort_keys=True, separators=(",", ":"), allow_nan=False)


def expression_from_json(text: str | bytes) -> dict[str, Any]:
    """Parse :func:`expression_to_json` output; :class:`MalformedExpressionError` if it is not JSON of a node."""
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise MalformedExpressionError(f"stored expression is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise MalformedExpressionError(f"stored expression is not a query node: {data!r:.60}")
    return data


def templatize(expression: Mapping[str, Any]) -> tuple[dict[str, Any], list[Encoded]]:
    """Split an encoded expression into a template (its shape, operators and functions, with every constant
    replaced by a parameter ``{"p": i}``) and the list of constants. Streams count as constants: the same query
    over another stream shares the template."""
    constants: list[Encoded] = []

    def walk(node: Encoded) -> Encoded:
        if isinstance(node, dict) and "op" in node and "args" in node:
            return {"op": node["op"], "args": [walk(arg) for arg in node["args"]]}
        if isinstance(node, dict) and len(node) == 1:
            tag, body = next(iter(node.items()))
            if tag == "q":
                return {"q": walk(body)}
            if tag == "fn":
                return node
        constants.append(node)
        return {"p": len(constants) - 1}

    return walk(expression), constants


def instantiate(template: Mapping[str, Any], constants: list[Encoded]) -> dict[str, Any]:
    """The encoded expression a template and its constants stand for (the inverse of :func:`templatize`)."""

    def walk(node: Encoded) -> Encoded:
        if isinstance(node, dict) and "op" in node and "args" in node:
            return {"op": node["op"], "args": [walk(arg) for arg in node["args"]]}
        if isinstance(node, dict) and len(node) == 1:
            tag, body = next(iter(node.items()))
            if tag == "q":
                return {"q": walk(body)}
            if tag == "p":
                if not isinstance(body, int) or not 0 <= body < len(constants):
                    raise MalformedExpressionError(f"template parameter {body!r} out of range ({len(constants)} given)")
                return constants[body]
        return node

    result = walk(template)
    if not isinstance(result, dict):
        raise MalformedExpressionError("a template must be a query node")
    return result


def template_id(template: Mapping[str, Any]) -> str:
    """The content hash that identifies a template (sha256 of its canonical JSON, hex)."""
    return hashlib.sha256(expression_to_json(template).encode("utf-8")).hexdigest()
