"""A Spark standalone cluster on 127.0.0.1 for the cluster tests: a master and workers started from the pyspark
distribution (``$SPARK_HOME/bin/spark-class``), the package shipped as users ship it (a zip for ``--py-files``),
and drivers started with ``spark-submit``.

``python -m tests.spark.cluster [WORKERS]`` starts one by hand (for ``bench/spark.py --master``), prints the
master URL and the ``--py-files`` zip, and stops it on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
START_DEADLINE: Final = 120.0  # seconds for the master and its workers to come up on a loaded 2-core machine
STOP_DEADLINE: Final = 20.0
# Short-lived test JVMs: the C1 compiler only and one GC thread start about a third faster on 2 cores.
JVM_OPTIONS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
USER_MODULES: Final = ("tests/__init__.py", "tests/spark/__init__.py", "tests/spark/queries.py")
"""What the tests' drivers and executors import besides reaqtive: the tests' query functions."""


class ClusterError(RuntimeError):
    """The cluster did not come up (the message holds the end of the daemons' logs)."""


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (its ``bin``, ``sbin`` and ``jars``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the daemon that gets it binds it moments later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def zip_package(target: Path, sources: Iterable[tuple[Path, str]]) -> Path:
    """A zip of ``(file, name in the zip)``: what ``--py-files`` takes."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in sources:
            archive.write(path, name)
    return target


def package_zips(directory: Path) -> list[Path]:
    """``reaqtive.zip`` (the package from this checkout) and ``user.zip`` (the tests' query functions)."""
    directory.mkdir(parents=True, exist_ok=True)
    package = sorted(path for path in (ROOT / "reaqtive").rglob("*")
                     if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"))
    reaqtive = zip_package(directory / "reaqtive.zip", ((path, str(path.relative_to(ROOT))) for path in package))
    user = zip_package(directory / "user.zip", ((ROOT / name, name) for name in USER_MODULES))
    return [reaqtive, user]


def daemon_environment(log_dir: Path) -> dict[str, str]:
    """The environment of the daemons and drivers: no ``PYTHONPATH`` (nothing finds this checkout but the shipped
    zips), the workers' Python = this interpreter, small daemon JVMs."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(log_dir),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    return env


class StandaloneCluster:
    """A master and ``workers`` workers (each ``cores`` cores, ``memory`` for executors), each in its own
    process group so that :meth:`stop` (or :meth:`kill_worker`) takes its executors and Python workers too."""

    def __init__(self, root: Path, workers: int = 2, *, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.web_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.logs = root / "logs"
        self.env = daemon_environment(self.logs)
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes] | None] = []

    def start(self) -> StandaloneCluster:
        """Start the master and the workers; return once the master counts them all alive."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self._master = self._daemon("master", "org.apache.spark.deploy.master.Master",
                                    ["--host", "127.0.0.1", "--port", str(self.port),
                                     "--webui-port", str(self.web_port)])
        self._wait(lambda state: True, "the master to answer")
        self._workers = [self._start_worker(number) for number in range(self.workers)]
        self._wait(lambda state: len(self.alive_workers(state)) == self.workers, f"{self.workers} workers")
        return self

    def _start_worker(self, number: int) -> subprocess.Popen[bytes]:
        work = self.root / f"worker-{number}"
        work.mkdir(exist_ok=True)
        return self._daemon(f"worker-{number}", "org.apache.spark.deploy.worker.Worker",
                            ["--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", str(self.cores),
                             "--memory", self.memory, "--work-dir", str(work), self.master_url])

    def restart_worker(self, number: int) -> None:
        """Start worker ``number`` again after :meth:`kill_worker`; return once the master counts every worker
        alive (as an operator brings a lost machine back)."""
        if self._workers[number] is not None:
            return
        known = {worker["id"] for worker in self.alive_workers(self.state())}
        self._workers[number] = self._start_worker(number)

        def back(state: Mapping[str, Any]) -> bool:  # the new worker registered, the lost one is gone
            alive = self.alive_workers(state)
            return len(alive) == self.workers and any(worker["id"] not in known for worker in alive)

        self._wait(back, f"worker {number} back among {self.workers} workers")

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON: workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
            return state

    @staticmethod
    def alive_workers(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return [worker for worker in state.get("workers", []) if worker.get("state") == "ALIVE"]

    def submit(self, script: Path, args: Sequence[str], py_files: Sequence[Path], *, cwd: Path,
               conf: Mapping[str, str] | None = None, log: Path) -> subprocess.Popen[bytes]:
        """``spark-submit`` ``script`` to the cluster in client mode (its own process group), its output in
        ``log``. ``conf``: more ``--conf`` settings (beside small executors, one core each)."""
        settings = {
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.cores.max": str(self.workers * self.cores),
            "spark.pyspark.python": sys.executable,
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.ui.enabled": "false",
            **(conf or {}),
        }
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url,
                   "--py-files", ",".join(str(path) for path in py_files)]
        for name, value in settings.items():
            command += ["--conf", f"{name}={value}"]
        with log.open("wb") as output:
            return subprocess.Popen([*command, str(script), *args], cwd=cwd, env=self.env, stdout=output,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    @staticmethod
    def kill_group(process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a process this cluster started (a driver, a daemon) with everything in its process group."""
        _kill_group(process, signal.SIGKILL)
        process.wait()

    def kill_worker(self, number: int) -> None:
        """SIGKILL worker ``number`` with its executor and the executor's Python workers (its process group)."""
        process = self._workers[number]
        if process is not None:
            _kill_group(process, signal.SIGKILL)
            self._workers[number] = None

    def stop(self) -> None:
        """End every daemon (and what it started): SIGTERM, then SIGKILL after a deadline."""
        processes = [process for process in [*self._workers, self._master] if process is not None]
        for process in processes:
            _kill_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_DEADLINE
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(process, signal.SIGKILL)
                process.wait()
        self._workers, self._master = [], None

    def log_tails(self, characters: int = 2000) -> str:
        return "\n".join(f"== {path.name}\n{path.read_text(errors='replace')[-characters:]}"
                         for path in sorted(self.logs.glob("*.log")))

    def _daemon(self, name: str, main_class: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as output:
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args], env=self.env,
                                    cwd=self.root, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait(self, ready: Any, what: str) -> None:
        """Poll the master's state until ``ready(state)``; :class:`ClusterError` past the deadline or when a
        daemon ended."""
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                if ready(self.state()):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass  # not listening yet
            ended = [process.args for process in [self._master, *self._workers]
                     if process is not None and process.poll() is not None]
            if ended or time.monotonic() > deadline:
                reason = f"a daemon ended ({ended})" if ended else f"no {what} after {START_DEADLINE:.0f} s"
                raise ClusterError(f"the standalone cluster did not start: {reason}\n{self.log_tails()}")
            time.sleep(0.2)


def _kill_group(process: subprocess.Popen[bytes], signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(process.pid, signal_number)


def main(argv: list[str]) -> int:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="reaqtive-cluster-"))
    cluster = StandaloneCluster(root, int(argv[0]) if argv else 2)
    try:
        started = time.monotonic()
        cluster.start()
        print(f"started in {time.monotonic() - started:.1f} s", flush=True)
        zips = package_zips(root / "ship")
        print(f"master {cluster.master_url}\n--py-files {','.join(map(str, zips))}\nCtrl-C stops it", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
