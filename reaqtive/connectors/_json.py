"""The JSON form of an output, shared by the sinks: ``{"subscription": ..., "seq": ..., "value": ...}``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from reaqtive.connectors.errors import UnencodableOutputError
from reaqtive.engine.egress import Output

JsonDefault = Callable[[Any], Any]
"""Converts a value JSON cannot represent into one it can (``json.dumps``'s ``default``), or raises."""


def output_json(output: Output, default: JsonDefault | None) -> bytes:
    """UTF-8 JSON on one line (no raw newline: JSON escapes them in strings); NaN and infinities are refused,
    since JSON has none. Raises :class:`UnencodableOutputError` naming the output."""
    try:
        text = json.dumps({"subscription": output.subscription, "seq": output.seq, "value": output.value},
                          default=default, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8")
    except Exception as error:  # TypeError, ValueError (NaN, lone surrogates), RecursionError, default's own
        raise UnencodableOutputError(output.subscription, output.seq, error) from error
