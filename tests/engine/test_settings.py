"""Engine settings from the environment: ``EngineSettings.from_env`` reads the ``REAQTIVE_*`` variables, checks
each (a bad value names its variable), and ``Engine.from_env`` / ``AsyncEngine.from_env`` open an engine with them,
keyword arguments overriding the environment."""

from __future__ import annotations

import asyncio
import doctest
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import Engine, RecoveryPolicy
from reaqtive.engine import settings as settings_module
from reaqtive.engine.aio import AsyncEngine
from reaqtive.engine.ingress import GroupCommit
from reaqtive.engine.settings import ENVIRONMENT_VARIABLES, EngineSettings, EnvironmentSettingError

ROOT = Path(__file__).resolve().parents[2]


def test_unset_and_empty_variables_keep_the_engines_defaults() -> None:
    settings = EngineSettings.from_env({"REAQTIVE_CLOCK": "", "HOME": "/root"})
    assert settings == EngineSettings()
    assert settings.engine_options() == {}


def test_every_variable_is_read_into_its_setting() -> None:
    settings = EngineSettings.from_env({
        "REAQTIVE_STORE": "postgresql://app@db/engine",
        "REAQTIVE_CLOCK": "WALL",
        "REAQTIVE_CHECKPOINT_EVERY_EVENTS": "5000",
        "REAQTIVE_CHECKPOINT_EVERY_SECONDS": "2.5",
        "REAQTIVE_SYNCHRONOUS": "normal",
        "REAQTIVE_RECOVERY_POLICY": "keep",
        "REAQTIVE_ON_ERROR": "skip",
        "REAQTIVE_ALLOW_MODULES": "myapp.rules, myapp.sinks.*",
        "REAQTIVE_INGRESS_COMMIT": "group",
        "REAQTIVE_GROUP_COMMIT_EVENTS": "100",
        "REAQTIVE_GROUP_COMMIT_SECONDS": "0.01",
        "REAQTIVE_OBSERVER_RETRIES": "3",
        "REAQTIVE_OBSERVER_BACKOFF": "0",
        "REAQTIVE_MAX_EVENT_TIME_AHEAD": "none",
        "REAQTIVE_ALLOWED_LATENESS": "90",
        "REAQTIVE_GC_FREEZE": "yes",
        "REAQTIVE_START": "2026-03-01T08:00:00Z",
    })
    assert settings == EngineSettings(
        store="postgresql://app@db/engine", clock="wall", checkpoint_every_events=5000, checkpoint_every_seconds=2.5,
        synchronous="NORMAL", recovery_policy=RecoveryPolicy.KEEP, on_error="skip",
        allow_modules=("myapp.rules", "myapp.sinks.*"), ingress_commit=GroupCommit(events=100, seconds=0.01),
        observer_retries=3, observer_backoff=0.0, max_event_time_ahead=None,
        allowed_lateness=timedelta(seconds=90), gc_freeze=True, start=datetime(2026, 3, 1, 8, tzinfo=UTC))
    assert "store" not in settings.engine_options()


def test_the_documented_table_lists_every_variable() -> None:
    table = (ROOT / "docs" / "deploying.md").read_text()
    assert sorted(set(re.findall(r"`(REAQTIVE_[A-Z_]+)`", table)) & set(ENVIRONMENT_VARIABLES)) == sorted(
        ENVIRONMENT_VARIABLES)


@pytest.mark.parametrize(("variable", "value", "wanted"), [
    ("REAQTIVE_CLOCK", "fast", "must be one of 'event', 'wall'"),
    ("REAQTIVE_CHECKPOINT_EVERY_EVENTS", "0", "a whole number >= 1"),
    ("REAQTIVE_CHECKPOINT_EVERY_EVENTS", "1e3", "a whole number >= 1"),
    ("REAQTIVE_CHECKPOINT_EVERY_SECONDS", "-1", "seconds > 0"),
    ("REAQTIVE_CHECKPOINT_EVERY_SECONDS", "nan", "seconds > 0"),
    ("REAQTIVE_SYNCHRONOUS", "OFF", "'FULL', 'NORMAL'"),
    ("REAQTIVE_RECOVERY_POLICY", "ignore", "'fail', 'keep', 'remove'"),
    ("REAQTIVE_ON_ERROR", "retry", "'stop', 'skip'"),
    ("REAQTIVE_ALLOW_MODULES", "myapp,,other", "none empty"),
    ("REAQTIVE_INGRESS_COMMIT", "batch", "'call', 'group'"),
    ("REAQTIVE_OBSERVER_RETRIES", "many", "a whole number >= 1"),
    ("REAQTIVE_OBSERVER_BACKOFF", "1s", "seconds >= 0"),
    ("REAQTIVE_MAX_EVENT_TIME_AHEAD", "forever", "or 'none'"),
    ("REAQTIVE_GC_FREEZE", "maybe", "1, true, yes or on"),
    ("REAQTIVE_START", "2026-03-01T08:00:00", "with its zone"),
])
def test_a_bad_value_names_the_variable_and_the_value(variable: str, value: str, wanted: str) -> None:
    expected = re.escape(f"{variable}={value!r}: ") + ".*" + re.escape(wanted)
    with pytest.raises(EnvironmentSettingError, match=expected) as raised:
        EngineSettings.from_env({variable: value})
    assert (raised.value.variable, raised.value.value) == (variable, value)
    assert isinstance(raised.value, ValueError)


def test_group_commit_sizes_need_the_group_mode() -> None:
    with pytest.raises(EnvironmentSettingError, match="REAQTIVE_GROUP_COMMIT_EVENTS='9': set only with"):
        EngineSettings.from_env({"REAQTIVE_GROUP_COMMIT_EVENTS": "9"})
    assert EngineSettings.from_env({"REAQTIVE_INGRESS_COMMIT": "group"}).ingress_commit == GroupCommit()


def test_engine_from_env_opens_the_store_the_environment_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REAQTIVE_STORE", str(tmp_path / "env.db"))
    monkeypatch.setenv("REAQTIVE_CHECKPOINT_EVERY_EVENTS", "2")
    monkeypatch.setenv("REAQTIVE_START", "2026-03-01T08:00:00+00:00")
    with Engine.from_env() as engine:
        assert engine.path == tmp_path / "env.db"
        assert engine.now == datetime(2026, 3, 1, 8, tzinfo=UTC)
        engine.create_stream("numbers")
        engine.create_subscription("all", Query.stream("numbers"))
        engine.append_many("numbers", [(1, None), (2, None), (3, None)])
        engine.process()
        assert engine.last_checkpoint is not None, "the policy from the environment checkpointed"


def test_keyword_arguments_override_the_environment(tmp_path: Path) -> None:
    environ = {"REAQTIVE_STORE": str(tmp_path / "env.db"), "REAQTIVE_CLOCK": "nonsense-is-checked-first"}
    with pytest.raises(EnvironmentSettingError, match="REAQTIVE_CLOCK"):
        Engine.from_env(environ, clock="wall")  # the environment is checked as a whole, before overrides
    environ["REAQTIVE_CLOCK"] = "event"
    with Engine.from_env(environ, store=":memory:", clock="wall") as engine:
        assert str(engine.path) == ":memory:" and engine._clock_mode == "wall"


def test_a_store_is_needed_from_the_environment_or_the_arguments() -> None:
    with pytest.raises(EnvironmentSettingError, match=r"REAQTIVE_STORE='': must be set .* \(or pass store="):
        Engine.from_env({})
    with Engine.from_env({}, store=":memory:") as engine:
        assert engine.status.value == "running"


def test_async_engine_from_env(tmp_path: Path) -> None:
    async def main() -> str:
        async with await AsyncEngine.from_env({"REAQTIVE_STORE": str(tmp_path / "a.db")}, batch_events=8) as engine:
            return str(engine.engine.path)

    assert asyncio.run(main()) == str(tmp_path / "a.db")


def test_the_modules_example_runs() -> None:
    result = doctest.testmod(settings_module)
    assert result.attempted > 0 and result.failed == 0
