"""The keyed state table: per-key records of one operator instance, checkpointed in pages of keys.

A keyed operator (a running aggregate per key, a window per key) keeps one small record per key. Holding them in
the operator's own blob would rewrite every key at each checkpoint that follows a change to any one of them; making
each key a subscription of its own (what ``group_by`` does) costs kilobytes and microseconds per key. The table sits
between the two: keys are assigned to **pages** of ``page_size`` keys in the order they are first put, and under a
:class:`~reaqtive.core.context.HigherOrderEnvironment` (the engine, the checkpoint harness, the Spark host) each page is
an **inner unit** of the owner, saved as its own blob, so a checkpoint writes only the pages whose keys changed.

::

    class RunningCount(StatefulUnaryOperatorBase[Any, tuple[Any, int]]):
        def __init__(self, ...):
            ...
            self._table: KeyedStateTable[Any] = KeyedStateTable()

        def set_context(self, context):
            super().set_context(context)
            self._table.attach(self, context)       # pages become inner units of this operator's unit

        def on_next(self, key):
            record = self._table.get(key)
            count = 1 if record is None else record[0] + 1
            self._table.put(key, (count,))           # dirties the key's page, not the operator
            self._downstream.on_next((key, count))

        def save_state_core(self, writer):  self._table.save(writer)   # the page numbers, not the records
        def load_state_core(self, reader):  self._table.load(reader)   # the pages are back when it returns
        def on_dispose(self):               self._table.dispose()      # deletes the page units

**Where things are saved.** Hosted, the owner's blob holds the page counter and the numbers of the live pages;
page ``n`` is the inner unit ``f"{prefix}/{n}"`` (``prefix`` from ``allocate_id(owner's instance id, "keyed")``
in ``attach``, so it is the same after a restart) whose one stateful node, ``reaqtive:keyed_page``, saves the
page's keys and records. The owner is dirtied only when a page is created or deleted (once per ``page_size`` new
keys at most); a ``put`` or ``pop`` dirties the key's page only, through the page node's tracker, which reports the
page's unit to the host's dirty registry. Standalone (no such environment), the owner's blob holds every record
and each change dirties the owner.

**Order.** New keys always go to the newest page, so the pages in number order, each in its insertion order, are
the keys in first-put order; :meth:`KeyedStateTable.items` follows it, and a restart rebuilds exactly the same
order. A key popped and put again is a new key (it goes last). A page that empties is deleted (its unit too).

**Recovery.** Pages are restored eagerly: :meth:`KeyedStateTable.load` (from the owner's ``load_state_core``)
re-creates each page listed in the owner's state through ``subscribe_inner(..., restoring=True)``, which loads the
page's own blob, so every record is back (and ``get`` works) before the owner starts. A missing or damaged page
fails the owner's load, i.e. the query's recovery, instead of starting it without those keys.

**Memory.** Per key: the key and its record, one entry in the key-to-page index and one in its page's dict (no
per-key object of the table's own); measured in ``tests/state/test_keyed_table.py``.

**Threads.** None of its own: the owner calls the table from its serialized per-element path, as it changes its
other fields.

**Stored form.** A page saves its records as lists (a tuple is an extension type of the state codec, encoded
through a Python callback; a list is native msgpack) and reads them back as tuples: a record's own fields keep
their types.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Generic, TypeAlias, TypeVar

from reaqtive.core.context import HigherOrderEnvironment, OperatorContext
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state.bases import StatefulOperatorBase, StatefulUnaryOperatorBase
from reaqtive.state.state_errors import OperatorStateError
from reaqtive.state.tracking import StateChangedTracker

__all__ = ["KeyedPage", "KeyedStateTable"]

K = TypeVar("K")

Record: TypeAlias = tuple[Any, ...]
Owner: TypeAlias = StatefulOperatorBase[Any] | StatefulUnaryOperatorBase[Any, Any]

_KIND: Final = "keyed"
"""The kind of the owner's id prefix: pages are ``<owner>/keyed<n>/<page>``."""


class _Page:
    """One page: its keys' records in insertion order, and the tracker a change sets (the page node's when
    hosted, the owner's standalone)."""

    __slots__ = ("number", "records", "tracker")

    def __init__(self, number: int, tracker: StateChangedTracker) -> None:
        self.number = number
        self.records: dict[Any, Record] = {}
        self.tracker = tracker


class KeyedPage(StatefulOperatorBase[Any]):
    """The node of one page's inner unit: saves the page's keys and records, and loads them back into it.

    It never emits (its subscriber is a no-op); it exists so that the host checkpoints the page as a unit of its
    own, with the same traversals, dirty tracking and recovery as any inner subscription.
    """

    name = "reaqtive:keyed_page"
    version: Version = (1,)

    __slots__ = ("_page",)

    def __init__(self, page: _Page, downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        self._page = page
        page.tracker = self._state  # a change to the page is a change to this node: its unit is reported

    def request(self, n: int) -> None:
        pass  # never emits

    def save_state_core(self, writer: StateWriter) -> None:
        records = self._page.records
        writer.write(list(records))
        writer.write([list(record) for record in records.values()])

    def load_state_core(self, reader: StateReader) -> None:
        keys = reader.read_list("keys")
        if not keys:
            raise reader.invalid("keys", "at least one key (a page that empties is deleted)", keys)
        records = reader.read_list("records", length=len(keys), of=list)
        try:
            loaded = dict(zip(keys, map(tuple, records), strict=True))
        except TypeError as error:  # an unhashable key cannot have been saved: a forged store
            raise reader.invalid("keys", f"hashable keys ({error})", keys) from error
        if len(loaded) != len(keys):
            raise reader.invalid("keys", "distinct keys", keys)
        self._page.records = loaded


class _PageSource(Subscribable[Any]):
    """What the environment subscribes to create a page's unit: a :class:`KeyedPage` over ``page``."""

    __slots__ = ("_page",)

    def __init__(self, page: _Page) -> None:
        self._page = page

    def subscribe_core(self, observer: Subscriber[Any]) -> SubscriptionHandle:
        return KeyedPage(self._page, observer)


class KeyedStateTable(Generic[K]):
    """Per-key records (plain tuples of storable values) of ONE operator instance, checkpointed in pages: a
    checkpoint writes only the pages holding keys that changed since the last one (see the module)."""

    __slots__ = (
        "_context",
        "_counter",
        "_environment",
        "_last",
        "_owner_tracker",
        "_page_size",
        "_pages",
        "_prefix",
        "index",
    )

    def __init__(self, *, page_size: int = 1024) -> None:
        if type(page_size) is not int or page_size < 1:
            raise ValueError(f"KeyedStateTable: page_size must be an int >= 1, got {page_size!r}")
        self._page_size = page_size
        # key -> its page. Public for owners' per-element paths (the same dict for the table's life, so an owner may
        # keep it): ``page.records[key]`` is the record; an owner that writes it there directly (an existing key
        # only) sets ``page.tracker.changed = True``, as put does.
        self.index: dict[K, _Page] = {}
        self._pages: dict[int, _Page] = {}  # by number, in creation (= number) order
        self._last: _Page | None = None  # the newest page: where new keys go
        self._counter = 0  # the number of the next page
        self._owner_tracker = StateChangedTracker()  # replaced by the owner's in attach
        self._environment: HigherOrderEnvironment | None = None
        self._context: OperatorContext | None = None
        self._prefix = ""

    def attach(self, owner: Owner, context: OperatorContext) -> None:
        """Bind the table to its owner: call from the owner's ``set_context``, after ``super().set_context``.
        Hosted (a :class:`~reaqtive.core.context.HigherOrderEnvironment` in ``context``), pages become inner units of
        the owner's unit; standalone, the owner's blob holds every record."""
        self._owner_tracker = owner._state
        self._context = context
        environment = context.execution_environment
        if isinstance(environment, HigherOrderEnvironment):
            self._environment = environment
            self._prefix = environment.allocate_id(context.instance_id, _KIND)
        else:
            self._environment = None
            self._prefix = f"{context.instance_id}/{_KIND}"
        for page in self._pages.values():  # put before attach (unusual): the pages move to their home now
            page.tracker = self._owner_tracker
            self._home(page, restoring=False)

    @property
    def hosted(self) -> bool:
        """Whether pages are inner units of an environment (``attach`` found one)."""
        return self._environment is not None

    @property
    def page_size(self) -> int:
        """The keys a page receives before the next page is opened."""
        return self._page_size

    def page_id(self, number: int) -> str:
        """The unit id of page ``number`` (hosted)."""
        return f"{self._prefix}/{number}"

    def page_ids(self) -> list[str]:
        """The unit ids of the live pages, in order (diagnostics and tests)."""
        return [self.page_id(number) for number in self._pages]

    # -- records -------------------------------------------------------------------------------------------------

    def get(self, key: K) -> Record | None:
        """The record of ``key``, or ``None``."""
        page = self.index.get(key)
        return None if page is None else page.records[key]

    def put(self, key: K, record: Record) -> None:
        """Set the record of ``key`` (a tuple of storable values); dirties the key's page only."""
        page = self.index.get(key)
        if page is None:
            page = self._last
            if page is None or len(page.records) >= self._page_size:
                page = self._open_page()
            self.index[key] = page
        page.records[key] = record
        page.tracker.changed = True

    def pop(self, key: K) -> Record | None:
        """Remove ``key`` and return its record (``None`` if absent); a page that empties is deleted."""
        page = self.index.pop(key, None)
        if page is None:
            return None
        records = page.records
        record = records.pop(key)
        if records:
            page.tracker.changed = True
        else:
            self._drop_page(page)
        return record

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, key: object) -> bool:
        return key in self.index

    def items(self) -> Iterator[tuple[K, Record]]:
        """``(key, record)`` in first-put order. Each page is copied when reached, so the owner may put and pop
        while iterating (what it changes in pages not reached yet is seen; pages opened meanwhile are not)."""
        for page in list(self._pages.values()):
            yield from list(page.records.items())

    # -- pages ---------------------------------------------------------------------------------------------------

    def _open_page(self) -> _Page:
        number = self._counter
        self._counter = number + 1
        page = _Page(number, self._owner_tracker)
        self._pages[number] = page
        self._last = page
        if self._environment is not None:
            self._home(page, restoring=False)
        self._owner_tracker.changed = True  # the page list is the owner's state (standalone: every record is)
        return page

    def _home(self, page: _Page, *, restoring: bool) -> None:
        """Make ``page`` an inner unit (hosted): its node takes over the page's tracker and, ``restoring``,
        loads the page's saved records into it."""
        environment, context = self._environment, self._context
        if environment is None or context is None:
            return
        environment.subscribe_inner(
            self.page_id(page.number), _PageSource(page), NOP_SUBSCRIBER, context, restoring=restoring
        )

    def _drop_page(self, page: _Page) -> None:
        del self._pages[page.number]
        if self._last is page:
            # The page before it becomes the newest: keys appended there still follow every earlier key.
            self._last = next(reversed(self._pages.values()), None)
        if self._environment is not None:
            self._environment.delete_inner(self.page_id(page.number))
        self._owner_tracker.changed = True

    # -- state -----------------------------------------------------------------------------------------------------

    def save(self, writer: StateWriter) -> None:
        """Write the owner's part: hosted, the page counter and the live page numbers (each page saves its own
        records as a unit); standalone, every key and record. Call from the owner's ``save_state_core``."""
        if self._environment is not None:
            writer.write(True)
            writer.write(self._counter)
            writer.write(list(self._pages))
            return
        writer.write(False)
        writer.write(list(self.index))
        writer.write([list(record) for _, record in self.items()])

    def load(self, reader: StateReader) -> None:
        """Read what :meth:`save` wrote, from the owner's ``load_state_core``; hosted, re-creates every page
        from its own blob before returning (a page whose state is missing or fails to load raises). A table
        saved standalone is loaded into new pages under an environment (they are saved at the next checkpoint)."""
        paged = reader.read_bool("paged")
        self._reset()
        if paged:
            self._load_pages(reader)
            return
        keys = reader.read_list("keys")
        records = reader.read_list("records", length=len(keys), of=list)
        try:
            for key, record in zip(keys, records, strict=True):
                if key in self.index:
                    raise reader.invalid("keys", "distinct keys", key)
                self.put(key, tuple(record))
        except TypeError as error:  # an unhashable key cannot have been saved: a forged store
            raise reader.invalid("keys", f"hashable keys ({error})", keys) from error

    def _load_pages(self, reader: StateReader) -> None:
        counter = reader.read_int("page counter")
        numbers = reader.read_list("pages", of=int)
        previous = -1
        for number in numbers:
            if not previous < number < counter:
                raise reader.invalid("pages", f"page numbers rising from 0 to below the counter {counter}", numbers)
            previous = number
        if self._environment is None:
            raise OperatorStateError(
                f"{self._prefix}: the keyed state was saved in pages (inner units), which only a "
                "HigherOrderEnvironment (the engine, reaqtive.state.InnerEnvironment) can restore"
            )
        self._counter = counter
        index = self.index
        for number in numbers:
            page = _Page(number, self._owner_tracker)
            self._pages[number] = page
            self._home(page, restoring=True)
            for key in page.records:
                if index.setdefault(key, page) is not page:
                    raise reader.invalid("pages", "each key in one page", key)
            self._last = page

    def _reset(self) -> None:
        """Forget every page in memory (before a load: the table is normally empty then)."""
        for page in list(self._pages.values()):
            if self._environment is not None:
                self._environment.delete_inner(self.page_id(page.number))
        self.index.clear()  # the same dict: owners may hold it
        self._pages = {}
        self._last = None
        self._counter = 0

    def clear(self) -> None:
        """Forget every key (the owner completed): the pages are deleted, their units too (hosted), and the
        owner is dirtied; the table stays usable."""
        had_pages = bool(self._pages)
        self.dispose()
        if had_pages:
            self._owner_tracker.changed = True

    def dispose(self) -> None:
        """The owner is disposed: delete the page units (hosted, their stored state goes at the next checkpoint)
        and forget every record. Call from the owner's ``on_dispose``."""
        pages, self._pages = list(self._pages.values()), {}
        self.index.clear()  # the same dict: owners may hold it
        self._last = None
        environment = self._environment
        if environment is not None:
            for page in pages:
                environment.delete_inner(self.page_id(page.number))

    def __repr__(self) -> str:
        return f"<KeyedStateTable {len(self.index)} keys in {len(self._pages)} pages>"
