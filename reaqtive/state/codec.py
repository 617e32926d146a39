"""Value encoding of operator state: msgpack, with a closed set of extension types. Never pickle.

Supported out of the box: ``None``, ``bool``, ``int`` (any size), ``float``, ``str``, ``bytes``, ``list``,
``tuple`` (kept distinct from ``list``), ``dict`` (any supported hashable keys), ``set``, ``frozenset``,
``datetime.datetime`` and ``datetime.timedelta``. Any other type, including subclasses of the above (an
``IntEnum``, a ``NamedTuple``, a ``defaultdict``), must be registered with an explicit encode/decode pair::

    register_state_type(Point, "myapp:Point", lambda p: (p.x, p.y), lambda v: Point(*v))

Types are matched exactly, so a value never silently comes back as another type (one exception, inherited
from msgpack: ``bytearray`` and ``memoryview`` are saved as ``bytes`` and come back as ``bytes``). Decoding runs
no code except the registered decoders, so loading state from a store cannot execute what the store contains.

Datetimes keep their wall time and UTC offset (``fold`` and the zone *name* are not kept: a ``ZoneInfo``
datetime comes back with a fixed-offset ``timezone``, equal to the original instant).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from itertools import chain
from typing import Any, Final, TypeVar

import msgpack

from reaqtive.state.state_errors import StateEncodeError, StateError, StateFormatError

__all__ = ["DEFAULT_CODEC", "StateCodec", "register_state_type"]

T = TypeVar("T")

# msgpack extension type codes. They are part of the persisted format: never renumber.
EXT_SEGMENT: Final = 0
EXT_TUPLE: Final = 1
EXT_BIGINT: Final = 2
EXT_DATETIME: Final = 3
EXT_TIMEDELTA: Final = 4
EXT_SET: Final = 5
EXT_FROZENSET: Final = 6
EXT_USER: Final = 7
# Not a value: in a run of outputs the engine writes, "the next ``count`` entries are msgpack arrays, each read as
# a tuple" (see :meth:`StateCodec.new_tuple_run_packer`). A reader older than it refuses it as an unknown extension.
EXT_TUPLE_RUN: Final = 8
_TUPLE_RUN_HEAD: Final = b"\xd6\x08"  # fixext 4, type 8: the count follows, 4 bytes big-endian
# The types msgpack packs the same with strict_types on and off: a flat tuple of these packs as an array of the
# same item bytes as its EXT_TUPLE entry holds. (Subclasses, e.g. an IntEnum or a bool seen as an int, are not.)
_RUN_SCALARS: Final = frozenset({type(None), bool, int, float, str, bytes})

class _Nesting:
    """A thread's packers for nested values, one per depth, and the depth in use."""

    __slots__ = ("depth", "packers")

    def __init__(self) -> None:
        self.depth = 0
        self.packers: list[Callable[[object], bytes]] = []


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    """``msgpack.ExtType(code, data)`` without its argument checks (written in Python, they cost more than the
    packing): our codes are in range and our data is bytes."""
    return _TUPLE_NEW(_EXT_TYPE, (code, data))


_TUPLE_NEW: Final = tuple.__new__
_EXT_TYPE: Final = msgpack.ExtType

_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_ORDINAL: Final = _EPOCH.toordinal()
_MICROSECOND: Final = timedelta(microseconds=1)
_BUILTIN_TYPES: Final = frozenset(
    {type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset, datetime, timedelta}
)


class Segment:
    """A nested segment met while decoding: the raw bytes of a child writer, decoded only when opened."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


@dataclass(frozen=True, slots=True)
class _Registration:
    cls: type[Any]
    tag: str
    encode: Callable[[Any], object]
    decode: Callable[[Any], object]


class StateCodec:
    """Encodes and decodes state values; holds the registered user types.

    Most code uses :data:`DEFAULT_CODEC` (through :func:`register_state_type`); a separate codec isolates a
    set of registrations, e.g. in tests. Thread-safe: encoders are per thread, registrations are guarded.
    """

    def __init__(self) -> None:
        self._by_type: dict[type[Any], _Registration] = {}
        self._by_tag: dict[str, _Registration] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- registration ------------------------------------------------------------------------------------------

    def register(
        self,
        cls: type[T],
        tag: str,
        encode: Callable[[T], object],
        decode: Callable[[Any], T],
    ) -> None:
        """Let values of exactly ``cls`` be saved: ``encode(value)`` returns something saveable, and
        ``decode(that)`` rebuilds the value. ``tag`` is persisted; like operator names it never changes once
        released (``"myapp:Point"``). Registering the same class under the same tag again replaces the pair."""
        if not isinstance(cls, type):
            raise TypeError(f"cls must be a type, got {cls!r}")
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"tag must be a non-empty str, got {tag!r}")
        if not callable(encode) or not callable(decode):
            raise TypeError("encode and decode must be callable")
        if cls in _BUILTIN_TYPES:
            raise ValueError(f"{cls.__qualname__} is saved natively and cannot be registered")
        with self._lock:
            by_tag = self._by_tag.get(tag)
            if by_tag is not None and by_tag.cls is not cls:
                raise ValueError(f"state type tag {tag!r} is already registered for {by_tag.cls.__qualname__}")
            by_type = self._by_type.get(cls)
            if by_type is not None and by_type.tag != tag:
                raise ValueError(f"{cls.__qualname__} is already registered under the tag {by_type.tag!r}")
            registration = _Registration(cls, tag, encode, decode)
            self._by_type[cls] = registration
            self._by_tag[tag] = registration

    def registered_tags(self) -> list[str]:
        """The tags of the registered user types, sorted."""
        return sorted(self._by_tag)

    # -- encoding ----------------------------------------------------------------------------------------------

    def packer(self) -> Callable[[object], bytes]:
        """The calling thread's encoder: ``pack(value) -> bytes``. Raises :class:`StateEncodeError` (plain
        msgpack errors are translated) for a value that cannot be saved."""
        pack: Callable[[object], bytes] | None = getattr(self._local, "pack", None)
        if pack is None:
            pack = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True).pack
            self._local.pack = pack
        return pack

    def new_packer(self) -> Callable[[object], bytes]:
        """A packer of the caller's own, for one owner that packs from one thread at a time (the engine's output
        writers): no per-thread lookup per value. It holds a 256 KB buffer: make one per owner, not per value or
        per subscription. It raises msgpack's own errors (see :meth:`encode` for a :class:`StateEncodeError` that
        names the value)."""
        free: list[Callable[[object], bytes]] = []  # the owner's packers for a tuple's items (one per depth in use)

        def default(value: object) -> object:
            if type(value) is tuple:  # a tuple output (issue 32), without _nested's thread-local lookup
                nested = free.pop() if free else msgpack.Packer(default=default, strict_types=True,
                                                                use_bin_type=True).pack
                data = nested(list(value))  # (a packer that raised is dropped: its buffer may be half written)
                free.append(nested)
                return _TUPLE_NEW(_EXT_TYPE, (EXT_TUPLE, data))
            return self._default(value)

        pack: Callable[[object], bytes] = msgpack.Packer(default=default, strict_types=True, use_bin_type=True).pack
        return pack

    def new_tuple_run_packer(self) -> Callable[[list[Any]], bytes | None]:
        """A packer of runs of outputs, for one owner (as :meth:`new_packer`): ``pack(values)`` gives, when every
        value is a flat tuple of ``None``/``bool``/``int``/``float``/``str``/``bytes`` items (exact types), a
        :data:`EXT_TUPLE_RUN` marker of ``len(values)`` followed by each tuple packed as an array by msgpack's own
        code, with no Python call per tuple; ``None`` for any other run (then pack it as usual). Only
        :meth:`decode_entries` and :func:`resolve_tuple_run_pieces` read the marker (a run of one value is not
        worth its 6 bytes: ``None``); each array is the body of the
        :data:`EXT_TUPLE` entry the value would have had (:func:`tuple_entry`)."""
        arrays = msgpack.Packer(strict_types=False, use_bin_type=True, autoreset=True).pack
        scalars = _RUN_SCALARS
        tuple_types = {tuple}

        def pack(values: list[Any]) -> bytes | None:
            # Cheap checks, in C: a run of other values is told by its first one; then every value, every item.
            if len(values) < 2 or type(values[0]) is not tuple or set(map(type, values)) != tuple_types:
                return None
            if not scalars.issuperset(map(type, chain.from_iterable(values))):
                return None
            count = len(values)
            if count >= 1 << 32:
                return None
            try:
                packed: bytes = arrays(values)
            except (OverflowError, ValueError):  # an int beyond 64 bits, a value too long for msgpack
                return None
            header = 1 if count < 16 else 3 if count < 0x10000 else 5  # the list's array header, dropped
            return _TUPLE_RUN_HEAD + count.to_bytes(4, "big") + packed[header:]

        return pack

    def encode(self, value: object) -> bytes:
        """One value as msgpack bytes (see :meth:`packer`)."""
        try:
            return self.packer()(value)
        except StateError:
            raise
        except (TypeError, ValueError, OverflowError, RecursionError) as error:
            raise StateEncodeError(f"cannot save {_describe(value)}: {error}") from error

    def _nested(self, value: object) -> bytes:
        # The thread's packer is busy with the enclosing value: nested values use one packer per nesting depth,
        # kept per thread (a fresh packer per call cost about 5 us per tuple or datetime; the bytes are the same).
        # One thread-local lookup per call (a tuple output of the engine passes here: issue 32 measured it).
        try:
            nesting: _Nesting = self._local.nesting
        except AttributeError:
            nesting = self._local.nesting = _Nesting()
        depth = nesting.depth
        packers = nesting.packers
        if depth == len(packers):
            packers.append(msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True).pack)
        nesting.depth = depth + 1
        try:
            return packers[depth](value)
        except BaseException:
            # a failed pack may leave the packer's buffer half written: replace it
            packers[depth] = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True).pack
            raise
        finally:
            nesting.depth = depth

    def _default(self, value: object) -> msgpack.ExtType:
        """Called by msgpack for every value that is not a plain msgpack type."""
        kind = type(value)
        if kind is tuple:  # the most common, inlined: _ext(EXT_TUPLE, ...)
            return _TUPLE_NEW(_EXT_TYPE, (EXT_TUPLE, self._nested(list(value))))  # type: ignore[call-overload]
        if kind is int:  # outside the 64-bit range msgpack handles natively
            number: int = value  # type: ignore[assignment]
            return _ext(EXT_BIGINT, number.to_bytes(number.bit_length() // 8 + 1, "big", signed=True))
        if kind is datetime:
            return _ext(EXT_DATETIME, self._nested(_datetime_fields(value)))  # type: ignore[arg-type]
        if kind is timedelta:
            delta: timedelta = value  # type: ignore[assignment]
            return _ext(EXT_TIMEDELTA, self._nested([delta.days, delta.seconds, delta.microseconds]))
        if kind is set:
            return _ext(EXT_SET, self._nested(list(value)))  # type: ignore[call-overload]
        if kind is frozenset:
            return _ext(EXT_FROZENSET, self._nested(list(value)))  # type: ignore[call-overload]
        registration = self._by_type.get(kind)
        if registration is None:
            raise StateEncodeError(
                f"cannot save a value of type {kind.__module__}.{kind.__qualname__}: it is not a supported state "
                "type; register an encode/decode pair with register_state_type()"
            )
        try:
            encoded = registration.encode(value)
        except Exception as error:
            raise StateEncodeError(f"the encoder registered for {registration.tag!r} raised: {error!r}") from error
        return msgpack.ExtType(EXT_USER, self._nested([registration.tag, encoded]))

    # -- decoding ----------------------------------------------------------------------------------------------

    def decode_entries(self, data: bytes, where: str) -> list[object]:
        """Decode a segment: every top-level entry, in order; nested segments stay :class:`Segment` markers.

        Raises :class:`StateFormatError` (naming ``where``) for anything malformed: truncated data, a nested
        segment inside a value, an unknown extension, a failing registered decoder.
        """
        decoder = _Decoder(self)
        try:
            unpacker = msgpack.Unpacker(
                None,
                ext_hook=decoder.hook,
                raw=False,
                strict_map_key=False,
                max_buffer_size=max(len(data), 1),
            )
            unpacker.feed(data)
            entries = list(unpacker)
            consumed = unpacker.tell()
        except StateError:
            raise
        except Exception as error:  # any malformed input, including unhashable keys and deep nesting
            raise StateFormatError(f"{where}: malformed state data ({type(error).__name__}: {error})") from error
        if consumed != len(data):
            raise StateFormatError(f"{where}: state data is truncated ({len(data) - consumed} bytes left undecoded)")
        if decoder.runs:
            entries = _resolve_tuple_runs(entries, decoder.runs, where)
        # Only a decode that made segments can hold one: the count is skipped otherwise (a pass over every entry).
        if (decoder.segments or decoder.foreign) and decoder.segments != sum(
                1 for entry in entries if type(entry) is Segment):
            raise StateFormatError(f"{where}: malformed state data (a nested segment inside a value)")
        return entries

    def decode_run(self, data: bytes, count: int) -> list[object] | None:
        """The ``count`` entries of ``data`` (values written one after the other, no segments), decoded as one
        msgpack array in a single ``unpackb`` call: faster than :meth:`decode_entries` for many small values (the
        rows of the ingress log). ``None`` if ``data`` is not exactly that, or holds a segment: then
        :meth:`decode_entries` gives the entries, or the error, as it always did."""
        decoder = _Decoder(self)
        try:
            entries = msgpack.unpackb(_array_header(count) + data, ext_hook=decoder.hook, raw=False,
                                      strict_map_key=False)
        except Exception:  # malformed, too few or too many entries, a failing decoder, a count no array has
            return None
        if decoder.segments or decoder.foreign or decoder.runs:
            return None
        return entries  # type: ignore[no-any-return]


    def decode_value(self, data: bytes, where: str) -> object:
        """Decode bytes that :meth:`encode` wrote for one value (no nested segments): one ``unpackb`` call, for
        the many small records of a keyed table. :class:`StateFormatError` (naming ``where``) as
        :meth:`decode_entries`."""
        decoder = _Decoder(self)
        try:
            value = msgpack.unpackb(data, ext_hook=decoder.hook, raw=False, strict_map_key=False)
        except StateError:
            raise
        except Exception as error:  # malformed, truncated, or extra bytes after the value
            raise StateFormatError(f"{where}: malformed state data ({type(error).__name__}: {error})") from error
        if decoder.segments or decoder.runs:
            raise StateFormatError(f"{where}: malformed state data (a nested segment or run inside a value)")
        return value


class _Decoder:
    """The extension hook of one decode call; it counts the nested segments it produces."""

    __slots__ = ("codec", "foreign", "runs", "segments")

    def __init__(self, codec: StateCodec) -> None:
        self.codec = codec
        self.segments = 0
        self.runs = 0  # EXT_TUPLE_RUN markers met (resolved by decode_entries)
        self.foreign = 0  # Segment objects a registered decoder returned (not segments of the data)

    def _nested(self, data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=self.hook, raw=False, strict_map_key=False)

    def hook(self, code: int, data: bytes) -> object:
        if code == EXT_SEGMENT:
            self.segments += 1
            return Segment(data)
        if code == EXT_TUPLE:
            return tuple(_expect(self._nested(data), list, "tuple"))
        if code == EXT_BIGINT:
            return int.from_bytes(data, "big", signed=True)
        if code == EXT_DATETIME:
            return _datetime_from_fields(_expect(self._nested(data), list, "datetime"))
        if code == EXT_TIMEDELTA:
            days, seconds, microseconds = _expect(self._nested(data), list, "timedelta")
            return timedelta(days=days, seconds=seconds, microseconds=microseconds)
        if code == EXT_SET:
            return set(_expect(self._nested(data), list, "set"))
        if code == EXT_FROZENSET:
            return frozenset(_expect(self._nested(data), list, "frozenset"))
        if code == EXT_TUPLE_RUN:
            if len(data) != 4:
                raise StateFormatError("malformed run of tuples in state data")
            self.runs += 1
            return _TupleRun(int.from_bytes(data, "big"))
        if code == EXT_USER:
            value = self._user(_expect(self._nested(data), list, "registered type"))
            if type(value) is Segment:
                self.foreign += 1
            return value
        raise StateFormatError(f"unknown state extension type {code}")

    def _user(self, fields: list[Any]) -> object:
        tag, encoded = fields
        registration = self.codec._by_tag.get(tag)
        if registration is None:
            raise StateFormatError(
                f"state holds a value of the registered type {tag!r}, which is not registered in this process"
            )
        try:
            return registration.decode(encoded)
        except Exception as error:
            raise StateFormatError(f"the decoder registered for {tag!r} raised: {error!r}") from error


class _TupleRun:
    """An :data:`EXT_TUPLE_RUN` marker met while decoding: the next ``count`` entries are tuples."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


def _resolve_tuple_runs(entries: list[Any], runs: int, where: str) -> list[Any]:
    """``entries`` with each run marker dropped and the arrays it covers made tuples; a marker that is not a
    top-level entry (inside a value), or covers what is not an array, is malformed data."""
    resolved: list[Any] = []
    seen = 0
    at = 0
    count = len(entries)
    while at < count:  # a marked run is stepped over whole
        entry = entries[at]
        if type(entry) is not _TupleRun:
            resolved.append(entry)
            at += 1
            continue
        seen += 1
        end = at + 1 + entry.count
        arrays = entries[at + 1:end]
        if end > count or set(map(type, arrays)) - {list}:
            raise StateFormatError(f"{where}: malformed state data (a run of tuples that does not hold its arrays)")
        resolved += map(tuple, arrays)
        at = end
    if seen != runs:
        raise StateFormatError(f"{where}: malformed state data (a run of tuples inside a value)")
    return resolved


def tuple_entry(array: bytes) -> bytes:
    """The :data:`EXT_TUPLE` entry whose body is ``array`` (a tuple packed as a msgpack array): the bytes packing
    the tuple alone writes."""
    size = len(array)
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}.get(size)
    if fixed is not None:
        head = bytes((fixed, EXT_TUPLE))
    elif size < 0x100:
        head = bytes((0xC7, size, EXT_TUPLE))
    elif size < 0x10000:
        head = b"\xc8" + size.to_bytes(2, "big") + bytes((EXT_TUPLE,))
    else:
        head = b"\xc9" + size.to_bytes(4, "big") + bytes((EXT_TUPLE,))
    return head + array


def is_tuple_run(payload: bytes) -> bool:
    """Whether ``payload`` starts with an :data:`EXT_TUPLE_RUN` marker."""
    return payload.startswith(_TUPLE_RUN_HEAD)


def resolve_tuple_run_pieces(pieces: list[bytes]) -> list[bytes] | None:
    """The entries of a payload cut apart (one ``bytes`` per msgpack entry), with each :data:`EXT_TUPLE_RUN`
    marker dropped and the arrays it covers made :data:`EXT_TUPLE` entries (:func:`tuple_entry`): one
    self-contained entry per value. ``None`` if a marker covers more entries than there are."""
    if not any(len(piece) == 6 and piece.startswith(_TUPLE_RUN_HEAD) for piece in pieces):
        return pieces
    resolved: list[bytes] = []
    at = 0
    while at < len(pieces):
        piece = pieces[at]
        if len(piece) == 6 and piece.startswith(_TUPLE_RUN_HEAD):
            end = at + 1 + int.from_bytes(piece[2:], "big")
            if end > len(pieces):
                return None
            resolved += map(tuple_entry, pieces[at + 1:end])
            at = end
        else:
            resolved.append(piece)
            at += 1
    return resolved


def _array_header(count: int) -> bytes:
    """The msgpack header of an array of ``count`` entries (``ValueError``, ``OverflowError``: no array has that
    many)."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 0x10000:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def _expect(value: Any, kind: type[Any], what: str) -> Any:
    if type(value) is not kind:
        raise StateFormatError(f"malformed {what} in state data")
    return value


def _datetime_fields(value: datetime) -> list[int | None]:
    tz = value.tzinfo
    if tz is UTC:  # the common case, without the datetime arithmetic (same fields)
        ordinal = value.toordinal() - _EPOCH_ORDINAL
        return [ordinal, value.hour * 3600 + value.minute * 60 + value.second, value.microsecond, 0]
    wall = value.replace(tzinfo=None) - _EPOCH
    offset = value.utcoffset()
    offset_us = None if offset is None else offset // _MICROSECOND
    return [wall.days, wall.seconds, wall.microseconds, offset_us]


def _datetime_from_fields(fields: list[Any]) -> datetime:
    days, seconds, microseconds, offset_us = fields
    wall = _EPOCH + timedelta(days=days, seconds=seconds, microseconds=microseconds)
    if offset_us is None:
        return wall
    tz = UTC if offset_us == 0 else timezone(timedelta(microseconds=offset_us))
    return wall.replace(tzinfo=tz)


def _describe(value: object) -> str:
    kind = type(value)
    return f"a value of type {kind.__module__}.{kind.__qualname__}"


DEFAULT_CODEC: Final = StateCodec()
"""The codec writers and readers use unless given another one."""


def register_state_type(
    cls: type[T],
    tag: str,
    encode: Callable[[T], object],
    decode: Callable[[Any], T],
) -> None:
    """Register a user type with :data:`DEFAULT_CODEC` (see :meth:`StateCodec.register`)."""
    DEFAULT_CODEC.register(cls, tag, encode, decode)
