"""What ``import reaqtive`` costs: milliseconds and modules loaded, each run in a fresh interpreter.

Run: .venv/bin/python bench/import_time.py [--runs N] [--module NAME ...]

For each module (by default ``reaqtive``; ``reaqtive.engine``, the package with its embedded engine; and RxPY's
``reactivex`` for comparison, when the ``peers`` extra is installed), N fresh processes each run ``python -X
importtime -c "import NAME"``, and the figure is the median of the cumulative time of the top-level lines of NAME's
package (the import and everything it imports; Python's own start-up is not in it). Beside it, by the process's CPU
time (steadier on a shared machine: time spent waiting for the CPU is not counted): the median CPU time of ``python
-c "import NAME"`` less that of ``python -c "pass"``, N runs each. Then the number of modules the import adds to
``sys.modules`` (of them, the package's own), and whether the modules ``import reaqtive`` leaves for first use
(asyncio, ssl, sqlite3, ...) were loaded.

Byte code is cached in a temporary folder (``PYTHONPYCACHEPREFIX``), filled by one warm-up run, so the figures are
those of an installed package (pip compiles at install), not of compiling the sources, and the source tree gets
no ``__pycache__``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DEFERRED = ("asyncio", "ssl", "http.client", "urllib.request", "sqlite3", "json", "importlib.metadata",
            "pyspark", "psycopg", "prometheus_client")
"""Modules a plain ``import reaqtive`` must not load: the features that need them import them when used."""

DEFAULT_MODULES = ("reaqtive", "reaqtive.engine", "reactivex")

_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")

_COUNT = """
import sys
before = set(sys.modules)
import {name}
added = set(sys.modules) - before
deferred = sorted(m for m in {deferred!r} if m in sys.modules)
own = sum(1 for m in added if m.split(".")[0] == "{top}")
import json  # only now: it is one of the modules looked for
print(json.dumps({{"added": len(added), "own": own, "deferred": deferred}}))
"""


def child_env(cache: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def importtime_ms(name: str, env: dict[str, str]) -> float:
    """The cumulative time of ``import name`` in a fresh process, by ``-X importtime``: the top-level lines of its
    package (for ``a.b``, ``a`` and ``a.b``: the package is imported first), each with all it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {name}"], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    top = name.split(".", maxsplit=1)[0]
    total = 0
    for line in done.stderr.splitlines():
        match = _LINE.match(line)
        if match and not match.group(3).strip(" ") and match.group(4).split(".", maxsplit=1)[0] == top:
            total += int(match.group(2))
    if not total:
        raise RuntimeError(f"no top-level line for {name} in -X importtime's output:\n{done.stderr[-2000:]}")
    return total / 1000


def cpu_ms(code: str, env: dict[str, str]) -> float:
    """The CPU time (user + system) of ``python -c code`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000


def measure(name: str, runs: int, env: dict[str, str]) -> dict[str, object]:
    subprocess.run([sys.executable, "-c", f"import {name}"], env=env, cwd=ROOT, check=True)  # warm-up: byte code
    wall = statistics.median(importtime_ms(name, env) for _ in range(runs))
    cpu = statistics.median(cpu_ms(f"import {name}", env) for _ in range(runs))
    start = statistics.median(cpu_ms("pass", env) for _ in range(runs))
    top = name.split(".", maxsplit=1)[0]
    counted = subprocess.run([sys.executable, "-c", _COUNT.format(name=name, top=top, deferred=DEFERRED)], env=env,
                             cwd=ROOT, capture_output=True, text=True, check=True)
    return {"module": name, "importtime_ms": wall, "cpu_ms": cpu - start, **json.loads(counted.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per figure (the median is shown)")
    parser.add_argument("--module", action="append",
                        help=f"module to import (repeatable; default {', '.join(DEFAULT_MODULES)})")
    options = parser.parse_args()
    print(f"python {sys.version.split()[0]}, median of {options.runs} fresh processes")
    print(f"{'import':<20} {'-X importtime':>14} {'CPU':>9} {'modules':>8} {'own':>5}  deferred modules loaded")
    with tempfile.TemporaryDirectory(prefix="reaqtive-pycache-") as cache:
        env = child_env(cache)
        for name in options.module or DEFAULT_MODULES:
            try:
                row = measure(name, options.runs, env)
            except subprocess.CalledProcessError:
                print(f"{name:<20} not importable here")
                continue
            loaded = ", ".join(row["deferred"]) or "none"  # type: ignore[arg-type]
            print(f"{name:<20} {row['importtime_ms']:>11.1f} ms {row['cpu_ms']:>6.1f} ms {row['added']:>8} "
                  f"{row['own']:>5}  {loaded}")


if __name__ == "__main__":
    main()
