"""How output values are written into Spark rows, and how payloads read from Spark become plain Python data.

A query's outputs are arbitrary Python values (numbers, lists, tuples, dicts, datetimes). The output column
``value`` holds them in one of three formats, chosen with ``value_format``:

* ``"json"`` (default): canonical JSON text (sorted keys, no spaces; tuples and sets as lists, datetimes as ISO
  8601, timedeltas as seconds, bytes as base64): readable anywhere, comparable as strings;
* ``"binary"``: the state codec's msgpack (exact: tuples stay tuples, datetimes keep their offset);
  :func:`decode_value` reads it back;
* any Spark SQL type in DDL form (``"bigint"``, ``"double"``, ``"array<bigint>"``, ...): the value as it is, for
  queries whose outputs already have that type.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.state import DEFAULT_CODEC

__all__ = ["canonical_json", "decode_value", "encode_values", "plain", "value_type"]


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON text (see the module docstring)."""
    kind = type(value)
    if kind is tuple or kind is list:  # a row of scalars (a window's row) is most outputs: written directly
        parts = []
        for item in value:
            text = _scalar_json(item)
            if text is None:
                return _ENCODER.encode(value)
            parts.append(text)
        return "[" + ",".join(parts) + "]"
    return _scalar_json(value) or _ENCODER.encode(value)


def _scalar_json(value: Any) -> str | None:
    """A scalar as ``json.dumps`` writes it (with ``_json_default`` for datetimes), ``None`` for anything else."""
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if kind is float:
        return _float_json(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is datetime:
        text = _ISO.get(value)
        if text is None:
            if len(_ISO) >= _ISO_CACHE:
                _ISO.clear()
            text = _ISO[value] = '"' + value.isoformat() + '"'
        return text
    return None


def _float_json(value: float) -> str:
    if math.isfinite(value):
        return float.__repr__(value)
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


# Window bounds repeat across rows: their text is kept (a datetime's hash costs less than its isoformat)
_ISO: dict[datetime, str] = {}
_ISO_CACHE = 4096


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        return int(seconds) if seconds.is_integer() else seconds
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=canonical_json)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    plain_value = plain(value)
    if plain_value is not value:
        return plain_value
    raise TypeError(f"an output of type {type(value).__name__} cannot be written as JSON; use value_format='binary'")


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=True)
_encode_string: Callable[[str], str] = getattr(json.encoder, "encode_basestring_ascii", None) or json.dumps


def encode_values(values: Sequence[Any], value_format: str) -> list[Any]:
    """The ``value`` column for ``values``."""
    if value_format == "json":
        return [canonical_json(value) for value in values]
    if value_format == "binary":
        return [DEFAULT_CODEC.encode(value) for value in values]
    return [None if isinstance(value, float) and math.isnan(value) else value for value in values]


def decode_value(data: bytes) -> Any:
    """A value written with ``value_format="binary"``."""
    (value,) = DEFAULT_CODEC.decode_entries(bytes(data), "output value")
    return value


def value_type(value_format: str) -> str:
    """The Spark SQL type of the ``value`` column for ``value_format``."""
    return {"json": "string", "binary": "binary"}.get(value_format, value_format)


_PLAIN: Final = frozenset({str, int, float, bool, type(None), bytes})


def plain(value: Any) -> Any:
    """A value read from a pandas frame as plain Python data: NumPy scalars and arrays become ``int``/``float``/
    lists, nested in dicts (Arrow structs) and lists alike; anything else is returned as it is."""
    if type(value) in _PLAIN:
        return value
    if type(value) is dict:
        for item in value.values():
            if type(item) not in _PLAIN:
                return {k: plain(v) for k, v in value.items()}
        return value  # (an Arrow struct's row: a fresh dict of plain values, kept as it is)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)  # NumPy scalars (float64 is a float subclass) and arrays
    if callable(tolist):
        return plain(tolist())
    return value
