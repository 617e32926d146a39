"""What Spark needs from the machine: Java 17+, found or explained (no JVM is started here)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reaqtive.spark import JavaNotFoundError, check_java
from reaqtive.spark.session import JAVA_INSTALL_HINT


def fake_java(home: Path, version_line: str) -> Path:
    """A ``$JAVA_HOME/bin/java`` that prints ``version_line`` as ``java -version`` does (on stderr)."""
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return java


def test_no_java_is_refused_with_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(JavaNotFoundError, match="no java found") as caught:
        check_java()
    assert JAVA_INSTALL_HINT in str(caught.value) and "openjdk-17" in str(caught.value)


def test_java_8_is_refused_and_17_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "old"))
    fake_java(tmp_path / "old", 'java version "1.8.0_392"')
    with pytest.raises(JavaNotFoundError, match="is Java 8"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "new"))
    java = fake_java(tmp_path / "new", 'openjdk version "17.0.15" 2025-04-15')
    assert check_java() == os.fspath(java)
