"""reaqtive: standing reactive queries whose operators checkpoint their state and recover after a restart,
on the Reactive Streams contract.

The public API is re-exported here; see ``docs/architecture.md`` for how the layers fit together.

``import reaqtive`` loads the queries and subscriptions; each operator's module loads on the first use of the
operator (binding imports it by name: :data:`reaqtive.core.binding.BUILTIN_OPERATORS`), ``reaqtive.ops`` when first
reached; the embedded engine (and with it SQLite and the asyncio face) loads when one of its names is first used
(``from reaqtive import Engine``), and the subpackages ``reaqtive.engine``, ``reaqtive.connectors``,
``reaqtive.spark``, ``reaqtive.testing``, ``reaqtive.tck`` and ``reaqtive.cli`` when they are imported or first
reached as attributes (PEP 562). ``bench/import_time.py`` measures what ``import reaqtive`` costs.
"""

from __future__ import annotations

import logging as _logging
from typing import TYPE_CHECKING

from reaqtive.core.binding import (
    ENTRY_POINT_GROUP,
    OperatorSpec,
    load_operator_plugins,
    operator_spec,
    operator_specs,
    register_operator,
    registered_operators,
)
from reaqtive.core.context import ExecutionEnvironment, HigherOrderEnvironment, OperatorContext
from reaqtive.core.error_policy import NO_ELEMENT, ErrorContext, ErrorPolicy
from reaqtive.core.errors import (
    BufferOverflowError,
    InvalidSettingError,
    LimitExceededError,
    MissingSchedulerError,
    ObjectDisposedError,
    OperatorArgumentError,
    OperatorPluginError,
    QueryTooDeepError,
    ReaqtiveError,
    SubscriptionAssignedError,
    UnknownOperatorError,
)
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import (
    Operator,
    OperatorBase,
    StatefulOperator,
    StateReader,
    StateWriter,
    UnaryOperator,
    UnaryOperatorBase,
    UnloadableOperator,
    Version,
    Versioned,
)
from reaqtive.core.scheduler_interface import Scheduler, SchedulerTask, YieldableSchedulerTask, YieldToken
from reaqtive.core.streams import LONG_MAX, Processor, Publisher, Subscriber, Subscription
from reaqtive.core.subjects import MultiSubject, OverflowPolicy, SimpleSubject, UntypedMultiSubject, to_typed
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscribers import NOP_SUBSCRIBER, CallbackSubscriber, NopSubscriber
from reaqtive.core.subscriptions import (
    NOP_SUBSCRIPTION,
    CompositeSubscription,
    NopSubscription,
    SerialSubscription,
    SingleAssignmentSubscription,
    StableCompositeSubscription,
    StaticCompositeSubscription,
    SubscriptionHandle,
)
from reaqtive.core.visitors import (
    SubscriptionVisitor,
    SubscriptionVisitorBuilder,
    initialize,
    set_context_all,
    start_all,
    subscribe_all,
    walk,
)
from reaqtive.fluent.query import (
    GroupedStream,
    InnerStream,
    Query,
    combine_latest,
    empty,
    from_iterable,
    interval,
    merge,
    never,
    return_value,
    throw,
    timer,
)
from reaqtive.processor import QueryProcessor, as_processor
from reaqtive.publisher import as_publisher

if TYPE_CHECKING:  # imported on first use (``__getattr__`` below); named here for type checkers
    from reaqtive.engine import (
        DURABLE_SINK,
        AsyncEngine,
        CheckpointMetrics,
        Engine,
        EngineError,
        EngineSettings,
        EngineStatus,
        FunctionRegistry,
        Output,
        RecoveryPolicy,
        Retention,
        UnpersistableQueryError,
    )
    from reaqtive.operators.keyed_groups import KeyedGroup, keyed_execution, set_keyed_execution
    from reaqtive.operators.keyed_window import Fold, Hopping, Session, Tumbling
    from reaqtive.operators.plan import QueryPlan, StagePlan

__version__ = "0.1.0"

# A library adds no handler of its own but this one: without a logging configuration, reaqtive's records are not
# printed through Python's last-resort handler; the application decides where they go (``logging.basicConfig``).
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

_LAZY_NAMES = {
    name: "reaqtive.engine"
    for name in (
        "DURABLE_SINK",
        "AsyncEngine",
        "CheckpointMetrics",
        "Engine",
        "EngineError",
        "EngineSettings",
        "EngineStatus",
        "FunctionRegistry",
        "Output",
        "RecoveryPolicy",
        "Retention",
        "UnpersistableQueryError",
    )
} | {
    # the operator library: binding imports each operator's module on first use (reaqtive.core.binding)
    "keyed_execution": "reaqtive.operators.keyed_groups",
    "set_keyed_execution": "reaqtive.operators.keyed_groups",
    "KeyedGroup": "reaqtive.operators.keyed_groups",
    "QueryPlan": "reaqtive.operators.plan",
    "StagePlan": "reaqtive.operators.plan",
    "Fold": "reaqtive.operators.keyed_window",
    "Hopping": "reaqtive.operators.keyed_window",
    "Session": "reaqtive.operators.keyed_window",
    "Tumbling": "reaqtive.operators.keyed_window",
}
"""The public names whose module loads on first use (each name to its module), with the ``TYPE_CHECKING`` imports
above naming the same names."""

_LAZY_SUBPACKAGES = frozenset({"ops", "engine", "connectors", "spark", "testing", "tck", "cli"})


if not TYPE_CHECKING:  # type checkers see the TYPE_CHECKING imports above; an unknown name stays an error to them

    def __getattr__(name: str) -> object:
        """PEP 562: load a lazily exported name's module (or a subpackage reached as an attribute) on first use."""
        import importlib

        module = _LAZY_NAMES.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            globals()[name] = value  # later lookups find it directly
            return value
        if name in _LAZY_SUBPACKAGES:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "NO_ELEMENT",
    # the embedded engine
    "DURABLE_SINK",
    "AsyncEngine",
    "CheckpointMetrics",
    "Engine",
    "EngineError",
    "EngineSettings",
    "EngineStatus",
    "FunctionRegistry",
    "Output",
    "RecoveryPolicy",
    "Retention",
    "UnpersistableQueryError",
    # Reactive Streams
    "LONG_MAX",
    "Processor",
    "Publisher",
    "Subscriber",
    "Subscription",
    # queries
    "Query",
    "ops",
    "InnerStream",
    "GroupedStream",
    "from_iterable",
    "return_value",
    "empty",
    "never",
    "throw",
    "timer",
    "interval",
    "merge",
    "combine_latest",
    "Tumbling",
    "Hopping",
    "Session",
    "Fold",
    "keyed_execution",
    "set_keyed_execution",
    "KeyedGroup",
    "QueryPlan",
    "StagePlan",
    "as_publisher",
    "as_processor",
    "QueryProcessor",
    "Expression",
    "OperatorCall",
    "register_operator",
    "registered_operators",
    "operator_spec",
    "operator_specs",
    "OperatorSpec",
    "load_operator_plugins",
    "ENTRY_POINT_GROUP",
    # subscribers and subjects
    "CallbackSubscriber",
    "NopSubscriber",
    "NOP_SUBSCRIBER",
    "MultiSubject",
    "UntypedMultiSubject",
    "SimpleSubject",
    "OverflowPolicy",
    "to_typed",
    "Subscribable",
    # operators and their lifecycle
    "Operator",
    "UnaryOperator",
    "OperatorBase",
    "UnaryOperatorBase",
    "StatefulOperator",
    "UnloadableOperator",
    "Versioned",
    "Version",
    "StateReader",
    "StateWriter",
    "OperatorContext",
    "ErrorContext",
    "ErrorPolicy",
    "ExecutionEnvironment",
    "HigherOrderEnvironment",
    "Scheduler",
    "SchedulerTask",
    "YieldableSchedulerTask",
    "YieldToken",
    # subscription handles and visitors
    "SubscriptionHandle",
    "NopSubscription",
    "NOP_SUBSCRIPTION",
    "CompositeSubscription",
    "StableCompositeSubscription",
    "StaticCompositeSubscription",
    "SingleAssignmentSubscription",
    "SerialSubscription",
    "SubscriptionVisitor",
    "SubscriptionVisitorBuilder",
    "initialize",
    "subscribe_all",
    "set_context_all",
    "start_all",
    "walk",
    # errors
    "ReaqtiveError",
    "UnknownOperatorError",
    "OperatorPluginError",
    "ObjectDisposedError",
    "OperatorArgumentError",
    "QueryTooDeepError",
    "BufferOverflowError",
    "LimitExceededError",
    "InvalidSettingError",
    "SubscriptionAssignedError",
    "MissingSchedulerError",
]
