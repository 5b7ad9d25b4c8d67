"""Spark's Python data source planner daemons, stopped once the running query no longer needs them.

Spark plans a Python data source in processes forked from three daemons of its own, one
`pyspark.daemon` for each of `pyspark.sql.worker.lookup_data_sources`, `create_data_source` and
`plan_data_source_read` (`PythonPlannerRunner` through `SparkEnv.createPythonWorker`). They start
with the query (ahead of it: `pipelines/warm_up.py`) and stay for the JVM's life: no Spark setting
stops an idle daemon (`spark.python.worker.reuse`, `use.daemon`, the idle timeouts and
`factory.idleWorkerMaxPoolSize` act on workers or on every Python process). A running streaming
query never calls them again: its offsets and partitions go through `PythonStreamingSourceRunner`'s
own process, its records through the task workers (`pipelines/worker_daemon.py`). So the active
writer stops them once its first batch completed, about 35 MiB of PSS each, more while their
forked workers live; a standby keeps them warm, since it starts its query in the same JVM when it
takes over. A later call (another query in this JVM) starts a daemon again.

Spark keeps the factories in a private field of `SparkEnv` and offers no call to stop one, so this
reads the field by reflection; a Spark that moved it is reported in the job's log, and the daemons
then stay as before.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

PLANNER_MODULES = frozenset({"pyspark.sql.worker.lookup_data_sources", "pyspark.sql.worker.create_data_source",
                             "pyspark.sql.worker.plan_data_source_read"})


def stop_planner_daemons(spark: Any) -> list[str]:
    """Stop the planner daemons' factories (`PythonWorkerFactory.stop`: their idle workers, then the
    daemon by SIGTERM); the worker modules whose daemons were stopped."""
    env = spark._jvm.org.apache.spark.SparkEnv.get()
    field = env.getClass().getDeclaredField("pythonWorkers")
    field.setAccessible(True)
    factories = field.get(env)
    found = []
    entries = factories.iterator()
    while entries.hasNext():
        entry = entries.next()
        module = str(entry._1().workerModule())
        if module in PLANNER_MODULES:
            found.append((module, entry._2()))
    for _, factory in found:
        factory.stop()
    return sorted(module for module, _ in found)


def stop_after_first_batch(spark: Any, query: Any, warmed: threading.Thread, stopping: threading.Event,
                           poll_s: float = 1.0) -> None:
    """Wait for the warm-up (it calls the planners) and the query's first completed batch, then stop
    the planner daemons; gives up quietly when the job stops first."""
    warmed.join()
    while not stopping.is_set() and query.isActive and query.lastProgress is None:
        time.sleep(poll_s)
    if stopping.is_set() or not query.isActive:
        return
    try:
        stopped = stop_planner_daemons(spark)
    except Exception as exc:  # a Spark whose SparkEnv no longer has the field: the daemons stay
        log.warning("Spark's Python data source planner daemons are kept (could not reach them: %s)",
                    str(exc).splitlines()[0] if str(exc) else exc)
        return
    log.info("stopped Spark's Python data source planner daemons, which the running query does not use: %s",
             ", ".join(m.rsplit(".", 1)[1] for m in stopped) or "none were running")
