"""Framing: how the state of one subscription's operator tree becomes one checksummed blob, and back.

Layout (see ``docs/state-format.md`` for the full description)::

    blob    := "RQ" format:u8 body_length:varint body crc32:u32be     # crc32 over everything before it
    body    := record*                                                 # one per stateful node, in pre-order
    record  := path name version segment                               # four msgpack items
    path    := [common, i, j, ...]   # the node's input-index path, as "keep `common` indices of the previous
                                     # record's path, then append i, j, ..." (short even for deep trees)
    name    := str                   # the operator's persisted name
    version := [int, ...]            # the operator's state version
    segment := ext(0, entry*)        # length-prefixed: msgpack ext type 0
    entry   := value | segment       # values written by the operator; nested segments from create_child()

A reader is given exactly one segment, so it can never read into its neighbour, and whatever it leaves unread
is skipped. Values and nested segments are different kinds of entry: reading one where the other was written is
an error rather than a wrong value.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from reaqtive.core.operator import Version
from reaqtive.state.codec import DEFAULT_CODEC, EXT_SEGMENT, Segment, StateCodec
from reaqtive.state.fields import CheckedReader
from reaqtive.state.state_errors import (
    StateChecksumError,
    StateEncodeError,
    StateError,
    StateFormatError,
    format_path,
)

__all__ = [
    "BLOB_FORMAT_VERSION",
    "BlobWriter",
    "NodeState",
    "Path",
    "SegmentReader",
    "SegmentWriter",
    "checksum",
    "read_blob",
]

Path = tuple[int, ...]
"""Where a node sits in its subscription's tree: input indices from the root, e.g. ``(0, 1)``."""

MAGIC: Final = b"RQ"
BLOB_FORMAT_VERSION: Final = 1
_CRC_SIZE: Final = 4
_FIXEXT: Final = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
_MAX_SEGMENT: Final = 2**32 - 1


def checksum(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 used for blobs and store rows (detects every single-bit flip and every burst up to 32 bits)."""
    return zlib.crc32(data) & 0xFFFFFFFF


# --------------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------------


class SegmentWriter:
    """Writes one segment: values in order, interleaved with nested child segments.

    Each value is encoded when it is written, so an unsupported value fails at the operator's own ``write``
    call. A writer is closed once its node's ``save_state`` has returned; writing later is an error.
    """

    __slots__ = ("_children", "_closed", "_name", "_nested", "_pack", "_parts", "path")

    def __init__(
        self, pack: Callable[[object], bytes], name: str, path: Path | None = None, nested: bool = False
    ) -> None:
        self._pack = pack
        self._name = name
        self._nested = nested
        self.path = path
        """The path of the node whose state this is (for messages), if known."""
        self._parts: list[bytes | SegmentWriter] = []
        self._closed = False
        self._children = False

    @property
    def _where(self) -> str:
        where = f"operator {self._name!r} at path {format_path(self.path)}"
        return f"{where} (nested segment)" if self._nested else where

    def write(self, value: object) -> None:
        if self._closed:
            raise StateError(f"{self._where}: write() after save_state returned (the writer is closed)")
        try:
            self._parts.append(self._pack(value))
        except StateEncodeError as error:
            raise StateEncodeError(f"{self._where}: {error}") from error
        except (TypeError, ValueError, OverflowError, RecursionError) as error:
            kind = type(value)
            raise StateEncodeError(
                f"{self._where}: cannot save a value of type {kind.__module__}.{kind.__qualname__}: {error}"
            ) from error

    def create_child(self) -> SegmentWriter:
        if self._closed:
            raise StateError(f"{self._where}: create_child() after save_state returned (the writer is closed)")
        child = SegmentWriter(self._pack, self._name, self.path, nested=True)
        self._parts.append(child)
        self._children = True
        return child

    def render(self) -> bytes:
        """Close this writer and its children; return the segment's content (without its own header)."""
        self._closed = True
        if not self._children:
            return b"".join(self._parts)  # type: ignore[arg-type]  # only values: all bytes
        return b"".join(part if isinstance(part, bytes) else _frame_segment(part.render()) for part in self._parts)


def _frame_segment(content: bytes) -> bytes:
    """``content`` as a msgpack ext of type 0: a 2-6 byte header that carries the length."""
    size = len(content)
    fixed = _FIXEXT.get(size)
    if fixed is not None:
        header = bytes((fixed, EXT_SEGMENT))
    elif size < 0x100:
        header = bytes((0xC7, size, EXT_SEGMENT))
    elif size < 0x10000:
        header = b"\xc8" + size.to_bytes(2, "big") + bytes((EXT_SEGMENT,))
    elif size <= _MAX_SEGMENT:
        header = b"\xc9" + size.to_bytes(4, "big") + bytes((EXT_SEGMENT,))
    else:
        raise StateEncodeError(f"a state segment of {size} bytes exceeds the 4 GiB limit")
    return header + content


class BlobWriter:
    """Builds the blob of one subscription, node by node, in traversal order."""

    __slots__ = ("_body", "_pack", "_previous")

    def __init__(self, codec: StateCodec = DEFAULT_CODEC) -> None:
        self._pack = codec.packer()
        self._body: list[bytes] = []
        self._previous: Path = ()

    def write_node(
        self, path: Path, name: str, version: Version, save: Callable[[SegmentWriter, Version], None]
    ) -> None:
        """Append the record of one node: its header, then the segment ``save(writer, version)`` fills."""
        pack = self._pack
        header = _header(name, version, path, pack)
        writer = SegmentWriter(pack, name, path)
        save(writer, version)
        content = writer.render()
        previous = self._previous
        step = _STEPS.get((previous, path)) if type(path) is tuple else None
        if step is None:
            step = _step(previous, path, pack)
        self._body += (step, header, _frame_segment(content))
        self._previous = path if type(path) is tuple else tuple(path)

    def finish(self) -> bytes:
        """The blob: header, body, checksum."""
        body = b"".join(self._body)
        head = MAGIC + bytes((BLOB_FORMAT_VERSION,)) + _varint(len(body))
        blob = head + body
        return blob + checksum(blob).to_bytes(_CRC_SIZE, "big")


_HEADERS: dict[tuple[str, Version], bytes] = {}
_MAX_CACHED_HEADERS: Final = 4096
_STEPS: dict[tuple[Path, Path], bytes] = {}
_MAX_CACHED_STEPS: Final = 4096


def _step(previous: Path, path: Path, pack: Callable[[object], bytes]) -> bytes:
    """The packed path of a record, relative to the previous record's (``[common, i, j, ...]``); cached, since
    the trees of the queries of one host repeat the same few shapes."""
    common = 0
    for a, b in zip(previous, path, strict=False):
        if a != b:
            break
        common += 1
    step = pack([common, *path[common:]])
    if type(path) is tuple:  # (a path given as a list is packed the same, not cached)
        if len(_STEPS) >= _MAX_CACHED_STEPS:
            _STEPS.clear()
        _STEPS[(previous, path)] = step
    return step


def _header(name: str, version: Version, path: Path, pack: Callable[[object], bytes]) -> bytes:
    """The packed ``name`` and ``version`` of a record, validated once per operator type and cached."""
    if type(name) is not str or type(version) is not tuple:
        _check_header(path, name, version)  # raises a clear error rather than "unhashable type"
    key = (name, version)
    header = _HEADERS.get(key)
    if header is None:
        _check_header(path, name, version)
        header = pack(name) + pack(list(version))
        if len(_HEADERS) >= _MAX_CACHED_HEADERS:
            _HEADERS.clear()
        _HEADERS[key] = header
    return header


def _check_header(path: Path, name: str, version: Version) -> None:
    if not isinstance(name, str) or not name:
        raise StateEncodeError(f"operator at path {format_path(path)}: its name must be a non-empty str, got {name!r}")
    if not isinstance(version, tuple) or not version or not all(type(part) is int and part >= 0 for part in version):
        raise StateEncodeError(
            f"operator {name!r} at path {format_path(path)}: its version must be a non-empty tuple of "
            f"non-negative ints, got {version!r}"
        )


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# --------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------


class SegmentReader(CheckedReader):
    """Reads one segment back: the entries in the order they were written, never past the segment's end.

    * :meth:`read` raises :class:`StateFormatError` past the end, or where a nested segment was written;
    * :meth:`try_read` returns ``(False, None)`` instead, without moving (probe for an optional trailing value);
    * :meth:`reset` rewinds to the start of this segment;
    * :meth:`create_child` opens the nested segment at the current position;
    * ``read_int``, ``read_bool``, ``read_datetime``, ``read_list``, ``read_records``, ...: the next value,
      checked for its type and range (:class:`~reaqtive.state.fields.CheckedReader`).
    """

    __slots__ = ("_codec", "_entries", "_position", "_where", "path")

    def __init__(self, data: bytes, where: str, codec: StateCodec = DEFAULT_CODEC, path: Path | None = None) -> None:
        self._codec = codec
        self._where = where
        self.path = path
        """The path of the node whose state this is (for messages), if known."""
        self._entries = codec.decode_entries(data, where)
        self._position = 0

    @property
    def where(self) -> str:
        return self._where

    @property
    def remaining(self) -> int:
        """How many entries (values and nested segments) are left to read."""
        return len(self._entries) - self._position

    def read(self) -> Any:
        entry = self._next("a value")
        if type(entry) is Segment:
            raise StateFormatError(
                f"{self._where}: entry {self._position} is a nested segment, not a value (read/write order differs)"
            )
        self._position += 1
        return entry

    def try_read(self) -> tuple[bool, Any]:
        position = self._position
        if position >= len(self._entries) or type(self._entries[position]) is Segment:
            return False, None
        self._position = position + 1
        return True, self._entries[position]

    def reset(self) -> None:
        self._position = 0

    def create_child(self) -> SegmentReader:
        entry = self._next("a nested segment")
        if type(entry) is not Segment:
            raise StateFormatError(
                f"{self._where}: entry {self._position} is a value, not a nested segment (read/write order differs)"
            )
        self._position += 1
        return SegmentReader(entry.data, f"{self._where} (nested segment)", self._codec, self.path)

    def _next(self, wanted: str) -> object:
        if self._position >= len(self._entries):
            raise StateFormatError(
                f"{self._where}: read past the end of its state (wanted {wanted} after all "
                f"{len(self._entries)} entries were read)"
            )
        return self._entries[self._position]


@dataclass(frozen=True, slots=True)
class NodeState:
    """The saved state of one node, as found in a blob (its segment is decoded only when opened)."""

    path: Path
    name: str
    version: Version
    data: bytes

    def reader(self, codec: StateCodec = DEFAULT_CODEC, context: str = "") -> SegmentReader:
        """A reader over this node's segment; ``context`` (e.g. the store key) prefixes its messages."""
        where = f"operator {self.name!r} at path {format_path(self.path)}"
        if context:
            where = f"{context}: {where}"
        return SegmentReader(self.data, where, codec, self.path)


def read_blob(blob: bytes, codec: StateCodec = DEFAULT_CODEC, where: str = "state blob") -> list[NodeState]:
    """Verify a blob (magic, format, length, checksum) and split it into its node records.

    Raises :class:`StateChecksumError` for a blob damaged after it was written and :class:`StateFormatError`
    for anything else malformed; ``where`` (e.g. the store key) starts every message.
    """
    body = _verified_body(bytes(blob), where)
    entries = codec.decode_entries(body, where)
    if len(entries) % 4:
        raise StateFormatError(f"{where}: malformed body ({len(entries)} items is not a whole number of records)")
    nodes: list[NodeState] = []
    previous: Path = ()
    for index in range(0, len(entries), 4):
        node = _record(entries, index, previous, where)
        nodes.append(node)
        previous = node.path
    return nodes


def _verified_body(blob: bytes, where: str) -> bytes:
    if blob[:2] != MAGIC:
        raise StateFormatError(f"{where}: not a reaqtive state blob ({len(blob)} bytes, no 'RQ' header)")
    if len(blob) < len(MAGIC) + 1 + 1 + _CRC_SIZE:
        raise StateFormatError(f"{where}: state blob is truncated ({len(blob)} bytes)")
    if blob[2] != BLOB_FORMAT_VERSION:
        raise StateFormatError(
            f"{where}: state blob format {blob[2]} is not supported (this version of reaqtive reads format "
            f"{BLOB_FORMAT_VERSION})"
        )
    length, start = _read_varint(blob, 3, where)
    if start + length + _CRC_SIZE != len(blob):
        raise StateFormatError(
            f"{where}: state blob is {len(blob)} bytes but its header announces {start + length + _CRC_SIZE} "
            "(truncated or padded)"
        )
    end = start + length
    expected = int.from_bytes(blob[end:], "big")
    actual = checksum(memoryview(blob)[:end])
    if actual != expected:
        raise StateChecksumError(f"{where}: checksum mismatch (stored {expected:08x}, computed {actual:08x})")
    return blob[start:end]


def _read_varint(data: bytes, position: int, where: str) -> tuple[int, int]:
    value = 0
    for shift in range(0, 64, 7):
        if position >= len(data):
            break
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
    raise StateFormatError(f"{where}: malformed length in the blob header")


def _record(entries: list[object], index: int, previous: Path, where: str) -> NodeState:
    raw_path, name, raw_version, segment = entries[index : index + 4]
    number = index // 4
    if (
        type(raw_path) is not list
        or not raw_path
        or not all(type(part) is int and part >= 0 for part in raw_path)
        or raw_path[0] > len(previous)
    ):
        raise StateFormatError(f"{where}: record {number} has a malformed path {raw_path!r}")
    path = previous[: raw_path[0]] + tuple(raw_path[1:])
    if type(name) is not str or not name:
        raise StateFormatError(f"{where}: record {number} (path {format_path(path)}) has a malformed name")
    if (
        type(raw_version) is not list
        or not raw_version
        or not all(type(part) is int and part >= 0 for part in raw_version)
    ):
        raise StateFormatError(f"{where}: record {number} ({name!r}) has a malformed version {raw_version!r}")
    if type(segment) is not Segment:
        raise StateFormatError(f"{where}: record {number} ({name!r}) has no state segment")
    return NodeState(path, name, tuple(raw_version), segment.data)
