"""``reaqtive.tck``: the Reactive Streams Technology Compatibility Kit for Python.

A port of the JVM kit 1.0.4 for any Python implementation of the ``reaqtive.core.streams`` interfaces (they are
Protocols: any object with the right methods conforms). It depends only on ``reaqtive.core.streams`` and the standard
library. Subclass a verification class in a ``Test*`` class of a pytest module and implement its hooks; every
inherited ``test_<JVM test name>`` then runs::

    from reaqtive.tck import PublisherVerification

    class TestRangePublisher(PublisherVerification[int]):
        def create_publisher(self, elements: int) -> Publisher[int]:
            return RangePublisher(0, elements)

        def create_failed_publisher(self) -> Publisher[int] | None:
            return None

See ``docs/tck.md`` for outcomes, timeouts and the Python mapping of Java's null and IllegalArgumentException.
"""

from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.failures import (
    ILLEGAL_ARGUMENT_ERRORS,
    NULL_ERRORS,
    SubscriberBufferOverflowError,
    TestException,
)
from reaqtive.tck.helper_publisher import INT_MAX, AsyncIterablePublisher, create_helper_publisher
from reaqtive.tck.identity_processor import IdentityProcessorVerification
from reaqtive.tck.manual_publisher import ManualPublisher
from reaqtive.tck.outcomes import (
    CapabilitySkip,
    NotVerified,
    OptionalNotImplemented,
    StochasticSkipped,
    TckSkip,
)
from reaqtive.tck.probes import BlackboxProbe, SubscriberPuppet, WhiteboxSubscriberProbe
from reaqtive.tck.publisher_verification import PublisherVerification
from reaqtive.tck.rules import Kind, Rule, rule_for
from reaqtive.tck.subscriber_blackbox import SubscriberBlackboxVerification
from reaqtive.tck.subscriber_whitebox import SubscriberWhiteboxVerification
from reaqtive.tck.subscribers import (
    ManualSubscriber,
    ManualSubscriberWithSubscriptionSupport,
    TestSubscriber,
)

__all__ = [
    # verification classes
    "IdentityProcessorVerification",
    "PublisherVerification",
    "SubscriberBlackboxVerification",
    "SubscriberWhiteboxVerification",
    # what whitebox subscribers report to
    "SubscriberPuppet",
    "WhiteboxSubscriberProbe",
    "BlackboxProbe",
    # outcomes
    "CapabilitySkip",
    "NotVerified",
    "OptionalNotImplemented",
    "StochasticSkipped",
    "TckSkip",
    # environment and building blocks
    "TestEnvironment",
    "ManualPublisher",
    "ManualSubscriber",
    "ManualSubscriberWithSubscriptionSupport",
    "TestSubscriber",
    "AsyncIterablePublisher",
    "create_helper_publisher",
    "SubscriberBufferOverflowError",
    "TestException",
    # Python mapping of Java's special cases
    "INT_MAX",
    "ILLEGAL_ARGUMENT_ERRORS",
    "NULL_ERRORS",
    # the rules registry
    "Kind",
    "Rule",
    "rule_for",
]
