"""The stateful operator bases: disposed flag first, restore-as-disposed, versions and a migration."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive import OperatorContext, SimpleSubject
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.visitors import initialize
from reaqtive.state import (
    BlobWriter,
    DirtyState,
    StateFormatError,
    StateVersionError,
    read_blob,
    save_subscription,
    state_loader,
)
from tests.state.support import RunningSum
from tests.support import Recorder

CONTEXT = OperatorContext("test://bases")


def running(
    subject: SimpleSubject[int], recorder: Recorder, blob: bytes | None = None, cls: type[Any] = RunningSum
) -> Any:
    operator = cls(subject, recorder)
    initialize(operator, CONTEXT, load_state=state_loader(blob) if blob is not None else None)
    return operator


def test_running_sum_continues_after_save_and_load_into_a_fresh_operator() -> None:
    subject, recorder = SimpleSubject[int](), Recorder(initial=100)
    first = running(subject, recorder)
    for value in (1, 2, 3):
        subject.on_next(value)
    blob = save_subscription(first)
    assert blob is not None

    subject2, recorder2 = SimpleSubject[int](), Recorder(initial=100)
    second = running(subject2, recorder2, blob)
    subject2.on_next(4)
    assert recorder.values == [1, 3, 6] and recorder2.values == [10]
    assert (second.total, second.count) == (10, 4)


def test_the_disposed_flag_is_written_first() -> None:
    subject = SimpleSubject[int]()
    operator = running(subject, Recorder(initial=1))
    subject.on_next(5)
    reader = read_blob(save_subscription(operator) or b"")[0].reader()
    assert [reader.read(), reader.read(), reader.read()] == [False, 5, 1]
    operator.dispose()
    reader = read_blob(save_subscription(operator) or b"")[0].reader()
    assert reader.read() is True


def test_disposing_marks_the_node_changed_so_termination_is_checkpointed() -> None:
    operator = running(SimpleSubject[int](), Recorder())
    save_subscription(operator)
    operator.on_state_saved()
    assert not operator.state_changed
    operator.dispose()
    assert operator.state_status is DirtyState.CHANGED


def test_a_node_restored_as_disposed_disposes_on_start_without_starting() -> None:
    subject = SimpleSubject[int]()
    operator = running(subject, Recorder(initial=10))
    subject.on_next(1)
    operator.on_complete()  # terminates: disposed
    assert operator.is_disposed
    blob = save_subscription(operator)
    assert blob is not None

    subject2, recorder2 = SimpleSubject[int](), Recorder(initial=10)
    restored = RunningSum(subject2, recorder2)
    starts: list[str] = []
    restored.on_start = lambda: starts.append("started")  # type: ignore[method-assign]
    initialize(restored, CONTEXT, load_state=state_loader(blob))
    assert restored.is_disposed and restored.is_started
    assert starts == [] and recorder2.subscribed == 0, "never offered downstream, never started"
    assert subject2.subscriber_count == 0, "its input was disposed"
    subject2.on_next(7)
    assert recorder2.values == []
    assert not restored.state_changed, "a dispose caused by the restored state is not a change"


def test_is_disposed_is_true_right_after_loading_a_disposed_state() -> None:
    operator = running(SimpleSubject[int](), Recorder())
    operator.dispose()
    blob = save_subscription(operator) or b""
    fresh = RunningSum(SimpleSubject[int](), Recorder())
    fresh.subscribe()
    fresh.set_context(CONTEXT)
    state_loader(blob)(fresh)
    assert fresh.is_disposed and not fresh.is_started


class RunningSumV2(RunningSum):
    """Version 2 also saves the largest element; it still loads version 1 (a migration)."""

    version: Version = (2,)
    older_versions = frozenset({(1,)})

    def __init__(self, source: Any, downstream: Any) -> None:
        super().__init__(source, downstream)
        self.largest: int | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self.largest)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self.largest = reader.read()

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        assert version == (1,)
        super().load_state_core(reader)  # v1: total, count; the largest element was not kept
        self.largest = None


class RunningSumV3(RunningSum):
    version: Version = (3,)


def test_a_declared_older_version_is_migrated() -> None:
    subject = SimpleSubject[int]()
    v1 = running(subject, Recorder(initial=10))
    subject.on_next(4)
    subject.on_next(5)
    blob = save_subscription(v1) or b""

    v2 = running(SimpleSubject[int](), Recorder(initial=10), blob, RunningSumV2)
    assert (v2.total, v2.count, v2.largest) == (9, 2, None)
    assert read_blob(save_subscription(v2) or b"")[0].version == (2,), "it saves its own version from now on"


def test_an_undeclared_version_is_an_error_naming_operator_path_and_both_versions() -> None:
    blob = save_subscription(running(SimpleSubject[int](), Recorder())) or b""
    with pytest.raises(
        StateVersionError, match=r"'test:running_sum' at path 0: state has version 1, .* version 3"
    ) as raised:
        running(SimpleSubject[int](), Recorder(), blob, RunningSumV3)
    assert (raised.value.saved, raised.value.current, raised.value.path) == ((1,), (3,), (0,))


def test_a_newer_saved_version_is_refused_too() -> None:
    blob = save_subscription(running(SimpleSubject[int](), Recorder(), cls=RunningSumV2)) or b""
    with pytest.raises(StateVersionError, match="version 2"):
        running(SimpleSubject[int](), Recorder(), blob)


def test_direct_load_and_save_check_versions() -> None:
    operator = running(SimpleSubject[int](), Recorder())
    node = read_blob(save_subscription(operator) or b"")[0]
    with pytest.raises(StateVersionError, match="at path 0"):
        operator.load_state(node.reader(), (9,))
    with pytest.raises(StateVersionError, match="current version"):
        operator.save_state(node.reader(), (9,))  # type: ignore[arg-type]


class DeclaresButCannotMigrate(RunningSum):
    version: Version = (2,)
    older_versions = frozenset({(1,)})


def test_declaring_an_older_version_without_a_migration_is_an_error() -> None:
    blob = save_subscription(running(SimpleSubject[int](), Recorder())) or b""
    with pytest.raises(StateVersionError, match="load_older_state_core"):
        running(SimpleSubject[int](), Recorder(), blob, DeclaresButCannotMigrate)


def test_a_disposed_flag_that_is_not_a_bool_is_a_format_error() -> None:
    writer = BlobWriter()
    writer.write_node((0,), "test:running_sum", (1,), lambda w, v: (w.write(0), w.write(1), w.write(1)))
    with pytest.raises(StateFormatError, match="disposed flag must be a bool"):
        running(SimpleSubject[int](), Recorder(), writer.finish())


def test_repr_shows_the_dirty_state() -> None:
    operator = running(SimpleSubject[int](), Recorder())
    assert "never saved" in repr(operator)
