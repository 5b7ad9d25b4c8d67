"""Delta table schemas: one definition per table, used by the sink, the server and the tests.

Route tables are *owned* by a grouping key: every row of `topic_queue`, `broker_addr`,
`cluster_addr`, `broker_live` and `filter_server` belongs to one broker group
(`brokerName`), every `kv_config` row to one namespace. The sink replaces a group's rows
as a unit, which is what makes each event apply atomically.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class TableDef:
    name: str
    schema: pa.Schema
    owner: str | None  # column holding the group key the rows belong to; None = append-only

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def from_rows(self, rows: list[dict]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=self.schema)


def _schema(*cols: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(n, t, nullable=nullable) for n, t, nullable in cols])


S, I32, I64, B = pa.string(), pa.int32(), pa.int64(), pa.bool_()

TOPIC_QUEUE = TableDef("topic_queue", _schema(
    ("topic", S, False), ("brokerName", S, False), ("readQueueNums", I32, False),
    ("writeQueueNums", I32, False), ("perm", I32, False), ("topicSysFlag", I32, False)), "brokerName")

BROKER_ADDR = TableDef("broker_addr", _schema(
    ("brokerName", S, False), ("cluster", S, False), ("brokerId", I64, False), ("brokerAddr", S, False),
    ("zoneName", S, True), ("enableActingMaster", B, False)), "brokerName")

CLUSTER_ADDR = TableDef("cluster_addr", _schema(
    ("clusterName", S, False), ("brokerName", S, False)), "brokerName")

BROKER_LIVE = TableDef("broker_live", _schema(
    ("clusterName", S, False), ("brokerAddr", S, False), ("brokerName", S, False), ("brokerId", I64, True),
    ("lastUpdateTimestamp", I64, False), ("heartbeatTimeoutMillis", I64, False),
    ("dataVersion", S, False),  # DataVersion JSON {"counter","stateVersion","timestamp"}
    ("haServerAddr", S, True)), "brokerName")

# RocketMQ keys filterServerTable by (cluster, addr); brokerName is the owning group.
FILTER_SERVER = TableDef("filter_server", _schema(
    ("clusterName", S, False), ("brokerAddr", S, False), ("brokerName", S, False),
    ("filterServer", pa.list_(S), False)), "brokerName")

# A namespace whose last key was deleted still exists in RocketMQ (GET answers {"table":{}}):
# it is kept as one row with a null key and value.
KV_CONFIG = TableDef("kv_config", _schema(
    ("namespace", S, False), ("key", S, True), ("value", S, True)), "namespace")

# Runtime switches (UPDATE_NAMESRV_CONFIG); `scope` is the owning group ("namesrv").
NAMESRV_CONFIG = TableDef("namesrv_config", _schema(
    ("scope", S, False), ("key", S, False), ("value", S, False)), "scope")

# Append-only audit log: one row per semantic topology/KV/config change, written in the same cut.
ROUTE_CHANGES = TableDef("route_changes", _schema(
    ("snapshotId", I64, False), ("seq", I32, False), ("time", I64, False), ("kind", S, False),
    ("clusterName", S, True), ("brokerName", S, True), ("brokerAddr", S, True), ("brokerId", I64, True),
    ("topic", S, True), ("namespace", S, True), ("key", S, True),
    ("before", S, True), ("after", S, True),  # JSON values
    ("partition", I32, True), ("offset", I64, True)), None)

DEAD_LETTER = TableDef("dead_letter", _schema(
    ("value", pa.binary(), True), ("key", S, True), ("reason", S, False), ("partition", I32, False),
    ("offset", I64, False), ("kafkaTimestamp", I64, True), ("batchId", I64, False),
    ("time", I64, False)), None)

SNAPSHOTS = TableDef("snapshots", _schema(
    ("snapshotId", I64, False), ("batchId", I64, False), ("commitTime", I64, False),
    ("topic_queue_version", I64, False), ("broker_addr_version", I64, False),
    ("cluster_addr_version", I64, False), ("broker_live_version", I64, False),
    ("filter_server_version", I64, False), ("kv_config_version", I64, False),
    ("namesrv_config_version", I64, False), ("route_changes_version", I64, False),
    ("sourceOffsets", S, False),  # JSON {"<partition>": next offset to read}
    ("eventCount", I64, False)), None)

ROUTE_TABLES: tuple[TableDef, ...] = (TOPIC_QUEUE, BROKER_ADDR, CLUSTER_ADDR, BROKER_LIVE, FILTER_SERVER)
STATE_TABLES: tuple[TableDef, ...] = ROUTE_TABLES + (KV_CONFIG, NAMESRV_CONFIG)
CUT_TABLES: tuple[TableDef, ...] = STATE_TABLES + (ROUTE_CHANGES,)  # versions a snapshots row records
ALL_TABLES: tuple[TableDef, ...] = CUT_TABLES + (DEAD_LETTER, SNAPSHOTS)
BY_NAME = {t.name: t for t in ALL_TABLES}


def version_column(table: TableDef) -> str:
    """The `snapshots` column recording `table`'s Delta version in a cut."""
    return f"{table.name}_version"
