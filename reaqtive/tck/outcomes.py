"""How a verification test reports something other than pass or fail.

Every outcome is a :class:`unittest.SkipTest`, so pytest and unittest report it as *skipped*; the subclass (and
the prefix of the message) says why, so a report can tell "the kit does not verify this rule" from "this
implementation does not offer this optional feature". A violated required rule is an ordinary ``AssertionError``.

The messages keep the JVM kit's wording after the prefix, so users can search for them.
"""

from __future__ import annotations

import unittest

__all__ = [
    "CapabilitySkip",
    "NO_ERROR_PUBLISHER",
    "NOT_VERIFIED_PUBLISHER",
    "NOT_VERIFIED_SUBSCRIBER",
    "NotVerified",
    "OptionalNotImplemented",
    "StochasticSkipped",
    "TckSkip",
]

NOT_VERIFIED_PUBLISHER = "Not verified by this TCK."
NOT_VERIFIED_SUBSCRIBER = "Not verified using this TCK."
NO_ERROR_PUBLISHER = (
    "Skipping because no error state Publisher provided, and the test requires it. "
    "Please implement PublisherVerification.create_failed_publisher to run this test."
)


class TckSkip(unittest.SkipTest):
    """Base of every non-pass, non-fail outcome of the kit; ``kind`` names the outcome in reports."""

    kind = "skip"

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.kind}] {message}")
        self.reason = message


class NotVerified(TckSkip):
    """An ``untested_*`` test: the rule cannot be checked from outside an implementation. Always reported."""

    kind = "untested"


class StochasticSkipped(TckSkip):
    """A ``stochastic_*`` test switched off by ``skip_stochastic_tests()``."""

    kind = "stochastic"


class OptionalNotImplemented(TckSkip):
    """An ``optional_*`` test whose behaviour the implementation does not offer; the reason says what failed."""

    kind = "optional"


class CapabilitySkip(TckSkip):
    """The test cannot run with this configuration: too few elements, no failed publisher, too few subscribers."""

    kind = "capability"
