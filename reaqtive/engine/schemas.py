"""Typed streams: the validator a stream's events must pass before they are appended.

A stream created with ``engine.create_stream(uri, schema="reading")`` checks every event appended to it with the
validator the host registered as ``"reading"`` (``engine.register_schema``, ``Engine(schemas=...)``, or
:meth:`~reaqtive.engine.expressions.FunctionRegistry.register_schema`). The store holds the name, never the
validator (a store is data, never code), so every process that opens the store registers it again, as it does
the functions of its queries. A validator is one of:

* a **pydantic model class** (pydantic v2): the event is ``Model.model_validate(event)``, and what is stored is
  ``model_dump(mode="json")`` of the result;
* a **pydantic** ``TypeAdapter``: ``validate_python(event)``, stored as ``dump_python(result, mode="json")``;
* a **msgspec** ``Struct`` type: ``msgspec.convert(event, type=Struct)``, stored as ``msgspec.to_builtins`` of it;
* any other **callable** ``event -> value`` that raises on a bad event: what it returns is stored.

So what a typed stream stores, and what its queries see, is the **validated, plain form**: dicts, lists, strings,
numbers (for pydantic and msgspec: their JSON-like form; a ``datetime`` field becomes its ISO 8601 text), whatever
the producer appended (a dict, a model instance, a ``Struct``). Stored events stay plain data the state codec
encodes and any process reads without the producer's classes. A validator may normalize (``"21.5"`` to ``21.5``
in pydantic's lax mode, a default filled in); a callable's result must be something the codec can save.

Neither pydantic nor msgspec is a dependency: the kind of a validator is found by looking at it (duck typing),
and msgspec is imported only when a ``Struct`` type is registered (its module is loaded then anyway).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from reaqtive.core.describe import error_text
from reaqtive.engine.engine_errors import SchemaValidationError

__all__ = ["Schema", "make_schema", "validation_problems"]

Event = tuple[Any, datetime | None]

_MSGSPEC_AT: Final = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MSGSPEC_MISSING: Final = re.compile(r"missing required field `(?P<field>[^`]+)`")


class Schema:
    """A validator registered under ``name``, ready to check events: ``kind`` is ``"pydantic"``,
    ``"pydantic-adapter"``, ``"msgspec"`` or ``"callable"``; :meth:`convert` turns one event into its stored form
    (raising the validator's error); :meth:`validate_events` checks a call's events."""

    __slots__ = ("convert", "kind", "name", "validator")

    def __init__(self, name: str, validator: object, kind: str, convert: Callable[[Any], Any]) -> None:
        self.name = name
        self.validator = validator
        self.kind = kind
        self.convert = convert

    def validate_events(self, stream: str, events: Sequence[Event]) -> list[Event]:
        """The events of one append call with their values validated (in their stored form); the first that does
        not validate raises :class:`~reaqtive.engine.engine_errors.SchemaValidationError` naming ``stream``, its
        index in ``events`` and the fields. A ``None`` value is left as it is (the append refuses it)."""
        convert = self.convert
        checked: list[Event] = []
        add = checked.append
        for index, (value, when) in enumerate(events):
            if value is None:
                add((value, when))
                continue
            try:
                stored = convert(value)
            except Exception as error:
                raise SchemaValidationError(stream, self.name, index, validation_problems(error)) from error
            if stored is None:
                raise SchemaValidationError(stream, self.name, index, [
                    (None, f"the validator returned None (a {self.kind} validator must return the event to store)")
                ])
            add((stored, when))
        return checked

    def __repr__(self) -> str:
        return f"Schema({self.name!r}, {self.kind}: {self.validator!r})"


def make_schema(name: str, validator: object) -> Schema:
    """The :class:`Schema` of ``validator`` (see the module for the kinds); ``TypeError`` for anything else, and
    for a pydantic v1 model (not supported: use pydantic v2's ``BaseModel``)."""
    if isinstance(validator, type):
        model_validate = getattr(validator, "model_validate", None)
        if callable(model_validate) and callable(getattr(validator, "model_dump", None)):
            return Schema(name, validator, "pydantic", _pydantic_model(model_validate))
        if _is_msgspec_struct(validator):
            return Schema(name, validator, "msgspec", _msgspec_struct(validator))
        if callable(getattr(validator, "parse_obj", None)) and hasattr(validator, "__fields__"):
            raise TypeError(f"register_schema({name!r}, ...): {validator.__qualname__} is a pydantic v1 model, "
                            "which is not supported; use a pydantic v2 BaseModel (model_validate)")
    else:
        validate_python = getattr(validator, "validate_python", None)
        dump_python = getattr(validator, "dump_python", None)
        if callable(validate_python) and callable(dump_python):
            return Schema(name, validator, "pydantic-adapter",
                          lambda value: dump_python(validate_python(value), mode="json"))
    if callable(validator):
        return Schema(name, validator, "callable", validator)
    raise TypeError(f"register_schema({name!r}, ...) needs a pydantic model class, a pydantic TypeAdapter, a "
                    f"msgspec Struct type or a callable, got {type(validator).__name__}")


def _pydantic_model(model_validate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        return model_validate(value).model_dump(mode="json")

    return convert


def _is_msgspec_struct(validator: type) -> bool:
    return any(base.__name__ == "Struct" and base.__module__ == "msgspec" for base in validator.__mro__[1:])


def _msgspec_struct(struct: type) -> Callable[[Any], Any]:
    msgspec = importlib.import_module("msgspec")  # loaded already: the Struct type derives from its class
    convert_to, to_builtins = msgspec.convert, msgspec.to_builtins

    def convert(value: Any) -> Any:
        return to_builtins(value if type(value) is struct else convert_to(value, type=struct))

    return convert


def validation_problems(error: BaseException) -> list[tuple[str | None, str]]:
    """``(field, message)`` pairs of a validator's error: pydantic's ``errors()`` (each with its location, as a
    dotted path), msgspec's ``ValidationError`` (its ``$.path`` and a missing field's name), or else the error's
    type and text (a ``KeyError`` from a callable names the missing key as its field)."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            listed = errors(include_url=False)
        except TypeError:
            listed = errors()
        except Exception:
            listed = None
        if isinstance(listed, list) and listed and all(isinstance(item, dict) for item in listed):
            return [(_dotted(item.get("loc")), str(item.get("msg", item.get("type", "invalid")))) for item in listed]
    if type(error).__module__.startswith("msgspec"):
        return [_msgspec_problem(str(error))]
    if isinstance(error, KeyError) and len(error.args) == 1:
        return [(str(error.args[0]), f"{type(error).__name__}: {error_text(error)}")]
    return [(None, f"{type(error).__name__}: {error_text(error)}")]


def _dotted(location: object) -> str | None:
    if isinstance(location, (tuple, list)):
        return ".".join(str(part) for part in location) or None
    return None if location is None else str(location)


def _msgspec_problem(text: str) -> tuple[str | None, str]:
    """msgspec says ``Expected `float`, got `str` - at `$.celsius``` or ``Object missing required field `celsius```
    (``- at `$.inner[0]``` when nested)."""
    found = _MSGSPEC_AT.match(text)
    message, path = (found.group("message"), found.group("path")) if found else (text, None)
    field = re.sub(r"\[(\d+)\]", r".\1", path).lstrip(".") if path else ""
    missing = _MSGSPEC_MISSING.search(message)
    if missing is not None:
        field = f"{field}.{missing.group('field')}" if field else missing.group("field")
    return (field or None, message)
