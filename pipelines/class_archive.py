"""A class-data-sharing archive for Spark's driver JVM, made once at set-up.

Most of a SparkSession's start is the JVM loading and verifying some 15,000 classes (Spark,
Delta, Hadoop, Arrow). A dynamic CDS archive (JDK 13+: `-XX:ArchiveClassesAtExit` when made,
`-XX:SharedArchiveFile` when used) maps them pre-parsed instead: on this machine the session
starts in about half the time (`./run.sh bench` measures the job's restart with it). That time
is the job's time to recover after a crash, and every test's and notebook's start.

The archive is made by running the job's own query (the step, the Delta sink) over a few
events read from files, so the classes of a real batch are in it; it is keyed by the Java
binary and the jars, because the JVM maps it only for the class path it was made with (with
`-Xshare:auto` it ignores a foreign archive instead of failing). `./run.sh` makes it during
set-up (`python -m pipelines.class_archive_maker make`, which runs the job's query; this module,
which the job imports, only finds the archive); without one the job starts the slow way and says
so in its log.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from conf import jvm

DIRECTORY = jvm.CACHE / "cds"


def _java() -> Path | None:
    """The `java` spark-submit runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where the archive for this Java and these jars is (None: no Java, or jars unresolved)."""
    java = _java()
    if java is None or not jvm.is_resolved("spark"):
        return None
    try:
        bundled = [p.name for p in jvm.pyspark_jars()]
        ours = jvm.classes_jar().name  # on the driver's class path, ahead of Spark's jars (`jvm.local_fs_conf`)
    except jvm.JarsMissing:
        return None
    st = java.stat()
    key = json.dumps([str(java), st.st_size, int(st.st_mtime), bundled, [p.name for p in jvm.jars("spark")], ours])
    return DIRECTORY / f"spark-driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def java_options() -> str:
    """The driver's JVM options that map the archive, or "" when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto"
