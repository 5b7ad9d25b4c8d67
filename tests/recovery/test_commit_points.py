"""Issue 24, the restart path: a crash at each of the sink's commit points loses nothing.

One query runs over a workload; before each round's batch a fault is armed at one commit point
(before each table's commit, before the `snapshots` row, before the progress record, and after the
whole batch but before Spark's commit log), the query dies there, and a new query starts on the
same checkpoint. At the end, the tables equal those of a second query that read the same topic
without a fault: nothing lost, nothing twice. (`test_crash_safety` SIGKILLs a job process at random
points; this walks every point once, deterministically.)
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from deltalake import DeltaTable

from pipelines.job import start_query
from schemas import events as ev
from schemas import tables as t
from schemas.progress import covers, read_progress
from tests.harness import Pipeline
from tests.helpers import reg, topics, unreg

pytestmark = [pytest.mark.integration, pytest.mark.faults]

POINTS = ("before:dead_letter", "before:topic_queue", "before:broker_addr", "before:cluster_addr",
          "before:broker_live", "before:kv_config", "before:route_changes", "before:snapshots", "before:progress",
          "after:batch")


class CrashAt:
    """A sink fault that raises once, at one commit point."""

    def __init__(self, point: str) -> None:
        self.point, self.fired = point, False

    def __call__(self, at: str) -> None:
        if at == self.point and not self.fired:
            self.fired = True
            raise RuntimeError(f"injected crash at {at}")


def round_events(i: int) -> list[dict]:
    """What makes a batch write every table: a new broker, a changed one, one leaving, a KV write."""
    events = [reg(f"cp-{i}", 0, f"127.0.0.1:{32000 + i}", tps=topics(f"Cp{i}", "CpBase"), cluster="CpCluster"),
              reg("cp-base", 0, "127.0.0.1:31999", tps=topics("CpBase", f"CpKeep{i}"), counter=i + 2,
                  cluster="CpCluster"),
              ev.put_kv_event("cpns", f"k{i % 3}", str(i))]
    if i:
        events.append(unreg(f"cp-{i - 1}", 0, f"127.0.0.1:{32000 + i - 1}", cluster="CpCluster"))
    return events


def rows(warehouse, table: t.TableDef, drop: tuple[str, ...] = ()) -> list[tuple]:
    data = DeltaTable(str(warehouse / table.name)).to_pyarrow_table().to_pylist()
    return sorted(tuple((k, str(v)) for k, v in sorted(r.items()) if k not in drop) for r in data)


def committed(p: Pipeline, coords: list[tuple[int, int]]) -> bool:
    progress = read_progress(p.cfg.warehouse)
    return progress is not None and covers(progress["sourceOffsets"], coords)


def test_a_crash_at_each_commit_point_loses_nothing(spark, kafka_bootstrap, tmp_path):
    p = Pipeline(spark, kafka_bootstrap, tmp_path / "crashed", NAMESRV_HEARTBEAT_DEFER_MS="0")
    topic = p.cfg.kafka_topic
    try:
        p.query = start_query(spark, p.cfg, query_name=f"cp_{uuid.uuid4().hex[:8]}")
        first = p.publish([reg("cp-base", 0, "127.0.0.1:31999", tps=topics("CpBase", "CpKeep"), cluster="CpCluster")])
        p.wait_for(lambda: committed(p, first), 120, "the first batch")
        for i, point in enumerate(POINTS):
            p.stop_job()
            fault = CrashAt(point)
            p.query = start_query(spark, p.cfg, query_name=f"cp_{uuid.uuid4().hex[:8]}", fault=fault)
            coords = p.publish(round_events(i))
            p.publisher.publish_raw([(f"cp-bad-{i}".encode(), b"not json")])  # a dead letter in the batch
            crashed = p.query
            p.query = None  # its failure is the point: not a failure of the test
            deadline = time.monotonic() + 120
            while crashed.isActive and time.monotonic() < deadline:
                time.sleep(0.1)
            assert fault.fired and "injected crash" in str(crashed.exception()), f"no crash at {point}"
            p.query = start_query(spark, p.cfg, query_name=f"cp_{uuid.uuid4().hex[:8]}")
            p.wait_for(lambda c=coords: committed(p, c), 120, f"round {i} committed after the crash at {point}")

        # The oracle: a second query over the same topic, from its start, never interrupted.
        oracle = Pipeline(spark, kafka_bootstrap, tmp_path / "oracle", NAMESRV_HEARTBEAT_DEFER_MS="0",
                          NAMESRV_KAFKA_TOPIC=topic).start_job()
        try:
            end = read_progress(p.cfg.warehouse)["sourceOffsets"]
            oracle.wait_for(lambda: (lambda r: r and r["sourceOffsets"] == end)(read_progress(oracle.cfg.warehouse)),
                            120, "the oracle to read as far")
            for table in (t.TOPIC_QUEUE, t.BROKER_ADDR, t.CLUSTER_ADDR, t.KV_CONFIG):
                assert rows(p.cfg.warehouse, table) == rows(oracle.cfg.warehouse, table), table.name
            live = ("lastUpdateTimestamp",)  # receive times are bounded by each run's own clock
            assert rows(p.cfg.warehouse, t.BROKER_LIVE, live) == rows(oracle.cfg.warehouse, t.BROKER_LIVE, live)
            kinds = ("kind", "brokerName", "topic", "key", "partition", "offset")

            def changes(w) -> Counter:
                data = DeltaTable(str(w / t.ROUTE_CHANGES.name)).to_pyarrow_table().to_pylist()
                return Counter(tuple(r[k] for k in kinds) for r in data)
            assert changes(p.cfg.warehouse) == changes(oracle.cfg.warehouse)
            dead = [r["offset"] for r in DeltaTable(str(p.cfg.warehouse / t.DEAD_LETTER.name)).to_pyarrow_table().to_pylist()]
            assert len(dead) == len(set(dead)) == len(POINTS)
        finally:
            oracle.close()
    finally:
        p.close()
