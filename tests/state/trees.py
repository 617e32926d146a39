"""A fixed-shape tree of test nodes, to save from and load into."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reaqtive.core.context import OperatorContext
from reaqtive.core.visitors import set_context_all, subscribe_all
from tests.state.support import Box, Plain

CONTEXT = OperatorContext("test://state")


class Tree:
    """``a(b, plain(c), d)``: three stateful nodes at paths 0, 0/0, 0/1/0 and 0/2, with a stateless one between."""

    def __init__(self, fields: Sequence[Sequence[Any]] = ((), (), (), ())) -> None:
        self.c = Box("test:c", fields=fields[2])
        self.b = Box("test:b", fields=fields[1])
        self.d = Box("test:d", fields=fields[3])
        self.a = Box("test:a", [self.b, Plain([self.c]), self.d], fields=fields[0])
        subscribe_all(self.a)
        set_context_all(self.a, CONTEXT)

    @property
    def boxes(self) -> list[Box]:
        return [self.a, self.b, self.c, self.d]

    @property
    def fields(self) -> list[list[Any]]:
        return [box.fields for box in self.boxes]
