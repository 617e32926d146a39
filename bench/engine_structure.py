"""The engine's structure in figures: how many members :class:`~reaqtive.engine.Engine` has, and how many of its
private fields the classes it is made of share (the fewer, the more each part owns its state).

Run: ``python bench/engine_structure.py``. It reads the source of every class in ``Engine``'s method resolution
order (nothing runs), and counts, per private field ``self._x``, the classes that read it and those that write it
(assign it, or assign into it: ``self._x = ...``, ``self._x[k] = ...``, ``self._x.y = ...``).
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import reaqtive
from reaqtive import Query
from reaqtive.engine import Engine

_PACKAGE = str(Path(reaqtive.__file__).parent)


def _fields(cls: type) -> tuple[set[str], set[str]]:
    """The private fields of ``self`` that the class body reads, and those it writes."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    read: set[str] = set()
    written: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            name = node.attr
            if not name.startswith("_") or name.startswith("__"):
                continue
            if callable(getattr(Engine, name, None)) or isinstance(getattr(Engine, name, None), property):
                continue  # a method, not a field
            (written if isinstance(node.ctx, ast.Store) else read).add(name)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for assigned in targets:
                target = assigned
                while isinstance(target, (ast.Subscript, ast.Attribute)):
                    inner = target.value
                    if (isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name)
                            and inner.value.id == "self" and inner.attr.startswith("_")):
                        written.add(inner.attr)
                    target = inner
    return read, written


def main() -> None:
    classes = [cls for cls in Engine.__mro__ if cls is not object]
    members = {name for cls in classes for name in vars(cls) if not (name.startswith("__") and name.endswith("__"))}
    readers: dict[str, set[str]] = defaultdict(set)
    writers: dict[str, set[str]] = defaultdict(set)
    for cls in classes:
        read, written = _fields(cls)
        for name in read | written:
            readers[name].add(cls.__name__)
        for name in written:
            writers[name].add(cls.__name__)
    stubs = sum(
        1 for cls in classes for value in vars(cls).values()
        if inspect.isfunction(value) and "raise NotImplementedError" in inspect.getsource(value)
    )
    shared = sorted(name for name, users in readers.items() if len(users) > 1)
    fields = set(readers)
    print(f"classes in Engine's MRO: {len(classes)} ({', '.join(cls.__name__ for cls in classes)})")
    print(f"Engine members (methods, properties, class attributes): {len(members)}; "
          f"private fields on self: {len(fields)}")
    print(f"'raise NotImplementedError' stubs: {stubs}")
    print(f"private fields used by more than one class: {len(shared)}; written in more than one: "
          f"{sum(1 for name in shared if len(writers[name]) > 1)}; used in three or more: "
          f"{sum(1 for name in shared if len(readers[name]) >= 3)}")
    for name in shared:
        print(f"  {name:<26} used by {len(readers[name])}, written by {len(writers[name])}: "
              f"{', '.join(sorted(readers[name]))}")
    for name, (files, moves) in _traces().items():
        print(f"traced, {name}: {files} files of the package, {moves} moves between them")


def _trace(action: Callable[[], object]) -> tuple[int, int]:
    """The package's files that ``action`` runs code in, and how often a call crosses from one to another (a call
    and its return each count, as a walk through them would)."""
    files: set[str] = set()
    moves = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal moves
        if event not in ("call", "return"):
            return
        here, there = frame.f_code.co_filename, frame.f_back.f_code.co_filename if frame.f_back else ""
        if here.startswith(_PACKAGE):
            files.add(here)
            if there.startswith(_PACKAGE) and there != here:
                moves += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return len(files), moves


def _traces() -> dict[str, tuple[int, int]]:
    """One event's process() and one checkpoint, on an engine with one subscription (map, filter, scan)."""
    with Engine.in_memory(start=datetime(2026, 1, 1, tzinfo=UTC)) as engine:
        engine.create_stream("numbers")
        query = Query.stream("numbers").map(abs).filter(bool).scan(0, max)
        engine.create_subscription("sub", query)
        engine.process()
        engine.checkpoint()
        engine.append("numbers", 1)
        process = _trace(engine.process)
        engine.append("numbers", 2)
        engine.process()
        checkpoint = _trace(engine.checkpoint)
    return {"one event's process()": process, "one checkpoint": checkpoint}


if __name__ == "__main__":
    main()
