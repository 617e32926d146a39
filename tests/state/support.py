"""Small operators for the state tests: a running sum (the pattern issue 6 will follow) and tree builders."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from reaqtive.core.operator import OperatorBase, StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import StatefulOperatorBase, StatefulUnaryOperatorBase


class RunningSum(StatefulUnaryOperatorBase[int, int]):
    """Emits the running sum of its input. State: the sum and how many elements were added."""

    name = "test:running_sum"
    version: Version = (1,)

    def __init__(self, source: Subscribable[int], downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self._source = source
        self.total = 0
        self.count = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self.total)
        writer.write(self.count)

    def load_state_core(self, reader: StateReader) -> None:
        self.total = reader.read()
        self.count = reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: int) -> None:
        self.total += value
        self.count += 1
        self.state_changed = True
        self._downstream.on_next(self.total)


class Plain(OperatorBase[Any]):
    """A stateless node with fixed children (traversal tests)."""

    def __init__(self, children: Sequence[SubscriptionHandle] = ()) -> None:
        super().__init__(NOP_SUBSCRIBER)
        self._children = tuple(children)

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return self._children

    def request(self, n: int) -> None:
        pass


class Box(StatefulOperatorBase[Any]):
    """A stateful node with a per-instance name, free-form fields and fixed children (traversal tests)."""

    def __init__(
        self,
        name: str,
        children: Sequence[SubscriptionHandle] = (),
        fields: Sequence[Any] = (),
        version: Version = (1,),
    ) -> None:
        super().__init__(NOP_SUBSCRIBER)
        self._name = name
        self._version = version
        self._children = tuple(children)
        self.fields = list(fields)

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> Version:
        return self._version

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return self._children

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(len(self.fields))
        inner = writer.create_child()  # the fields go in a nested segment, to exercise those too
        for value in self.fields:
            inner.write(value)

    def load_state_core(self, reader: StateReader) -> None:
        count = reader.read()
        inner = reader.create_child()
        self.fields = [inner.read() for _ in range(count)]

    def touch(self, *fields: Any) -> None:
        self.fields = list(fields)
        self.state_changed = True

    def request(self, n: int) -> None:
        pass
