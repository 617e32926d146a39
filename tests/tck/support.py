"""Helpers for the kit's self-tests: run one verification test and check its outcome, and small building blocks
for writing deliberately broken publishers and subscribers in a few lines."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any

from reaqtive.core.streams import Publisher, Subscriber
from reaqtive.tck.base import VerificationBase

_UNHELPFUL = (AttributeError, NameError, UnboundLocalError)
"""Errors that mean the kit itself crashed (the JVM self-tests reject a NullPointerException for the same reason)."""


def run_verification(verification: VerificationBase, name: str) -> BaseException | None:
    """Run ``test_<name>`` of ``verification`` with its setup and teardown; return what it raised, if anything."""
    method = getattr(verification, "test_" + name)
    verification.setup_method(method)
    try:
        method()
    except Exception as error:
        return error
    finally:
        verification.teardown_method(method)
    return None


def _chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 6:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def require_test_failure(verification: VerificationBase, name: str, fragment: str) -> BaseException:
    """The test must *fail* (not skip), and ``fragment`` must appear in the error or one of its causes."""
    error = run_verification(verification, name)
    assert error is not None, f"expected {name} to fail with {fragment!r}, but it passed"
    assert not isinstance(error, unittest.SkipTest), f"expected {name} to fail with {fragment!r}, it skipped: {error}"
    chain = _chain(error)
    unhelpful = [e for e in chain if isinstance(e, _UNHELPFUL)]
    assert not unhelpful, f"{name} failed with an unhelpful error (a kit bug): {unhelpful[0]!r}"
    messages = [str(e) for e in chain]
    assert any(fragment in m for m in messages), f"{name}: {fragment!r} not found in {messages}"
    return error


def require_test_skip(verification: VerificationBase, name: str, fragment: str) -> unittest.SkipTest:
    """The test must skip, with ``fragment`` in the reason."""
    error = run_verification(verification, name)
    assert isinstance(error, unittest.SkipTest), f"expected {name} to skip with {fragment!r}, got {error!r}"
    assert fragment in str(error), f"{name}: {fragment!r} not in skip reason {str(error)!r}"
    return error


def require_test_failure_or_skip(verification: VerificationBase, name: str, fragment: str) -> BaseException:
    """Optional tests report a violation as a skip whose reason names it; either outcome must carry ``fragment``."""
    error = run_verification(verification, name)
    assert error is not None, f"expected {name} to fail or skip with {fragment!r}, but it passed"
    messages = [str(e) for e in _chain(error)]
    assert any(fragment in m for m in messages), f"{name}: {fragment!r} not found in {messages}"
    return error


def require_test_pass(verification: VerificationBase, name: str) -> None:
    """The test must pass: neither fail nor skip."""
    error = run_verification(verification, name)
    assert error is None, f"expected {name} to pass, got {error!r}"


class LambdaPublisher:
    """A publisher whose ``subscribe`` is the given function (for writing broken publishers briefly)."""

    def __init__(self, on_subscribe: Callable[[Subscriber[Any]], None], name: str = "LambdaPublisher") -> None:
        self._on_subscribe = on_subscribe
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def subscribe(self, subscriber: Subscriber[Any]) -> None:
        self._on_subscribe(subscriber)


class LambdaSubscription:
    """A subscription whose ``request``/``cancel`` are the given functions (no-ops by default)."""

    def __init__(
        self, on_request: Callable[[int], None] | None = None, on_cancel: Callable[[], None] | None = None
    ) -> None:
        self._on_request = on_request
        self._on_cancel = on_cancel

    def request(self, n: int) -> None:
        if self._on_request is not None:
            self._on_request(n)

    def cancel(self) -> None:
        if self._on_cancel is not None:
            self._on_cancel()


def noop_publisher() -> Publisher[Any]:
    """Signals ``on_subscribe`` and then nothing, whatever is requested."""
    return LambdaPublisher(lambda s: s.on_subscribe(LambdaSubscription()), "noop publisher")


def demand_ignoring_sync_publisher(extra: int = 1) -> Publisher[Any]:
    """On ``request(n)`` emits ``n + extra`` elements at once (0, 1, 2, ...), even after ``cancel``."""

    def subscribe(subscriber: Subscriber[Any]) -> None:
        counter = [0]

        def request(n: int) -> None:
            for _ in range(min(n, 10_000) + extra):
                subscriber.on_next(counter[0])
                counter[0] += 1

        subscriber.on_subscribe(LambdaSubscription(request))

    return LambdaPublisher(subscribe, "demand-ignoring publisher")
