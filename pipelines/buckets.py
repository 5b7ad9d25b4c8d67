"""Many broker groups per key of the stateful operator: a liveness signal costs no Python call per broker.

PySpark calls the function of `applyInPandasWithState` once per key and batch, and that call
costs about 4 ms of CPU however little it does (BENCHMARKS.md, the fleet part): keyed by broker
group, a fleet of 1,000 re-registering brokers cost 1,000 calls every 30 s. Keyed by bucket
(`b<buckets>/<n>`, a hash of the brokerName), a batch costs at most `buckets` calls, whatever
the fleet. Inside a call each group still runs alone, through the same `run_group` and with
only its own records, so no rule changed: a bucket is a container, not a new unit of state.

A bucket's state keeps, per group, its core, its topic table and its next deadline as lines
(`<group as JSON>\\t<deadline>\\t<core JSON>` and `<group as JSON>\\t<topic table JSON>`): a
call splits them and decodes only the groups it runs; a group's topic table is decoded only if
a rule touches it (`GroupState.topics`). KV namespaces and the runtime switches keep their own
keys (`kv/<namespace>`, `config/namesrv`): rare, and their state is not a group's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas import events as ev

BUCKET_PREFIX = "b"
IMPORT_PARTITION = -1  # the `partition` of a record that carries a bucket's whole state (pipelines/state_layout.py)


def bucket_prefix(buckets: int) -> str:
    """The prefix of every bucket key under this bucket count: a checkpoint made under another
    count has keys no call of this job takes for one of its buckets."""
    return f"{BUCKET_PREFIX}{buckets}/"


def bucket_key_column(key: Any, buckets: int) -> Any:
    """The operator's key for a record whose Kafka key is the column `key`: its bucket for a
    broker group, the key itself otherwise (null stays null: dead-lettered as before). Spark's
    xxhash64 is seeded and stable across versions and hosts, so a restarted job finds its buckets."""
    from pyspark.sql.functions import concat, lit, pmod, when, xxhash64
    broker = key.isNotNull() & ~key.startswith(ev.KV_KEY_PREFIX) & (key != lit(ev.CONFIG_KEY))
    return when(broker, concat(lit(bucket_prefix(buckets)), pmod(xxhash64(key), lit(buckets)).cast("string"))
                ).otherwise(key)


@dataclass
class Entry:
    core: str
    topics: str
    deadline: int | None


def decode(state: tuple[str, str | None] | None) -> dict[str, Entry]:
    if state is None:
        return {}
    entries: dict[str, Entry] = {}
    for line in state[0].split("\n") if state[0] else ():
        name, deadline, core = line.split("\t", 2)
        entries[json.loads(name)] = Entry(core, "{}", int(deadline) if deadline else None)
    for line in state[1].split("\n") if state[1] else ():
        name, topics = line.split("\t", 1)
        entries[json.loads(name)].topics = topics
    return entries


def encode(entries: dict[str, Entry]) -> tuple[str, str] | None:
    if not entries:
        return None
    names = {g: json.dumps(g) for g in sorted(entries)}
    core = "\n".join(f"{n}\t{'' if entries[g].deadline is None else entries[g].deadline}\t{entries[g].core}"
                     for g, n in names.items())
    topics = "\n".join(f"{n}\t{entries[g].topics}" for g, n in names.items() if entries[g].topics != "{}")
    return core, topics


GroupRun = Callable[[str, list[dict[str, Any]], "tuple[str, str | None] | None"],
                    "tuple[tuple[str, str | None] | None, int | None, list[dict[str, Any]]]"]


def run_bucket(records: list[dict[str, Any]], state: tuple[str, str | None] | None, now_ms: int,
               run_group: GroupRun) -> tuple[tuple[str, str] | None, int | None, list[dict[str, Any]]]:
    """One call of a bucket key: every group with records, and every group whose deadline is due
    (what Spark's per-group timeout would have called), runs alone through `run_group(group,
    its records, its state)`; the others are not decoded. A record from `IMPORT_PARTITION`
    replaces the bucket's state first (a checkpoint moved from another layout). Returns (new
    state, the bucket's next deadline = its groups' earliest, output rows)."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["partition"] == IMPORT_PARTITION:
            core, topics = json.loads(r["value"])
            state = (core, topics)
        else:
            by_group.setdefault(r["key"], []).append(r)
    entries = decode(state)
    due = {g for g, e in entries.items() if e.deadline is not None and e.deadline <= now_ms}
    out: list[dict[str, Any]] = []
    for group in sorted(by_group.keys() | due):
        entry = entries.get(group)
        new, deadline, rows = run_group(group, by_group.get(group, []),
                                        None if entry is None else (entry.core, entry.topics))
        out.extend(rows)
        if new is None:
            entries.pop(group, None)
        else:
            entries[group] = Entry(new[0], new[1] or "{}", deadline)
    deadlines = [e.deadline for e in entries.values() if e.deadline is not None]
    return encode(entries), min(deadlines, default=None), out
