"""Many broker groups per key of the stateful operator: a liveness signal costs no Python call per broker.

PySpark calls the function of `applyInPandasWithState` once per key and batch, and that call
costs about 4 ms of CPU however little it does (BENCHMARKS.md, the fleet part): keyed by broker
group, a fleet of 1,000 re-registering brokers cost 1,000 calls every 30 s. Keyed by bucket
(`Layout`: a hash of the brokerName), a batch costs at most `buckets` calls, whatever
the fleet. Inside a call each group still runs alone, through the same rules and with only its
own records, so no rule changed: a bucket is a container, not a new unit of state.

The state is split by temperature. A bucket's live entries are one columnar table
(`liveness/hot.py`): a batch's pure liveness signals move their times in one pass, and the
groups they belong to are not decoded. The rest of a group (its route core without its live
entries, and its topic table) is a line each (`<group as JSON>\\t<deadline>\\t<flags>\\t<core
JSON>` after the table's own first line, and `<group as JSON>\\t<topic table>`), split out of the
bucket's state and decoded only when the group's route rules run: for its route events, or its
due expiry. KV namespaces and the runtime switches keep their own keys (`kv/<namespace>`,
`config/namesrv`): rare, and their state is not a group's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from liveness import hot
from pipelines import step_rows as out_rows
from routeinfo import housekeeping
from routeinfo.state import LiveInfo, live_entry, live_of_entry, live_row
from schemas import events as ev
from schemas import json_codec
from schemas import tables as t

BUCKET_PREFIX = "b"
IMPORT_PARTITION = -1  # the `partition` of a record that carries a bucket's whole state (pipelines/state_layout.py)
# The first line of a bucket's core column in this layout: its live table. A state without it is
# of the layout before (each group's core held its live entries), read once and rewritten.
LIVE_LINE = "~live\t"
GROUPS_LINE = "~groups\t"  # the second: the groups' names, deadlines and flags
_PENDING = "p"  # the flag of a group with a chunked registration being assembled: its signals run the rules
NO_DEADLINE = np.iinfo(np.int64).max

State = tuple[str, "str | None"]


def spark_partition(key: str, partitions: int) -> int:
    """The task of the stateful stage Spark hands the operator key `key` to: its hash
    partitioning, `pmod(Murmur3_x86_32(UTF-8 bytes, seed 42), partitions)`, as Spark hashes a
    string column (`Murmur3_x86_32.hashUnsafeBytes`: whole 4-byte words little-endian, then each
    byte left over alone, sign-extended). Pure, so a layout's keys are a function of its
    numbers; tests/pipeline/test_state_layout_keys.py checks it against Spark's own `hash`."""
    data = key.encode("utf-8")
    mask = 0xFFFFFFFF

    def mix(h1: int, k1: int) -> int:
        k1 = (k1 * 0xCC9E2D51) & mask
        k1 = ((k1 << 15) | (k1 >> 17)) & mask
        k1 = (k1 * 0x1B873593) & mask
        h1 ^= k1
        h1 = ((h1 << 13) | (h1 >> 19)) & mask
        return (h1 * 5 + 0xE6546B64) & mask

    h1, aligned = 42, len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = mix(h1, int.from_bytes(data[i:i + 4], "little"))
    for byte in data[aligned:]:
        h1 = mix(h1, (byte - 256 if byte > 127 else byte) & mask)
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & mask
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & mask
    h1 ^= h1 >> 16
    signed = h1 - (1 << 32) if h1 & 0x80000000 else h1
    return signed % partitions  # Python's % of a positive divisor is Spark's pmod


@dataclass(frozen=True)
class Layout:
    """Which keys of the stateful operator broker groups share: `buckets` of them, a group's
    being a hash of its brokerName, named so that Spark's hash partitioning hands each of the
    stage's `partitions` tasks as many (`spark_partition`). A batch's groups then weigh alike on
    every task, and a registration wave's stage lasts as long as its share, not its largest
    task's. `partitions` None: the names of checkpoints recorded before it (`b<buckets>/<n>`,
    which fall where their hash puts them: 32 over 2 tasks fell 19 and 13, and a 1,000-broker
    wave's larger task ran 0.88 s against the smaller's 0.61, Spark's event log, 2026-11-28).
    The partition count only balances: keys of any count are correct under any other."""

    buckets: int
    partitions: int | None = None

    def __post_init__(self) -> None:
        if self.buckets < 1 or (self.partitions is not None and self.partitions < 1):
            raise ValueError(f"a layout needs at least one bucket and one partition, not {self}")

    @property
    def prefix(self) -> str:
        """What every key of this layout begins with, and no key of another layout does."""
        if self.partitions is None:
            return f"{BUCKET_PREFIX}{self.buckets}/"
        return f"{BUCKET_PREFIX}{self.buckets}.{self.partitions}/"

    @cached_property
    def keys(self) -> tuple[str, ...]:
        """The key of each bucket, by bucket number. Balanced: bucket n's key is the prefix and
        the smallest number not taken yet whose key Spark hands to task n mod partitions."""
        if self.partitions is None:
            return tuple(f"{self.prefix}{n}" for n in range(self.buckets))
        keys: list[str] = []
        taken: set[int] = set()
        for n in range(self.buckets):
            m = 0
            while m in taken or spark_partition(f"{self.prefix}{m}", self.partitions) != n % self.partitions:
                m += 1
            taken.add(m)
            keys.append(f"{self.prefix}{m}")
        return tuple(keys)

    @property
    def tag(self) -> int | str:
        """The layout in a batch's offsets (`state_layout.LAYOUT`) and the source's option: the bucket
        count alone for the names before balancing, as batches planned before it recorded it."""
        return self.buckets if self.partitions is None else f"{self.buckets}.{self.partitions}"

    @staticmethod
    def of_tag(tag: int | str) -> Layout:
        buckets, _, partitions = str(tag).partition(".")
        return Layout(int(buckets), int(partitions) if partitions else None)

    def describe(self) -> str:
        if self.partitions is None:
            return f"{self.buckets} buckets"
        return f"{self.buckets} buckets balanced over {self.partitions} tasks"

    def key_column(self, key: Any) -> Any:
        """The operator's key for a record whose Kafka key is the column `key`: its bucket's key for
        a broker group, the key itself otherwise (null stays null: dead-lettered as before). Spark's
        xxhash64 is seeded and stable across versions and hosts, so a restarted job finds its
        buckets."""
        from pyspark.sql.functions import array, element_at, lit, pmod, when, xxhash64
        broker = key.isNotNull() & ~key.startswith(ev.KV_KEY_PREFIX) & (key != lit(ev.CONFIG_KEY))
        bucket = pmod(xxhash64(key), lit(self.buckets)).cast("int") + lit(1)
        return when(broker, element_at(array(*(lit(k) for k in self.keys)), bucket)).otherwise(key)


@dataclass
class Entry:
    """A group whole, as the route rules store it (`GroupState.to_parts`: its core lists its live
    entries): what a layout import and the tests hand over and read back."""

    core: str
    topics: str
    deadline: int | None


class GroupRules(Protocol):
    """The route rules of one batch, as a bucket's call needs them (`pipelines.step.GroupRunner`)."""

    flush_ms: int
    heard_since: int | None
    verdicts: str  # what the live table's fixed-point verdicts are made under (`hot.LiveTable.under`)

    def run(self, group: str, records: list[dict[str, Any]], state: State | None
            ) -> tuple[State | None, int | None, list[dict[str, Any]]]:
        """The group's route rules on its records: (new whole state, next deadline, output rows)."""

    def signals(self, records: list[dict[str, Any]]) -> list[hot.Signal] | None:
        """The records as liveness signals in log order, or None if one is anything else."""

    def expiry_ms(self, records: list[dict[str, Any]]) -> int:
        """The time the group of these records is expired at."""

    def registrations(self, group: str) -> dict[tuple[str, str], tuple[int, str, dict[str, Any]]]:
        """Per address, the newest registration the group's last `run` applied: (its offset as the
        live entry records it, its `hot.header_digest`, its small repeat)."""

    def repeats_nothing(self, state: State, repeat: dict[str, Any]) -> bool:
        """Whether applying the small repeat to the whole state would change nothing but times."""


class Bucket:
    """A bucket's state, split by temperature: its live table, its groups' deadlines and flags
    (one line, numpy), and their cores and topic tables (a line each, in the order of the names),
    which stay one unsplit string each until a group's rules need its own."""

    def __init__(self, names: list[str], deadlines: np.ndarray, pending: list[bool], cores: str, topics: str,
                 live: hot.LiveTable) -> None:
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.deadlines = deadlines  # int64, NO_DEADLINE: none
        self.pending = pending
        self._cores_text: str | None = cores
        self._topics_text: str | None = topics
        self._cores: list[str] = []
        self._topics: list[str] = []
        self.live = live
        self._removed = False
        self._names_text: str | None = None  # the names as stored, while no group came or went

    @staticmethod
    def decode(state: State | None, verdicts: str = "") -> Bucket:
        """`verdicts`: the job's key for the live table's fixed-point verdicts (`hot.LiveTable.under`)."""
        if state is None:
            return Bucket([], np.zeros(0, dtype=np.int64), [], "", "", hot.LiveTable.empty(verdicts))
        core, topics = state[0], state[1] or ""
        if not core.startswith(LIVE_LINE):
            bucket = Bucket.of_groups(_old_groups(core, topics))
            bucket.live = bucket.live.under(verdicts)
            return bucket
        live, _, rest = core.partition("\n")
        groups, _, cores = rest.partition("\n")
        if not groups.startswith(GROUPS_LINE):
            raise ValueError("a bucket's state without its groups line")
        deadlines, flags, names = groups[len(GROUPS_LINE):].split("\t", 2)
        bucket = Bucket(json.loads(names), np.frombuffer(base64.b64decode(deadlines), dtype="<i8").astype(np.int64),
                        [f == _PENDING for f in flags], cores, topics,
                        hot.LiveTable.decode(live[len(LIVE_LINE):]).under(verdicts))
        bucket._names_text = names
        return bucket

    def encode(self) -> tuple[str, str] | None:
        if self._removed:
            self._split()
            kept = [i for i, n in enumerate(self.names) if n is not None]
            self.names = [self.names[i] for i in kept]
            self.deadlines = self.deadlines[kept]
            self.pending = [self.pending[i] for i in kept]
            self._cores = [self._cores[i] for i in kept]
            self._topics = [self._topics[i] for i in kept]
            self.index = {n: i for i, n in enumerate(self.names)}
            self._removed = False
        if not self.names:
            return None
        cores = self._cores_text if self._cores_text is not None else "\n".join(self._cores)
        topics = self._topics_text if self._topics_text is not None else "\n".join(self._topics)
        flags = "".join(_PENDING if p else "-" for p in self.pending)
        deadlines = base64.b64encode(np.ascontiguousarray(self.deadlines, dtype="<i8").tobytes()).decode("ascii")
        names = self._names_text if self._names_text is not None else json.dumps(self.names, separators=(",", ":"))
        return f"{LIVE_LINE}{self.live.encode()}\n{GROUPS_LINE}{deadlines}\t{flags}\t{names}\n{cores}", topics

    def _split(self) -> None:
        if self._cores_text is not None:
            self._cores = self._cores_text.split("\n") if self.names else []
            self._topics = self._topics_text.split("\n") if self.names and self._topics_text is not None else []
            self._cores_text = self._topics_text = None

    @staticmethod
    def of_groups(entries: Mapping[str, Entry]) -> Bucket:
        bucket = Bucket.decode(None)
        replaced: dict[str, list[hot.Row]] = {}
        for group, entry in sorted(entries.items()):
            core, pending, live = _split_core(entry.core)
            bucket.put(group, entry.deadline, pending, core, entry.topics)
            replaced[group] = _rows(live, {}, {}, unchanged=False)
        bucket.live = bucket.live.with_groups(replaced)
        return bucket

    def due(self, now_ms: int) -> list[str]:
        return [self.names[i] for i in np.flatnonzero(self.deadlines <= now_ms) if self.names[i] is not None]

    def next_deadline(self) -> int | None:
        live = [d for i, d in enumerate(self.deadlines.tolist()) if self.names[i] is not None and d != NO_DEADLINE]
        return min(live, default=None)

    def set_deadline(self, group: str, deadline: int | None) -> None:
        self.deadlines[self.index[group]] = NO_DEADLINE if deadline is None else deadline

    def stored(self, group: str) -> tuple[str, str] | None:
        """(core without live entries, topic table) of a group, or None if the bucket has none."""
        i = self.index.get(group)
        if i is None:
            return None
        self._split()
        return self._cores[i], self._topics[i]

    def put(self, group: str, deadline: int | None, pending: bool, core: str, topics: str) -> None:
        self._split()
        i = self.index.get(group)
        value = NO_DEADLINE if deadline is None else deadline
        if i is None:
            self._names_text = None
            self.index[group] = len(self.names)
            self.names.append(group)
            self.deadlines = np.append(self.deadlines, np.int64(value))
            self.pending.append(pending)
            self._cores.append(core)
            self._topics.append(topics)
        else:
            self.deadlines[i], self.pending[i], self._cores[i], self._topics[i] = value, pending, core, topics

    def remove(self, group: str) -> None:
        i = self.index.pop(group, None)
        if i is not None:
            self.names[i] = None  # type: ignore[call-overload]  # compacted by encode
            self._names_text = None
            self.deadlines[i] = NO_DEADLINE
            self._removed = True

    def whole(self, group: str) -> Entry | None:
        """The group as its route rules store it: its core with its live entries."""
        stored = self.stored(group)
        if stored is None:
            return None
        raw = json.loads(stored[0])
        raw["live"] = [live_entry(r.cluster, r.addr, _info(r)) for r in self.live.rows(group)]
        deadline = int(self.deadlines[self.index[group]])
        return Entry(_dump(raw), stored[1], None if deadline == NO_DEADLINE else deadline)


def _dump(raw: dict[str, Any]) -> str:
    return json_codec.dumps_sorted(raw)  # as GroupState.to_parts


def _split_core(core: str) -> tuple[str, bool, list[tuple[tuple[str, str], LiveInfo]]]:
    """A group's whole core → (its core without live entries, whether a chunked registration is
    being assembled, its live entries)."""
    raw = json.loads(core)
    live = [live_of_entry(entry) for entry in raw["live"]]
    raw["live"] = []
    return _dump(raw), bool(raw.get("pending")), live


def _rows(live: list[tuple[tuple[str, str], LiveInfo]], registered: Mapping[tuple[str, str], tuple[int, str, bool]],
          before: Mapping[tuple[str, str], hot.Row], *, unchanged: bool) -> list[hot.Row]:
    """A group's live entries as the live table keeps them. `registered`: per address whose
    registration the rules' call applied, (its offset, digest, whether it is a fixed point);
    `before`: the rows the call started from, whose digest and fixed point stand while the call
    changed nothing but times (`unchanged`) and the address registered nothing newer."""
    rows = []
    for (cluster, addr), li in live:
        mine = registered.get((cluster, addr))
        old = before.get((cluster, addr))
        if mine is not None and mine[0] == li.registered_offset:
            digest, fixed = mine[1], mine[2]
        elif old is not None and old.registered == li.registered_offset:
            digest, fixed = old.digest, old.fixed and unchanged
        else:
            digest, fixed = "", False
        rows.append(hot.Row(cluster, addr, hot.statics(li.broker_id, li.data_version, li.ha_server_addr), digest,
                            li.last_update, li.materialized_update, li.stale_since, li.timeout_ms,
                            li.registered_offset, fixed))
    return rows


def _info(row: hot.Row) -> LiveInfo:
    broker_id, data_version, ha = json.loads(row.statics)
    return LiveInfo(broker_id, row.last, row.timeout, data_version, ha, row.materialized, row.stale_since,
                    row.registered)


def _old_groups(core: str, topics: str | None) -> dict[str, Entry]:
    """The groups of a bucket state of the layout before this one (`<group>\\t<deadline>\\t<core>`)."""
    entries: dict[str, Entry] = {}
    for line in core.split("\n") if core else ():
        name, deadline, group_core = line.split("\t", 2)
        entries[json.loads(name)] = Entry(group_core, "{}", int(deadline) if deadline else None)
    for line in topics.split("\n") if topics else ():
        name, table = line.split("\t", 1)
        entries[json.loads(name)].topics = table
    return entries


def groups(state: State | None) -> dict[str, Entry]:
    """Every group of a bucket's state, whole (layout imports, tests)."""
    bucket = Bucket.decode(state)
    return {g: e for g in bucket.names if g is not None and (e := bucket.whole(g)) is not None}


def encode_groups(entries: Mapping[str, Entry]) -> tuple[str, str] | None:
    """A bucket's state holding these groups, whole (layout imports, tests)."""
    return Bucket.of_groups(entries).encode()


def run_bucket(records: list[dict[str, Any]], state: State | None, now_ms: int,
               rules: GroupRules) -> tuple[tuple[str, str] | None, int | None, list[dict[str, Any]]]:
    """One call of a bucket key: every group with records, and every group whose deadline is due
    (what Spark's per-group timeout would have called), runs alone; the others are not decoded.
    A group whose records are all pure liveness signals (and whose due deadline, if any, expires
    nothing) is absorbed by the live table in one pass for the whole bucket; any other runs its
    route rules (`rules.run`) on its whole state. A record from `IMPORT_PARTITION` replaces the
    bucket's state first (a checkpoint moved from another layout). Returns (new state, the
    bucket's next deadline = its groups' earliest, output rows, in the order of the groups)."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["partition"] == IMPORT_PARTITION:
            core, topics = json.loads(r["value"])
            state = (core, topics)
        else:
            by_group.setdefault(r["key"], []).append(r)
    bucket = Bucket.decode(state, rules.verdicts)
    due = set(bucket.due(now_ms))
    calls: dict[str, hot.Call] = {}
    for group in by_group.keys() | due:
        i = bucket.index.get(group)
        if i is None or bucket.pending[i]:
            continue
        mine = by_group.get(group, [])
        signals = rules.signals(mine) if mine else []
        if signals is not None:
            calls[group] = hot.Call(signals, rules.expiry_ms(mine))
    absorbed = bucket.live.absorb(calls, now_ms, rules.flush_ms, rules.heard_since)
    out: dict[str, list[dict[str, Any]]] = {}
    replaced: dict[str, list[hot.Row]] = {}
    for group in sorted(by_group.keys() | due):
        outcome = absorbed.get(group)
        if outcome is not None:
            out[group] = _absorbed_rows(bucket, group, outcome, calls[group].expiry_ms, now_ms)
            continue
        mine = by_group.get(group, [])
        before = bucket.whole(group)
        stored = bucket.stored(group)
        new, deadline, out[group] = rules.run(group, mine, None if before is None else (before.core, before.topics))
        old_rows = bucket.live.rows(group)
        if new is None:
            bucket.remove(group)
            replaced[group] = []
            continue
        topics = new[1] or "{}"
        core, pending, live = _split_core(new[0])
        registered = {address: (offset, digest, rules.repeats_nothing((new[0], topics), repeat))
                      for address, (offset, digest, repeat) in rules.registrations(group).items()}
        unchanged = stored == (core, topics) and [
            (r.cluster, r.addr, r.statics, r.timeout, r.registered) for r in old_rows] == [
            (c, a, hot.statics(li.broker_id, li.data_version, li.ha_server_addr), li.timeout_ms, li.registered_offset)
            for (c, a), li in sorted(live, key=lambda e: e[0])]
        bucket.put(group, deadline, pending, core, topics)
        replaced[group] = _rows(live, registered, {(r.cluster, r.addr): r for r in old_rows}, unchanged=unchanged)
    bucket.live = bucket.live.with_groups(replaced)
    return bucket.encode(), bucket.next_deadline(), [row for g in sorted(out) for row in out[g]]


def _absorbed_rows(bucket: Bucket, group: str, outcome: hot.Outcome, expiry_ms: int,
                   now_ms: int) -> list[dict[str, Any]]:
    """What a group's call emits when the live table absorbed it: its broker_live rows if they were
    flushed, and its next deadline (also kept with the group), as the rules' call would."""
    rows = []
    if outcome.flushed is not None:
        rows.append(out_rows.table_row(group, t.BROKER_LIVE.name,
                                       [live_row(group, r.cluster, r.addr, _info(r)) for r in outcome.flushed]))
    deadline = housekeeping.look_again(outcome.deadline, expiry_ms, now_ms)
    bucket.set_deadline(group, deadline)
    rows.append(out_rows.row(group, out_rows.DEADLINE, "" if deadline is None else str(deadline)))
    return rows
