"""The engine's own rows in the checkpoint store: their categories, how a record or a counter is written as bytes, and
what a record names (the URIs an expression reads; the observers that are no artifacts). Every part that commits an
engine row uses these (the registry, checkpoints, upgrades, recovery).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from reaqtive.engine.database import EngineStore
from reaqtive.engine.expressions import expression_from_json, expression_to_json
from reaqtive.engine.model import DISCARD_SINK, DURABLE_SINK

__all__ = ["ARTIFACTS", "BUILTIN_OBSERVERS", "DELIVERY", "ENGINE", "OBSERVED", "OUTPUTS", "SOURCES", "TEMPLATES",
           "commit_changes", "counter_bytes", "from_bytes", "now_text", "owned_by", "references_of", "to_bytes"]

ARTIFACTS: Final = "artifacts"
TEMPLATES: Final = "templates"
ENGINE: Final = "engine"
DELIVERY: Final = "delivery"
OUTPUTS: Final = "outputs"  # per subscription, the next output sequence number (when it moved)
OBSERVED: Final = "observed"  # per subscription with an observer function, the last output it received
SOURCES: Final = "sources"  # per source registered with register_source, its position (opaque bytes)
BUILTIN_OBSERVERS: Final = frozenset({DURABLE_SINK, DISCARD_SINK})  # observers that are no stored artifacts


def counter_bytes(value: int) -> bytes:
    return str(value).encode("ascii")


def to_bytes(record: Mapping[str, Any]) -> bytes:
    return expression_to_json(record).encode("utf-8")


def from_bytes(blob: bytes, where: str) -> dict[str, Any]:
    try:
        return expression_from_json(blob)
    except Exception as error:
        raise ValueError(f"{where}: {error}") from error


def now_text() -> str:
    return datetime.now(UTC).isoformat()


def commit_changes(
    store: EngineStore, puts: Iterable[tuple[str, str, bytes]] = (), deletes: Iterable[tuple[str, str]] = ()
) -> None:
    """Write ``puts`` and delete ``deletes`` in one transaction of the store (rolled back if any step fails)."""
    transaction = store.checkpoints.begin()
    try:
        for category, key, blob in puts:
            transaction.put(category, key, blob)
        for category, key in deletes:
            transaction.delete(category, key)
        transaction.commit()
    except BaseException:
        transaction.rollback()
        raise


def references_of(expression: Any) -> set[str]:
    """The stream/definition URIs an encoded expression reads."""
    found: set[str] = set()
    stack = [expression]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "stream" in node and len(node) == 1:
                found.add(node["stream"])
            else:
                stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def owned_by(key: str, owners: set[str]) -> bool:
    """Whether state key ``key`` is one of ``owners`` or one of their inner units (``owner/...``)."""
    if key in owners:
        return True
    cut = key.find("/")
    while cut != -1:
        if key[:cut] in owners:
            return True
        cut = key.find("/", cut + 1)
    return False
