"""The rows the state step emits and the sink reads: one definition for both.

Each row is addressed to a `target`:
- a state table name (`topic_queue`, ..., `kv_config`, `namesrv_config`): `body` is the JSON
  list of rows that replace every row of that table whose owner column equals `owner`;
- `route_changes`: `body` is the JSON list of audit rows, each a list of `CHANGE_FIELDS` (the
  table's columns without snapshotId/seq, which the sink assigns);
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
from _json import make_encoder
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

from schemas import json_codec
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


def _dumps(*, sort_keys: bool, separators: tuple[str, str]) -> Callable[[Any], str]:
    """`json.dumps(value, sort_keys=..., separators=...)` with its C encoder made once. json.dumps
    builds a JSONEncoder on every call with settings other than its defaults, and JSONEncoder.encode
    a C encoder on every call, which cost more than encoding what the step encodes most (a route
    change's small before/after dicts, 25 for a default broker's first registration). Without
    json.dumps' check for circular values: the step encodes only what it built from decoded JSON."""
    encode = make_encoder(None, json.JSONEncoder().default, encode_basestring_ascii, None,
                          separators[1], separators[0], sort_keys, False, True)
    return lambda value: "".join(encode(value, 0))


dumps_sorted = _dumps(sort_keys=True, separators=(", ", ": "))  # json.dumps(value, sort_keys=True)

# A route change as the step emits it: route_changes' columns but snapshotId and seq, in order. A
# list, not an object: at 25 changes a first registration, the column names written and read for
# every change were half of what encoding and decoding them cost.
_SINK_ASSIGNED, CHANGE_FIELDS = t.ROUTE_CHANGES.schema.names[:2], tuple(t.ROUTE_CHANGES.schema.names[2:])
if _SINK_ASSIGNED != ["snapshotId", "seq"]:  # the sink puts them first
    raise RuntimeError("route_changes' first columns are no longer snapshotId and seq")


def changes_of(body: str) -> list[dict[str, Any]]:
    """A `route_changes` row's body as one dict per change (tests, readers)."""
    return [dict(zip(CHANGE_FIELDS, c, strict=True)) for c in json.loads(body)]


def row(owner: str | None, target: str, body: str) -> dict[str, Any]:
    """An output row that is not a quarantined record (no raw bytes, no Kafka coordinates)."""
    return {"owner": owner, "target": target, "body": body, "raw": None, "rawKey": None, "partition": None,
            "offset": None, "kafkaTimestamp": None}


def table_row(owner: str | None, table: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`rows` replace every row of `table` whose owner column equals `owner`. The body only
    travels to the sink, which decodes it: orjson's text (`json_codec.dumps_text`) is enough."""
    return row(owner, table, json_codec.dumps_text(rows))


def dead_letter_row(owner: str | None, reason: str, record: dict[str, Any]) -> dict[str, Any]:
    return {"owner": owner, "target": DEAD_LETTER, "body": reason, "raw": record["value"], "rawKey": record["key"],
            "partition": record["partition"], "offset": record["offset"], "kafkaTimestamp": record["timestamp"]}
