"""The artifacts' records: a part of the engine that owns them (the registry writes them as it commits each create
or delete, recovery fills them, checkpoints rewrite a backfill's once it joined), with the query templates their
subscriptions name. Records are replaced, never changed in place (their parts may be shared: see
:func:`reaqtive.engine.records.parse_artifact`).
"""

from __future__ import annotations

from typing import Any

from sortedcontainers import SortedList

from reaqtive.engine.engine_errors import ArtifactNotFoundError

__all__ = ["ArtifactRecords"]


class ArtifactRecords(dict[str, dict[str, Any]]):
    """The artifacts' records by URI (see the module docstring), with the subscription URIs kept sorted, so that
    a URI nested with a subscription's (``a`` and ``a/b``) is found without scanning them all; ``templates``: the
    query templates of the subscriptions, by id."""

    def __init__(self) -> None:
        super().__init__()
        self._subscriptions: SortedList = SortedList()
        self.templates: dict[str, dict[str, Any]] = {}

    def __setitem__(self, uri: str, record: dict[str, Any]) -> None:
        if uri in self:
            self._forget(uri)
        super().__setitem__(uri, record)
        if record.get("kind") == "subscription":
            self._subscriptions.add(uri)

    def __delitem__(self, uri: str) -> None:
        self._forget(uri)
        super().__delitem__(uri)

    def pop(self, uri: str, *default: Any) -> Any:
        if uri in self:
            self._forget(uri)
        return super().pop(uri, *default)

    def _forget(self, uri: str) -> None:
        if self[uri].get("kind") == "subscription":
            self._subscriptions.discard(uri)

    def subscription_nested_with(self, uri: str) -> str | None:
        """A subscription URI that ``uri`` starts with, followed by ``/``, or one that starts with ``uri/``."""
        for cut in range(len(uri) - 1, 0, -1):
            if uri[cut] == "/" and self._is_subscription(uri[:cut]):
                return uri[:cut]
        prefix = uri + "/"
        index = self._subscriptions.bisect_left(prefix)
        if index < len(self._subscriptions) and self._subscriptions[index].startswith(prefix):
            return str(self._subscriptions[index])
        return None

    def _is_subscription(self, uri: str) -> bool:
        record = self.get(uri)
        return record is not None and record.get("kind") == "subscription"

    def require(self, uri: str) -> dict[str, Any]:
        """The record of ``uri``; :class:`ArtifactNotFoundError` if there is none."""
        record = self.get(uri)
        if record is None:
            raise ArtifactNotFoundError(f"no artifact {uri!r}")
        return record

    def check_kind(self, uri: str, kind: str) -> dict[str, Any]:
        """The record of ``uri``, which must be of ``kind``."""
        record = self.require(uri)
        if record["kind"] != kind:
            raise ArtifactNotFoundError(f"{uri!r} is a {record['kind']}, not a {kind}")
        return record

    def template_of(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The query template a subscription's record names (``None``: not in the store)."""
        return self.templates.get(record["template"])

    def template_used_besides(self, tid: str, uri: str) -> bool:
        """Whether a subscription other than ``uri`` uses template ``tid`` (else it goes with ``uri``)."""
        return any(record.get("template") == tid for other, record in self.items() if other != uri)

    def users_of(self, uri: str) -> list[str]:
        """The artifacts that refer to ``uri``, sorted."""
        return sorted(other for other, record in self.items() if uri in record.get("refs", ()))

    def streams_read(self, references: list[str]) -> list[str]:
        """The streams among ``references``, and those the definitions among them read, transitively."""
        streams: set[str] = set()
        seen: set[str] = set()
        pending = list(references)
        while pending:
            ref = pending.pop()
            record = self.get(ref)
            if ref in seen or record is None:
                continue
            seen.add(ref)
            if record["kind"] == "stream":
                streams.add(ref)
            elif record["kind"] == "observable":
                pending.extend(record.get("refs", ()))
        return sorted(streams)

