"""Upgrading a running subscription in place: ``update_subscription``, ``rollback_subscription``, its history.

An update replaces a subscription's definition at **one checkpoint boundary**, in one transaction:

1. a checkpoint commits everything the old definition did (its state, its outputs, the delivery record): the
   boundary;
2. the old query stops (its state stays in the store), the new one is bound and each of its stateful operators
   loads what :mod:`reaqtive.engine.upgrade` matched for it in that state (the rest start empty), then it starts;
3. one commit writes the new record (with the old definition appended to its history), the new template, the
   new query's full state, the old definition's state kept for a rollback, the outputs it produced on start, and
   deletes the old state rows the new query does not use.

Nothing is delivered between 1 and 3 (the engine's lock is held), so a crash before 3's commit recovers the old
definition at the boundary, and one after it the new definition at the same boundary: never a mix. The output
counter goes on (the new query's first output has the number after the old one's last), so a consumer reading
the durable sink or an observer function sees the old definition's values, then the new one's, none lost or
doubled. If the new query cannot start (its state does not load, a required state cannot move, a function is
missing) or the commit fails, the old query is bound again from the boundary's state and the error is raised:
nothing changed.

``unmatched="backfill"``: the new definition is rebuilt from the retained log instead: it starts empty, behind
the engine at ``start`` (as ``create_subscription(..., start=...)``), and catches up through the log to the
engine's position; its outputs during the catch-up are new outputs after the old ones (see ``docs/engine.md``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.core.streams import LONG_MAX
from reaqtive.core.subjects import SimpleSubject
from reaqtive.core.visitors import subscribe_all
from reaqtive.engine._room import (
    _ARTIFACTS,
    _BUILTIN_OBSERVERS,
    _OUTPUTS,
    _TEMPLATES,
    EngineRoom,
    _counter_bytes,
    _now_text,
    _references,
    _to_bytes,
)
from reaqtive.engine.backfill import BackfillStart, check_start, resolve_start
from reaqtive.engine.backfill import behind_of as backfill_behind
from reaqtive.engine.database import to_micros
from reaqtive.engine.engine_errors import ArtifactNotFoundError, UpdateError
from reaqtive.engine.expressions import decode_query, encode_query, instantiate, template_id, templatize
from reaqtive.engine.records import parse_counter
from reaqtive.engine.upgrade import (
    UNMATCHED,
    Identity,
    IncompatibleState,
    NodeChange,
    UpdatePlan,
    identities,
    matched_record,
    migrating_loader,
    old_states,
    plan_update,
    planned_states,
    recording_loader,
    records_by_path,
)
from reaqtive.fluent.query import Query
from reaqtive.operators.keyed_steps import in_keyed_form, recorded_keyed_form
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.state import STATE_CATEGORY, CheckpointMode
from reaqtive.state.codec import DEFAULT_CODEC
from reaqtive.state.environment import InnerEnvironment
from reaqtive.state.framing import NodeState, Path
from reaqtive.state.host import HostedQuery, QueryHost

__all__ = ["PREVIOUS_STATES", "DefinitionEntry", "Upgrading"]

PREVIOUS_STATES: Final = "previous_states"
"""Store category: per subscription, the state units of its previous definition at the swap (for a rollback)."""

DefinitionEntry = dict[str, Any]
"""One definition in a subscription's history: ``expression``, ``observer``, ``refs``, ``keyed``, ``from`` and
``until`` (ISO times), ``pos`` (the log position of the swap that ended it)."""


class _Discard:
    """The observer of a tree built only to be looked at, or tried and thrown away (a plan)."""

    def on_subscribe(self, subscription: Any) -> None:
        """A trial starts it: it asks for everything (and drops it)."""
        subscription.request(LONG_MAX)

    def on_next(self, value: Any) -> None:
        """Dropped."""

    def on_error(self, error: BaseException) -> None:
        """Dropped."""

    def on_complete(self) -> None:
        """Dropped."""


class Upgrading(EngineRoom):
    """See the module docstring."""

    def update_subscription(
        self,
        uri: str,
        query: Query[Any],
        *,
        unmatched: str = "empty",
        require_state: bool = False,
        dry_run: bool = False,
        start: int | datetime | str | None = None,
    ) -> UpdatePlan:
        """Replace the definition of running subscription ``uri`` by ``query`` at one checkpoint boundary, keeping
        the state of the operators it shares with the old one (see :mod:`reaqtive.engine.upgrade` for what is
        matched: ``.named(...)`` parts by name, the rest by path and operator; a state moves when its version
        is one the new operator loads). Outputs before the boundary come from the old definition, after it from
        the new, numbered on. Returns the :class:`~reaqtive.engine.upgrade.UpdatePlan` of what was done.

        ``unmatched``: ``"empty"`` (operators without a state to move start empty) or ``"backfill"`` (the whole
        new definition is rebuilt from the retained log from ``start``, ``"earliest"`` by default, and catches
        up behind the engine; no state moves). ``require_state``: refuse the update if any operator of the new
        definition would start empty or any operator of the old one would be dropped. ``dry_run``: compute and
        return the plan only, changing nothing (the refusals below apply).

        Refused with nothing changed: no such subscription (:class:`~reaqtive.engine.ArtifactNotFoundError`), a
        query that cannot be persisted or reads what does not exist (as ``create_subscription``), and, as
        :class:`~reaqtive.engine.UpdateError`: a subscription that does not run (failed or stopped: restart it
        first), is paused or catching up, a required state that cannot move, a new definition that fails to
        start from the state it is given, ``start`` given without ``unmatched="backfill"``.
        """
        if unmatched not in UNMATCHED:
            raise ValueError(f"update_subscription({uri!r}): unmatched must be one of {', '.join(UNMATCHED)}, got "
                             f"{unmatched!r}")
        if start is not None and unmatched != "backfill":
            raise UpdateError(f"update_subscription({uri!r}): start= is for unmatched='backfill' (the new "
                              "definition rebuilt from the log); matched state needs no start")
        with self._lock:
            self._check_open()
            hosted, record = self._updatable(uri, "update_subscription")
            expression = encode_query(query, self.functions)
            references = sorted(_references(expression) | {record["observer"]} - _BUILTIN_OBSERVERS)
            missing = [ref for ref in references if ref not in self._records]
            if missing:
                raise ArtifactNotFoundError(f"update_subscription({uri!r}): the new query refers to "
                                            f"{', '.join(map(repr, missing))}, which does not exist")
            backfill = None
            if unmatched == "backfill":
                backfill = self._update_start(uri, "earliest" if start is None else start, references)
            # A dry run tries the load to find the operators that refuse their state; the update finds them as it
            # binds (one load of the state, not two); with require_state the trial says everything that will not move.
            plan = self._plan(uri, hosted, expression, unmatched, start if start is not None else "earliest",
                              trial=dry_run or require_state)
            if require_state and (plan.of("reset") or plan.of("dropped")):
                lost = [change.describe() for change in (*plan.of("reset"), *plan.of("dropped"))]
                raise UpdateError(f"update_subscription({uri!r}, require_state=True): not every state moves:\n  "
                                  + "\n  ".join(lost))
            if dry_run:
                return plan
            plan = _amended(plan, self._swap(uri, hosted, record, expression, references, backfill=backfill,
                                             require_state=require_state))
            self._log.info("subscription %r updated: %s", uri, plan.describe().splitlines()[0],
                           extra={"reaqtive_event": "subscription_updated", "subscription": uri})
        self.appended.fire()  # a processing loop looks again: the new query may have timers due sooner
        return plan

    def rollback_subscription(self, uri: str, *, state: str = "current", dry_run: bool = False) -> UpdatePlan:
        """Go back to subscription ``uri``'s previous definition (its history's last), at one checkpoint boundary
        as an update. ``state="current"`` (default): the operators both definitions share go on from the current
        state (they saw every event since the swap); the others take the state they had at the swap, kept in the
        store. ``state="kept"``: the previous definition resumes from its state at the swap, as it was (the
        events since are not replayed to it). The current definition becomes the history's last entry, so a
        second rollback goes forward again. Refused (:class:`~reaqtive.engine.UpdateError`, nothing changed)
        when there is no previous definition, or as :meth:`update_subscription`."""
        if state not in ("current", "kept"):
            raise ValueError(f"rollback_subscription({uri!r}): state must be 'current' or 'kept', got {state!r}")
        with self._lock:
            self._check_open()
            hosted, record = self._updatable(uri, "rollback_subscription")
            history = record.get("history") or []
            if not history:
                raise UpdateError(f"rollback_subscription({uri!r}): it has no previous definition")
            previous = history[-1]
            kept = self._kept_states(uri)
            expression = previous["expression"]
            missing = [ref for ref in previous["refs"] if ref not in self._records]
            if missing:
                raise ArtifactNotFoundError(f"rollback_subscription({uri!r}): the previous definition refers to "
                                            f"{', '.join(map(repr, missing))}, which no longer exists")
            exact = state == "kept"
            if exact and uri not in kept:
                raise UpdateError(f"rollback_subscription({uri!r}, state='kept'): the store keeps no state of its "
                                  "previous definition")
            plan = self._plan(uri, hosted, expression, "empty", None, kept=kept, exact=exact)
            # Operators only the previous definition had take their state kept at the swap, with its inner units
            # (their ids are the previous definition's own); ids the current state uses too would be ambiguous.
            uses_kept = not exact and any("kept at the swap" in change.reason for change in plan.changes)
            if uses_kept:
                prefix = uri + "/"
                current = set(hosted.inner_units()) | {key for key in self._stored_state_keys if key.startswith(prefix)}
                shared = sorted(current & {key for key in kept if key.startswith(prefix)})
                if shared:
                    raise UpdateError(f"rollback_subscription({uri!r}): inner units {', '.join(map(repr, shared[:3]))} "
                                      "are in both the current state and the state kept at the swap; roll back with "
                                      "state='kept' (the previous definition as it was at the swap)")
            if dry_run:
                return plan
            plan = _amended(plan, self._swap(uri, hosted, record, expression, list(previous["refs"]), kept=kept,
                                             exact=exact, rollback=True, kept_inner=uses_kept))
            self._log.info("subscription %r rolled back to its previous definition", uri,
                           extra={"reaqtive_event": "subscription_rolled_back", "subscription": uri})
        self.appended.fire()
        return plan

    def subscription_history(self, uri: str) -> list[DefinitionEntry]:
        """Every definition subscription ``uri`` had, oldest first, the current one last: each with its
        ``expression``, ``observer``, ``from`` (when it took effect) and ``until`` (when it was replaced;
        ``None`` for the current one) and ``pos`` (the log position of that swap)."""
        with self._lock:
            record = self._check_kind(uri, "subscription")
            current = {"expression": self._expression_of(record), "observer": record["observer"],
                       "refs": list(record.get("refs", ())), "keyed": record.get("keyed", False),
                       "from": record.get("updated", record["created"]), "until": None, "pos": None}
            return [*(dict(entry) for entry in record.get("history", ())), current]

    # -- the parts ---------------------------------------------------------------------------------------------

    def _updatable(self, uri: str, what: str) -> tuple[HostedQuery, dict[str, Any]]:
        record = self._check_kind(uri, "subscription")
        hosted = self._subscriptions.get(uri)
        if hosted is None:
            raise UpdateError(f"{what}({uri!r}): it does not run (failed or stopped: restart_subscription first, "
                              "or delete it and create it anew)")
        if uri in self._scheduling.behind:
            raise UpdateError(f"{what}({uri!r}): it is paused or catching up behind the engine; update it once it "
                              "runs at the engine's position (resume it, process)")
        return hosted, record

    def _expression_of(self, record: dict[str, Any]) -> dict[str, Any]:
        template = self._records.templates.get(record["template"])
        if template is None:
            raise UpdateError(f"the query template {record['template']!r} is not in the store")
        expression: dict[str, Any] = instantiate(template, record["constants"])
        return expression

    def _update_start(self, uri: str, start: object, references: list[str]) -> BackfillStart | None:
        where = f"update_subscription({uri!r})"
        check_start(start, where)
        self._positions.refresh_heads()
        streams = self._records.streams_read(references)
        return resolve_start(start, where=where, store=self._store, streams=streams, heads=self._positions.heads,
                             delivered_at=self._positions.delivered_at, cursor=self._positions.cursor.pos,
                             now_micros=to_micros(self._scheduler.now))

    def _plan(self, uri: str, hosted: HostedQuery, expression: dict[str, Any], unmatched: str, start: object, *,
              kept: dict[str, bytes] | None = None, exact: bool = False, trial: bool = True) -> UpdatePlan:
        """The plan, from the running tree (its operators' versions: what a checkpoint would save now) and a
        tree of the new definition built and subscribed, never started; what refuses its state is found by a
        trial (:meth:`_trial`). ``kept``: a rollback's state kept at the swap, for what the current state lacks
        (``exact``: for everything)."""
        old = {} if exact else planned_states(hosted.handle)
        fallback = records_by_path(kept.get(uri), where=f"the kept state of {uri!r}") if kept else {}
        query = self._expand(decode_query(expression, self.functions))
        refused: dict[Identity, str] = {}
        notes: list[str] = []
        if unmatched != "backfill" and trial:
            refused, notes = self._trial(uri, hosted, query, fallback, kept if exact else None)
        # Bound in the subscription's form: group_by/flat_map choose keyed or general when their inputs are made.
        with in_keyed_form(recorded_keyed_form(self._records[uri])):
            handle = Query("egress", (query, uri)).subscribe(_Discard())
            try:
                subscribe_all(handle)
                if unmatched == "backfill":
                    return plan_update(uri, handle, {}, unmatched=unmatched, backfill=start)
                plan = plan_update(uri, handle, old, unmatched=unmatched, fallback=fallback, refused=refused)
            finally:
                handle.dispose()
        return replace(plan, notes=tuple(notes))

    def _trial(self, uri: str, hosted: HostedQuery, query: Query[Any], fallback: dict[Path, NodeState],
               exact: dict[str, bytes] | None) -> tuple[dict[Identity, str], list[str]]:
        """Load the last checkpoint's state of ``uri`` into the new definition on a host of its own (its own
        scheduler at the engine's clock, its own inner environment holding copies of the inner units, empty
        subjects for the streams), started and thrown away: which operators refuse their state, and which inner
        units fail to load (notes). Nothing of the engine is touched."""
        snapshot = self._store.checkpoints.read(strict=False)
        where = f"state of {uri!r}"
        prefix = uri + "/"
        if exact is not None:  # a rollback to the kept state: it is the only state
            records: dict[Identity, NodeState] = {}
            inner = {key: blob for key, blob in exact.items() if key.startswith(prefix)}
        else:
            records = old_states(hosted.handle, snapshot.get(STATE_CATEGORY, uri), where=where)
            inner = {key: blob for key, blob in snapshot.items(STATE_CATEGORY) if key.startswith(prefix)}
            if fallback:  # a rollback: the kept inner units the current state does not have come with it
                inner = {**{key: blob for key, blob in self._kept_states(uri).items() if key.startswith(prefix)},
                         **inner}
        environment = InnerEnvironment()
        for stream in self._records.streams_read(sorted(_references(encode_query(query, self.functions)))):
            environment.add_stream(stream, SimpleSubject())
        host = QueryHost(VirtualTimeScheduler(timedelta(microseconds=1)), environment=environment,
                         settings=self._settings)
        host.advance(self._scheduler.now)
        refused: dict[Identity, str] = {}
        notes: list[str] = []
        try:
            with in_keyed_form(recorded_keyed_form(self._records[uri])):
                trial = host.bind(uri, Query("egress", (query, uri)), _Discard())
                environment.restore(inner)
                trial.start(None, load=recording_loader(records, refused, where=where, fallback=fallback))
            notes += [f"  note: inner unit {inner_id!r} would not load: {error}"
                      for inner_id, error in sorted(trial.load_failures().items())]
        except Exception as error:
            notes.append(f"  note: the new definition would fail to start: {error!r}")
        finally:
            host.dispose()
        return refused, notes

    def _kept_states(self, uri: str) -> dict[str, bytes]:
        blob = self._store.checkpoints.read(strict=False).get(PREVIOUS_STATES, uri)
        if blob is None:
            return {}
        units = DEFAULT_CODEC.decode_value(blob, f"the kept state of {uri!r}")
        if not isinstance(units, dict) or not all(isinstance(k, str) and isinstance(v, bytes)
                                                  for k, v in units.items()):
            raise UpdateError(f"the kept state of {uri!r} is not a map of state units")
        return units

    def _swap(  # noqa: PLR0915 (one transaction's worth of steps, kept together)
        self, uri: str, hosted: HostedQuery, record: dict[str, Any], expression: dict[str, Any],
        references: list[str], *, backfill: BackfillStart | None = None,
        kept: dict[str, bytes] | None = None, exact: bool = False, rollback: bool = False,
        require_state: bool = False, kept_inner: bool = False,
    ) -> list[NodeChange]:
        """Steps 1 to 3 of the module docstring. Returns what the plan (made without a trial) did not know: the
        operators that refused their state (reset) and the old ones they would have taken it from (dropped)."""
        self.checkpoint()  # 1: the boundary
        snapshot = self._store.checkpoints.read(strict=False)
        prefix = uri + "/"
        old_main = snapshot.get(STATE_CATEGORY, uri)
        old_inner = {key: blob for key, blob in snapshot.items(STATE_CATEGORY) if key.startswith(prefix)}
        where = f"state of {uri!r}"
        old = old_states(hosted.handle, old_main, where=where)
        fallback = records_by_path(kept.get(uri), where=f"the kept state of {uri!r}") if kept and not exact else {}
        counter = self._outputs.counters[uri]
        stored_counter = snapshot.get(_OUTPUTS, uri)
        template, constants = templatize(expression)
        tid = template_id(template)
        now = _now_text()
        entry: DefinitionEntry = {
            "expression": self._expression_of(record), "observer": record["observer"],
            "refs": list(record.get("refs", ())), "keyed": record.get("keyed", False),
            "from": record.get("updated", record["created"]), "until": now, "pos": self._positions.cursor.pos}
        history = list(record.get("history", ()))
        if rollback:
            history.pop()  # the definition rolled back to leaves the history; the current one takes its place
        new_record = {key: value for key, value in record.items() if key not in ("backfill", "skipping")}
        # The form its keyed chains run in stays the subscription's (a keyed chain's state and a general one's are
        # not each other's): the new definition runs in the old one's form.
        new_record.update(template=tid, constants=constants, refs=references, keyed=record.get("keyed", False),
                          updated=now, history=[*history, entry])
        if backfill is not None:
            new_record["backfill"] = backfill.to_record()
            new_record["start_pos"] = backfill.pos
        # 2: the old query stops (its state stays in the store), the new one starts.
        waiting = self._outputs.stop(uri)
        if waiting:
            self._store.write_outputs(waiting)
        hosted.abandon()
        self._running.drop_policy(uri)
        from_kept = {key: blob for key, blob in (kept or {}).items() if key.startswith(prefix)}
        if exact:
            new_inner = from_kept
        elif backfill is not None:
            new_inner = {}
        else:
            new_inner = {**from_kept, **old_inner} if kept_inner else old_inner
        self._environment.release_ids(uri)
        self._environment.restore(new_inner)
        self._outputs.counters[uri] = counter
        new_hosted: HostedQuery | None = None
        refused: dict[Identity, str] = {}
        try:
            if exact and kept is not None and kept.get(uri) is not None:
                new_hosted = self._running.bind(uri, new_record, template, kept[uri])
            elif backfill is not None:
                new_hosted = self._running.bind(uri, new_record, template, None, behind=backfill_behind(new_record))
            else:
                new_hosted, refused = self._bind_refusing(uri, new_record, template, (old, fallback), new_inner,
                                                          require_state=require_state)
            failures = self._environment.take_load_failures(uri)
            if failures:
                inner_id, error = min(failures.items())
                raise UpdateError(f"the new definition of {uri!r} cannot take the old state of its inner unit "
                                  f"{inner_id!r}: {error}") from error
            # 3: one transaction.
            # Every live unit of the new query, whole (nothing carried over: an old unit it does not use goes).
            saving = new_hosted.save(None, CheckpointMode.FULL)
            units = saving.state.units(uri)
            puts = [(STATE_CATEGORY, key, blob) for key, blob in units.items()]
            deletes = [(STATE_CATEGORY, key) for key in old_inner if key not in units]
            previous_units = {key: blob for key, blob in ({uri: old_main} | old_inner).items() if blob is not None}
            puts.append((PREVIOUS_STATES, uri, DEFAULT_CODEC.encode(previous_units)))
            puts.append((_ARTIFACTS, uri, _to_bytes(new_record)))
            if tid not in self._records.templates:
                puts.append((_TEMPLATES, tid, _to_bytes(template)))
            old_tid = record["template"]
            if old_tid != tid and not self._records.template_used_besides(old_tid, uri):
                deletes.append((_TEMPLATES, old_tid))
            puts.append((_OUTPUTS, uri, _counter_bytes(counter.next)))
            own = self._outputs.take_own(uri)
            self._outputs.flush()
            self._store.commit_with_outputs(puts, deletes, outputs=own, encoded=True)
        except BaseException:
            self._environment.discard_saved(list(new_inner), delete=False)  # restored for the new tree, unclaimed
            self._undo(uri, new_hosted, record, (old_main, old_inner), stored_counter)
            raise
        saving.confirm()
        self._stored_state_keys.update(units)
        self._stored_state_keys.difference_update(key for category, key in deletes if category == STATE_CATEGORY)
        produced = counter.next != counter.committed
        counter.committed = counter.next
        self._records.templates[tid] = template
        if (_TEMPLATES, record["template"]) in deletes:
            self._records.templates.pop(record["template"], None)
        self._records[uri] = new_record
        self._subscriptions[uri] = new_hosted
        self._running.forget_ended(uri)
        if backfill is not None:
            self._backfilling.add(uri)
        if produced:
            self.produced.fire()  # it produced outputs on start
        return _refusals(new_hosted, refused, old)

    def _bind_refusing(
        self, uri: str, record: dict[str, Any], template: dict[str, Any],
        states: tuple[dict[Identity, NodeState], dict[Path, NodeState]], inner: dict[str, bytes], *,
        require_state: bool,
    ) -> tuple[HostedQuery, dict[Identity, str]]:
        """Bind the new definition loading what was matched; an operator that refuses its old state (its load
        raises a StateError) starts empty instead: the tree, partly loaded, is thrown away and bound again
        without it (once per such operator). With ``require_state`` that refuses the update. Returns the query
        and the identities refused, with why."""
        old, fallback = states
        refused: dict[Identity, str] = {}
        where = f"state of {uri!r}"
        while True:
            load = migrating_loader(old, where=where, fallback=fallback, refused=refused)
            try:
                return self._running.bind(uri, record, template, None, load=load), refused
            except IncompatibleState as incompatible:
                if require_state:
                    raise UpdateError(f"update_subscription({uri!r}, require_state=True): operator "
                                      f"{incompatible.identity[3]!r} refuses the old state: {incompatible}") \
                        from incompatible.error
                refused[incompatible.identity] = str(incompatible.error)
                self._log.info("update of %r: %s starts empty: %s", uri, incompatible.identity[3], incompatible,
                               extra={"reaqtive_event": "update_reset", "subscription": uri})
                # Its start failed: the tree is disposed; its inner units and ids go back to the boundary's.
                self._environment.abandon(uri)
                self._environment.discard_saved(list(inner), delete=False)
                self._environment.release_ids(uri)
                self._environment.restore(inner)

    def _undo(self, uri: str, new_hosted: HostedQuery | None, record: dict[str, Any],
              state: tuple[bytes | None, dict[str, bytes]], stored_counter: bytes | None) -> None:
        """The swap failed before its commit: the new query goes, the old one is bound again from the boundary's
        state (the store still holds it), as if nothing happened."""
        old_main, old_inner = state
        self._scheduling.drop_behind(uri)
        if new_hosted is not None:
            new_hosted.abandon()
        self._outputs.stop(uri)
        self._outputs.drop_buffered(uri)
        self._environment.discard_saved(list(old_inner), delete=False)
        self._environment.release_ids(uri)
        self._environment.restore(old_inner)
        from reaqtive.engine.counters import OutputCounter

        committed = parse_counter(uri, stored_counter) if stored_counter is not None else 0
        self._outputs.counters[uri] = OutputCounter(committed, committed)
        template = self._records.templates[record["template"]]
        self._subscriptions[uri] = self._running.bind(uri, record, template, old_main)


def _refusals(hosted: HostedQuery, refused: dict[Identity, str], old: dict[Identity, NodeState]) -> list[NodeChange]:
    """The changes of the operators of ``hosted`` that refused their old state, and of the old ones dropped."""
    if not refused:
        return []
    changes = []
    for node, path, identity in identities(hosted.handle):
        if identity in refused:
            record = matched_record(node, path, identity, old)
            changes.append(NodeChange("reset", node.name, path, identity[1] or None,
                                      None if record is None else tuple(record.version), tuple(node.version),
                                      f"its old state does not fit it: {refused[identity]}"))
            if record is not None:
                changes.append(NodeChange("dropped", record.name, record.path, identity[1] or None,
                                          tuple(record.version), None,
                                          "its state does not fit the new operator with its identity"))
    return changes


def _amended(plan: UpdatePlan, found: list[NodeChange]) -> UpdatePlan:
    """``plan`` with what the update found as it bound: a refused operator is reset, not moved."""
    if not found:
        return plan
    reset = {(change.path, change.operator): change for change in found if change.action == "reset"}
    changes = [reset.get((change.path, change.operator), change) if change.action in ("moved", "migrated")
               else change for change in plan.changes]
    return replace(plan, changes=(*changes, *(change for change in found if change.action == "dropped")))
