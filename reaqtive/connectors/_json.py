"""The JSON form of an output, shared by the sinks: ``{"subscription": ..., "seq": ..., "value": ...}``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]
from typing import Any

from reaqtive.connectors.errors import UnencodableOutputError
from reaqtive.engine.egress import Output

JsonDefault = Callable[[Any], Any]
"""Converts a value JSON cannot represent into one it can (``json.dumps``'s ``default``), or raises."""


class OutputJson:
    """Encodes outputs as UTF-8 JSON on one line each (no raw newline: JSON escapes them in strings); NaN and
    infinities are refused, since JSON has none. One encoder per sink: ``json.dumps`` with options builds a new
    one per call, which costs more than the encoding of a small output. Raises :class:`UnencodableOutputError`
    naming the output."""

    __slots__ = ("_encode",)

    def __init__(self, default: JsonDefault | None) -> None:
        encoder = json.JSONEncoder(default=default, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        self._encode: Callable[[object], str] = encoder.encode
        if c_make_encoder is not None:
            # What JSONEncoder.encode runs for a whole value, made once instead of per call (half the cost of a
            # small output). No circular check: a value that holds itself ends in a RecursionError, refused too.
            chunks = c_make_encoder(None, encoder.default, c_encode_basestring, None, ":", ",", False, False, False)
            self._encode = lambda value: "".join(chunks(value, 0))

    def one(self, output: Output) -> bytes:
        """One output."""
        try:
            return self._encode({"subscription": output.subscription, "seq": output.seq,
                                 "value": output.value}).encode("utf-8")
        except Exception as error:  # TypeError, ValueError (NaN, lone surrogates), RecursionError, default's own
            raise UnencodableOutputError(output.subscription, output.seq, error) from error

    def array(self, outputs: Sequence[Output]) -> bytes:
        """The outputs as one JSON array (one call into the encoder for all of them)."""
        try:
            return self._encode([{"subscription": output.subscription, "seq": output.seq, "value": output.value}
                                 for output in outputs]).encode("utf-8")
        except Exception:
            for output in outputs:
                self.one(output)  # raises, naming the first output that cannot be encoded
            raise

