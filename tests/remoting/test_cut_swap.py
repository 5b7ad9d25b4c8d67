"""A cut replaced under a reader never yields a torn answer.

The store swaps between two cuts as fast as it can load them, and every route lookup over
remoting must be wholly one cut's: its brokers, their queues and addresses all from the cut whose
id the answer is stamped with, a topic only one cut holds found exactly when the stamp names that
cut. The store, its refresher thread, the front's loop and the TCP connection are real; only the
reader's I/O is replaced, by Arrow tables of the two cuts handed over as a read of their files does.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa

from conf import load_config
from remoting import codes
from remoting.client import RemotingClient
from remoting.front import Front
from remoting.replies import SNAPSHOT_EXT
from schemas import tables as t
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore
from tests.differential.in_memory import InMemoryLog
from tests.harness import FrontThread

_SCHEMAS = {x.name: x.schema for x in t.STATE_TABLES}
BROKERS = 3
QUEUES = {"a": 8, "b": 4}  # cut a (odd ids) and cut b (even ids) differ in every field a route holds
OCTET = {"a": 1, "b": 2}


def _cut(side: str) -> dict[str, pa.Table]:
    names = [f"{side}{i}" for i in range(BROKERS)]
    addr = {n: f"10.{OCTET[side]}.0.{i + 1}:10911" for i, n in enumerate(names)}
    topics = ["Swapped"] + (["OnlyA"] if side == "a" else [])
    rows: dict[str, list[dict[str, Any]]] = {
        t.TOPIC_QUEUE.name: [{"topic": topic, "brokerName": n, "readQueueNums": QUEUES[side],
                              "writeQueueNums": QUEUES[side], "perm": 6, "topicSysFlag": 0}
                             for topic in topics for n in names],
        t.BROKER_ADDR.name: [{"brokerName": n, "cluster": f"C{side}", "brokerId": 0, "brokerAddr": addr[n],
                              "zoneName": None, "enableActingMaster": False} for n in names],
        t.CLUSTER_ADDR.name: [{"clusterName": f"C{side}", "brokerName": n} for n in names],
        t.BROKER_LIVE.name: [{"clusterName": f"C{side}", "brokerAddr": addr[n], "brokerName": n, "brokerId": 0,
                              "haServerAddr": None, "dataVersion": '{"counter":1,"timestamp":1}',
                              "lastUpdateTimestamp": 1, "heartbeatTimeoutMillis": 120_000} for n in names],
        t.FILTER_SERVER.name: [], t.KV_CONFIG.name: [], t.NAMESRV_CONFIG.name: []}
    return {name: pa.Table.from_pylist(r, schema=_SCHEMAS[name]) for name, r in rows.items()}


class SwappingReader(SnapshotReader):
    """A warehouse whose newest cut alternates between cut a (odd ids) and cut b (even ids)."""

    def __init__(self, warehouse: Any) -> None:
        super().__init__(warehouse)
        self.cuts = {"a": _cut("a"), "b": _cut("b")}
        self.loads = 0
        self._id = 0

    def newest_row(self, after: int | None = None) -> dict[str, Any] | None:
        self._id += 1
        return {"snapshotId": self._id, "commitTime": int(time.time() * 1000), "sourceOffsets": "{}",
                **{t.version_column(x): self._id for x in t.CUT_TABLES}}

    def read_table(self, table: t.TableDef, version: int) -> pa.Table:
        return self.cuts["a" if version % 2 else "b"][table.name]

    def load(self, row: dict[str, Any], previous: Any = None) -> Any:
        self.loads += 1
        return super().load(row, previous)


def _side_of(answer: Any) -> str:
    return "a" if int(answer.ext[SNAPSHOT_EXT]) % 2 else "b"


def test_every_answer_is_wholly_the_cut_it_is_stamped_with(tmp_path):
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    reader = SwappingReader(cfg.warehouse)
    store = SnapshotStore(reader, 0.001, retention_ms=cfg.history_retention_ms)
    store.refresh()
    front = FrontThread(Front(cfg, store, lambda: InMemoryLog(cfg.broker_timeout_ms)))  # type: ignore[arg-type]
    store.start()
    seen = {"a": 0, "b": 0}
    asked = 0
    try:
        with RemotingClient(front.addr, timeout_s=30) as client:
            stop = time.monotonic() + 3.0
            while time.monotonic() < stop:  # bounded by time: a few thousand lookups
                asked += 1
                answer = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Swapped"})
                assert answer.code == codes.SUCCESS, answer.remark
                side = _side_of(answer)
                seen[side] += 1
                route = json.loads(answer.body)
                brokers = {b["brokerName"] for b in route["brokerDatas"]}
                assert brokers == {f"{side}{i}" for i in range(BROKERS)}, (side, route)
                assert {q["brokerName"] for q in route["queueDatas"]} == brokers, (side, route)
                assert {q["readQueueNums"] for q in route["queueDatas"]} == {QUEUES[side]}, (side, route)
                assert all(b["cluster"] == f"C{side}" and b["brokerAddrs"]["0"].startswith(f"10.{OCTET[side]}.")
                           for b in route["brokerDatas"]), (side, route)
                only = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "OnlyA"})
                expected = codes.SUCCESS if _side_of(only) == "a" else codes.TOPIC_NOT_EXIST
                assert only.code == expected, (only.ext, only.remark)
    finally:
        store.stop(timeout_s=10)
        front.stop()
    # the cuts really were swapped under the lookups, and both were answered from
    assert reader.loads >= 20 and min(seen.values()) >= 20, (reader.loads, seen, asked)
