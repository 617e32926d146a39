"""The engine's settings from the environment: one documented list of ``REAQTIVE_*`` variables.

A service configured the twelve-factor way reads its settings from the environment; :class:`EngineSettings` is
that list, checked, and :meth:`Engine.from_env <reaqtive.engine.Engine.from_env>` opens an engine with it::

    engine = Engine.from_env(functions=registry, sinks=[alerts])   # REAQTIVE_STORE=/var/lib/app/engine.db ...

Only plain settings come from the environment; code (functions, schemas, sinks, a logger) is passed as keyword
arguments, as are settings that override the environment. Each variable is parsed and checked here, and a bad
value raises :class:`EnvironmentSettingError` naming the variable and the value, before anything opens. An unset
or empty variable leaves the engine's default. The table is in ``docs/deploying.md``, "Settings from the
environment".
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from reaqtive.core.errors import InvalidSettingError
from reaqtive.engine.event_times import DEFAULT_MAX_EVENT_TIME_AHEAD
from reaqtive.engine.ingress import GroupCommit, IngressCommit
from reaqtive.engine.model import RecoveryPolicy
from reaqtive.engine.outbox import DEFAULT_OBSERVER_BACKOFF, DEFAULT_OBSERVER_RETRIES

__all__ = [
    "ENVIRONMENT_VARIABLES",
    "EngineSettings",
    "EnvironmentSettingError",
    "check_seconds",
    "check_whole",
    "engine_arguments",
]

_NONE_WORDS: Final = frozenset({"none", "off"})
_TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS: Final = frozenset({"0", "false", "no", "off"})


class EnvironmentSettingError(InvalidSettingError):
    """An environment variable holds a value the engine cannot take; ``variable`` and ``value`` say which."""

    def __init__(self, variable: str, value: str, wanted: str) -> None:
        super().__init__(f"{variable}={value!r}: {wanted}")
        self.variable = variable
        self.value = value


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """The engine's plain settings, each with its environment variable (``ENVIRONMENT_VARIABLES``); ``None``
    means the engine's default. See :class:`~reaqtive.engine.Engine` for what each one does.

    >>> EngineSettings.from_env({"REAQTIVE_STORE": ":memory:", "REAQTIVE_CLOCK": "wall"}).engine_options()
    {'clock': 'wall'}
    """

    store: str | Path | None = None
    """``REAQTIVE_STORE``: a SQLite file's path, ``:memory:``, or a ``postgresql://`` URL."""
    clock: str = "event"
    """``REAQTIVE_CLOCK``: ``event`` or ``wall``."""
    checkpoint_every_events: int | None = None
    """``REAQTIVE_CHECKPOINT_EVERY_EVENTS``: a whole number >= 1."""
    checkpoint_every_seconds: float | None = None
    """``REAQTIVE_CHECKPOINT_EVERY_SECONDS``: seconds > 0."""
    synchronous: str = "FULL"
    """``REAQTIVE_SYNCHRONOUS``: SQLite durability, ``FULL`` or ``NORMAL``."""
    recovery_policy: RecoveryPolicy = RecoveryPolicy.FAIL
    """``REAQTIVE_RECOVERY_POLICY``: ``fail``, ``keep`` or ``remove``."""
    on_error: str = "stop"
    """``REAQTIVE_ON_ERROR``: ``stop`` or ``skip``."""
    allow_modules: tuple[str, ...] = ()
    """``REAQTIVE_ALLOW_MODULES``: module names separated by commas (``myapp.rules,myapp.sinks.*``)."""
    ingress_commit: IngressCommit = "call"
    """``REAQTIVE_INGRESS_COMMIT``: ``call``, or ``group`` (with ``REAQTIVE_GROUP_COMMIT_EVENTS`` and
    ``REAQTIVE_GROUP_COMMIT_SECONDS``, default 10000 events and 0.05 s)."""
    observer_retries: int = DEFAULT_OBSERVER_RETRIES
    """``REAQTIVE_OBSERVER_RETRIES``: a whole number >= 1."""
    observer_backoff: float = DEFAULT_OBSERVER_BACKOFF
    """``REAQTIVE_OBSERVER_BACKOFF``: seconds >= 0."""
    max_event_time_ahead: timedelta | None = DEFAULT_MAX_EVENT_TIME_AHEAD
    """``REAQTIVE_MAX_EVENT_TIME_AHEAD``: seconds >= 0, or ``none`` (no bound)."""
    allowed_lateness: timedelta | None = None
    """``REAQTIVE_ALLOWED_LATENESS``: seconds >= 0, or ``none`` (no bound; the default)."""
    gc_freeze: bool = False
    """``REAQTIVE_GC_FREEZE``: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    start: datetime | None = None
    """``REAQTIVE_START``: where a new store's clock starts, an ISO 8601 time with its zone."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EngineSettings:
        """The settings the environment (``os.environ`` by default) holds; unset or empty variables keep the
        defaults. :class:`EnvironmentSettingError` for a bad value."""
        env = os.environ if environ is None else environ
        found: dict[str, Any] = {}
        for field, (variable, parse) in _PARSERS.items():
            raw = env.get(variable, "").strip()
            if raw:
                found[field] = parse(variable, raw)
        mode = found.pop("_mode", None)
        events, seconds = found.pop("_group_events", None), found.pop("_group_seconds", None)
        if mode == "group":
            found["ingress_commit"] = GroupCommit(**{k: v for k, v in (("events", events), ("seconds", seconds))
                                                     if v is not None})
        elif events is not None or seconds is not None:
            variable = "REAQTIVE_GROUP_COMMIT_EVENTS" if events is not None else "REAQTIVE_GROUP_COMMIT_SECONDS"
            raise EnvironmentSettingError(variable, env[variable], "set only with REAQTIVE_INGRESS_COMMIT=group")
        elif mode == "call":
            found["ingress_commit"] = "call"
        return cls(**found)

    def engine_options(self) -> dict[str, Any]:
        """The settings that differ from the engine's defaults, as :class:`~reaqtive.engine.Engine` keyword
        arguments (``store`` is its first argument, so it is left out)."""
        defaults = EngineSettings()
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name != "store" and getattr(self, field.name) != getattr(defaults, field.name)}

    def replace(self, **changes: Any) -> EngineSettings:
        """A copy with ``changes`` (names of fields; a misspelt one is a ``TypeError``)."""
        return dataclasses.replace(self, **changes)


def engine_arguments(
    environ: Mapping[str, str] | None, options: Mapping[str, Any]
) -> tuple[str | Path, dict[str, Any]]:
    """The store and the keyword arguments of an engine configured by the environment, where ``options`` override
    it: a setting's name (``store``, ``clock``, ...) replaces the variable, anything else (``functions``,
    ``sinks``) is passed on as it is. A store is needed from one or the other."""
    names = {field.name for field in dataclasses.fields(EngineSettings)}
    settings = EngineSettings.from_env(environ).replace(**{k: v for k, v in options.items() if k in names})
    if settings.store is None or settings.store == "":
        raise EnvironmentSettingError("REAQTIVE_STORE", "", "must be set to a SQLite file's path, ':memory:' or a "
                                                            "postgresql:// URL (or pass store=...)")
    return settings.store, {**settings.engine_options(), **{k: v for k, v in options.items() if k not in names}}


# -- parsing ----------------------------------------------------------------------------------------------------


def _choice(*choices: str, lower: bool = True) -> Callable[[str, str], str]:
    def parse(variable: str, raw: str) -> str:
        value = raw.lower() if lower else raw.upper()
        if value not in choices:
            raise EnvironmentSettingError(variable, raw, "must be one of " + ", ".join(map(repr, choices)))
        return value
    return parse


def _whole(minimum: int) -> Callable[[str, str], int]:
    def parse(variable: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise EnvironmentSettingError(variable, raw, f"must be a whole number >= {minimum}")
        return value
    return parse


def _seconds(*, positive: bool) -> Callable[[str, str], float]:
    def parse(variable: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise EnvironmentSettingError(variable, raw, f"must be a number of seconds {'>' if positive else '>='} 0")
        return value
    return parse


def _optional_duration(variable: str, raw: str) -> timedelta | None:
    if raw.lower() in _NONE_WORDS:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise EnvironmentSettingError(variable, raw, "must be a number of seconds >= 0, or 'none' for no bound")
    return timedelta(seconds=value)


def _flag(variable: str, raw: str) -> bool:
    if raw.lower() in _TRUE_WORDS:
        return True
    if raw.lower() in _FALSE_WORDS:
        return False
    raise EnvironmentSettingError(variable, raw, "must be 1, true, yes or on; or 0, false, no or off")


def _modules(variable: str, raw: str) -> tuple[str, ...]:
    modules = tuple(part.strip() for part in raw.split(","))
    if not all(modules):
        raise EnvironmentSettingError(variable, raw, "must be module names separated by commas, none empty")
    return modules


def _time(variable: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise EnvironmentSettingError(variable, raw, "must be an ISO 8601 time with its zone "
                                                     "(2026-03-01T08:00:00+00:00, or ...Z)")
    return value


def _policy(variable: str, raw: str) -> RecoveryPolicy:
    return RecoveryPolicy(_choice("fail", "keep", "remove")(variable, raw))


def _store(variable: str, raw: str) -> str:
    return raw


_PARSERS: Final[dict[str, tuple[str, Callable[[str, str], Any]]]] = {
    "store": ("REAQTIVE_STORE", _store),
    "clock": ("REAQTIVE_CLOCK", _choice("event", "wall")),
    "checkpoint_every_events": ("REAQTIVE_CHECKPOINT_EVERY_EVENTS", _whole(1)),
    "checkpoint_every_seconds": ("REAQTIVE_CHECKPOINT_EVERY_SECONDS", _seconds(positive=True)),
    "synchronous": ("REAQTIVE_SYNCHRONOUS", _choice("FULL", "NORMAL", lower=False)),
    "recovery_policy": ("REAQTIVE_RECOVERY_POLICY", _policy),
    "on_error": ("REAQTIVE_ON_ERROR", _choice("stop", "skip")),
    "allow_modules": ("REAQTIVE_ALLOW_MODULES", _modules),
    "_mode": ("REAQTIVE_INGRESS_COMMIT", _choice("call", "group")),
    "_group_events": ("REAQTIVE_GROUP_COMMIT_EVENTS", _whole(1)),
    "_group_seconds": ("REAQTIVE_GROUP_COMMIT_SECONDS", _seconds(positive=True)),
    "observer_retries": ("REAQTIVE_OBSERVER_RETRIES", _whole(1)),
    "observer_backoff": ("REAQTIVE_OBSERVER_BACKOFF", _seconds(positive=False)),
    "max_event_time_ahead": ("REAQTIVE_MAX_EVENT_TIME_AHEAD", _optional_duration),
    "allowed_lateness": ("REAQTIVE_ALLOWED_LATENESS", _optional_duration),
    "gc_freeze": ("REAQTIVE_GC_FREEZE", _flag),
    "start": ("REAQTIVE_START", _time),
}

ENVIRONMENT_VARIABLES: Final = tuple(variable for variable, _ in _PARSERS.values())
"""Every variable :meth:`EngineSettings.from_env` reads."""


def check_whole(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    """An argument that must be a whole number >= ``minimum`` (``None`` too, if ``optional``)."""
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSettingError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def check_seconds(name: str, value: object, *, positive: bool, optional: bool = False) -> None:
    """An argument that must be a finite number of seconds, > 0 if ``positive`` (``None`` too, if ``optional``)."""
    if value is None and optional:
        return
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        wanted = "a finite number of seconds > 0" if positive else "a finite number of seconds >= 0"
        raise InvalidSettingError(f"{name} must be {wanted}, got {value!r}")
