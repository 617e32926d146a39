"""reaqtive: standing reactive queries whose operators checkpoint their state and recover after a restart,
on the Reactive Streams contract.

The public API is re-exported here; see ``docs/architecture.md`` for how the layers fit together.
"""

from reaqtive import operators as _operators  # registers every operator's binder
from reaqtive.binding import (
    ENTRY_POINT_GROUP,
    OperatorSpec,
    load_operator_plugins,
    operator_spec,
    operator_specs,
    register_operator,
    registered_operators,
)
from reaqtive.context import ExecutionEnvironment, HigherOrderEnvironment, OperatorContext
from reaqtive.engine import (
    DURABLE_SINK,
    AsyncEngine,
    CheckpointMetrics,
    Engine,
    EngineError,
    EngineStatus,
    FunctionRegistry,
    Output,
    RecoveryPolicy,
    UnpersistableQueryError,
)
from reaqtive.error_policy import NO_ELEMENT, ErrorContext, ErrorPolicy
from reaqtive.errors import (
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
from reaqtive.expression import Expression, OperatorCall
from reaqtive.operator import (
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
from reaqtive.operators.keyed_groups import keyed_execution, set_keyed_execution
from reaqtive.operators.keyed_window import Fold, Hopping, Session, Tumbling
from reaqtive.processor import QueryProcessor, as_processor
from reaqtive.publisher import as_publisher
from reaqtive.query import (
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
from reaqtive.scheduler_interface import Scheduler, SchedulerTask, YieldableSchedulerTask, YieldToken
from reaqtive.streams import LONG_MAX, Processor, Publisher, Subscriber, Subscription
from reaqtive.subjects import MultiSubject, OverflowPolicy, SimpleSubject, UntypedMultiSubject, to_typed
from reaqtive.subscribable import Subscribable
from reaqtive.subscribers import NOP_SUBSCRIBER, CallbackSubscriber, NopSubscriber
from reaqtive.subscriptions import (
    NOP_SUBSCRIPTION,
    CompositeSubscription,
    NopSubscription,
    SerialSubscription,
    SingleAssignmentSubscription,
    StableCompositeSubscription,
    StaticCompositeSubscription,
    SubscriptionHandle,
)
from reaqtive.visitors import (
    SubscriptionVisitor,
    SubscriptionVisitorBuilder,
    initialize,
    set_context_all,
    start_all,
    subscribe_all,
    walk,
)

del _operators

__version__ = "0.1.0"

__all__ = [
    "NO_ELEMENT",
    # the embedded engine
    "DURABLE_SINK",
    "AsyncEngine",
    "CheckpointMetrics",
    "Engine",
    "EngineError",
    "EngineStatus",
    "FunctionRegistry",
    "Output",
    "RecoveryPolicy",
    "UnpersistableQueryError",
    # Reactive Streams
    "LONG_MAX",
    "Processor",
    "Publisher",
    "Subscriber",
    "Subscription",
    # queries
    "Query",
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
