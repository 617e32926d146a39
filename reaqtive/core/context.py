"""The operator context: what the host hands every operator between ``subscribe()`` and ``start()``.

An operator never receives a scheduler, a logger or a setting as a parameter: it reads them from its context in
``set_context``. That is what lets the same query run standalone (Rx-like, in memory), under a virtual-time test
scheduler, inside the engine, or on Spark.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

from reaqtive.core.errors import MissingSchedulerError

if TYPE_CHECKING:
    from reaqtive.core.scheduler_interface import Scheduler
    from reaqtive.core.streams import Subscriber
    from reaqtive.core.subjects import MultiSubject
    from reaqtive.core.subscribable import Subscribable
    from reaqtive.core.subscriptions import SubscriptionHandle

__all__ = ["DEFAULT_LOGGER", "ExecutionEnvironment", "HigherOrderEnvironment", "OperatorContext"]

DEFAULT_LOGGER: Final = logging.getLogger("reaqtive.operators")
"""Where operators trace when the host gives no logger of its own."""

_EMPTY_SETTINGS: Final[Mapping[str, object]] = {}  # shared, never written

D = TypeVar("D")


class ExecutionEnvironment(ABC):
    """The host's registry of sibling artifacts, addressed by URI.

    Operators that must reach other artifacts (a stream defined in the engine, an inner subject created by a
    higher-order operator) look them up here. ``None`` in the context means standalone use.
    """

    __slots__ = ()

    @abstractmethod
    def get_subject(self, uri: str) -> MultiSubject[Any, Any]:
        """The subject (stream) registered under ``uri``; raises :class:`LookupError` if there is none."""

    @abstractmethod
    def get_subscription(self, uri: str) -> SubscriptionHandle:
        """The subscription registered under ``uri``; raises :class:`LookupError` if there is none."""


class HigherOrderEnvironment(ExecutionEnvironment):
    """An environment that keeps the inner parts of higher-order operators as artifacts of their own.

    ``flat_map``, ``switch_latest`` and ``debounce`` create inner subscriptions while events flow; ``group_by``
    and ``window`` create inner subjects. Under such an environment each inner subscription is registered under
    an id derived deterministically from its parent (never random, so a replay after recovery re-creates the same
    ids), is checkpointed as its own unit (so one inner change does not rewrite its siblings), and is loaded from
    its own saved state when its parent re-creates it after a restart. Without one, higher-order operators run in
    memory only.
    """

    __slots__ = ()

    @abstractmethod
    def allocate_id(self, owner: str, kind: str) -> str:
        """A stable id for one higher-order operator instance inside the artifact ``owner``.

        Operators call it from ``set_context``. The traversal order is deterministic, so the n-th call for an
        ``owner`` gets the same id after a restart: ``f"{owner}/{kind}{n}"``.
        """

    @abstractmethod
    def subscribe_inner(
        self,
        inner_id: str,
        source: Subscribable[Any],
        observer: Subscriber[Any],
        parent: OperatorContext,
        *,
        restoring: bool = False,
    ) -> SubscriptionHandle:
        """Subscribe ``observer`` to ``source`` as the inner subscription ``inner_id``: bind, give it a context
        derived from ``parent`` (instance id ``inner_id``), load its saved state if there is any, start it, and
        register it for checkpoints. Returns its handle; disposing the handle does not unregister it.

        ``restoring``: the parent re-creates an inner subscription that its own restored state says was live at
        the checkpoint, so its saved state must be there: if it is not, this raises
        :class:`~reaqtive.state.state_errors.MissingStateError` rather than starting it empty."""

    @abstractmethod
    def delete_inner(self, inner_id: str) -> None:
        """The inner subscription ended for good: dispose it and drop its saved state at the next checkpoint."""

    @abstractmethod
    def get_or_create_subject(self, subject_id: str) -> MultiSubject[Any, Any]:
        """The inner subject ``subject_id``, created if it does not exist yet (a group, a window)."""

    @abstractmethod
    def delete_subject(self, subject_id: str) -> None:
        """Forget the inner subject ``subject_id`` (its group or window ended)."""

    def note_ended_subjects(self, prefix: str, is_ended: Callable[[int], bool] | None) -> None:
        """The operator whose inner subjects are ``f"{prefix}/{number}"`` tells which numbers ended (``None``: it
        is gone). A recovered consumer that looks up an ended one (it held the stream at the checkpoint and had
        not subscribed yet) must find it completed, as a late subscriber of the live subject does, not a new
        subject that never ends. The default keeps nothing: an environment that never restores has no such
        lookups."""


class OperatorContext:
    """Everything an operator may use from its host.

    * ``instance_id``: the URI of the owning subscription or stream (for tracing and for deriving inner ids).
    * ``scheduler``: the only clock and the only way to run work later (see :mod:`reaqtive.core.scheduler_interface`).
    * ``logger``: a :class:`logging.Logger` for tracing.
    * ``execution_environment``: the host's artifact registry, or ``None`` when running standalone.
    * ``settings``: host settings such as size limits, read with :meth:`try_get_element` / :meth:`get_setting`.
      The context keeps a copy; a ``types.MappingProxyType`` is kept as given (its dict must not change after).
    """

    __slots__ = ("_environment", "_instance_id", "_logger", "_scheduler", "_settings")

    def __init__(
        self,
        instance_id: str,
        scheduler: Scheduler | None = None,
        *,
        logger: logging.Logger | None = None,
        execution_environment: ExecutionEnvironment | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        if not isinstance(instance_id, str) or not instance_id:
            raise TypeError(f"instance_id must be a non-empty str, got {instance_id!r}")
        self._instance_id = instance_id
        self._scheduler = scheduler
        self._logger = logger if logger is not None else DEFAULT_LOGGER
        self._environment = execution_environment
        # A private copy, never written: contexts derived from this one share it, and ``settings`` hands out a
        # read-only view (a view kept per context would cost 48 bytes per subscription). A read-only view given
        # by the host is kept as it is: the host hands it over (one copy less per subscription).
        self._settings: Mapping[str, object] = (
            settings if type(settings) is MappingProxyType else dict(settings) if settings else _EMPTY_SETTINGS
        )

    @property
    def instance_id(self) -> str:
        """The URI of the subscription or stream that owns the operator."""
        return self._instance_id

    @property
    def has_scheduler(self) -> bool:
        """Whether a scheduler was provided."""
        return self._scheduler is not None

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler; raises :class:`~reaqtive.core.errors.MissingSchedulerError` when the context has none."""
        scheduler = self._scheduler
        if scheduler is None:
            raise MissingSchedulerError(
                f"the operator context of {self._instance_id!r} has no scheduler; "
                "time-based operators need one (pass scheduler= to OperatorContext)"
            )
        return scheduler

    @property
    def logger(self) -> logging.Logger:
        """The logger operators trace to."""
        return self._logger

    @property
    def execution_environment(self) -> ExecutionEnvironment | None:
        """The host's artifact registry, or ``None`` when running standalone."""
        return self._environment

    @property
    def settings(self) -> Mapping[str, object]:
        """All settings, read-only."""
        settings = self._settings
        return settings if type(settings) is MappingProxyType else MappingProxyType(settings)

    def try_get_element(self, key: str) -> tuple[bool, object]:
        """Return ``(True, value)`` if the setting ``key`` exists, else ``(False, None)``."""
        if key in self._settings:
            return True, self._settings[key]
        return False, None

    @overload
    def get_setting(self, key: str) -> object | None: ...

    @overload
    def get_setting(self, key: str, default: D) -> object | D: ...

    def get_setting(self, key: str, default: object = None) -> object:
        """The setting ``key``, or ``default`` when absent."""
        return self._settings.get(key, default)

    def derive(self, instance_id: str) -> OperatorContext:
        """A context for an inner artifact: same scheduler, logger, environment and settings, another id."""
        context = OperatorContext(
            instance_id, self._scheduler, logger=self._logger, execution_environment=self._environment
        )
        context._settings = self._settings  # shared: neither context ever writes it
        return context

    def __repr__(self) -> str:
        return f"OperatorContext({self._instance_id!r})"
