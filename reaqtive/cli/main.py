"""The ``reaqtive`` command.

* ``reaqtive demo``: the IoT engine demo (sensors, standing queries, a ``kill -9`` and a recovery, checked against
  an uncrashed run); ``reaqtive demo --backpressure``: the Reactive Streams demand demo.
* ``reaqtive inspect STORE [--json] [--keys]``: what an engine store holds, read without opening an engine; or,
  for a Spark checkpoint directory (``reaqtive.spark``), the reaqtive state Spark keeps in it.
* ``reaqtive checkpoint STORE [--full] [--allow-module M ...] [--functions MODULE:ATTR]``: open the engine on a
  store (recovering it), take a checkpoint, close. The store's queries may name only the functions registered in
  ``--functions`` and those defined in the ``--allow-module`` modules (a store is data: nothing else is imported).

Exit codes: 0 success, 1 the command ran and failed (the demo's results differ, a recovery failed), 2 bad usage
or a file that is missing or is not a reaqtive store.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reaqtive.engine import FunctionRegistry
    from reaqtive.engine.expressions import ForbiddenReferenceError

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    """A problem with what the user asked for: printed as one line, exit code 2."""


def _demo(args: argparse.Namespace) -> int:
    if args.backpressure:
        from reaqtive.cli.demos import backpressure

        backpressure.run()
        return EXIT_OK
    from reaqtive.cli.demos import iot

    if args.events < 4 * args.every:
        raise _UsageError(f"--events must be at least 4 x --every ({4 * args.every:,})")
    config = iot.DemoConfig(events=args.events, every=args.every, store_dir=args.store)
    try:
        report = iot.run_demo(config, say=lambda line: print(line, flush=True))
    except iot.DemoError as error:
        print(f"reaqtive demo: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if report.equal else EXIT_FAILED


def _inspect(args: argparse.Namespace) -> int:
    from reaqtive.engine.inspection import format_summary, read_store, summary_to_json

    if args.store.is_dir():
        return _inspect_spark(args)
    summary = read_store(args.store)
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


def _inspect_spark(args: argparse.Namespace) -> int:
    """A Spark checkpoint directory: its reaqtive state, read through Spark's state data source."""
    if not (args.store / "state").is_dir() or not (args.store / "offsets").is_dir():
        raise _UsageError(f"{args.store} is a directory but not a Spark checkpoint with state (no 'state' and "
                          "'offsets' directories); an engine store is a file")
    try:
        from reaqtive.spark import format_state, inspect_state
    except ImportError as error:
        raise _UsageError(f"{args.store} is a Spark checkpoint: {error}") from error
    from reaqtive.spark import JavaNotFoundError
    from reaqtive.spark.host import BucketStateError

    try:
        summary = inspect_state(args.store, keys=args.keys)
    except (JavaNotFoundError, BucketStateError) as error:
        print(f"reaqtive inspect: {args.store}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(summary, indent=2, default=str) if args.json else format_state(summary))
    return EXIT_OK


def _checkpoint(args: argparse.Namespace) -> int:
    from reaqtive.engine import Engine, FunctionRegistry, RecoveryError, RecoveryPolicy
    from reaqtive.engine.inspection import read_store

    read_store(args.store)  # refuse a missing or foreign file before the engine could create or touch it
    allowed = list(args.allow_module or ())
    try:
        FunctionRegistry(allow_modules=allowed)
    except ValueError as error:
        raise _UsageError(f"--allow-module: {error}") from error
    # Allowed modules and --functions are imported by module path: make the current directory's modules
    # importable, as ``python -m`` would, so that the command works from a service's directory.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    functions = _load_functions(args.functions) if args.functions else None
    policy = RecoveryPolicy.KEEP if args.keep_broken else RecoveryPolicy.FAIL
    try:
        engine = Engine(args.store, functions=functions, allow_modules=allowed, recovery_policy=policy)
    except RecoveryError as error:
        print(f"reaqtive checkpoint: {args.store}: {error}. Nothing was changed. {_recovery_hint(error)} "
              "--keep-broken checkpoints the others and keeps the broken one stored.", file=sys.stderr)
        return EXIT_FAILED
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
    """The :class:`~reaqtive.engine.FunctionRegistry` named by ``module:attribute``."""
    from reaqtive.engine import FunctionRegistry

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise _UsageError(f"--functions needs MODULE:ATTRIBUTE, got {spec!r}")
    try:
        registry = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise _UsageError(f"--functions {spec}: {error}") from error
    if not isinstance(registry, FunctionRegistry):
        raise _UsageError(f"--functions {spec}: a {type(registry).__name__}, not a FunctionRegistry")
    return registry


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reaqtive", description="Standing reactive queries with checkpoints.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo", help="run the IoT engine demo: standing queries, a kill -9, recovery, compared to an uncrashed run",
    )
    demo.add_argument("--backpressure", action="store_true", help="run the Reactive Streams demand demo instead")
    demo.add_argument("--events", type=_positive, default=100_000, help="sensor readings (default 100,000)")
    demo.add_argument("--every", type=_positive, default=2_000, help="events between checkpoints (default 2,000)")
    demo.add_argument("--store", type=Path, default=None, metavar="DIR",
                      help="keep the two store files in DIR (default: a temporary directory, removed)")
    demo.set_defaults(handler=_demo)

    inspect = commands.add_parser(
        "inspect", help="show what an engine store (read-only; no engine opened) or a Spark checkpoint holds",
    )
    inspect.add_argument("store", type=Path, help="the engine's SQLite file, or a Spark checkpoint directory")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of tables")
    inspect.add_argument("--keys", action="store_true", help="Spark checkpoint: one line per key, not per bucket")
    inspect.set_defaults(handler=_inspect)

    checkpoint = commands.add_parser(
        "checkpoint", help="open the engine on a store (recovering it), take a checkpoint, print its metrics",
    )
    checkpoint.add_argument("store", type=Path, help="the engine's SQLite file (the service must not be running)")
    checkpoint.add_argument("--full", action="store_true", help="write every subscription, not only changed ones")
    checkpoint.add_argument("--functions", metavar="MODULE:ATTR",
                            help="a FunctionRegistry with the functions the queries use by registered name")
    checkpoint.add_argument("--allow-module", action="append", metavar="MODULE",
                            help="a module whose functions the stored queries may name by import path (repeatable; "
                                 "'pkg.*' for every submodule of pkg); by default none is")
    checkpoint.add_argument("--keep-broken", action="store_true",
                            help="keep subscriptions that fail to recover stored, not running (default: stop)")
    checkpoint.set_defaults(handler=_checkpoint)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reaqtive`` command; returns the process exit code."""
    from reaqtive.state import StoreError

    args = _parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except (_UsageError, StoreError, OSError) as error:
        message = str(error) if not isinstance(error, OSError) or not error.filename else (
            f"{error.filename}: {error.strerror}" if error.strerror else str(error)
        )
        print(f"reaqtive {args.command}: {message}", file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
