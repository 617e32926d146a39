"""What every verification class shares: the per-test environment, the helper executor and the skip helpers.

The verification classes are plain classes (no ``__init__``, not named ``Test*``), so pytest collects the
inherited ``test_*`` methods only on a user's ``Test*`` subclass. pytest calls ``setup_method`` and
``teardown_method`` around each test; a subclass that overrides them must call ``super()``.
"""

from __future__ import annotations

from abc import ABC
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import ClassVar, NoReturn

from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.failures import ILLEGAL_ARGUMENT_ERRORS, NULL_ERRORS
from reaqtive.tck.outcomes import NotVerified

__all__ = ["VerificationBase"]


class VerificationBase(ABC):
    """The per-test lifecycle of every verification class."""

    null_error_types: ClassVar[tuple[type[BaseException], ...]] = NULL_ERRORS
    """What a ``None`` argument must raise (Java's NullPointerException): rules 1.9 and 2.13."""
    illegal_argument_error_types: ClassVar[tuple[type[BaseException], ...]] = ILLEGAL_ARGUMENT_ERRORS
    """What ``on_error`` must carry after ``request(n <= 0)`` (Java's IllegalArgumentException): rule 3.9."""
    publisher_executor_workers: ClassVar[int] = 4
    """Threads of the executor the kit's helper publishers run on."""

    env: TestEnvironment
    _executor: ThreadPoolExecutor | None = None

    # -- hooks ----------------------------------------------------------------------------------------------------

    def create_environment(self) -> TestEnvironment:
        """The environment of one test; override to set timeouts in code (environment variables otherwise)."""
        return TestEnvironment.from_env()

    def publisher_executor(self) -> Executor:
        """The executor the kit's helper publishers run on (created on first use, shut down after the test)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.publisher_executor_workers, thread_name_prefix="tck-helper")
        return self._executor

    # -- pytest lifecycle -----------------------------------------------------------------------------------------

    def setup_method(self, method: object = None) -> None:
        self.env = self.create_environment()
        self._executor = None

    def teardown_method(self, method: object = None) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            env.close()  # cancel what the test left running before the executor goes away
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # -- outcomes -------------------------------------------------------------------------------------------------

    not_verified_message: ClassVar[str] = "Not verified by this TCK."

    def not_verified(self, message: str | None = None) -> NoReturn:
        """Report an ``untested_*`` test."""
        raise NotVerified(message or self.not_verified_message)
