"""The ``reaqtive`` command.

* ``reaqtive demo``: the IoT engine demo (sensors, standing queries, a ``kill -9`` and a recovery, checked against
  an uncrashed run); ``reaqtive demo --backpressure``: the Reactive Streams demand demo.
  The demo's stores are kept (``--store DIR``, or a new temporary directory) and it ends with the
  ``reaqtive inspect`` commands to run on them.
STORE is what :class:`~reaqtive.engine.Engine` takes: a store file, or a PostgreSQL database as a
``postgresql://`` / ``postgres://`` URL or a libpq ``key=value`` DSN (``reaqtive[postgres]``); messages name a
database without its password.

* ``reaqtive inspect STORE [--json] [--keys]``: what an engine store holds, read without opening an engine; or,
  for a Spark checkpoint directory (``reaqtive.spark``), the reaqtive state Spark keeps in it.
  ``--outputs URI``, ``--state URI``: a subscription's outputs in the durable sink and its saved state, decoded;
  ``--graph URI``: an artifact's query as a Mermaid flowchart (:mod:`reaqtive.cli.views`); ``--plan URI [--allow-module
  M ...] [--functions MODULE:ATTR]``: which path (keyed, fused, general) each stage of a subscription runs on as it
  recovers, and why a general one is general (it imports what the query names, as ``checkpoint`` does);
  ``--history URI``: a subscription's definitions, each with when it took effect and when it was replaced.
* ``reaqtive checkpoint STORE [--full] [--allow-module M ...] [--functions MODULE:ATTR]``: open the engine on a
  store (recovering it), take a checkpoint, close. The store's queries may name only the functions registered in
  ``--functions`` (a FunctionRegistry, or a function that makes one) and those defined in the ``--allow-module``
  modules (a store is data: nothing else is imported).
* ``reaqtive update STORE URI --query MODULE:ATTR [--dry-run] [--unmatched empty|backfill] [--require-state]
  [--functions ...] [--allow-module ...]``: open the engine (recovering it), replace subscription URI's definition
  by the query ``MODULE:ATTR`` names (a query, or a function without arguments that returns one), keeping the state
  of matched operators (``Engine.update_subscription``), print what was matched, migrated, reset or dropped, close.
  ``--dry-run`` prints it and changes nothing (exit 1 if the update would be refused). ``reaqtive rollback STORE
  URI [--state current|kept] [--dry-run]``: back to the previous definition (``Engine.rollback_subscription``).
* ``reaqtive --version``.

Exit codes: 0 success, 1 the command ran and failed (the demo's results differ, a recovery failed), 2 bad usage,
a file that is missing or is not a reaqtive store, or any other error: always one line on stderr, never a
traceback (``--traceback`` shows it). The library's log records (WARNING and above) are the command's to report:
when it fails, its one line says what failed and the records are dropped; when it succeeds, each is one line on
stderr (``reaqtive checkpoint: warning: ...``), without its traceback; ``--traceback`` prints them in full
instead. A closed output pipe (``reaqtive inspect ... | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

if TYPE_CHECKING:
    from typing import Any

    from reaqtive.engine import Engine, FunctionRegistry
    from reaqtive.engine.expressions import ForbiddenReferenceError
    from reaqtive.engine.inspection import ArtifactSummary, StoreSummary
    from reaqtive.fluent.query import Query

__all__ = ["main"]

EXIT_OK = 0
# As diff(1): 1 is an answer ("the demo's results differ"), 2 is an error, whatever its cause.
EXIT_DIFFERENT = 1
EXIT_ERROR = 2


class _UsageError(Exception):
    """A problem with what the user asked for: printed as one line, exit code 2 (as every error)."""


def _demo(args: argparse.Namespace) -> int:
    if args.backpressure:
        from reaqtive.cli.demos import backpressure

        backpressure.run()
        return EXIT_OK
    from reaqtive.cli.demos import iot

    if args.events < 4 * args.every:
        raise _UsageError(f"--events must be at least 4 x --every ({4 * args.every:,})")
    # The stores are kept, so that the inspect commands of the demo's report have something to look at.
    store_dir: Path = args.store if args.store is not None else Path(tempfile.mkdtemp(prefix="reaqtive-demo-"))
    store_dir.mkdir(parents=True, exist_ok=True)
    config = iot.DemoConfig(events=args.events, every=args.every, store_dir=store_dir)
    try:
        report = iot.run_demo(config, say=lambda line: print(line, flush=True))
    except iot.DemoError as error:
        print(f"reaqtive demo: {error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if report.equal else EXIT_DIFFERENT


def _inspect(args: argparse.Namespace) -> int:
    from reaqtive.engine.inspection import format_summary, read_store, summary_to_json
    from reaqtive.state.postgres_store import is_postgres_dsn

    _check_store_address(args.store)
    if not is_postgres_dsn(args.store) and Path(args.store).is_dir():
        if args.outputs or args.state or args.graph or args.plan or args.history:
            raise _UsageError("--outputs, --state, --graph, --plan and --history read an engine store (a file), not "
                              "a directory")
        return _inspect_spark(args)
    summary = read_store(args.store)
    if args.outputs or args.state or args.graph or args.plan or args.history:
        return _inspect_artifact(args, summary)
    if args.json:
        data = summary_to_json(summary)
        try:
            text = json.dumps(data, indent=2, sort_keys=False)
        except RecursionError:  # a query deeper than the json module goes: compact JSON, written with a stack
            from reaqtive.engine.expressions import expression_to_json

            text = expression_to_json(data)
        print(text)
    else:
        print(format_summary(summary))
    return EXIT_OK


def _inspect_artifact(args: argparse.Namespace, summary: StoreSummary) -> int:
    """``--outputs``, ``--state``, ``--graph``, ``--plan``: one artifact's outputs, state, query or plan, in that
    order."""
    from reaqtive.cli import views

    wanted = [(option, uri) for option, uri in (("outputs", args.outputs), ("state", args.state),
                                                 ("graph", args.graph), ("plan", args.plan),
                                                 ("history", args.history)) if uri]
    for option, uri in wanted:
        try:
            artifact = views.find_artifact(summary, uri)
        except LookupError as error:
            raise _UsageError(f"--{option}: {error.args[0]}") from None
        if option in ("outputs", "state", "history") and artifact.kind != "subscription":
            raise _UsageError(f"--{option}: {uri!r} is a {artifact.kind}; only subscriptions have {option}")
        if option == "outputs":
            outputs = views.read_outputs(args.store, uri)
            if args.json:
                for seq, value in outputs:
                    print(json.dumps(views.jsonable({"subscription": uri, "seq": seq, "value": value})))
            else:
                print(f"outputs of {uri} in the durable sink ({len(outputs):,})")
                for seq, value in outputs:
                    print(f"  {seq:>8}  {value!r}")
        elif option == "history":
            _print_history(artifact, as_json=args.json)
        elif option == "state":
            nodes = views.read_state(args.store, uri)
            if args.json:
                # "entries" stays (the values in order); "fields" names them when the operator declares names
                print(json.dumps(views.jsonable([{"key": n.key, "path": list(n.path), "name": n.name,
                                                  "version": list(n.version), "entries": n.entries,
                                                  "fields": n.named()} for n in nodes]),
                                 indent=2))
            else:
                print(f"state of {uri} as last saved (by its creation or the last checkpoint since): "
                      f"{len(nodes)} stateful operators")
                for n in nodes:
                    where = n.key if n.key == uri else f"{n.key} (inner)"
                    version = ".".join(map(str, n.version))
                    print(f"  {where}  path {list(n.path)}  {n.name} v{version}")
                    labels = n.fields or ("",) * len(n.entries)
                    for label, entry in zip(labels, n.entries, strict=True):
                        print(f"      {label}{'=' if label else ''}{_shorten(repr(entry))}")
        elif option == "graph":
            try:
                graph = views.mermaid_graph(artifact)
            except LookupError as error:
                raise _UsageError(f"--graph: {error.args[0]}") from None
            print(graph)
        else:
            _print_plan(args, summary, artifact)
    return EXIT_OK


def _print_history(artifact: ArtifactSummary, *, as_json: bool) -> None:
    """``--history``: every definition of a subscription, oldest first, the current one last."""
    from reaqtive.engine.inspection import describe_expression

    current = {"expression": artifact.expression, "observer": artifact.observer,
               "from": artifact.updated or artifact.created, "until": None, "pos": None}
    entries = [*(artifact.history or []), current]
    if as_json:
        from reaqtive.cli import views

        for entry in entries:
            print(json.dumps(views.jsonable({"subscription": artifact.uri, **entry})))
        return
    print(f"definitions of {artifact.uri} ({len(entries)}, oldest first)")
    for number, entry in enumerate(entries, start=1):
        until = "now" if entry.get("until") is None else f"{entry['until']} (log position {entry.get('pos')})"
        print(f"  {number}. from {entry.get('from')} until {until}")
        expression = entry.get("expression")
        print(f"     {describe_expression(expression) if expression is not None else '?'}")


def _print_plan(args: argparse.Namespace, summary: StoreSummary, artifact: ArtifactSummary) -> None:
    """``--plan``: the subscription's stages and their paths, as its recovery binds them."""
    from reaqtive.cli import views

    functions = _functions_of(args)
    try:
        plan = views.query_plan(summary, artifact, functions)
    except LookupError as error:
        raise _UsageError(f"--plan: {error.args[0]}") from None
    except Exception as error:
        refused = _forbidden(error)
        if refused is None:
            raise
        raise _UsageError(f"--plan {artifact.uri}: {error} ({_forbidden_hint(refused)})") from None
    if args.json:
        print(json.dumps({"subscription": artifact.uri, **plan.to_dict()}, indent=2))
    else:
        print(f"{artifact.uri}: {plan}")


def _functions_of(args: argparse.Namespace) -> FunctionRegistry:
    """The registry that ``--functions`` and ``--allow-module`` make: what a stored query may name."""
    from reaqtive.engine import FunctionRegistry

    allowed = list(args.allow_module or ())
    # Allowed modules and --functions are imported by module path: make the current directory's modules
    # importable, as ``python -m`` would, so that the command works from a service's directory.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    registry = _load_functions(args.functions) if args.functions else FunctionRegistry()
    try:
        return registry.allowing(allowed)
    except ValueError as error:
        raise _UsageError(f"--allow-module: {error}") from error


_LONGEST_ENTRY = 2_000  # characters of one state entry in text (a buffer may hold thousands of elements)


def _shorten(text: str) -> str:
    if len(text) <= _LONGEST_ENTRY:
        return text
    return f"{text[:_LONGEST_ENTRY]}... ({len(text) - _LONGEST_ENTRY:,} more characters; --json prints everything)"


def _check_store_address(store: str) -> None:
    """Refuse ``:memory:``, which :class:`~reaqtive.engine.Engine` takes but names no store another process can
    open."""
    if store == ":memory:":
        raise _UsageError("':memory:' is a store inside one engine's process, gone when it closes; give a store "
                          "file or a postgresql:// DSN")


def _shown(store: str) -> str:
    """The store as messages name it: a database without its password."""
    from reaqtive.state.postgres_store import describe_dsn, is_postgres_dsn

    return describe_dsn(store) if is_postgres_dsn(store) else store


def _inspect_spark(args: argparse.Namespace) -> int:
    """A Spark checkpoint directory: its reaqtive state, read through Spark's state data source."""
    directory = Path(args.store)
    if not (directory / "state").is_dir() or not (directory / "offsets").is_dir():
        raise _UsageError(f"{directory} is a directory but not a Spark checkpoint with state (no 'state' and "
                          "'offsets' directories); an engine store is a file")
    try:
        from reaqtive.spark import format_state, inspect_state
    except ImportError as error:
        raise _UsageError(f"{directory} is a Spark checkpoint: {error}") from error
    from reaqtive.spark import JavaNotFoundError
    from reaqtive.spark.host import BucketStateError

    try:
        summary = inspect_state(directory, keys=args.keys)
    except (JavaNotFoundError, BucketStateError) as error:
        print(f"reaqtive inspect: {directory}: {error}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(summary, indent=2, default=str) if args.json else format_state(summary))
    return EXIT_OK


def _opening(args: argparse.Namespace) -> tuple[list[str], FunctionRegistry | None]:
    """What a command that opens an engine on ``args.store`` opens it with: the modules ``--allow-module`` allows
    and the registry ``--functions`` makes (``None`` without it), after refusing a bad address, a missing or
    foreign store (before the engine could create or touch it) and a bad module name."""
    from reaqtive.engine import FunctionRegistry
    from reaqtive.engine.inspection import read_store

    _check_store_address(args.store)
    read_store(args.store)
    allowed = list(args.allow_module or ())
    try:
        FunctionRegistry(allow_modules=allowed)
    except ValueError as error:
        raise _UsageError(f"--allow-module: {error}") from error
    # Allowed modules and --functions are imported by module path: make the current directory's modules
    # importable, as ``python -m`` would, so that the command works from a service's directory.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return allowed, _load_functions(args.functions) if args.functions else None


def _checkpoint(args: argparse.Namespace) -> int:
    from reaqtive.engine import Engine, RecoveryError, RecoveryPolicy

    allowed, functions = _opening(args)
    policy = RecoveryPolicy.KEEP if args.keep_broken else RecoveryPolicy.FAIL
    try:
        # Every subscription bound at once: each state is loaded and checked, and a full checkpoint rewrites it.
        engine = Engine(args.store, functions=functions, allow_modules=allowed, recovery_policy=policy,
                        lazy_binding=False)
    except RecoveryError as error:
        if args.traceback:  # the failure in full, for a bug report (the engine raises it; it logs nothing)
            traceback.print_exception(error, file=sys.stderr)
        print(f"reaqtive checkpoint: {_shown(args.store)}: {error}. Nothing was changed. {_recovery_hint(error)} "
              "--keep-broken checkpoints the others and keeps the broken one stored.", file=sys.stderr)
        return EXIT_ERROR
    with engine:
        recovery = engine.recovery
        print(f"recovered {recovery.streams} streams, {recovery.definitions} definitions, "
              f"{recovery.subscriptions} subscriptions ({recovery.inner_subscriptions} inner) in "
              f"{recovery.phases.get('total', 0.0) * 1e3:.1f} ms")
        for failure in recovery.failures:
            refused = _forbidden(failure.error)
            hint = f" ({_forbidden_hint(refused)})" if refused is not None else ""
            print(f"  not running (kept in the store): {failure.uri}: {type(failure.error).__name__}: "
                  f"{failure.error}{hint}")
        metrics = engine.checkpoint(full=args.full)
    print(f"checkpoint {metrics.checkpoint_id} ({'full' if metrics.full else 'differential'})")
    for label, value in (
        ("pause", f"{metrics.pause_seconds * 1e3:.2f} ms"),
        ("serialize", f"{metrics.serialize_seconds * 1e3:.2f} ms"),
        ("commit", f"{metrics.commit_seconds * 1e3:.2f} ms"),
        ("egress flush", f"{metrics.egress_seconds * 1e3:.2f} ms"),
        ("bytes written", f"{metrics.bytes_written:,}"),
        ("dirty subscriptions", f"{metrics.dirty_subscriptions:,}"),
        ("ingress truncated", f"{metrics.ingress_truncated:,} events"),
    ):
        print(f"  {label:<20} {value}")
    return EXIT_OK


def _forbidden(error: BaseException) -> ForbiddenReferenceError | None:
    """The refused reference behind a recovery failure, if that is what it is."""
    from reaqtive.engine.expressions import ForbiddenReferenceError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ForbiddenReferenceError):
            return current
        seen.add(id(current))
        current = getattr(current, "error", None) or current.__cause__
    return None


def _forbidden_hint(refused: ForbiddenReferenceError) -> str:
    """What to pass to load a refused reference, if the store is trusted."""
    if refused.kind == "error type":
        return (f"the error type {refused.reference!r} must be registered (register_error) in the FunctionRegistry "
                "given with --functions MODULE:ATTR")
    module = refused.module
    if module is None or module.partition(".")[0] in ("builtins", "__main__"):
        return f"{refused.reference!r} must be registered by name in the FunctionRegistry given with --functions"
    return (f"if you trust the module {module!r}, pass --allow-module {module}; or register the function by name "
            "in the FunctionRegistry given with --functions")


def _recovery_hint(error: BaseException) -> str:
    refused = _forbidden(error)
    if refused is not None:
        return f"Nothing the store names was imported or run: {_forbidden_hint(refused)}."
    return ("The functions the queries use must be registered (--functions MODULE:ATTR) or defined in allowed "
            "modules (--allow-module M; run from the service's directory or set PYTHONPATH so they import).")


def _load_functions(spec: str) -> FunctionRegistry:
    """The :class:`~reaqtive.engine.FunctionRegistry` named by ``module:attribute``: the registry itself, or a
    function called without arguments that returns one (``myapp.functions:make_functions``)."""
    from reaqtive.engine import FunctionRegistry

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise _UsageError(f"--functions needs MODULE:ATTRIBUTE, got {spec!r}")
    try:
        registry = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise _UsageError(f"--functions {spec}: {error}") from error
    if not isinstance(registry, FunctionRegistry) and _takes_no_arguments(registry):
        factory = registry
        try:
            registry = factory()
        except Exception as error:  # the user's factory: any failure is reported, in one line
            raise _UsageError(f"--functions {spec}: calling it raised {type(error).__name__}: {error}") from error
        if not isinstance(registry, FunctionRegistry):
            raise _UsageError(f"--functions {spec}: returned a {type(registry).__name__}, not a FunctionRegistry")
    if not isinstance(registry, FunctionRegistry):
        raise _UsageError(f"--functions {spec}: a {type(registry).__name__}, not a FunctionRegistry nor a "
                          "function that makes one")
    return registry


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (argparse prints the usage first, then the error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _takes_no_arguments(value: object) -> bool:
    """Whether ``value`` is a function that can be called without arguments (a registry factory)."""
    if not callable(value) or isinstance(value, type):
        return False
    try:
        inspect.signature(value).bind()
    except (TypeError, ValueError):  # needs arguments, or has no signature to tell
        return False
    return True


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reaqtive", description="Standing reactive queries with checkpoints.")
    parser.add_argument("--version", action="version", version=f"reaqtive {_version()}")
    parser.add_argument("--traceback", action="store_true",
                        help="on an error, show its traceback instead of one line (for a bug report)")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = commands.add_parser(
        "demo", help="run the IoT engine demo: standing queries, a kill -9, recovery, compared to an uncrashed run",
    )
    demo.add_argument("--backpressure", action="store_true", help="run the Reactive Streams demand demo instead")
    demo.add_argument("--events", type=_positive, default=100_000, help="sensor readings (default 100,000)")
    demo.add_argument("--every", type=_positive, default=2_000, help="events between checkpoints (default 2,000)")
    demo.add_argument("--store", type=Path, default=None, metavar="DIR",
                      help="keep the two store files in DIR (default: a new temporary directory, kept and printed)")
    demo.set_defaults(handler=_demo)

    inspect = commands.add_parser(
        "inspect", help="show what an engine store (read-only; no engine opened) or a Spark checkpoint holds",
    )
    inspect.add_argument("store", help="the engine's SQLite file or PostgreSQL DSN (postgresql://...), or a Spark "
                                       "checkpoint directory")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of tables")
    inspect.add_argument("--keys", action="store_true", help="Spark checkpoint: one line per key, not per bucket")
    inspect.add_argument("--outputs", metavar="URI", help="the subscription's outputs in the durable sink, decoded")
    inspect.add_argument("--state", metavar="URI", help="the subscription's state as of the last checkpoint, decoded")
    inspect.add_argument("--graph", metavar="URI", help="the artifact's query as a Mermaid flowchart")
    inspect.add_argument("--plan", metavar="URI",
                         help="the subscription's stages as it recovers: keyed, fused or general, and why (imports "
                              "the functions its query names: see --allow-module, --functions)")
    inspect.add_argument("--allow-module", action="append", metavar="MODULE",
                         help="--plan: a module whose functions the stored query may name (repeatable)")
    inspect.add_argument("--functions", metavar="MODULE:ATTR",
                         help="--plan: the FunctionRegistry (or a function making it) the service registers")
    inspect.add_argument("--history", metavar="URI",
                         help="the subscription's definitions, each with when it took effect and was replaced")
    inspect.set_defaults(handler=_inspect)

    checkpoint = commands.add_parser(
        "checkpoint", help="open the engine on a store (recovering it), take a checkpoint, print its metrics",
    )
    checkpoint.add_argument("store", help="the engine's SQLite file or PostgreSQL DSN (postgresql://...); the "
                                          "service must not be running")
    checkpoint.add_argument("--full", action="store_true", help="write every subscription, not only changed ones")
    checkpoint.add_argument("--functions", metavar="MODULE:ATTR",
                            help="a FunctionRegistry with the functions the queries use by registered name, or a "
                                 "function that returns one (called without arguments)")
    checkpoint.add_argument("--allow-module", action="append", metavar="MODULE",
                            help="a module whose functions the stored queries may name by import path (repeatable; "
                                 "'pkg.*' for every submodule of pkg); by default none is")
    checkpoint.add_argument("--keep-broken", action="store_true",
                            help="keep subscriptions that fail to recover stored, not running (default: stop)")
    checkpoint.set_defaults(handler=_checkpoint)

    update = commands.add_parser(
        "update", help="replace a subscription's definition in place, keeping the state of matched operators",
        description="Open the engine on STORE (recovering it), replace subscription URI's definition by the query "
                    "--query names, keeping the state of the operators matched by name (.named) or by path and "
                    "operator, at one checkpoint boundary; print what was matched, migrated, reset or dropped.")
    _engine_arguments(update)
    update.add_argument("uri", help="the subscription")
    update.add_argument("--query", required=True, metavar="MODULE:ATTR",
                        help="the new definition: a Query, or a function without arguments that returns one")
    update.add_argument("--dry-run", action="store_true", help="print what would be done and change nothing")
    update.add_argument("--unmatched", choices=("empty", "backfill"), default="empty",
                        help="operators without a state to move start empty (default), or the whole new "
                             "definition is rebuilt by a backfill from the earliest retained event")
    update.add_argument("--require-state", action="store_true",
                        help="refuse the update unless every operator's state moves")
    update.set_defaults(handler=_update)

    rollback = commands.add_parser(
        "rollback", help="go back to a subscription's previous definition",
        description="Open the engine on STORE and go back to subscription URI's previous definition "
                    "(Engine.rollback_subscription); print what was matched.")
    _engine_arguments(rollback)
    rollback.add_argument("uri", help="the subscription")
    rollback.add_argument("--state", choices=("current", "kept"), default="current",
                          help="shared operators go on from the current state (default), or the previous "
                               "definition resumes from its state kept at the swap")
    rollback.add_argument("--dry-run", action="store_true", help="print what would be done and change nothing")
    rollback.set_defaults(handler=_rollback)
    return parser


def _engine_arguments(parser: argparse.ArgumentParser) -> None:
    """STORE, --functions and --allow-module, as ``checkpoint`` takes them."""
    parser.add_argument("store", help="the engine's SQLite file or PostgreSQL DSN (postgresql://...)")
    parser.add_argument("--functions", metavar="MODULE:ATTR",
                        help="a FunctionRegistry with the functions the queries use by registered name, or a "
                             "function without arguments that returns one")
    parser.add_argument("--allow-module", action="append", metavar="MODULE",
                        help="a module whose functions the stored queries may name by import path (repeatable)")


def _open_for_change(args: argparse.Namespace) -> Engine:
    """The engine on ``args.store``, recovered with every query (a failure is the command's error)."""
    from reaqtive.engine import Engine, RecoveryPolicy

    allowed, functions = _opening(args)
    return Engine(args.store, functions=functions, allow_modules=allowed, recovery_policy=RecoveryPolicy.FAIL)


def _load_query(spec: str) -> Query[Any]:
    """The query named by ``module:attribute``: a Query, or a function without arguments that returns one."""
    from reaqtive.fluent.query import Query

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise _UsageError(f"--query needs MODULE:ATTRIBUTE, got {spec!r}")
    try:
        query = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise _UsageError(f"--query {spec}: {error}") from error
    if not isinstance(query, Query) and _takes_no_arguments(query):
        try:
            query = query()
        except Exception as error:  # the user's factory: any failure is reported, in one line
            raise _UsageError(f"--query {spec}: calling it raised {type(error).__name__}: {error}") from error
    if not isinstance(query, Query):
        raise _UsageError(f"--query {spec}: a {type(query).__name__}, not a Query nor a function that makes one")
    return query


def _update(args: argparse.Namespace) -> int:
    from reaqtive.engine import UpdateError

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    query = _load_query(args.query)
    with _open_for_change(args) as engine:
        try:
            plan = engine.update_subscription(args.uri, query, unmatched=args.unmatched,
                                              require_state=args.require_state, dry_run=args.dry_run)
        except UpdateError as error:
            print(f"reaqtive update: refused: {error}", file=sys.stderr)
            return EXIT_DIFFERENT
    print(("would do (dry run, nothing changed): " if args.dry_run else "done: ") + plan.describe())
    return EXIT_OK


def _rollback(args: argparse.Namespace) -> int:
    from reaqtive.engine import UpdateError

    with _open_for_change(args) as engine:
        try:
            plan = engine.rollback_subscription(args.uri, state=args.state, dry_run=args.dry_run)
        except UpdateError as error:
            print(f"reaqtive rollback: refused: {error}", file=sys.stderr)
            return EXIT_DIFFERENT
    print(("would do (dry run, nothing changed): " if args.dry_run else "done: ") + plan.describe())
    return EXIT_OK


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reaqtive")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from reaqtive import __version__

        return __version__


class _LibraryLog(logging.Handler):
    """The library's log records of one command (WARNING and above), held until the command ends: without a
    handler of ours, logging's last resort would print each to stderr with its traceback."""

    # What a command reports itself: recovery failures are checkpoint's error line, or its "not running" lines.
    _REPORTED: Final = frozenset({"recovery_failed"})

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "reaqtive_event", None) not in self._REPORTED:
            self.records.append(record)

    def lines(self, command: str) -> list[str]:
        """The records as one line each, without their tracebacks."""
        return [f"reaqtive {command}: {record.levelname.lower()}: {' '.join(record.getMessage().split())}"
                for record in self.records]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reaqtive`` command; returns the process exit code."""
    args = _parser().parse_args(argv)
    library = logging.getLogger("reaqtive")
    log = _LibraryLog()
    if not args.traceback:  # with --traceback, logging's own output (records with their tracebacks) is wanted
        library.addHandler(log)
    try:
        code = _run(args)
    finally:
        library.removeHandler(log)
    if code == EXIT_OK:
        for line in log.lines(args.command):
            print(line, file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        code: int = args.handler(args)
    except BrokenPipeError:
        return _reader_went_away()
    except KeyboardInterrupt:
        print(f"reaqtive {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as error:
        if args.traceback:
            raise
        print(f"reaqtive {args.command}: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
    try:
        sys.stdout.flush()  # a reader that left during the last lines is noticed here, not at exit
    except BrokenPipeError:
        return _reader_went_away()
    return code


def _one_line(error: BaseException) -> str:
    """An error as one line: ours say what and where; anything else is named by its type (a bug: --traceback)."""
    from reaqtive.core.errors import ReaqtiveError

    if isinstance(error, OSError) and error.filename:
        text = f"{error.filename}: {error.strerror}" if error.strerror else str(error)
    elif isinstance(error, (_UsageError, ReaqtiveError, OSError)):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error} (an unexpected error: run with --traceback to report it)"
    return " ".join(text.split())


def _reader_went_away() -> int:
    """``reaqtive inspect ... | head``: the reader closed the pipe. End quietly, as Unix tools do: what is still
    buffered goes to /dev/null (Python would otherwise report the failed flush at exit)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
