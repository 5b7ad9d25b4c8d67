"""The pipeline's pure core driven batch by batch: the stand-in for Kafka → Spark in fast tests
(model property, upstream scenarios, Delta histories built without Spark)."""

from __future__ import annotations

import json
from typing import Any

from pipelines import buckets as bk
from pipelines.sink import plan_batch
from pipelines.step import GroupRunner, StepConfig, run_group
from routeinfo.snapshot import build_snapshot
from schemas import events as ev
from schemas import tables as t
from tests.helpers import routing_config


class Batches:
    """One micro-batch at a time, as Spark would run it: the events become Kafka-like records
    (one partition, consecutive offsets, record time = now); broker groups run in one bucket as the
    job runs them (a group with records, or whose deadline is due: the timeouts of a real run), and
    every KV namespace with records or state is stepped at `now`."""

    def __init__(self, cfg: StepConfig) -> None:
        self.cfg = cfg
        self.states: dict[str, str] = {}
        self.bucket: bk.State | None = None
        self.batch = 0
        self.offset = 0
        self.log: dict[int, bytes] = {}  # every record's value by offset: what a repeat's body is read from

    def step(self, events: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
        records: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            key, value = ev.encode({**e, "timestamp": now})
            records.setdefault(key.decode(), []).append(
                {"partition": 0, "offset": self.offset, "timestamp": now, "key": key.decode(), "value": value})
            self.log[self.offset] = value
            self.offset += 1
        out = []
        # broker groups share one bucket, as the job keeps them (pipelines/buckets.py: a group with
        # no records runs only when its deadline is due; its pure liveness signals are absorbed by
        # the bucket's live table); KV namespaces and the switches keep their own keys
        brokers = [r for g, rs in records.items() if ev.is_broker_group(g) for r in rs]
        self.bucket, _, rows = bk.run_bucket(brokers, self.bucket, now, GroupRunner(now, self.cfg, fetch=self.fetch))
        out.extend(rows)
        for group in sorted(set(self.states) | {g for g in records if not ev.is_broker_group(g)}):
            state, _, rows = run_group(group, records.get(group, []), self.states.get(group), now, self.cfg,
                                       fetch=self.fetch)
            if state is None:
                self.states.pop(group, None)
            else:
                self.states[group] = state
            out.extend(rows)
        self.batch += 1
        return out


    def fetch(self, partition: int, offsets: list[int]) -> list[bytes | None]:
        return [self.log.get(o) for o in offsets]


def step_config(*, timeout_ms: int = 120_000, live_flush_ms: int = 0,
                delete_topic_with_broker_registration: bool = False) -> StepConfig:
    return StepConfig(routing_config(
        default_timeout_ms=timeout_ms, live_flush_ms=live_flush_ms,
        delete_topic_with_broker_registration=delete_topic_with_broker_registration), 1 << 20, 10**12)


class PureSystem:
    """Batches whose output is materialized in memory like the sink would (no Delta)."""

    def __init__(self, timeout_ms: int = 120_000, delete_topic_with_broker_registration: bool = False,
                 live_flush_ms: int = 0) -> None:
        self.batches = Batches(step_config(timeout_ms=timeout_ms, live_flush_ms=live_flush_ms,
                                           delete_topic_with_broker_registration=delete_topic_with_broker_registration))
        self.tables: dict[str, dict[str, list[dict[str, Any]]]] = {x.name: {} for x in t.STATE_TABLES}

    def run_batch(self, events: list[dict[str, Any]], now: int) -> None:
        out = self.batches.step(events, now)
        plan = plan_batch(out, self.batches.batch - 1, now)
        assert not plan.dead_letters, plan.dead_letters
        for table, owners in plan.replace.items():
            self.tables[table].update(owners)

    def rows(self, table: str) -> list[dict[str, Any]]:
        return [r for rs in self.tables[table].values() for r in rs]

    def snapshot(self):
        return build_snapshot(None, {name: self.rows(name) for name in self.tables})

    def table_rows(self) -> dict[str, set[tuple]]:
        live = set()
        for r in self.rows("broker_live"):
            dv = json.loads(r["dataVersion"])
            live.add((r["clusterName"], r["brokerAddr"], r["lastUpdateTimestamp"], r["heartbeatTimeoutMillis"],
                      tuple(sorted(dv.items())), r["haServerAddr"]))
        return {
            "topic_queue": {(r["topic"], r["brokerName"], r["readQueueNums"], r["writeQueueNums"], r["perm"],
                             r["topicSysFlag"]) for r in self.rows("topic_queue")},
            "broker_addr": {(r["brokerName"], r["cluster"], r["brokerId"], r["brokerAddr"], r["zoneName"],
                             r["enableActingMaster"]) for r in self.rows("broker_addr")},
            "cluster_addr": {(r["clusterName"], r["brokerName"]) for r in self.rows("cluster_addr")},
            "broker_live": live,
            "filter_server": {(r["clusterName"], r["brokerAddr"], tuple(r["filterServer"]))
                              for r in self.rows("filter_server")},
            "kv_config": {(r["namespace"], r["key"], r["value"]) for r in self.rows("kv_config")},
        }
