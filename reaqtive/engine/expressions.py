"""Queries are data: encode a :class:`~reaqtive.fluent.query.Query` as a plain, language-neutral tree and back.

The encoded form holds only JSON types (``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``None``), so it
can be stored as JSON or msgpack, read by other tools, and it never names a Python class. A node is
``{"op": "filter", "args": [...]}``; an argument is a plain JSON scalar or a one-key tagged object:

=====================  =================================================================================
tag                    meaning
=====================  =================================================================================
``{"q": node}``        a nested query (a source)
``{"fn": "@name"}``    a function registered by name with a :class:`FunctionRegistry` (the engine's)
``{"fn": "m.n:f"}``    a function by import path (module, then qualified name): a standard function
                       (``builtins:len``, ``_operator:add``, ``math:sqrt``), or one defined in a module
                       the registry allows (``FunctionRegistry(allow_modules=["m.n"])``)
``{"stream": uri}``    a stream of the engine, by URI (``Query.stream(uri)`` in Python)
``{"list": [...]}``    a list; also ``tuple``, ``dict`` (as ``[[k, v], ...]``), ``set``
``{"int": "123..."}``  an int outside the 64-bit range
``{"float": "nan"}``   a float JSON cannot hold (``nan``, ``inf``, ``-inf``)
``{"bytes": "b64"}``   bytes, base64
``{"td": [d, s, us]}``  a timedelta
``{"dt": "iso"}``      an aware datetime (ISO 8601 with its offset)
``{"range": [a,b,c]}`` a range
``{"error": [n, [...]]}``  an exception (for ``throw``): its type's registered name and its args
``{"p": i}``           template parameter ``i`` (only in templates, see :func:`templatize`)
=====================  =================================================================================

Anything else (a lambda, a closure, a bound method, a live object) cannot be persisted: encoding raises
:class:`UnpersistableQueryError` naming the operator and the argument, so a query that cannot survive a restart is
refused when it is created, not when it is recovered.

**A stored expression is data, never code.** Decoding resolves every reference through a
:class:`FunctionRegistry` and imports nothing the host did not allow: a function is one the host registered by
name, one of a fixed set of standard pure functions (:data:`STANDARD_FUNCTIONS`), or a function *defined in* a
module the host allowed; an error type is a built-in exception, one of reaqtive's own errors, or one the host
registered (:meth:`FunctionRegistry.register_error`). Anything else raises :class:`ForbiddenReferenceError`
naming the reference and where it is, before any module is imported. ``docs/engine.md`` ("Threat model: store
files") explains what this protects against.

**Templates.** Thousands of standing queries often differ only in constants ("sensor 7 above 30", "sensor 8 above
31"). :func:`templatize` replaces every constant by a parameter and returns the template (hashed by content) and
the constants; the engine stores each template once, reference-counted, and each query as its template id plus its
constants.

**Deep queries.** Encoding, decoding, templates and JSON walk the tree with explicit stacks, not recursion: a chain
of thousands of operators works like a short one.
"""

from __future__ import annotations

import base64
import builtins
import functools
import hashlib
import importlib
import json
import math
import operator
import re
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.core.errors import ReaqtiveError
from reaqtive.engine.schemas import Schema, make_schema
from reaqtive.fluent.query import Query

__all__ = [
    "STANDARD_FUNCTIONS",
    "ExpressionError",
    "ForbiddenReferenceError",
    "FunctionRegistry",
    "MalformedExpressionError",
    "UnpersistableQueryError",
    "decode_query",
    "encode_query",
    "expression_from_json",
    "expression_to_json",
    "instantiate",
    "referenced_modules",
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


class ForbiddenReferenceError(MalformedExpressionError):
    """A stored expression names a function or an error type this process does not allow: not registered, in a
    module that is not allowed, or a path that does not lead to something defined in its module. Nothing was
    imported. The message names the reference and where it is in the expression; ``reference``, ``module`` (the
    module it names, if any) and ``kind`` (``"function"`` or ``"error type"``) say the same as data."""

    def __init__(self, message: str, *, reference: str = "", module: str | None = None,
                 kind: str = "function") -> None:
        super().__init__(message)
        self.reference = reference
        self.module = module
        self.kind = kind


# -- standard functions and error types: known without importing anything ---------------------------------------

_STANDARD_BUILTINS: Final = (
    abs, all, any, bool, bytes, chr, dict, divmod, float, frozenset, int, len, list, max, min, ord, pow, repr,
    round, set, sorted, str, sum, tuple,
)
_STANDARD_OPERATORS: Final = (
    "abs", "add", "and_", "concat", "contains", "countOf", "eq", "floordiv", "ge", "getitem", "gt", "index",
    "indexOf", "inv", "invert", "is_", "is_not", "le", "lshift", "lt", "matmul", "mod", "mul", "ne", "neg", "not_",
    "or_", "pos", "pow", "rshift", "sub", "truediv", "truth", "xor",
)


def _standard_functions() -> dict[str, Callable[..., Any]]:
    table: dict[str, Callable[..., Any]] = {}
    for function in _STANDARD_BUILTINS:
        table[f"builtins:{function.__qualname__}"] = function
    for name in _STANDARD_OPERATORS:
        function = getattr(operator, name)
        table[f"{function.__module__}:{function.__qualname__}"] = function  # "_operator:add" in CPython
        table[f"operator:{name}"] = function
    for name, function in vars(math).items():
        if not name.startswith("_") and callable(function):
            table[f"math:{name}"] = function
    return table


STANDARD_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = types.MappingProxyType(_standard_functions())
"""Pure functions every registry knows by import path without allowing a module: selected built-ins (``len``,
``max``, ``sorted``, ``str``, ...), the arithmetic and comparison functions of :mod:`operator`, and :mod:`math`.
Not ``eval``, ``open``, ``getattr`` or anything else that reaches beyond its arguments."""

_STANDARD_PATHS: Final[dict[int, str]] = {id(fn): path for path, fn in reversed(list(STANDARD_FUNCTIONS.items()))}

_REAQTIVE_ERROR_MODULES: Final = (
    "reaqtive.core.errors", "reaqtive.state.state_errors", "reaqtive.engine.engine_errors", "reaqtive.engine.readers",
    "reaqtive.engine.database", "reaqtive.engine.outbox", __name__,
)
_RENAMED_ERROR_MODULES: Final = {
    # modules renamed after stores were written with their import paths: the old path still reads
    "reaqtive.core.errors": "reaqtive.errors",
    "reaqtive.state.state_errors": "reaqtive.state.errors",
    "reaqtive.engine.engine_errors": "reaqtive.engine.errors",
    "reaqtive.engine.readers": "reaqtive.engine.streams",
    "reaqtive.engine.database": "reaqtive.engine.store",
}


@functools.cache
def _standard_errors() -> tuple[dict[str, type[BaseException]], dict[type[BaseException], str]]:
    """Error types known by stable names: every built-in ``Exception`` class (``"builtins:ValueError"``) and
    reaqtive's own errors (``"reaqtive:RecoveryError"``, also read under the import path older stores hold).
    Built once, on first use, from a fixed list of modules (reaqtive's own; nothing named by a store)."""
    by_name: dict[str, type[BaseException]] = {}
    names: dict[type[BaseException], str] = {}
    for name, value in vars(builtins).items():
        if isinstance(value, type) and issubclass(value, Exception):
            by_name[f"builtins:{name}"] = value
            names[value] = f"builtins:{value.__qualname__}"
    for module_name in _REAQTIVE_ERROR_MODULES:
        try:
            module = importlib.import_module(module_name)  # a fixed name of our own, never one read from a store
        except ModuleNotFoundError:  # pragma: no cover - a module of the list renamed: its errors go unnamed
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Exception) and value.__module__ == module_name
                    and not value.__name__.startswith("_")):
                stable = f"reaqtive:{value.__qualname__}"
                if stable in by_name and by_name[stable] is not value:
                    raise RuntimeError(f"two reaqtive error types are named {value.__qualname__}")
                by_name[stable] = value
                by_name[f"{module_name}:{value.__qualname__}"] = value
                if module_name in _RENAMED_ERROR_MODULES:
                    by_name[f"{_RENAMED_ERROR_MODULES[module_name]}:{value.__qualname__}"] = value
                names[value] = stable
    return by_name, names


_NEVER_ALLOWED: Final = frozenset({"builtins", "__main__"})


# -- the registry --------------------------------------------------------------------------------------------------


class FunctionRegistry:
    """What stored expressions may refer to: functions registered by name, modules whose functions may be named
    by import path, and error types. Every reference in an expression is resolved here; nothing else is imported.

    ``allow_modules``: modules (a list, or one name) whose functions stored queries may name by import path
    (``"myapp.rules"``; ``"myapp.*"`` allows every submodule of ``myapp`` but not ``myapp`` itself). By default
    none is: a stored query may name only registered functions and :data:`STANDARD_FUNCTIONS`. Allowing a module
    trusts every function and class *defined* in it to be called with data (events, constants) by any stored
    query, so allow the modules that hold your query functions, never a general-purpose one. It also holds the
    validators of typed streams, by name (:meth:`register_schema`): a stream record names its validator as a
    query names its functions. Thread-safe.

    >>> registry = FunctionRegistry(allow_modules=["myapp.rules"])
    >>> registry.allows_module("myapp.rules"), registry.allows_module("os")
    (True, False)
    """

    def __init__(self, allow_modules: Iterable[str] | str = ()) -> None:
        self._by_name: dict[str, Callable[..., Any]] = {}
        self._by_id: dict[int, str] = {}
        self._modules: set[str] = set()
        self._packages: set[str] = set()
        self._errors: dict[str, type[BaseException]] = {}
        self._error_names: dict[type[BaseException], str] = {}
        self._schemas: dict[str, Schema] = {}
        self._lock = threading.Lock()
        self.allowing(allow_modules)

    # -- functions by name -------------------------------------------------------------------------------------

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

    # -- modules -----------------------------------------------------------------------------------------------

    def allow_module(self, *modules: str) -> None:
        """Allow stored queries to name functions defined in ``modules`` by import path (see the class
        docstring for ``"pkg.*"``). ``builtins`` and ``__main__`` cannot be allowed: the first holds ``eval``,
        ``exec`` and ``open`` (its pure functions are in :data:`STANDARD_FUNCTIONS`; register others by name),
        the second is whatever script happens to run."""
        for module in modules:
            if not isinstance(module, str):
                raise TypeError(f"a module name must be a str, got {type(module).__name__}")
            base, package = (module[:-2], True) if module.endswith(".*") else (module, False)
            if not _is_dotted_name(base):
                raise ValueError(f"cannot allow {module!r}: not a module name (a dotted name such as 'myapp.rules', "
                                 "or 'myapp.*' for every submodule of myapp)")
            if base.partition(".")[0] in _NEVER_ALLOWED:
                raise ValueError(f"cannot allow {module!r}: {base.partition('.')[0]} is never allowed; register the "
                                 "functions your queries use by name instead")
            with self._lock:
                (self._packages if package else self._modules).add(base)

    def allowing(self, modules: Iterable[str] | str) -> FunctionRegistry:
        """Allow ``modules`` (a list, or one name; see :meth:`allow_module`) and return this registry."""
        self.allow_module(*((modules,) if isinstance(modules, str) else modules))
        return self

    def allows_module(self, module: str) -> bool:
        """Whether stored queries may name functions defined in ``module``."""
        with self._lock:
            if module in self._modules:
                return True
            return any(module.startswith(package + ".") for package in self._packages)

    def allowed_modules(self) -> list[str]:
        """The allowed modules as given (``"pkg.*"`` for packages), sorted."""
        with self._lock:
            return sorted(self._modules | {package + ".*" for package in self._packages})

    def resolve_reference(self, reference: str, where: str = "expression") -> Callable[..., Any]:
        """The function a stored ``{"fn": reference}`` names: ``"@name"`` (registered), a standard function, or
        ``"module:qualified.name"`` defined in an allowed module. Raises :class:`ForbiddenReferenceError` for
        anything else, before importing anything; ``where`` goes into the message."""
        if reference.startswith("@"):
            with self._lock:
                function = self._by_name.get(reference[1:])
            if function is None:
                raise MalformedExpressionError(
                    f"{where}: the expression uses function {reference!r}, which is not registered (register it "
                    "with engine.register_function or the FunctionRegistry given to the engine)"
                )
            return function
        standard = STANDARD_FUNCTIONS.get(reference)
        if standard is not None:
            return standard
        module, qualname = self._check_path(reference, where)
        try:
            module_object = importlib.import_module(module)
        except Exception as error:  # an allowed module that is missing or fails on import
            raise MalformedExpressionError(
                f"{where}: function {reference!r} cannot be imported (its module {module!r} is allowed): "
                f"{type(error).__name__}: {error}"
            ) from error
        found, problem = _lookup(module_object, module, qualname)
        if problem is not None:
            raise ForbiddenReferenceError(f"{where}: function {reference!r} is refused: {problem}",
                                          reference=reference, module=module)
        if not callable(found):
            raise MalformedExpressionError(f"{where}: {reference!r} is not callable")
        return found  # type: ignore[no-any-return]

    def _check_path(self, reference: str, where: str) -> tuple[str, str]:
        """The module and qualified name of an import-path reference the registry allows to import."""
        module, colon, qualname = reference.partition(":")
        if not colon or not _is_dotted_name(module) or not _is_dotted_name(qualname):
            raise ForbiddenReferenceError(
                f"{where}: function {reference!r} is refused: not '@name' nor 'module:qualified.name'",
                reference=reference,
            )
        if not self.allows_module(module):
            fix = (f"register the function by name, or allow the module (allow_modules=[{module!r}])"
                   if module.partition(".")[0] not in _NEVER_ALLOWED else
                   f"{module!r} can never be allowed; register the function by name")
            raise ForbiddenReferenceError(
                f"{where}: function {reference!r} is refused: its module {module!r} is not allowed (nothing was "
                f"imported); {fix}",
                reference=reference, module=module,
            )
        special = next((part for part in qualname.split(".") if part.startswith("__")), None)
        if special is not None:
            raise ForbiddenReferenceError(
                f"{where}: function {reference!r} is refused: {special!r} is a special attribute, not a function "
                f"defined in {module!r}",
                reference=reference, module=module,
            )
        return module, qualname

    # -- error types -------------------------------------------------------------------------------------------

    def register_error(self, name: str, error_type: type[BaseException]) -> None:
        """Make the exception class ``error_type`` usable in persisted queries (``throw``) as ``name``, e.g.
        ``"myapp:SensorError"``. Built-in exceptions and reaqtive's errors need no registration."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"an error type name must be a non-empty str, got {name!r}")
        if not (isinstance(error_type, type) and issubclass(error_type, BaseException)):
            raise TypeError(f"register_error({name!r}, ...) needs an exception class, got {error_type!r}")
        standard, _ = _standard_errors()
        if name in standard:
            raise ValueError(f"error type name {name!r} is reserved for {standard[name].__qualname__}")
        with self._lock:
            existing = self._errors.get(name)
            if existing is not None and existing is not error_type:
                raise ValueError(f"error type name {name!r} is already registered for {existing.__qualname__}")
            self._errors[name] = error_type
            self._error_names.setdefault(error_type, name)

    def error_name_of(self, error_type: type[BaseException]) -> str | None:
        """The stable name of ``error_type`` (standard or registered), if it has one."""
        name = _standard_errors()[1].get(error_type)
        if name is not None:
            return name
        with self._lock:
            return self._error_names.get(error_type)

    def resolve_error(self, name: str, where: str = "expression") -> type[BaseException]:
        """The exception class a stored error tag names; :class:`ForbiddenReferenceError` if it is neither a
        standard one nor registered (nothing is imported)."""
        found = _standard_errors()[0].get(name)
        if found is None:
            with self._lock:
                found = self._errors.get(name)
        if found is None:
            raise ForbiddenReferenceError(
                f"{where}: error type {name!r} is refused: it is neither a built-in exception, nor one of "
                "reaqtive's, nor registered (FunctionRegistry.register_error); nothing was imported",
                reference=str(name), module=str(name).partition(":")[0] if ":" in str(name) else None,
                kind="error type",
            )
        return found


    # -- validators of typed streams ---------------------------------------------------------------------------

    def register_schema(self, name: str, validator: object) -> None:
        """Register ``validator`` as the schema ``name`` of typed streams (``create_stream(uri, schema=name)``):
        a pydantic model class, a pydantic ``TypeAdapter``, a msgspec ``Struct`` type, or a callable
        ``event -> value`` that raises on a bad event (see :mod:`reaqtive.engine.schemas`). A name can be
        registered once (again with the same validator is a no-op); names must not be empty or contain ``:``."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a schema name must be a non-empty str without ':', got {name!r}")
        schema = make_schema(name, validator)
        with self._lock:
            existing = self._schemas.get(name)
            if existing is not None and existing.validator is not validator and existing.validator != validator:
                raise ValueError(f"schema name {name!r} is already registered for {existing.validator!r}")
            if existing is None:
                self._schemas[name] = schema

    def schema(self, name: str) -> Schema | None:
        """The schema registered as ``name``, if any."""
        with self._lock:
            return self._schemas.get(name)

    def schema_names(self) -> list[str]:
        """The registered schema names, sorted."""
        with self._lock:
            return sorted(self._schemas)


_NO_FUNCTIONS: Final = FunctionRegistry()


def _is_dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _lookup(module_object: object, module: str, qualname: str) -> tuple[Any, str | None]:
    """The object ``module:qualname`` names, found without running anything of it: each step is a plain
    namespace lookup (``vars``), intermediate steps must be classes defined in ``module`` (never modules or
    imported objects), and the object found must say it is ``module.qualname`` (``__module__`` and
    ``__qualname__``). Returns ``(object, None)`` or ``(None, why not)``."""
    parts = qualname.split(".")
    target: Any = module_object
    for i, part in enumerate(parts):
        path = ".".join(parts[: i + 1])
        if part.startswith("__"):
            return None, f"{part!r} is a special attribute"
        try:
            namespace = vars(target)
        except TypeError:
            return None, f"{'.'.join(parts[:i])!r} has no attributes to look up"
        if part not in namespace:
            return None, f"{module!r} defines no {path!r}"
        if i < len(parts) - 1:
            target = namespace[part]
            if not isinstance(target, type) or target.__module__ != module:
                return None, (f"{path!r} is {_describe(target)}, not a class defined in {module!r}; only "
                              "functions and classes defined in an allowed module can be named")
        else:
            target = namespace[part] if isinstance(target, types.ModuleType) else getattr(target, part)
    if isinstance(target, types.ModuleType):
        return None, f"{qualname!r} is a module, not a function defined in {module!r}"
    defined_in, defined_as = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not isinstance(defined_in, str) or not isinstance(defined_as, str):
        return None, f"{qualname!r} in {module!r} is {_describe(target)}, not a function or a class"
    if defined_in != module or defined_as != qualname:
        return None, (f"{qualname!r} in {module!r} is {_describe(target)}, defined as "
                      f"'{defined_in}:{defined_as}' (imported into {module!r}, not defined there)")
    return target, None


# -- walking deep trees without recursion ---------------------------------------------------------------------------


class _Expand:
    """What a walk step returns for a node with children: the children, the label of child ``i`` in error
    messages, and how to build the node's result from the children's results."""

    __slots__ = ("build", "children", "label", "results")

    def __init__(self, children: Sequence[Any], label: Callable[[int], str],
                 build: Callable[[list[Any]], Any]) -> None:
        self.children = children
        self.label = label
        self.build = build
        self.results: list[Any] = []


class _Walk:
    """A post-order transformation of a tree with an explicit stack. Subclasses define :meth:`step`, which
    returns a leaf's result or an :class:`_Expand`; :meth:`where` describes the position being worked on."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._frames: list[_Expand] = []

    def step(self, node: Any) -> Any:
        raise NotImplementedError

    def run(self, root: Any) -> Any:
        out = self.step(root)
        if type(out) is not _Expand:
            return out
        frames = self._frames
        frames.append(out)
        while True:
            frame = frames[-1]
            index = len(frame.results)
            if index < len(frame.children):
                out = self.step(frame.children[index])
                if type(out) is _Expand:
                    frames.append(out)
                else:
                    frame.results.append(out)
                continue
            frames.pop()
            value = frame.build(frame.results)
            if not frames:
                return value
            frames[-1].results.append(value)

    def where(self) -> str:
        labels = [frame.label(len(frame.results)) for frame in self._frames]
        if len(labels) > 10:  # a deep chain: its two ends say where
            labels = [*labels[:3], f"... {len(labels) - 8:,} levels ...", *labels[-5:]]
        return " > ".join([self._root, *labels]) if self._root else " > ".join(labels) or "the query"


# -- encoding --------------------------------------------------------------------------------------------------


def encode_query(
    query: Query[Any], functions: FunctionRegistry | None = None, *, check_references: bool = True
) -> dict[str, Any]:
    """The persisted form of ``query``; raises :class:`UnpersistableQueryError` naming what cannot be persisted.

    ``functions``: the registry that will decode the expression. Functions registered in it are written by
    name; with ``check_references`` (the default), a function named by import path that the registry would
    refuse when decoding (its module is not allowed) is refused now, with the fix in the message. Without a
    registry the expression is only encoded: import paths are written unchecked.
    """
    if not isinstance(query, Query):
        raise TypeError(f"encode_query needs a Query, got {type(query).__name__}")
    registry = functions if functions is not None else _NO_FUNCTIONS
    result = _Encoder(registry, check_references and functions is not None).run(query)
    assert isinstance(result, dict)
    return result


class _Encoder(_Walk):
    def __init__(self, functions: FunctionRegistry, check: bool) -> None:
        super().__init__("")
        self._functions = functions
        self._check = check
        self._root_done = False

    def step(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value if _INT64_MIN <= value <= _INT64_MAX else {"int": str(value)}
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, Query):
            return self.query(value)
        if isinstance(value, (list, tuple, set, frozenset)):
            kind = {list: "list", tuple: "tuple", set: "set", frozenset: "set"}.get(type(value))
            if kind is None:
                raise UnpersistableQueryError(f"{self.where()} is a {type(value).__name__}, which cannot be persisted")
            items = sorted(value, key=repr) if kind == "set" else list(value)
            return _Expand(items, _index_label, lambda encoded: {kind: encoded})
        if type(value) is dict:
            keys = list(value)
            flat = [item for key in keys for item in (key, value[key])]
            return _Expand(flat, lambda i: f"key {keys[i // 2]!r}" if i % 2 == 0 else f"[{keys[i // 2]!r}]",
                           lambda encoded: {"dict": [[encoded[i], encoded[i + 1]] for i in range(0, len(encoded), 2)]})
        if isinstance(value, bytes):
            return {"bytes": base64.b64encode(value).decode("ascii")}
        if type(value) is timedelta:
            return {"td": [value.days, value.seconds, value.microseconds]}
        if type(value) is datetime:
            if value.tzinfo is None:
                raise UnpersistableQueryError(f"{self.where()} is a naive datetime; use an aware one (timezone.utc)")
            return {"dt": value.isoformat()}
        if type(value) is range:
            return {"range": [value.start, value.stop, value.step]}
        if isinstance(value, BaseException):
            return self.error(value)
        if callable(value):
            return {"fn": self.function(value)}
        raise UnpersistableQueryError(
            f"{self.where()} is a {type(value).__name__} ({_describe(value)}), which cannot be persisted"
        )

    def query(self, query: Query[Any]) -> Any:
        root = not self._root_done
        self._root_done = True
        if query.op == "stream" and not root:
            return {"stream": query.args[0]}
        if query.op == "subscribable":
            where = self.where() + ": " if self._frames else ""
            raise UnpersistableQueryError(
                f"{where}the query reads from a live object ({_describe(query.args[0])}), which cannot be "
                "persisted; read engine streams by URI with Query.stream(uri)"
            )
        op = query.op
        if root:
            return _Expand(query.args, lambda i: f"argument {i} of {op!r}", lambda args: {"op": op, "args": args})
        return _Expand(query.args, lambda i: f"argument {i} of {op!r}",
                       lambda args: {"q": {"op": op, "args": args}})

    def function(self, function: Callable[..., Any]) -> str:
        name = self._functions.name_of(function)
        if name is not None:
            return f"@{name}"
        standard = _STANDARD_PATHS.get(id(function))
        if standard is not None and STANDARD_FUNCTIONS[standard] is function:
            return standard
        path = _import_path(function)
        if path is None and getattr(function, "__module__", None) == "__main__" and "<" not in str(
            getattr(function, "__qualname__", "<")  # a lambda or a nested function: the generic message below
        ):
            # The commonest first mistake (a function in the script being run): say that the script is the
            # problem, since "no import path" does not explain why a module-level function has none.
            raise UnpersistableQueryError(
                f"{self.where()} is {_describe(function)}, defined in __main__ (the script being run): a restarted "
                "engine cannot import a function from a script, because __main__ is another module in every "
                "process. Move the function into an importable module (e.g. myapp/functions.py, then "
                "allow_modules=['myapp.functions']), or register it by name with "
                "engine.register_function(name, function)"
            )
        if path is None:
            raise UnpersistableQueryError(
                f"{self.where()} is {_describe(function)}, which has no import path (a lambda, a nested function, a "
                "bound method or a partial); define it at module level, or register it with "
                "engine.register_function"
            )
        if self._check and not self._functions.allows_module(path.partition(":")[0]):
            module = path.partition(":")[0]
            raise UnpersistableQueryError(
                f"{self.where()} is {path!r}, which a restarted engine would refuse to load: its module {module!r} "
                f"is not allowed. Register the function by name (engine.register_function), or allow its module "
                f"(Engine(..., allow_modules=[{module!r}]))"
            )
        return path

    def error(self, error: BaseException) -> Any:
        name = self._functions.error_name_of(type(error))
        if name is None:
            raise UnpersistableQueryError(
                f"{self.where()}: the exception class {type(error).__qualname__} has no registered name; register "
                f"it with FunctionRegistry.register_error(name, {type(error).__qualname__})"
            )
        return _Expand(list(error.args), lambda i: f"{type(error).__qualname__} args[{i}]",
                       lambda args: {"error": [name, args]})


def _index_label(i: int) -> str:
    return f"[{i}]"


def _import_path(obj: Any) -> str | None:
    """``module:qualname`` of a function or class defined at that place (found again there by :func:`_lookup`,
    in the already imported module: nothing is imported), or ``None``."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__":
        return None
    if not _is_dotted_name(module) or not _is_dotted_name(qualname):
        return None
    module_object = sys.modules.get(module)
    if module_object is None:
        return None
    found, _ = _lookup(module_object, module, qualname)
    return f"{module}:{qualname}" if found is obj else None


def _describe(value: object) -> str:
    if isinstance(value, types.ModuleType):
        return f"the module {value.__name__!r}"
    name = getattr(value, "__qualname__", None) or type(value).__name__
    text = f"<{name}>" if callable(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- decoding --------------------------------------------------------------------------------------------------


def decode_query(
    data: Mapping[str, Any], functions: FunctionRegistry | None = None, *, where: str = "expression"
) -> Query[Any]:
    """Re-create the query encoded by :func:`encode_query`. Raises :class:`MalformedExpressionError` naming the
    place in the expression that is wrong (``where`` names the expression itself, e.g. the artifact).

    Every function and error type is resolved through ``functions`` (by default a registry that allows only the
    standard functions and error types): a reference it does not allow raises :class:`ForbiddenReferenceError`
    and nothing is imported."""
    result = _Decoder(functions if functions is not None else _NO_FUNCTIONS, where).run(data)
    assert isinstance(result, Query)
    return result


_DECODE_TAGS: Final = frozenset({"q", "stream", "fn", "list", "tuple", "set", "dict", "int", "float", "bytes", "td",
                                 "dt", "range", "error"})
_COLLECTIONS: Final[Mapping[str, Callable[[list[Any]], object]]] = {"list": list, "tuple": tuple, "set": set}


class _Decoder(_Walk):
    def __init__(self, functions: FunctionRegistry, where: str) -> None:
        super().__init__(where)
        self._functions = functions
        self._root_done = False

    def step(self, data: Any) -> Any:
        if not self._root_done:
            self._root_done = True
            return self.query(data)
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        if not (type(data) is dict or isinstance(data, Mapping)) or len(data) != 1:
            raise MalformedExpressionError(f"{self.where()}: unexpected {type(data).__name__} {data!r:.60}")
        tag, body = next(iter(data.items()))
        if tag not in _DECODE_TAGS:
            raise MalformedExpressionError(f"{self.where()}: unknown tag {tag!r}")
        try:
            return self.tagged(tag, body)
        except ExpressionError:
            raise
        except Exception as error:
            raise MalformedExpressionError(
                f"{self.where()}: cannot decode {tag!r} value {body!r:.60}: {error}"
            ) from error

    def tagged(self, tag: str, body: Any) -> Any:
        if tag == "q":
            return self.query(body)
        if tag == "stream":
            return Query("stream", (str(body),))
        if tag == "fn":
            if not isinstance(body, str):
                raise MalformedExpressionError(f"{self.where()}: a function reference must be a str, got {body!r:.60}")
            return self._functions.resolve_reference(body, self.where())
        if tag in _COLLECTIONS:
            if not isinstance(body, list):
                raise TypeError(f"expected a list, got {type(body).__name__}")
            return _Expand(body, _index_label, self.guarded(tag, _COLLECTIONS[tag]))
        if tag == "dict":
            if not (isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body)):
                raise TypeError("expected a list of [key, value] pairs")
            flat = [item for pair in body for item in pair]
            return _Expand(flat, lambda i: f"key {i // 2}" if i % 2 == 0 else f"value {i // 2}",
                           self.guarded(tag, lambda items: {items[i]: items[i + 1] for i in range(0, len(items), 2)}))
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
        # "error"
        name, encoded_args = body
        if not isinstance(name, str) or not isinstance(encoded_args, list):
            raise TypeError("expected [type name, [args...]]")
        error_type = self._functions.resolve_error(name, self.where())
        return _Expand(encoded_args, lambda i: f"{name} args[{i}]",
                       self.guarded(tag, lambda args: error_type(*args)))

    def guarded(self, tag: str, build: Callable[[list[Any]], object]) -> Callable[[list[Any]], object]:
        """``build``, its failures reported as malformed at the current position."""

        def guarded_build(items: list[Any]) -> object:
            try:
                return build(items)
            except Exception as error:
                raise MalformedExpressionError(f"{self.where()}: cannot decode {tag!r} value: {error}") from error

        return guarded_build

    def query(self, data: Any) -> _Expand:
        if not ((type(data) is dict or isinstance(data, Mapping)) and isinstance(data.get("op"), str) and data["op"]
                and isinstance(data.get("args"), list)):
            raise MalformedExpressionError(
                f"{self.where()}: expected a query node {{'op': str, 'args': list}}, got {data!r:.80}"
            )
        op: str = data["op"]
        return _Expand(data["args"], lambda i: f"{op} argument {i}", lambda args: Query(op, tuple(args)))


def referenced_modules(expression: Any) -> set[str]:
    """The modules an encoded expression names in import-path function references (standard functions
    excluded): what a registry must allow to decode it."""
    found: set[str] = set()
    stack = [expression]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            reference = node.get("fn") if len(node) == 1 else None
            if isinstance(reference, str):
                if not reference.startswith("@") and reference not in STANDARD_FUNCTIONS and ":" in reference:
                    found.add(reference.partition(":")[0])
            else:
                stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


# -- JSON and templates ----------------------------------------------------------------------------------------


def expression_to_json(expression: Mapping[str, Any]) -> str:
    """Canonical JSON of an encoded expression (sorted keys, no spaces): stable bytes to hash and store."""
    try:
        return json.dumps(expression, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except RecursionError:  # deeper than the json module goes: the same text, written with a stack
        return _dump_iteratively(expression)


def expression_from_json(text: str | bytes) -> dict[str, Any]:
    """Parse :func:`expression_to_json` output; :class:`MalformedExpressionError` if it is not JSON of a node."""
    try:
        try:
            data = json.loads(text)
        except RecursionError:  # deeper than the json module goes
            data = _load_iteratively(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise MalformedExpressionError(f"stored expression is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise MalformedExpressionError(f"stored expression is not a query node: {data!r:.60}")
    return data


class _Raw(str):
    """Text to copy as is into the JSON being written (not a value to encode)."""

    __slots__ = ()


def _dump_iteratively(value: Any) -> str:
    """What ``json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)`` returns, at any
    depth. Keys must be str (as in every encoded expression)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Raw:
            out.append(item)
        elif isinstance(item, dict):
            if not item:
                out.append("{}")
                continue
            if not all(isinstance(key, str) for key in item):
                raise TypeError("keys must be str in an encoded expression")
            out.append("{")
            stack.append(_Raw("}"))
            entries = sorted(item.items(), key=lambda entry: entry[0])
            for i in range(len(entries) - 1, -1, -1):
                key, entry = entries[i]
                stack.append(entry)
                stack.append(_Raw(("," if i else "") + json.dumps(key) + ":"))
        elif isinstance(item, (list, tuple)):
            if not item:
                out.append("[]")
                continue
            out.append("[")
            stack.append(_Raw("]"))
            for i in range(len(item) - 1, -1, -1):
                stack.append(item[i])
                if i:
                    stack.append(_Raw(","))
        else:
            out.append(json.dumps(item, allow_nan=False))
    return "".join(out)


_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_NUMBER: Final = re.compile(r"(-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?")
_CONSTANTS: Final = (("null", None), ("true", True), ("false", False), ("NaN", math.nan), ("Infinity", math.inf),
                     ("-Infinity", -math.inf))


class _Members:
    """An object being parsed: its dict and the key whose value comes next."""

    __slots__ = ("key", "members")

    def __init__(self, key: str) -> None:
        self.members: dict[str, Any] = {}
        self.key = key


_OPENED: Final = object()  # what _JsonParser.value returns when it opened a container


class _JsonParser:
    """``json.loads`` at any depth: the containers being parsed are on a stack (errors are
    :class:`json.JSONDecodeError`, as ``json.loads`` raises them)."""

    def __init__(self, document: str | bytes) -> None:
        if isinstance(document, bytes):
            document = document.decode(json.detect_encoding(document), "surrogatepass")
        if document.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", document, 0)
        self.text = document
        self.pos = 0
        self.stack: list[list[Any] | _Members] = []
        self.scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]

    def parse(self) -> Any:
        while True:
            value = self.value()
            if value is _OPENED:
                continue
            while True:  # the value is complete: add it to its container, closing the containers that end here
                self.skip()
                if not self.stack:
                    if self.pos != len(self.text):
                        raise json.JSONDecodeError("Extra data", self.text, self.pos)
                    return value
                closed = self.add(value)
                if closed is _OPENED:
                    break
                value = closed

    def skip(self) -> None:
        match = _WHITESPACE.match(self.text, self.pos)
        assert match is not None  # matches the empty string
        self.pos = match.end()

    def value(self) -> Any:
        """The scalar or empty container that starts here, or ``_OPENED`` after pushing a container."""
        self.skip()
        text, pos = self.text, self.pos
        char = text[pos:pos + 1]
        if char in ("{", "["):
            self.pos += 1
            self.skip()
            if text[self.pos:self.pos + 1] == ("}" if char == "{" else "]"):
                self.pos += 1
                return {} if char == "{" else []
            self.stack.append(_Members(self.key()) if char == "{" else [])
            return _OPENED
        if char == '"':
            value, self.pos = self.scanstring(text, pos + 1)
            return value
        value, self.pos = _scalar(text, pos)
        return value

    def key(self) -> str:
        self.skip()
        if self.text[self.pos:self.pos + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", self.text, self.pos)
        key, self.pos = self.scanstring(self.text, self.pos + 1)
        self.skip()
        if self.text[self.pos:self.pos + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", self.text, self.pos)
        self.pos += 1
        return key

    def add(self, value: Any) -> Any:
        """Add ``value`` to the innermost container; that container if it ends here (popped), else ``_OPENED``
        (a next member follows)."""
        top = self.stack[-1]
        char = self.text[self.pos:self.pos + 1]
        if isinstance(top, list):
            top.append(value)
            end = "]"
        else:
            top.members[top.key] = value
            end = "}"
        self.pos += 1
        if char == ",":
            if isinstance(top, _Members):
                top.key = self.key()
            return _OPENED
        if char != end:
            raise json.JSONDecodeError("Expecting ',' delimiter", self.text, self.pos - 1)
        self.stack.pop()
        return top if isinstance(top, list) else top.members


def _load_iteratively(document: str | bytes) -> Any:
    """What ``json.loads(document)`` returns, at any depth."""
    return _JsonParser(document).parse()


def _scalar(text: str, pos: int) -> tuple[Any, int]:
    """The number or literal (``null``, ``true``, ``NaN``, ...) at ``pos``, and where it ends."""
    for literal, constant in _CONSTANTS:
        if text.startswith(literal, pos):
            return constant, pos + len(literal)
    number = _NUMBER.match(text, pos)
    if number is None:
        raise json.JSONDecodeError("Expecting value", text, pos)
    integer, fraction, exponent = number.groups()
    if fraction or exponent:
        return float(integer + (fraction or "") + (exponent or "")), number.end()
    return int(integer), number.end()


def _rebuild(root: Any, leaf: Callable[[Any], Any]) -> Any:
    """A copy of the query nodes (``{"op", "args"}``) and nested-query tags (``{"q"}``) of an encoded
    expression, every other argument replaced by ``leaf(argument)``, called in document order (depth first, left
    to right). Iterative: the output containers are made first and filled as the stack reaches their parts."""
    result: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(root, result, 0)]
    while stack:
        node, target, place = stack.pop()
        if type(node) is dict:
            if "op" in node and "args" in node:
                args = list(node["args"])
                copied: list[Any] = [None] * len(args)
                target[place] = {"op": node["op"], "args": copied}
                for i in range(len(args) - 1, -1, -1):
                    stack.append((args[i], copied, i))
                continue
            if len(node) == 1 and "q" in node:
                holder: dict[str, Any] = {"q": None}
                target[place] = holder
                stack.append((node["q"], holder, "q"))
                continue
        target[place] = leaf(node)
    return result[0]


def templatize(expression: Mapping[str, Any]) -> tuple[dict[str, Any], list[Encoded]]:
    """Split an encoded expression into a template (its shape, operators and functions, with every constant
    replaced by a parameter ``{"p": i}``) and the list of constants. Streams count as constants: the same query
    over another stream shares the template."""
    constants: list[Encoded] = []

    def parameter(node: Any) -> Any:
        if type(node) is dict and len(node) == 1 and "fn" in node:
            return node
        constants.append(node)
        return {"p": len(constants) - 1}

    return _rebuild(expression, parameter), constants


def instantiate(template: Mapping[str, Any], constants: list[Encoded]) -> dict[str, Any]:
    """The encoded expression a template and its constants stand for (the inverse of :func:`templatize`)."""

    def constant(node: Any) -> Any:
        if type(node) is dict and len(node) == 1 and "p" in node:
            index = node["p"]
            if type(index) is not int or not 0 <= index < len(constants):
                raise MalformedExpressionError(f"template parameter {index!r} out of range ({len(constants)} given)")
            return constants[index]
        return node

    result = _rebuild(template, constant)
    if not isinstance(result, dict):
        raise MalformedExpressionError("a template must be a query node")
    return result


def template_id(template: Mapping[str, Any]) -> str:
    """The content hash that identifies a template (sha256 of its canonical JSON, hex)."""
    return hashlib.sha256(expression_to_json(template).encode("utf-8")).hexdigest()
