"""The reaqtive command."""

from __future__ import annotations

import pytest

from reaqtive.cli import main


def test_demo_prints_requests_and_elements(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "sink   -> request(4)" in out, "the sink's demand is shown"
    assert "[source] request(1)" in out, "the filter's replacement requests reach the source"
    assert "sink   <- 49" in out and "sink   <- complete" in out
    assert "BufferOverflowError" in out, "the hot subject's overflow policy is shown"


def test_unknown_command_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fly"])
    assert exit_info.value.code == 2
