"""Starting a local SparkSession fit for reaqtive's queries, and checking what Spark needs from the machine.

::

    from reaqtive.spark import local_session

    spark = local_session()          # local[2], RocksDB state store, the workers run this interpreter

On a cluster, build the session as usual and call :func:`use_rocksdb` on it (or set the provider in the cluster's
configuration); every executor's Python needs ``reaqtive`` installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from reaqtive.core.errors import ReaqtiveError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JAVA_INSTALL_HINT",
    "ROCKSDB_PROVIDER",
    "JavaNotFoundError",
    "check_java",
    "local_session",
    "use_rocksdb",
]

ROCKSDB_PROVIDER: Final = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_CONF: Final = "spark.sql.streaming.stateStore.providerClass"
JAVA_INSTALL_HINT: Final = (
    "Spark needs Java 17 or newer: install it with `sudo apt-get install -y openjdk-17-jre-headless` "
    "(macOS: `brew install openjdk@17`; conda: `conda install openjdk=17`), or set JAVA_HOME to a JDK 17+"
)
_MIN_JAVA: Final = 17


class JavaNotFoundError(ReaqtiveError, RuntimeError):
    """No usable Java (17+) for Spark on this machine."""


def check_java() -> str:
    """The ``java`` Spark will start (``$JAVA_HOME/bin/java``, else the one on ``PATH``), checked to be 17+;
    :class:`JavaNotFoundError` with install instructions otherwise."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        where = f"JAVA_HOME={home}" if home else "PATH"
        raise JavaNotFoundError(f"no java found (looked in {where}). {JAVA_INSTALL_HINT}")
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as error:
        raise JavaNotFoundError(f"{java} cannot run ({error}). {JAVA_INSTALL_HINT}") from error
    version = _java_major(result.stderr + result.stdout)
    if version is None or version < _MIN_JAVA:
        found = "an unknown version" if version is None else f"Java {version}"
        raise JavaNotFoundError(f"{java} is {found}. {JAVA_INSTALL_HINT}")
    return java


def _java_major(text: str) -> int | None:
    """The major version in ``java -version``'s output (``"17.0.15"`` → 17, ``"1.8.0"`` → 8)."""
    for part in text.split('"')[1::2]:
        pieces = part.split(".")
        if pieces[0].isdigit():
            major = int(pieces[0])
            return int(pieces[1]) if major == 1 and len(pieces) > 1 and pieces[1].isdigit() else major
    return None


def use_rocksdb(spark: SparkSession) -> None:
    """Make the session's stateful queries use the RocksDB state store (``transformWithState`` requires it)."""
    if spark.conf.get(PROVIDER_CONF, None) != ROCKSDB_PROVIDER:
        spark.conf.set(PROVIDER_CONF, ROCKSDB_PROVIDER)


def local_session(
    app_name: str = "reaqtive",
    *,
    cores: int = 2,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local SparkSession (``local[cores]``) for reaqtive: RocksDB state store, ``shuffle_partitions``
    (default: ``cores``) shuffle partitions, quiet UI, and Python workers that run this interpreter
    (``PYSPARK_PYTHON``, unless already set). Checks Java first (:func:`check_java`)."""
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config(PROVIDER_CONF, ROCKSDB_PROVIDER)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
    )
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
