"""The rows the state step emits and the sink reads: one definition for both.

Each row is addressed to a `target`:
- a state table name (`topic_queue`, ..., `kv_config`, `namesrv_config`): `body` is the JSON
  list of rows that replace every row of that table whose owner column equals `owner`;
- `route_changes`: `body` is the JSON list of audit rows (without snapshotId/seq, which the
  sink assigns);
- `dead_letter`: a record that broke the contract; `body` is the reason, and `raw`, `rawKey`,
  `partition`, `offset`, `kafkaTimestamp` locate the record;
- REJECTED: a valid registration RocketMQ's rules refused (logged; the audit row is in
  `route_changes`); `body` is the reason;
- DEADLINE: the group's next timeout in epoch ms ("" = none), which the sink publishes as
  `nextDeadline` so the source can schedule a batch for it;
- BATCH: the batch as its source planned it (`pipelines/batch_context.py`, JSON), once per batch;
- READ_LOSS: offsets a read found removed by the topic's retention, `[partition, first, end]`;
- READ: with Spark's Kafka connector (no batch context), how far one call's records reach,
  `{"<partition>": [next offset, records]}`.
"""

from __future__ import annotations

import json
from typing import Any

from schemas import tables as t

OUTPUT_SCHEMA = ("owner string, target string, body string, raw binary, rawKey string, "
                 "partition int, offset long, kafkaTimestamp long")

COLUMNS = tuple(field.split()[0] for field in OUTPUT_SCHEMA.split(", "))  # the step's output frame, in order

DEAD_LETTER = t.DEAD_LETTER.name
ROUTE_CHANGES = t.ROUTE_CHANGES.name
REJECTED = "_rejected"
DEADLINE = "_deadline"
BATCH = "_batch"
READ_LOSS = "_read_loss"
READ = "_read"


# `json.dumps` with these settings, its encoder made once: json.dumps builds a JSONEncoder on every
# call with settings other than its defaults, which cost more than encoding what the step encodes
# most (a route change's small before/after dicts, 37 for a default broker's first registration)
dumps_sorted = json.JSONEncoder(sort_keys=True).encode  # json.dumps(value, sort_keys=True)
dumps_compact = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps(value, separators=(",", ":"))


def row(owner: str | None, target: str, body: str) -> dict[str, Any]:
    """An output row that is not a quarantined record (no raw bytes, no Kafka coordinates)."""
    return {"owner": owner, "target": target, "body": body, "raw": None, "rawKey": None, "partition": None,
            "offset": None, "kafkaTimestamp": None}


def table_row(owner: str | None, table: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`rows` replace every row of `table` whose owner column equals `owner`."""
    return row(owner, table, dumps_compact(rows))


def dead_letter_row(owner: str | None, reason: str, record: dict[str, Any]) -> dict[str, Any]:
    return {"owner": owner, "target": DEAD_LETTER, "body": reason, "raw": record["value"], "rawKey": record["key"],
            "partition": record["partition"], "offset": record["offset"], "kafkaTimestamp": record["timestamp"]}
