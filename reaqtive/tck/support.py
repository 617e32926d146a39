"""Small pieces the subscriber verifications share."""

from __future__ import annotations

import sys
from collections.abc import Callable

from reaqtive.tck.base import VerificationBase
from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.sync import Latch

__all__ = ["SecondSubscription", "TerminalSignalGuardSubscription", "require_null_error"]


class TerminalSignalGuardSubscription:
    """A subscription that records a failure when it is used from inside the kit's own call of ``on_complete`` or
    ``on_error`` (rule 2.3). Unrelated methods that happen to share those names never trip it."""

    def __init__(self, env: TestEnvironment, signal: str) -> None:
        self._env = env
        self._signal = signal

    def _check(self, method: str) -> None:
        if self._env.current_signal() == self._signal:
            caller = sys._getframe(2).f_code.co_qualname
            self._env.flop(
                f"Subscription.{method} MUST NOT be called from Subscriber.{self._signal} (Rule 2.3)! "
                f"(Caller: {caller})"
            )

    def request(self, n: int) -> None:
        self._check("request")

    def cancel(self) -> None:
        self._check("cancel")


class SecondSubscription:
    """A second subscription given to an already subscribed subscriber: it must be cancelled (rule 2.5)."""

    def __init__(self, env: TestEnvironment, cancelled: Latch, *, forbid_request: bool, subscriber: str = "") -> None:
        self._env, self._cancelled, self._forbid_request, self._subscriber = env, cancelled, forbid_request, subscriber

    def request(self, n: int) -> None:
        if self._forbid_request:
            self._env.flop(f"Subscriber {self._subscriber} illegally called `subscription.request({n})`!")

    def cancel(self) -> None:
        self._cancelled.close()


def require_null_error(verification: VerificationBase, call: str, invoke: Callable[[], None]) -> None:
    """Call ``invoke``; it must raise one of the null error types (rule 2.13)."""
    try:
        invoke()
    except verification.null_error_types:
        return
    names = " or ".join(t.__name__ for t in verification.null_error_types)
    raise AssertionError(f"{call} did not raise {names} (rule 2.13)")
