"""bench/keyed.py keeps working (a tiny configuration in one process; the figures themselves are not checked), and
the window counts it checks every column against are the right ones."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def keyed() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "bench"))  # keyed.py imports _workloads from its folder
    try:
        import keyed as module
    finally:
        sys.path.remove(str(ROOT / "bench"))
    yield module


def test_keyed_benchmark_runs_and_prints_its_table() -> None:
    # A subprocess, as make bench runs it: bench/ is then sys.path[0]. Exit 0 also means every column's output
    # count was the expected one.
    command = [sys.executable, str(ROOT / "bench" / "keyed.py"), "--events", "3000", "--general-events", "2000",
               "--rounds", "1", "--no-subprocess", "--recovery-keys", "2000"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("| workload | dict floor | library, keyed | library, Rx form run keyed | library, general | "
            "engine process(), keyed | engine process(), Rx form run keyed | engine process(), general ") in done.stdout
    assert "| library, keyed, tagged | engine process(), keyed, tagged |" in done.stdout
    for title in ("(d) 1-min tumbling average per key, 1,000 keys |", "100,000 keys |",
                  "(e) running count per key, 100,000 keys |"):
        assert title in done.stdout
    assert "WRONG" not in done.stdout
    assert "(2,000 ev)" in done.stdout, "the general form over 100,000 keys runs --general-events events"
    assert "summary (issue 17's table" in done.stdout
    assert "| (e) running count per key, 100,000 keys, a checkpoint every 0.5 s | — |" in done.stdout
    assert "memory over 100,000 keys" in done.stdout
    assert "(e) library, general (group_by + scan, a group per key): " in done.stdout
    assert "(e) library, keyed (group_by + scan, run keyed): " in done.stdout
    assert "recovery: an engine holding 2,000 keyed running counts" in done.stdout
    assert "ratios, reaqtive's rate / Bytewax's" in done.stdout


def test_the_key_sequence_is_fixed_and_its_prefixes_agree(keyed: ModuleType) -> None:
    keyed.key_sequence.cache_clear()
    long = keyed.key_sequence(1_000, 5_000)
    keyed.key_sequence.cache_clear()
    assert keyed.key_sequence(1_000, 2_000) == long[:2_000]
    assert all(0 <= key < 1_000 for key in long)
    assert keyed.make_events(1_000, 3)[2] == (long[2], 2)


def test_windows_are_epoch_aligned_for_the_floor_and_start_with_each_group_for_the_general_form(
    keyed: ModuleType,
) -> None:
    # 61,000 events 1 ms apart cross one minute boundary: the last second's events open a new aligned window for
    # most keys, but for few general-form windows, which open with each group (its first event) and last a minute.
    workload = keyed.Workload("d", "(d) test", 1_000, True)
    n = 61_000
    floor = next(v for v in keyed.VARIANTS if v.key == "floor")
    general = next(v for v in keyed.VARIANTS if v.key == "library-general")
    keys = keyed.key_sequence(1_000, n)
    aligned, by_creation = keyed.aligned_windows(keys, n), keyed.creation_windows(keys, n)
    assert (aligned, by_creation) == (1_633, 1_290)  # the fixed sequence's
    assert keyed.run_floor(workload, floor, n)[1] == aligned == keyed.expected(workload, "keyed", n)
    assert keyed.run_library(workload, general, n)[1] == by_creation == keyed.expected(workload, "general", n)
    if keyed.keyed_available():
        library_keyed = next(v for v in keyed.VARIANTS if v.key == "library-keyed")
        assert keyed.run_library(workload, library_keyed, n)[1] == aligned

