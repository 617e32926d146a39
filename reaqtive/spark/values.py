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
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from reaqtive.state import DEFAULT_CODEC

__all__ = ["canonical_json", "decode_value", "encode_values", "plain", "value_type"]


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON text (see the module docstring)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=True)


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


def plain(value: Any) -> Any:
    """A value read from a pandas frame as plain Python data: NumPy scalars and arrays become ``int``/``float``/
    lists, nested in dicts (Arrow structs) and lists alike; anything else is returned as it is."""
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)  # NumPy scalars and arrays
    if callable(tolist):
        return plain(tolist())
    return value
