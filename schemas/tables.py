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


STRING, INT32, INT64, BOOL = pa.string(), pa.int32(), pa.int64(), pa.bool_()

TOPIC_QUEUE = TableDef("topic_queue", _schema(
    ("topic", STRING, False), ("brokerName", STRING, False), ("readQueueNums", INT32, False),
    ("writeQueueNums", INT32, False), ("perm", INT32, False), ("topicSysFlag", INT32, False)), "brokerName")

BROKER_ADDR = TableDef("broker_addr", _schema(
    ("brokerName", STRING, False), ("cluster", STRING, False), ("brokerId", INT64, False), ("brokerAddr", STRING, False),
    ("zoneName", STRING, True), ("enableActingMaster", BOOL, False)), "brokerName")

CLUSTER_ADDR = TableDef("cluster_addr", _schema(
    ("clusterName", STRING, False), ("brokerName", STRING, False)), "brokerName")

BROKER_LIVE = TableDef("broker_live", _schema(
    ("clusterName", STRING, False), ("brokerAddr", STRING, False), ("brokerName", STRING, False), ("brokerId", INT64, True),
    ("lastUpdateTimestamp", INT64, False), ("heartbeatTimeoutMillis", INT64, False),
    ("dataVersion", STRING, False),  # DataVersion JSON {"counter","stateVersion","timestamp"}
    ("haServerAddr", STRING, True)), "brokerName")

# RocketMQ keys filterServerTable by (cluster, addr); brokerName is the owning group.
FILTER_SERVER = TableDef("filter_server", _schema(
    ("clusterName", STRING, False), ("brokerAddr", STRING, False), ("brokerName", STRING, False),
    ("filterServer", pa.list_(STRING), False)), "brokerName")

# A namespace whose last key was deleted still exists in RocketMQ (GET answers {"table":{}}):
# it is kept as one row with a null key and value.
KV_CONFIG = TableDef("kv_config", _schema(
    ("namespace", STRING, False), ("key", STRING, True), ("value", STRING, True)), "namespace")

# Runtime switches (UPDATE_NAMESRV_CONFIG); `scope` is the owning group ("namesrv").
NAMESRV_CONFIG = TableDef("namesrv_config", _schema(
    ("scope", STRING, False), ("key", STRING, False), ("value", STRING, False)), "scope")

# Append-only audit log: one row per semantic topology/KV/config change, written in the same cut.
ROUTE_CHANGES = TableDef("route_changes", _schema(
    ("snapshotId", INT64, False), ("seq", INT32, False), ("time", INT64, False), ("kind", STRING, False),
    ("clusterName", STRING, True), ("brokerName", STRING, True), ("brokerAddr", STRING, True), ("brokerId", INT64, True),
    ("topic", STRING, True), ("namespace", STRING, True), ("key", STRING, True),
    ("before", STRING, True), ("after", STRING, True),  # JSON values
    ("partition", INT32, True), ("offset", INT64, True)), None)

DEAD_LETTER = TableDef("dead_letter", _schema(
    ("value", pa.binary(), True), ("key", STRING, True), ("reason", STRING, False), ("partition", INT32, False),
    ("offset", INT64, False), ("kafkaTimestamp", INT64, True), ("batchId", INT64, False),
    ("time", INT64, False)), None)

SNAPSHOTS = TableDef("snapshots", _schema(
    ("snapshotId", INT64, False), ("batchId", INT64, False), ("commitTime", INT64, False),
    ("topic_queue_version", INT64, False), ("broker_addr_version", INT64, False),
    ("cluster_addr_version", INT64, False), ("broker_live_version", INT64, False),
    ("filter_server_version", INT64, False), ("kv_config_version", INT64, False),
    ("namesrv_config_version", INT64, False), ("route_changes_version", INT64, False),
    ("sourceOffsets", STRING, False),  # JSON {"<partition>": next offset to read}
    ("eventCount", INT64, False)), None)

ROUTE_TABLES: tuple[TableDef, ...] = (TOPIC_QUEUE, BROKER_ADDR, CLUSTER_ADDR, BROKER_LIVE, FILTER_SERVER)
STATE_TABLES: tuple[TableDef, ...] = ROUTE_TABLES + (KV_CONFIG, NAMESRV_CONFIG)
CUT_TABLES: tuple[TableDef, ...] = STATE_TABLES + (ROUTE_CHANGES,)  # versions a snapshots row records
ALL_TABLES: tuple[TableDef, ...] = CUT_TABLES + (DEAD_LETTER, SNAPSHOTS)


def version_column(table: TableDef) -> str:
    """The `snapshots` column recording `table`'s Delta version in a cut."""
    return f"{table.name}_version"
