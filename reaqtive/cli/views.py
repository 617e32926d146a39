"""What ``reaqtive inspect --outputs/--state/--graph/--plan`` print: one artifact's outputs and state decoded, its
query as a Mermaid graph and its plan (which path each stage runs on; this one imports what the query names, from
the modules ``--allow-module`` allows), read from the store (a file or a PostgreSQL database) read-only, like
:func:`~reaqtive.engine.inspection.read_store`.

The store is first checked by :func:`~reaqtive.engine.inspection.read_store` (so a missing or foreign file is
refused the same way), then read through SQLite's read-only mode or a PostgreSQL ``READ ONLY`` transaction:
nothing is written, no engine is opened and (but for ``--plan``) no function the queries name is imported. Values
are decoded with
the default state codec: a value of a user type registered with ``register_state_type`` in the service (not in
this process) cannot be decoded and is shown as such, with the reason, instead of failing the whole listing.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from reaqtive.core.expression import Expression
from reaqtive.engine.database import egress_checksum
from reaqtive.engine.inspection import ArtifactSummary, StoreSummary, describe_expression, open_read_only
from reaqtive.state import STATE_CATEGORY, StateError
from reaqtive.state.codec import DEFAULT_CODEC, Segment
from reaqtive.state.framing import read_blob
from reaqtive.state.sqlite_store import row_checksum, verifies

if TYPE_CHECKING:
    from reaqtive.engine.expressions import FunctionRegistry
    from reaqtive.operators.plan import QueryPlan

__all__ = [
    "NodeView",
    "Undecodable",
    "declared_fields",
    "field_names",
    "find_artifact",
    "jsonable",
    "mermaid_graph",
    "query_plan",
    "read_outputs",
    "read_state",
]


class Undecodable:
    """A value that could not be decoded here (shown with why)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<undecodable: {self.reason}>"


def find_artifact(summary: StoreSummary, uri: str) -> ArtifactSummary:
    """The artifact ``uri`` of the store; :class:`LookupError` listing what there is if it has none."""
    for artifact in summary.artifacts:
        if artifact.uri == uri:
            return artifact
    known = ", ".join(a.uri for a in summary.artifacts) or "none"
    raise LookupError(f"{summary.path}: no artifact {uri!r} (artifacts: {known})")


# -- outputs -------------------------------------------------------------------------------------------------------


def read_outputs(store: str | os.PathLike[str], subscription: str) -> list[tuple[int, Any]]:
    """The durable sink's outputs of ``subscription`` in the store ``store`` names (a file or a DSN):
    ``(seq, value)`` in sequence order. A damaged row becomes one ``(seq, Undecodable)`` entry for its last output
    (its neighbours are still listed)."""
    with open_read_only(store) as db:
        columns = db.columns("reaqtive_egress")
        count = "count" if "count" in columns else "1"  # layouts 1 and 2: one output per row
        crc = "crc" if "crc" in columns else "NULL"  # layout 1: no checksums
        rows = db.all(f"SELECT seq, {count}, payload, {crc} FROM reaqtive_egress WHERE subscription = ? "
                      "ORDER BY seq", (subscription,))
        checked = "count" in columns
    outputs: list[tuple[int, Any]] = []
    for last, size, payload, row_crc in rows:
        if type(payload) is not bytes or type(size) is not int or size < 1:
            outputs.append((last, Undecodable("damaged row")))
            continue
        if checked and not verifies(row_crc, egress_checksum, subscription, last, size, payload):
            outputs.append((last, Undecodable(f"row of outputs {last - size + 1}-{last} fails its checksum")))
            continue
        try:
            entries = DEFAULT_CODEC.decode_entries(payload, f"{subscription}#{last}")
        except StateError as error:
            outputs.append((last, Undecodable(str(error))))
            continue
        outputs.extend(enumerate(entries, last - len(entries) + 1))
    return outputs


# -- state ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeView:
    """The saved state of one stateful operator: the subscription key it is stored under (the subscription, or
    one of its inner subscriptions), its path in the operator tree, its persisted name and version, its
    entries (a nested segment is a list of entries), and the names of its entries when the operator declares
    them for this version and count of entries (``None``: shown unnamed)."""

    key: str
    path: tuple[int, ...]
    name: str
    version: tuple[int, ...]
    entries: list[Any]
    fields: tuple[str, ...] | None = None

    def named(self) -> dict[str, Any] | None:
        """The entries by name, in the order they were saved (``None`` when they have no names)."""
        return None if self.fields is None else dict(zip(self.fields, self.entries, strict=True))


def read_state(store: str | os.PathLike[str], subscription: str) -> list[NodeView]:
    """The state of ``subscription`` and of its inner subscriptions as of the last checkpoint, node by node, in
    the store ``store`` names (a file or a DSN). A blob that fails its checksum or cannot be decoded is one node
    named ``DAMAGED`` with the reason."""
    with open_read_only(store) as db:
        rows = db.all(
            "SELECT key, value, crc FROM reaqtive_blobs WHERE category = ? AND (key = ? OR substr(key, 1, ?) = ?) "
            "ORDER BY key", (STATE_CATEGORY, subscription, len(subscription) + 1, subscription + "/")
        )
        version = db.all("SELECT value FROM reaqtive_meta WHERE key = 'schema_version'")
    nodes: list[NodeView] = []
    for key, value, crc in rows:
        if type(value) is not bytes or (
            version and version[0][0] != 1 and not verifies(crc, row_checksum, STATE_CATEGORY, key, value)
        ):
            nodes.append(NodeView(key, (), "DAMAGED", (), ["the row fails its checksum"]))
            continue
        try:
            for node in read_blob(value, where=f"state/{key}"):
                entries = _entries(node.data, f"state/{key}")
                nodes.append(NodeView(key, tuple(node.path), node.name, tuple(node.version), entries,
                                      field_names(node.name, tuple(node.version), len(entries))))
        except StateError as error:
            nodes.append(NodeView(key, (), "DAMAGED", (), [str(error)]))
    return nodes


@functools.cache
def declared_fields() -> dict[tuple[str, tuple[int, ...]], tuple[str, ...]]:
    """Every operator's declared ``state_fields``, by persisted name and current version. Read from the class
    that sets the name (not inherited: a renamed subclass may save more), after the stateful base's own
    ``disposed`` flag. Imports the operator library (not the
    user's modules): the declarations live next to each ``save_state_core``."""
    import reaqtive.engine.egress
    import reaqtive.engine.readers  # noqa: F401  (the engine's own stateful stages)
    from reaqtive.core.binding import load_builtin_operators
    from reaqtive.core.operator import Versioned
    from reaqtive.state.bases import _StatefulCore

    load_builtin_operators()  # operator modules load on first use: the declarations need every one
    declared: dict[tuple[str, tuple[int, ...]], tuple[str, ...]] = {}
    pending: list[type] = [Versioned]
    seen: set[type] = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        names, name, version = cls.__dict__.get("state_fields"), cls.__dict__.get("name"), getattr(cls, "version", None)
        # a name or version computed per instance (a property) cannot be keyed: such a class shows values unnamed
        if names and isinstance(name, str) and isinstance(version, tuple):
            # the stateful base writes its disposed flag before the operator's own fields
            declared[(name, version)] = (
                ("disposed", *names) if issubclass(cls, _StatefulCore) and "save_state" not in cls.__dict__ else names
            )
    return declared


def field_names(name: str, version: tuple[int, ...], count: int) -> tuple[str, ...] | None:
    """The names of the ``count`` values an operator ``name`` saved at ``version``: all its declared fields, or
    only those not marked optional (``?``); ``None`` when it declares none for that version or the count fits
    neither (an older layout, a damaged blob): the values are then shown unnamed, never mislabelled."""
    names = declared_fields().get((name, version))
    if not names:
        return None
    if count == len(names):
        return tuple(n.removeprefix("?") for n in names)
    required = tuple(n for n in names if not n.startswith("?"))
    return required if count == len(required) else None


def _entries(data: bytes, where: str) -> list[Any]:
    """A segment's entries, nested segments as lists (decoded with a stack: segments nest as deep as trees)."""
    top: list[Any] = []
    pending: list[tuple[bytes, list[Any]]] = [(data, top)]
    while pending:
        chunk, into = pending.pop()
        try:
            entries = DEFAULT_CODEC.decode_entries(chunk, where)
        except StateError as error:
            into.append(Undecodable(str(error)))
            continue
        for entry in entries:
            if type(entry) is Segment:
                child: list[Any] = []
                into.append(child)
                pending.append((entry.data, child))
            else:
                into.append(entry)
    return top


def jsonable(value: Any) -> Any:
    """``value`` as what :func:`json.dumps` writes as standard JSON: lists for tuples and sets, text keys
    (``repr`` of those that are not text), ISO 8601 for datetimes, seconds for durations, ``repr`` for anything
    else (bytes, user types, and infinite or NaN floats, which JSON has no number for). Converted with a stack:
    state nests deeply."""
    result: list[Any] = []
    pending: list[tuple[Any, Any, Any]] = [(value, result, 0)]  # (a value, the container it goes into, its key)
    while pending:
        item, into, key = pending.pop()
        converted: Any
        if item is None or type(item) in (bool, int, str) or (type(item) is float and math.isfinite(item)):
            converted = item
        elif isinstance(item, dict):
            converted = {}
            # reversed: popped in the dict's own order, so the keys keep it
            pending.extend(reversed([(v, converted, k if isinstance(k, str) else repr(k)) for k, v in item.items()]))
        elif isinstance(item, (list, tuple, set, frozenset)):
            items = list(item)
            converted = [None] * len(items)
            pending.extend((v, converted, i) for i, v in enumerate(items))
        elif isinstance(item, (datetime, timedelta)):
            converted = item.isoformat() if isinstance(item, datetime) else item.total_seconds()
        else:
            converted = repr(item)
        if into is result:
            result.append(converted)
        else:
            into[key] = converted
    return result[0]


# -- graph ---------------------------------------------------------------------------------------------------------

_BUILTIN_OBSERVERS: Final = {"reaqtive://sinks/durable": "durable sink", "reaqtive://sinks/discard": "discard"}


def mermaid_graph(artifact: ArtifactSummary) -> str:
    """The artifact's query as a Mermaid flowchart: a node per operator and per stream, an edge from each input
    to the operator reading it, and the artifact (with where it outputs to) at the end. Built with a stack, so a
    query thousands of stages deep draws too (as a long chain)."""
    if artifact.expression is None:
        raise LookupError(f"{artifact.uri!r} has no readable expression ({artifact.problem or artifact.kind})")
    lines = ["flowchart LR"]
    names: dict[str, str] = {}  # stream URI -> node id: a stream read twice is one node
    counter = 0

    def node(label: str) -> str:
        nonlocal counter
        ident = f"n{counter}"
        counter += 1
        lines.append(f'  {ident}["{_label(label)}"]')
        return ident

    end = node(f"{artifact.kind} {artifact.uri}")
    if artifact.observer is not None:
        sink = node(_BUILTIN_OBSERVERS.get(artifact.observer, artifact.observer))
        lines.append(f"  {end} --> {sink}")
    edges: list[str] = []
    pending: list[tuple[Any, str]] = [(artifact.expression, end)]  # (an expression, the node it feeds)
    while pending:
        expression, feeds = pending.pop()
        if isinstance(expression, dict) and "q" in expression and len(expression) == 1:
            expression = expression["q"]
        if isinstance(expression, dict) and "stream" in expression and len(expression) == 1:
            uri = str(expression["stream"])
            if uri not in names:
                names[uri] = node(f"stream {uri}")
            edges.append(f"  {names[uri]} --> {feeds}")
            continue
        if not (isinstance(expression, dict) and "op" in expression):
            ident = node(describe_expression(expression))
            edges.append(f"  {ident} --> {feeds}")
            continue
        args = list(expression.get("args", []))
        inputs = [a for a in args if isinstance(a, dict) and len(a) == 1 and ("q" in a or "stream" in a)]
        parameters = [a for a in args if not any(a is i for i in inputs)]
        ident = node(describe_expression({"op": expression["op"], "args": parameters}))
        edges.append(f"  {ident} --> {feeds}")
        pending.extend((source, ident) for source in reversed(inputs))
    lines.extend(reversed(edges))  # sources first: the graph reads from left to right
    return "\n".join(lines)


_MOST_EXPANSIONS: Final = 100_000  # definitions a plan expands (a store whose definitions refer to each other)


def query_plan(summary: StoreSummary, artifact: ArtifactSummary, functions: FunctionRegistry) -> QueryPlan:
    """How the subscription's stored query binds when the engine recovers it: in its recorded keyed form, with
    the observable definitions it reads expanded (see :mod:`reaqtive.operators.plan`). Decoding resolves the
    functions the query names through ``functions`` (a reference it does not allow raises
    :class:`~reaqtive.engine.expressions.ForbiddenReferenceError`, and nothing is imported); the plan calls each
    ``flat_map`` selector over a ``group_by`` once on a stand-in group, as binding does."""
    from reaqtive.engine.expressions import decode_query
    from reaqtive.operators.keyed_steps import in_keyed_form
    from reaqtive.operators.plan import explain

    if artifact.kind != "subscription" or artifact.expression is None or artifact.keyed_form is None:
        raise LookupError(f"{artifact.uri!r} is a {artifact.kind}{': ' + artifact.problem if artifact.problem else ''}"
                          "; only a readable subscription has a plan")
    query = decode_query(artifact.expression, functions, where=f"subscription {artifact.uri!r}")
    definitions = {a.uri: a.expression for a in summary.artifacts if a.kind == "observable" and a.expression}
    expanded = 0

    def resolve(node: Expression[Any]) -> Expression[Any] | None:
        nonlocal expanded
        uri = node.args[0] if node.op == "stream" and node.args else None
        expression = definitions.get(uri) if isinstance(uri, str) else None
        if expression is None:
            return None
        expanded += 1
        if expanded > _MOST_EXPANSIONS:
            raise LookupError(f"{artifact.uri!r}: its observable definitions refer to each other without end")
        return decode_query(expression, functions, where=f"observable definition {uri!r}")

    with in_keyed_form(artifact.keyed_form):
        return explain(query, resolve)


def _label(text: str) -> str:
    """Text for a double-quoted Mermaid label (its entity codes for what would end or break the label)."""
    shown = text if len(text) <= 80 else text[:77] + "..."
    return shown.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
