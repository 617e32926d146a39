"""An error policy for tests: it skips or stops, and records what every operator asked it.

A query runs under an error policy when its operator context carries one (the setting
:data:`~reaqtive.core.error_policy.ERROR_POLICY_SETTING`, see :mod:`reaqtive.core.error_policy`); the test
harnesses take it through their ``settings``::

    policy = RecordingPolicy(skip=True)
    scheduler.start(lambda: xs.map(f), context=scheduler.create_context(policy.settings))
    assert_checkpoint_anywhere(lambda xs: xs.map(f), script, settings=policy.settings)
    policy.calls   # [PolicyCall(operator='reaqtive:map', error=ValueError(...), element=3), ...]

>>> from reaqtive.testing import TestScheduler, on_next, on_completed
>>> scheduler = TestScheduler()
>>> xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 0), on_next(230, 4), on_completed(240))
>>> policy = RecordingPolicy(skip=True)
>>> scheduler.start(lambda: xs.map(lambda x: 12 // x), context=scheduler.create_context(policy.settings)).messages
[OnNext(12)@210, OnNext(3)@230, OnCompleted()@240]
>>> policy.calls
[PolicyCall(operator='reaqtive:map', error=ZeroDivisionError('integer division or modulo by zero'), element=0)]
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reaqtive.core.error_policy import ERROR_POLICY_SETTING

if TYPE_CHECKING:
    from reaqtive.core.operator import OperatorBase

__all__ = ["PolicyCall", "RecordingPolicy"]


@dataclass(frozen=True)
class PolicyCall:
    """One question an operator asked: its persisted name, the error its user function raised, and the element
    it was called on (:data:`~reaqtive.core.error_policy.NO_ELEMENT` for a function that runs without one)."""

    operator: str
    error: Exception
    element: object


class RecordingPolicy:
    """An :class:`~reaqtive.core.error_policy.ErrorPolicy` that records every question (:attr:`calls`, in order) and
    answers ``skip``: ``True`` skips every element, ``False`` stops the query at the first user error, a function
    ``(operator name, error, element) -> bool`` decides per error."""

    __slots__ = ("_decide", "_lock", "calls")

    def __init__(self, skip: bool | Callable[[str, Exception, object], bool] = True) -> None:
        self._decide = skip
        self._lock = threading.Lock()
        self.calls: list[PolicyCall] = []

    @property
    def settings(self) -> dict[str, object]:
        """The context settings that give a query this policy."""
        return {ERROR_POLICY_SETTING: self}

    def skips(self, operator: OperatorBase[Any], error: Exception, element: object) -> bool:
        name = str(getattr(operator, "name", type(operator).__name__))
        with self._lock:
            self.calls.append(PolicyCall(name, error, element))
        decide = self._decide
        return decide if isinstance(decide, bool) else bool(decide(name, error, element))

    def __repr__(self) -> str:
        return f"<RecordingPolicy skip={self._decide!r}, {len(self.calls)} calls>"
