"""bench/pause.py keeps working: ``--quick`` runs (small sizes) and prints each of its lines; the figures themselves
are not checked (they depend on the machine)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = re.compile(r"^\s+(?P<label>.+?)\s+(?P<p50>[\d,.]+)\s+(?P<p99>[\d,.]+)\s+(?P<max>[\d,.]+) ms$")


@pytest.fixture(scope="module")
def quick() -> str:
    """One ``--quick`` run (about 12 s), as make bench runs it: a subprocess whose sys.path[0] is bench/."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "pause.py"), "--quick"], check=False,
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_pause_bench_prints_every_figure_of_both_mixes_and_the_window_close(quick: str) -> None:
    out = quick
    labels = {match["label"] for line in out.splitlines() if (match := FIGURES.match(line))}
    for mode in ("requested", "periodic 0.15 s"):
        for figure in ("wait", "pause", "commit", "held (processing stopped)", "append_many (producer)"):
            assert f"{mode}: {figure}" in labels, (mode, figure, out)
    assert "mix 'hot'" in out and "mix 'all'" in out
    assert out.count("x the baseline)") == 4  # the two checkpointing runs of each mix, against its baseline
    assert "close: closing event appended -> last row" in labels
    assert "checkpoint requested at the first row: wait" in labels
    assert "(no samples)" not in out


def dirty_per_checkpoint(section: str) -> list[int]:
    """The median subscriptions written per checkpoint, of each checkpointing run of a mix's section."""
    return [int(count.replace(",", "")) for count in re.findall(r"^  .+: \d+ checkpoints, ([\d,]+) dirty", section,
                                                               re.MULTILINE)]


def test_pause_bench_changes_one_stream_in_the_hot_mix_and_many_in_the_all_mix(quick: str) -> None:
    # --quick has 500 subscriptions, 5 per stream. (A run that replayed the last run's backlog first, all of it
    # on the hot stream, showed the all mix writing 5 per checkpoint.)
    hot, everything = quick.split("mix 'all'")
    assert dirty_per_checkpoint(hot) == [5, 5], hot
    medians = dirty_per_checkpoint(everything)
    assert len(medians) == 2 and min(medians) >= 100, everything  # 20 streams or more between two checkpoints
