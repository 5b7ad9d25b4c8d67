"""Per-group cost of PySpark's stateful operators, to choose the job's stateful API by measurement.

The job keeps one state per broker group with `applyInPandasWithState` (pipelines/job.py). Spark 4
adds `transformWithStateInPandas` and, from 4.1, the Row-based `transformWithState` (both need the
RocksDB state store). This module runs the job's shape through each of them with trivial Python
work, so what is measured is the framework's plumbing: per micro-batch, one heartbeat row (a
~200-byte JSON string) per key; per key, a ~1.5 KB string state whose timestamp is rewritten; a
processing-time timeout pushed forward (applyInPandasWithState: `setTimeoutDuration`, since
`setTimeoutTimestamp` is for event time only; transformWithState*: delete the previous
processing-time timer, register the next); one small output row per key.

Each query reads `batches` parquet files (one per micro-batch, the same `groups` keys in each, so
state exists from batch 1 on) with `maxFilesPerTrigger=1` and `availableNow`, into a `foreachBatch`
sink that collects the batch with `toArrow()`. Per batch it records `addBatch` and
`triggerExecution` from the query's progress, and the CPU seconds of the whole process tree (driver
Python, the JVM, Spark's Python workers) between the starts of consecutive `foreachBatch` calls.
Batch 0 (state created) is reported apart from the later batches (state present).

    cd /work/main && .venv/bin/python -m bench.stateful_api
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import GroupedData, Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.pandas._typing import DataFrameLike as PandasDataFrameLike

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
INPUT_SCHEMA = "key string, value string"
OUTPUT_SCHEMA = "key string, kind string, deadline long"
STATE_SCHEMA = "route string, deadline long"  # the encoded route state and the pending deadline
TIMEOUT_MS = 600_000  # far beyond a run: no timeout or timer fires while measuring
ROUTE_BYTES = 1536
ROUTE_SEED = "0" * 13 + "r" * (ROUTE_BYTES - 13)  # 13 digits of epoch ms, then the "encoded" route
QUERY_TIMEOUT_S = 600
GROUP_SIZES = (100, 1000, 5000)
_TICKS = os.sysconf("SC_CLK_TCK")


def _stamp(route: str, now_ms: int) -> str:
    """The route state with its timestamp rewritten (the whole value is written back, as the job does)."""
    return f"{now_ms:013d}{route[13:]}"


# --- the step, once per API --------------------------------------------------------------------

def apply_step(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """applyInPandasWithState: update the state, push the timeout forward, one row out."""
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "kind": ["expired"], "deadline": [0]})
        return
    for _ in pdfs:  # the heartbeats: consumed, not decoded
        pass
    now = state.getCurrentProcessingTimeMs()
    route = state.get[0] if state.exists else ROUTE_SEED
    deadline = now + TIMEOUT_MS
    state.update((_stamp(route, now), deadline))
    state.setTimeoutDuration(TIMEOUT_MS)
    yield pd.DataFrame({"key": [key[0]], "kind": ["heartbeat"], "deadline": [deadline]})


class _TimerStep(StatefulProcessor):
    """transformWithState*: one value state per key and one processing-time timer, moved forward."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.route = handle.getValueState("route", STATE_SCHEMA)

    def _advance(self, timer_values: TimerValues) -> int:
        now = timer_values.getCurrentProcessingTimeInMs()
        current = self.route.get()
        if current is None:
            route = ROUTE_SEED
        else:
            route = current[0]
            self.handle.deleteTimer(current[1])
        deadline = now + TIMEOUT_MS
        self.route.update((_stamp(route, now), deadline))
        self.handle.registerTimer(deadline)
        return deadline

    def close(self) -> None:
        pass


class PandasTimerStep(_TimerStep):
    """For transformWithStateInPandas: rows come in, and go out, as pandas DataFrames."""

    def handleInputRows(self, key: Any, rows: Iterator[PandasDataFrameLike] | Iterator[Row],
                        timerValues: TimerValues) -> Iterator[PandasDataFrameLike]:
        for _ in rows:
            pass
        deadline = self._advance(timerValues)
        yield pd.DataFrame({"key": [key[0]], "kind": ["heartbeat"], "deadline": [deadline]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[PandasDataFrameLike]:
        self.route.clear()
        yield pd.DataFrame({"key": [key[0]], "kind": ["expired"], "deadline": [0]})


class RowTimerStep(_TimerStep):
    """For the Row-based transformWithState: rows come in, and go out, as pyspark Rows."""

    def handleInputRows(self, key: Any, rows: Iterator[PandasDataFrameLike] | Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        for _ in rows:
            pass
        deadline = self._advance(timerValues)
        yield Row(key=key[0], kind="heartbeat", deadline=deadline)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        self.route.clear()
        yield Row(key=key[0], kind="expired", deadline=0)


@dataclass(frozen=True)
class Api:
    name: str
    store: str  # state store provider class
    build: Callable[[GroupedData], DataFrame]


def _apis() -> list[Api]:
    """Every stateful API this pyspark has, with the store each is measured on."""
    def aipws(g: GroupedData) -> DataFrame:
        return g.applyInPandasWithState(apply_step, OUTPUT_SCHEMA, STATE_SCHEMA, "append",
                                        GroupStateTimeout.ProcessingTimeTimeout)

    def twsp(g: GroupedData) -> DataFrame:
        return g.transformWithStateInPandas(PandasTimerStep(), OUTPUT_SCHEMA, "Append", "ProcessingTime")

    def tws(g: GroupedData) -> DataFrame:
        return g.transformWithState(RowTimerStep(), OUTPUT_SCHEMA, "Append", "ProcessingTime")

    apis = [Api("applyInPandasWithState", HDFS, aipws), Api("applyInPandasWithState", ROCKSDB, aipws)]
    if hasattr(GroupedData, "transformWithStateInPandas"):
        apis.append(Api("transformWithStateInPandas", ROCKSDB, twsp))
    if hasattr(GroupedData, "transformWithState"):
        apis.append(Api("transformWithState", ROCKSDB, tws))
    return apis


# --- instruments -------------------------------------------------------------------------------

def tree_cpu_seconds(root: int) -> float:
    """utime+stime of `root` and its live descendants, plus cutime+cstime (the CPU of children they
    already reaped, e.g. Python workers that exited), from /proc."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, ticks)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0, [root], set[int]()
    while stack and len(seen) <= len(stats):  # bounded by the number of processes
        pid = stack.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        stack.extend(children.get(pid, []))
    return total / _TICKS


def write_batches(directory: Path, groups: int, batches: int) -> None:
    """One parquet file per micro-batch, `groups` heartbeats (same keys in each), mtimes in order
    (the file source admits the oldest file first)."""
    keys = [f"broker-group-{i:06d}" for i in range(groups)]
    base = time.time() - batches - 10
    for b in range(batches):
        values = [json.dumps({"brokerName": k, "brokerId": 0, "clusterName": "BenchCluster", "batch": b,
                              "brokerAddr": f"10.0.{i // 250 % 250}.{i % 250}:10911",
                              "haServerAddr": f"10.0.{i // 250 % 250}.{i % 250}:10912",
                              "dataVersion": {"counter": b, "timestamp": 1700000000000 + b}})
                  for i, k in enumerate(keys)]
        path = directory / f"batch-{b:04d}.parquet"
        pq.write_table(pa.table({"key": keys, "value": values}), path)
        os.utime(path, (base + b, base + b))


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _first_lines(exc: BaseException, n: int = 8) -> str:
    lines = [line for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    return "\n".join(lines[:n])


# --- one query ---------------------------------------------------------------------------------

def run_one(spark: SparkSession, api: Api, groups: int, batches: int, scratch: Path) -> dict[str, Any]:
    """Run `api` over `batches` micro-batches of `groups` keys; return per-batch and summary numbers."""
    src, ckpt = scratch / "input", scratch / "checkpoint"
    src.mkdir()
    write_batches(src, groups, batches)
    spark.conf.set(PROVIDER_CONF, api.store)  # fixed per checkpoint: this one is fresh
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")  # as the job runs
    root = os.getpid()
    cpu_at_start: dict[int, float] = {}
    rows_out: dict[int, int] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        cpu_at_start[batch_id] = tree_cpu_seconds(root)
        rows_out[batch_id] = df.toArrow().num_rows

    stream = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(src)))
    query = (api.build(stream.groupBy("key")).writeStream.outputMode("append").foreachBatch(sink)
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    try:
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            raise TimeoutError(f"{api.name} did not finish {batches} batches in {QUERY_TIMEOUT_S} s")
    finally:
        query.stop()
    cpu_at_end = tree_cpu_seconds(root)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    per_batch = []
    progress = {p.batchId: p for p in query.recentProgress if p.numInputRows > 0}
    ids = sorted(cpu_at_start)
    for i, batch_id in enumerate(ids):
        p = progress.get(batch_id)
        cpu_end = cpu_at_start[ids[i + 1]] if i + 1 < len(ids) else cpu_at_end
        ops = p.stateOperators if p is not None else []
        per_batch.append({
            "batch": batch_id, "rows_in": p.numInputRows if p is not None else None, "rows_out": rows_out[batch_id],
            "add_batch_ms": p.durationMs.get("addBatch") if p is not None else None,
            "trigger_ms": p.durationMs.get("triggerExecution") if p is not None else None,
            "cpu_ms": (cpu_end - cpu_at_start[batch_id]) * 1000,
            "state_rows": ops[0].numRowsTotal if ops else None,
            "state_commit_ms": ops[0].commitTimeMs if ops else None,
            "state_memory_bytes": ops[0].memoryUsedBytes if ops else None,
        })
    return _summary(api, groups, per_batch)


def _summary(api: Api, groups: int, per_batch: list[dict[str, Any]]) -> dict[str, Any]:
    later = [b for b in per_batch if b["batch"] > 0]
    first = [b for b in per_batch if b["batch"] == 0]
    add = _median([b["add_batch_ms"] for b in later if b["add_batch_ms"] is not None])
    cpu = _median([b["cpu_ms"] for b in later])
    return {
        "api": api.name, "store": api.store.rsplit(".", 1)[1], "groups": groups, "batches": len(per_batch),
        "add_batch_ms": add, "trigger_ms": _median([b["trigger_ms"] for b in later if b["trigger_ms"] is not None]),
        "ms_per_group": None if add is None else add / groups,
        "cpu_ms_per_group": None if cpu is None else cpu / groups,
        "state_commit_ms": _median([b["state_commit_ms"] for b in later if b["state_commit_ms"] is not None]),
        "first_add_batch_ms": first[0]["add_batch_ms"] if first else None,
        "first_ms_per_group": first[0]["add_batch_ms"] / groups if first and first[0]["add_batch_ms"] else None,
        "first_cpu_ms_per_group": first[0]["cpu_ms"] / groups if first else None,
        "rows_out_ok": all(b["rows_out"] == groups for b in per_batch),
        "per_batch": per_batch, "error": None,
    }


def measure(spark: SparkSession, groups: int, batches: int) -> list[dict[str, Any]]:
    """Every available API once, each with a fresh input and checkpoint directory."""
    results = []
    for api in _apis():
        with tempfile.TemporaryDirectory(prefix="stateful-api-") as scratch:
            try:
                results.append(run_one(spark, api, groups, batches, Path(scratch)))
            except Exception as exc:  # an API missing or failing here is a result too
                error = _first_lines(exc)
                if api.name.startswith("transformWithState") and importlib.util.find_spec("google") is None:
                    # Its Python workers talk to the JVM's state server in protobuf; pyspark does not
                    # declare the dependency, and the worker dies before it can say so.
                    error += "\n(probable cause: the `protobuf` package is not importable by Spark's Python workers)"
                results.append({"api": api.name, "store": api.store.rsplit(".", 1)[1], "groups": groups,
                                "error": error})
    return results


@contextlib.contextmanager
def session() -> Iterator[SparkSession]:
    """The project's SparkSession (pipelines.job.build_spark) over a scratch data directory."""
    from conf import load_config
    from pipelines.job import build_spark

    with tempfile.TemporaryDirectory(prefix="stateful-api-data-") as data:
        spark = build_spark(load_config({"NAMESRV_DATA_DIR": data}), app_name="bench-stateful-api")
        try:
            yield spark
        finally:
            spark.stop()


def compare(groups: int = 1000, batches: int = 6) -> list[dict[str, Any]]:
    """Per available API: median addBatch, ms and CPU ms per group over batches 1.. (state
    present), and the same for batch 0 (state created)."""
    if batches < 2:
        raise ValueError("batches must be >= 2: batch 0 creates the state and is reported apart")
    with session() as spark:
        return measure(spark, groups, batches)


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| API | state store | groups per batch | addBatch ms (median) | ms per group | CPU ms per group "
             "| batch 0: ms per group | batch 0: CPU ms per group |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.get("error"):
            lines.append(f"| {r['api']} | {r['store']} | {r['groups']} | error: "
                         f"{r['error'].splitlines()[0][:120]} | | | | |")
            continue
        lines.append(f"| {r['api']} | {r['store']} | {r['groups']} | {_fmt(r['add_batch_ms'], 0)} "
                     f"| {_fmt(r['ms_per_group'], 3)} | {_fmt(r['cpu_ms_per_group'], 3)} "
                     f"| {_fmt(r['first_ms_per_group'], 3)} | {_fmt(r['first_cpu_ms_per_group'], 3)} |")
    return "\n".join(lines)


def marginal(results: list[dict[str, Any]], small: int, large: int) -> str:
    """Cost of one more group, from the difference between two batch sizes (the per-batch fixed cost,
    planning and commits, cancels out)."""
    lines = [f"| API | state store | addBatch ms per extra group ({small}→{large}) | CPU ms per extra group |",
             "|---|---|---:|---:|"]
    ok = {(r["api"], r["store"], r["groups"]): r for r in results if not r.get("error")}
    for (api, store, groups), lo in ok.items():
        hi = ok.get((api, store, large))
        if groups != small or hi is None or lo["add_batch_ms"] is None or hi["add_batch_ms"] is None:
            continue
        add = (hi["add_batch_ms"] - lo["add_batch_ms"]) / (large - small)
        cpu = (hi["cpu_ms_per_group"] * large - lo["cpu_ms_per_group"] * small) / (large - small)
        lines.append(f"| {api} | {store} | {add:.3f} | {cpu:.3f} |")
    return "\n".join(lines)


def run(sizes: tuple[int, ...] = GROUP_SIZES, batches: int = 6) -> list[dict[str, Any]]:
    """Every API at every size in one session, after an unrecorded warm-up (class loading and
    JIT, so the first API measured is not penalised)."""
    results: list[dict[str, Any]] = []
    with session() as spark:
        changelog = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
        print(f"{changelog} = {spark.conf.get(changelog, 'unset: RocksDB default')}", flush=True)
        measure(spark, 200, 3)
        for groups in sizes:
            results.extend(measure(spark, groups, batches))
    return results


def main() -> None:
    results = run()
    print(table(results))
    print()
    print(marginal(results, GROUP_SIZES[1], GROUP_SIZES[-1]))
    for r in results:
        if r.get("error"):
            print(f"\n{r['api']} ({r['store']}, {r['groups']} groups) failed:\n{r['error']}")
    out = os.environ.get("STATEFUL_API_JSON")
    if out:
        Path(out).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
