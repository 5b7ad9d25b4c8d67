"""One cut's table write, by the two writers that can make it: delta-rs (what the sink uses) and
Delta for Spark (`replaceWhere` overwrite and MERGE of the same rows), at several table sizes.

A cut replaces the rows of the broker groups a batch changed: here 1 % of the groups (at least
one) of a `topic_queue` holding `rows` queue rows, the common shape of a streaming batch. Wall
time and CPU time (this process and its JVM child) per cut, best of `repeat`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.system import cpu_seconds
from ops.procs import tree
from schemas import tables as t

TOPICS_PER_GROUP = 100


def _tree_cpu_s() -> float:
    """CPU seconds of this process and its descendants (the local Spark JVM)."""
    return cpu_seconds([p.pid for p in tree(os.getpid())])


def queue_rows(groups: range, topics: int, perm: int) -> pa.Table:
    rows = [{"topic": f"T-{g}-{i}", "brokerName": f"g-{g}", "readQueueNums": 8, "writeQueueNums": 8, "perm": perm,
             "topicSysFlag": 0} for g in groups for i in range(topics)]
    return pa.Table.from_pylist(rows, schema=t.TOPIC_QUEUE.schema)


def _measure(fn: Callable[[int], None], repeat: int) -> dict[str, float]:
    best_wall, best_cpu = float("inf"), float("inf")
    for attempt in range(repeat):
        c0, w0 = _tree_cpu_s(), time.perf_counter()
        fn(attempt)
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, _tree_cpu_s() - c0)
    return {"wall_ms": best_wall * 1000, "cpu_ms": best_cpu * 1000}


def compare(spark: Any, rows: int, *, repeat: int = 3) -> dict[str, Any]:
    groups = max(1, rows // TOPICS_PER_GROUP)
    topics = rows // groups
    changed = range(max(1, groups // 100))
    root = Path(tempfile.mkdtemp(prefix="bench-writers-"))
    try:
        base = queue_rows(range(groups), topics, 6)
        predicate = "brokerName IN (" + ", ".join(f"'g-{g}'" for g in changed) + ")"
        out: dict[str, Any] = {"rows": groups * topics, "groups": groups, "changed_groups": len(changed)}

        rs_path = str(root / "delta_rs")
        write_deltalake(rs_path, base, mode="overwrite")
        dt = DeltaTable(rs_path)

        def delta_rs(attempt: int) -> None:
            write_deltalake(dt, queue_rows(changed, topics, 2 + attempt % 2 * 4), mode="overwrite", predicate=predicate)
        out["delta-rs"] = _measure(delta_rs, repeat)

        sp_path = str(root / "delta_spark")
        write_deltalake(sp_path, base, mode="overwrite")

        def spark_replace(attempt: int) -> None:
            df = spark.createDataFrame(queue_rows(changed, topics, 2 + attempt % 2 * 4).to_pandas())
            df.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(sp_path)
        out["delta-spark replaceWhere"] = _measure(spark_replace, repeat)

        def spark_merge(attempt: int) -> None:
            from delta.tables import DeltaTable as SparkDeltaTable
            df = spark.createDataFrame(queue_rows(changed, topics, 2 + attempt % 2 * 4).to_pandas())
            (SparkDeltaTable.forPath(spark, sp_path).alias("t")
             .merge(df.alias("s"), "t.topic = s.topic AND t.brokerName = s.brokerName")
             .whenMatchedUpdateAll().whenNotMatchedInsertAll()
             .whenNotMatchedBySourceDelete(condition="t." + predicate)  # the same replacement as the others
             .execute())
        out["delta-spark MERGE"] = _measure(spark_merge, repeat)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)
