"""Which keys the job's stateful operator uses, recorded beside Spark's checkpoint, and the move
of a checkpoint written under other keys into this job's buckets.

Spark would run this job over a checkpoint written under other keys without a word: the state of
one key per broker group (every version before buckets) or of another bucket count would lie under
keys no call reads, and every route would be rebuilt from whatever arrives next, while a silent
broker would never expire. So the layout is written down (`namesrv-layout.json`), and a checkpoint
without it, or with another bucket count or key names (`buckets.Layout`), is moved at start: the
driver reads the operator's state as of the last committed batch (Spark's state data source: no
file of Spark's is read here), regroups every broker group into this job's buckets (`import_rows`,
pure), and writes the result beside the checkpoint. The source hands it to the step as the first
records of a batch: of the batch Spark replays first when that one was planned under the old
layout (its offsets carry no `LAYOUT` entry of this layout), else of the next batch (its offsets
name the file, so a replay reads it again). Once that batch has committed, the source records the
new layout; a job that stopped before it could finds the state already under this job's keys and
records it then. Keys of the old layout are dropped when Spark next calls them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from conf.store import StorePath, replace_text
from pipelines import buckets as bk
from routeinfo import housekeeping
from routeinfo.route_writes import RoutingConfig
from routeinfo.state import GroupState
from schemas import events as ev

LAYOUT_FILE = "namesrv-layout.json"
IMPORT_DIR = "namesrv-import"
IMPORT_OFFSET = "import"  # our source's offsets entry: the import file this batch (and every later one) carries
LAYOUT = "buckets"  # our source's offsets entry: the layout the batch was planned under (`Layout.tag`)

log = logging.getLogger(__name__)


class LayoutError(RuntimeError):
    """The checkpoint's state must be moved to this job's buckets and this job cannot do it."""


def recorded_layout(checkpoint_dir: StorePath) -> bk.Layout | None:
    """The layout the checkpoint's state is keyed by; None: one key per broker group (no layout
    file, written by a version before buckets)."""
    try:
        raw = json.loads((checkpoint_dir / LAYOUT_FILE).read_text())
    except FileNotFoundError:
        return None
    return bk.Layout(int(raw["buckets"]), int(raw["partitions"]) if raw.get("partitions") else None)


def recorded_buckets(checkpoint_dir: StorePath) -> int | None:
    """The recorded layout's bucket count (None: one key per broker group)."""
    layout = recorded_layout(checkpoint_dir)
    return None if layout is None else layout.buckets


def _replace_text(path: StorePath, text: str) -> None:
    """`replace_text`, its directory made first (a new checkpoint has none yet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, text)


def record_layout(checkpoint_dir: StorePath, layout: bk.Layout) -> None:
    record: dict[str, Any] = {"stateKeys": "buckets", "buckets": layout.buckets}
    if layout.partitions is not None:
        record["partitions"] = layout.partitions
    _replace_text(checkpoint_dir / LAYOUT_FILE, json.dumps(record) + "\n")


def wanted_layout(recorded: bk.Layout | None, buckets: int, partitions: int) -> bk.Layout:
    """Pure: the layout this start runs, given the recorded one and NAMESRV_STATE_BUCKETS and
    NAMESRV_SHUFFLE_PARTITIONS. A checkpoint keeps the partition count of its first start
    (Spark's offset log records it), so a recorded balanced layout keeps its own; a checkpoint
    recorded before balancing (or none) is balanced for the configured count, which is the one
    Spark runs unless the variable changed since the first start (then the keys only balance
    worse, as before)."""
    kept = recorded.partitions if recorded is not None and recorded.partitions is not None else partitions
    return bk.Layout(buckets, kept)


def import_rows(state_rows: Iterable[tuple[str, str, str | None]], recorded: bk.Layout | None,
                bucket_of: Callable[[list[str]], dict[str, str]], layout: bk.Layout,
                routing: RoutingConfig) -> tuple[list[dict[str, str]], int]:
    """Pure: the operator's state rows (key, core, topics) of the layout `recorded` (None: one key
    per group) → one import record per bucket of `layout` ({"key", "core", "topics"}) and the
    number of broker groups. KV namespaces and the switches keep their keys and are not moved.
    `bucket_of` names each group's bucket key as the job's key column computes it."""
    groups: dict[str, bk.Entry] = {}
    for key, core, topics in state_rows:
        if not ev.is_broker_group(key):
            continue
        if recorded is None:  # the key is the brokerName
            groups[key] = bk.Entry(core, topics or "{}", None)
        elif key.startswith(recorded.prefix):
            groups.update(bk.groups((core, topics)))
    for entry in groups.values():
        entry.deadline = housekeeping.next_deadline(GroupState.from_parts(entry.core, entry.topics), routing)
    where = bucket_of(sorted(groups))
    if not set(where.values()) <= set(layout.keys):
        raise ValueError(f"bucket keys outside {layout.describe()}: {sorted(set(where.values()) - set(layout.keys))[:3]}")
    per_bucket: dict[str, dict[str, bk.Entry]] = {}
    for name, entry in groups.items():
        per_bucket.setdefault(where[name], {})[name] = entry
    rows = []
    for key, entries in sorted(per_bucket.items()):
        encoded = bk.encode_groups(entries)
        assert encoded is not None
        rows.append({"key": key, "core": encoded[0], "topics": encoded[1]})
    return rows, len(groups)


def prepare(spark: Any, checkpoint_dir: StorePath, buckets: int, partitions: int, routing: RoutingConfig, *,
            can_import: bool = True) -> tuple[bk.Layout, StorePath | None]:
    """At start: the layout this job runs (`wanted_layout`), and the import file the source must
    hand over (None: the checkpoint is new, holds no state, or its state is in this layout
    already). `can_import`: whether the job's source can hand an import over (ours; Spark's Kafka
    connector cannot, and a checkpoint to move is then refused with LayoutError)."""
    recorded = recorded_layout(checkpoint_dir)
    layout = wanted_layout(recorded, buckets, partitions)
    if recorded == layout:
        return layout, None
    state = _read_state(spark, checkpoint_dir)
    moved = any(key.startswith(layout.prefix) for key, _, _ in state)
    if moved or not any(ev.is_broker_group(key) for key, _, _ in state):
        # new, nothing to move, or moved by a batch that committed before its record was written
        record_layout(checkpoint_dir, layout)
        return layout, None
    was = "one key per broker group (written before buckets)" if recorded is None else recorded.describe()
    if not can_import:
        if recorded is not None and recorded.buckets == buckets:
            # Only the names changed (balanced keys): what this source cannot move it keeps.
            return recorded, None
        raise LayoutError(f"checkpoint {checkpoint_dir} holds its state under {was}, this job under {buckets} "
                          "buckets, and Spark's Kafka connector cannot hand the moved state to the job: start it "
                          "once with NAMESRV_KAFKA_SOURCE=python, or set NAMESRV_STATE_BUCKETS to the recorded count")
    rows, groups = import_rows(state, recorded, lambda names: _bucket_of(spark, names, layout), layout, routing)
    target = checkpoint_dir / IMPORT_DIR / f"{layout.tag}-{int(time.time() * 1000)}.jsonl"
    _replace_text(target, "".join(json.dumps(r) + "\n" for r in rows))
    log.warning("checkpoint %s holds its state under %s, this job under %s: moving %d broker group(s) "
                "into them in %s (the first batch hands it over)", checkpoint_dir, was, layout.describe(), groups,
                target)
    return layout, target


def read_import(path: StorePath) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _read_state(spark: Any, checkpoint_dir: StorePath) -> list[tuple[str, str, str | None]]:
    """The stateful operator's rows as of the last committed batch (Spark's state data source;
    none when no batch has committed state yet)."""
    from pyspark.errors import PySparkException
    spark.streams.active  # noqa: B018 -- starts the state store coordinator the reader asks for
    try:
        df = spark.read.format("statestore").load(str(checkpoint_dir))
        rows = df.selectExpr("key.key AS key", "value.groupState.core AS core",
                             "value.groupState.topics AS topics").collect()
    except PySparkException as exc:
        if _no_state_yet(exc):
            return []
        raise
    return [(r["key"], r["core"], r["topics"]) for r in rows if r["key"] is not None]


def _no_state_yet(exc: Exception) -> bool:
    """Spark's state reader refused a checkpoint because no batch has committed (or it does not
    exist yet)."""
    text = str(exc)
    return any(m in text for m in ("STDS_OFFSET_LOG_UNAVAILABLE", "STDS_COMMITTED_BATCH_UNAVAILABLE",
                                   "STDS_NO_PARTITION_DISCOVERED_IN_STATE_STORE", "PATH_NOT_FOUND",
                                   "STDS_OFFSET_METADATA_LOG_UNAVAILABLE"))


def _bucket_of(spark: Any, names: list[str], layout: bk.Layout) -> dict[str, str]:
    if not names:
        return {}
    from pyspark.sql.functions import col
    df = spark.createDataFrame([(n,) for n in names], "key string")
    out = df.select(col("key"), layout.key_column(col("key")).alias("bucket")).collect()
    return {r["key"]: r["bucket"] for r in out}
