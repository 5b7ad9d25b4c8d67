"""The risks in a topology, from the cuts and their change log (issue 39, item 2): pure, no I/O.

A NameServer answers where a topic's queues are; nothing tells an operator that a topic's every
writable queue sits on one broker group, or that a master has no slave, until the day it fails.
This module reads those facts off the cuts this project keeps, so that an HTTP answer, a dashboard
page and a gauge per kind can show them before they bite. It decides nothing about serving: its
callers hand it cuts (`Snapshot`s) and the change-log rows each cut committed, as plain mappings.

Kinds (`KINDS`; the name is the stable part of every risk id)
-------------------------------------------------------------
`single-group-topic` (warning)
    A topic whose writable queues are all on exactly one broker group. A queue is writable as a
    RocketMQ client's `topicRouteData2TopicPublishInfo` finds it: its QueueData has PermName's
    PERM_WRITE bit and `writeQueueNums > 0`, and its group has a BrokerData with a master (id 0).
    Why: when that group's master fails, producers of the topic have nowhere to send. A topic with
    no writable queue at all is not this kind (a read-only topic, or one whose groups were wiped:
    `write-perm-wiped` says that), nor is a group's own topic, named after it and on it alone: every
    RocketMQ broker registers one (TopicConfigManager's broker topic, `brokerTopicEnable`), on
    one group by design, so a fleet would otherwise show a risk per group. Id
    `single-group-topic:<topic>`.
`single-zone-topic` (info)
    A topic with writable queues on two or more groups, every one of which names the same zone
    (BrokerData's `zoneName`, compared case-insensitively as the zone filter compares, §6.4). Why:
    a zone outage stops the topic's writes however many groups it has. A group without a zone is
    in no known zone, so a topic with one is not reported; a topic on one group is reported as
    `single-group-topic` only (the narrower risk). Id `single-zone-topic:<topic>`.
`no-live-slave` (warning)
    A broker group with a master (id 0 in its BrokerData) and no slave (an id other than 0) that is
    live, i.e. whose (cluster, address) has a `broker_live` row in the cut: a group of a master
    alone, or whose slaves all expired. Why: no replica to read from or take over when the master
    fails, and messages not yet replicated are lost with its disk. A group without a master is
    not this kind (it is down, not at risk). Id `no-live-slave:<brokerName>`.
`write-perm-wiped` (critical)
    A broker group with a BrokerData and queue rows none of which has PERM_WRITE: what RocketMQ's
    `wipeWritePermOfBroker` leaves (§7.1, `perm &= ~PERM_WRITE` on every QueueData of the group),
    and what a prime slave of an acting-master group registers (§3.2.10). A broker registers its
    own system topics writable, so a group with none writable was wiped (or lost its master).
    Why: producers skip the group now, until an addWritePerm or a registration with a changed
    DataVersion puts the bits back. Id `write-perm-wiped:<brokerName>`.
`flapping-broker` (warning)
    A broker (cluster, address) expired more than `Settings.flap_threshold` times (default 3)
    within the `Settings.window_ms` (one day) ending at the cut's commit time: change-log rows of
    kind BROKER_EXPIRED (route_writes / housekeeping write one each time a registration of the
    address ends by silence; each expiry closes one registration), counted when their `time` is in
    (commit time - window, commit time] and, when they carry one, their `snapshotId` is at most
    the cut's. Why: a broker that keeps dropping out and coming back makes every client's route
    flap and fail over (RocketMQ removes it only 120 s after its last heartbeat). Id
    `flapping-broker:<cluster>/<address>`.
`data-version-backwards` (warning)
    A live broker (cluster, brokerName, address) whose DataVersion in `broker_live` compared less
    than the one it showed in the latest earlier cut where it was live, at a cut within the window
    before this one. Less is RocketMQ's `DataVersion.compare` (§9.3): by `stateVersion`, then
    `counter`, then `timestamp`. Why: a broker persists its topic config with its DataVersion and
    only moves it forward, so a version going back is a broker that lost or rolled back its
    config store (a replaced disk, an old backup) or a stale master of an older controller epoch:
    its routes may miss topics the fleet had. Id `data-version-backwards:<cluster>/<brokerName>/<address>`.

Since
-----
Every risk has `since`: the time (ms) of the earliest cut from which it held at every cut up to the
one asked about; a cut without it ends the run, and it starts again at the next cut that shows it.
A cut's time is its `commitTime`. `RiskTracker` folds cuts in commit order and keeps what that
needs (a serving process folds the retained history at its start and then each cut it serves,
so `GET /risks` for the newest cut is the tracker's last report; `GET /risks?asOf=` folds a fresh
tracker over the past cuts up to that instant; which past cuts are read: `snapshots.risk_history`).
`RiskReport.origin_ms` is the first cut folded: a risk whose since it is may have begun earlier.
`report_from_scratch` recomputes a cut's report from the cuts up to it with no carried state: the
reference the tracker is tested against.

API
---
`current_risks(snap)`: the kinds one cut shows by itself, `since` unset (a list: small cuts, tests).
`RiskTracker(settings).fold(Cut(snap, changes))` -> `RiskReport`: every kind with its since; the
tracker keeps `report`, the last cut's. `report_as_of(cuts)`: a fresh tracker folded over past
cuts. `RiskReport.counts()`: risks per kind, every kind named (the gauges); `RiskReport.risks(kind=,
offset=, limit=)`: a page of risks; `Risk.to_json()`: one risk as an answer carries it.
`counts_by_kind(risks)`: the same counts over any risks. `KINDS`: each kind's name, severity and
one-line description (for the docs and the alerting thresholds).

Cost
----
A cut's topology kinds are computed from its topic index, not from a Python object per queue row:
over a TopicIndex (a cut loaded from Delta), numpy over its sorted columns; over a mapped cut file
(`snapshots.mapped.FileTopics`, a serving process's newest cut), once per distinct route body and
then numpy over the file's `body_of` section. A report holds topic risks as name lists and
materializes `Risk` values only for what is asked (`RiskReport.risks(offset=, limit=)`), so
counts per kind cost nothing more; a tracker folding a cut whose topic index and BrokerDatas are the
previous cut's, or a mapped file whose topology digests are the previous file's (a cut that moved
only heartbeats), reuses the previous cut's topic facts: such a cut costs the group kinds alone.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from routeinfo.snapshot import Snapshot
from routeinfo.topic_index import QueueColumns, TopicIndex
from schemas import json_codec
from schemas.fields import MASTER_ID, PERM_WRITE

DAY_MS = 86_400_000

CRITICAL, WARNING, INFO = "critical", "warning", "info"


@dataclass(frozen=True)
class RiskKind:
    name: str          # stable: the first part of every risk id of the kind, and the gauge's label
    severity: str      # CRITICAL, WARNING or INFO
    description: str   # one line, for the docs


SINGLE_GROUP_TOPIC = RiskKind("single-group-topic", WARNING,
                              "every writable queue of the topic is on one broker group")
SINGLE_ZONE_TOPIC = RiskKind("single-zone-topic", INFO,
                             "the topic's writable queues are on two or more groups, all in one zone")
NO_LIVE_SLAVE = RiskKind("no-live-slave", WARNING, "a broker group's master has no live slave")
WRITE_PERM_WIPED = RiskKind("write-perm-wiped", CRITICAL, "no queue of the broker group has write permission")
FLAPPING_BROKER = RiskKind("flapping-broker", WARNING,
                           "the broker expired more than the threshold's number of times in the window")
DATA_VERSION_BACKWARDS = RiskKind("data-version-backwards", WARNING,
                                  "the broker's DataVersion went backwards within the window")

KINDS: tuple[RiskKind, ...] = (WRITE_PERM_WIPED, SINGLE_GROUP_TOPIC, NO_LIVE_SLAVE, FLAPPING_BROKER,
                               DATA_VERSION_BACKWARDS, SINGLE_ZONE_TOPIC)
KIND_BY_NAME: dict[str, RiskKind] = {k.name: k for k in KINDS}
_TOPIC_KINDS = (SINGLE_GROUP_TOPIC.name, SINGLE_ZONE_TOPIC.name)


@dataclass(frozen=True)
class Settings:
    flap_threshold: int = 3   # flapping: more expiries than this in the window
    window_ms: int = DAY_MS   # flapping and data-version-backwards look this far back from a cut


@dataclass(frozen=True, slots=True)
class Risk:
    id: str                     # "<kind>:<subject>", the same in every cut the risk holds in
    kind: str
    severity: str
    message: str
    since: int | None           # ms: the first cut of the uninterrupted run up to this report's cut
    topic: str | None = None
    cluster: str | None = None
    broker_name: str | None = None
    address: str | None = None

    def to_json(self) -> dict[str, Any]:
        """RocketMQ-style field names; subject fields a kind has no use for are left out."""
        body: dict[str, Any] = {"id": self.id, "kind": self.kind, "severity": self.severity,
                                "message": self.message, "since": self.since}
        for key, value in (("topic", self.topic), ("cluster", self.cluster), ("brokerName", self.broker_name),
                           ("address", self.address)):
            if value is not None:
                body[key] = value
        return body


@dataclass(frozen=True)
class Cut:
    """One cut as the risks read it: the Snapshot, the change-log rows it committed (route_changes
    rows as mappings: kind, time, clusterName, brokerName, brokerAddr, snapshotId), and its time
    (default: the snapshot's commitTime)."""

    snapshot: Snapshot
    changes: Sequence[Mapping[str, Any]] = ()
    time_ms: int | None = None

    @property
    def at(self) -> int:
        at = self.snapshot.commit_time if self.time_ms is None else self.time_ms
        if at is None:
            raise ValueError("a cut without a commit time needs time_ms")
        return at


# ---------------------------------------------------------------- one cut's topology


@dataclass(frozen=True)
class _TopicFacts:
    """The topics showing one topic kind, kept columnar: a million of them cost no Python object
    each until a page of them is asked for."""

    names: pa.Array                    # large_string, in name order
    where: npt.NDArray[np.int64]       # per name: its group's or zone's number in `labels`
    labels: Sequence[str]

    def __len__(self) -> int:
        return len(self.names)

    def page(self, start: int, stop: int) -> list[tuple[str, str]]:
        names = self.names.slice(start, max(0, stop - start)).to_numpy(zero_copy_only=False).tolist()
        return [(n, self.labels[w]) for n, w in zip(names, self.where[start:stop].tolist(), strict=True)]


def _facts(names: pa.Array, where: npt.NDArray[np.int64], labels: Sequence[str]) -> _TopicFacts:
    return _TopicFacts(names.cast(pa.large_string()), where.astype(np.int64), labels)


# pa.nulls, not pa.array([]): a list's conversion imports pandas (conf/imports.py), at this module's import
_NO_FACTS = _TopicFacts(pa.nulls(0, pa.large_string()), np.zeros(0, dtype=np.int64), ())


# What the topic kinds read of a topic_queue row (`TopicColumns`).
RISK_QUEUE_COLUMNS = ("topic", "brokerName", "perm", "writeQueueNums")


class TopicColumns(TopicIndex):
    """A cut's topic_queue as the topic kinds read it, and nothing more: each row's topic, group,
    perm and writeQueueNums (`RISK_QUEUE_COLUMNS`) as columns sorted by topic
    (`TopicIndex.columns`, what `_arrow_topology` reads), made by `read` (an Arrow table of those
    columns, in any order) when first asked and dropped by `release`.

    What the history fold (`snapshots.risk_history`) hands a tracker in place of a cut's whole
    TopicIndex: `key` names the rows (their table version), and a tracker keeps the facts it
    computed while the next cut's key and BrokerDatas are the same (`_topology_of`), so the fold
    holds the columns only while a tracker computes from them (a 10,000 × 100 cut: about 40 MB,
    where a whole TopicIndex and the reader's files of it held three times that) and reads them
    again in the rare cut whose BrokerDatas moved under the same rows. It has no QueueDatas: the
    Mapping reads raise TypeError."""

    def __init__(self, key: Hashable, read: Callable[[], pa.Table]) -> None:
        # TopicIndex's constructor is not run: none of its columns exist until asked for
        self.key = key
        self._read = read
        self._columns: QueueColumns | None = None

    def columns(self) -> QueueColumns:
        if self._columns is None:
            self._columns = sorted_queue_columns(self._read())
        return self._columns

    def row_count(self) -> int:
        return len(self.columns().topic)

    @property
    def loaded(self) -> bool:
        """Whether the columns are held now (a test's and the fold's check that they went)."""
        return self._columns is not None

    def release(self) -> None:
        """Drop the columns (read again if a later fold needs them)."""
        self._columns = None

    def _no_queue_datas(self) -> NoReturn:
        raise TypeError("TopicColumns holds the risk rules' columns of topic_queue, not QueueDatas")

    def __getitem__(self, topic: str) -> list[dict[str, Any]]:
        self._no_queue_datas()

    def __contains__(self, topic: object) -> bool:
        self._no_queue_datas()

    def __iter__(self) -> Iterator[str]:
        self._no_queue_datas()

    def __len__(self) -> int:
        self._no_queue_datas()


def sorted_queue_columns(table: pa.Table) -> QueueColumns:
    """`RISK_QUEUE_COLUMNS` of `table` sorted by topic, as a TopicIndex keeps them: the topic as an
    Arrow string array, the group as codes into a list of names, perm and writeQueueNums as
    numpy arrays. Only the topic strings are copied in the sort; the rest moves as numbers."""
    if not table.num_rows:
        empty = np.zeros(0, dtype=np.int32)
        return QueueColumns(pa.array([], pa.string()), [], empty, {"perm": empty, "writeQueueNums": empty})
    order = pc.sort_indices(table, [("topic", "ascending")])
    at = order.to_numpy()
    topic = table.column("topic").take(order).combine_chunks()
    broker = pc.dictionary_encode(table.column("brokerName").combine_chunks())
    codes = broker.indices.to_numpy(zero_copy_only=False)[at]
    ints = {f: table.column(f).to_numpy()[at] for f in ("perm", "writeQueueNums")}
    return QueueColumns(topic, broker.dictionary.to_pylist(), codes, ints)


def _zone_spellings(snap: Snapshot) -> dict[str, str]:
    """Zone (lower case) -> how a report names it: as the first BrokerData in name order spells it."""
    out: dict[str, str] = {}
    for name in sorted(snap.brokers):
        z = snap.brokers[name].get("zoneName")
        if z is not None:
            out.setdefault(z.lower(), z)
    return out


def _group_tables(snap: Snapshot, names: Sequence[str]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], list[str]]:
    """Per group of `names`: whether it takes writes (a BrokerData with a master), its zone's
    number (-1: none), and the zones by number (`_zone_spellings`)."""
    writer = np.zeros(len(names), dtype=np.bool_)
    zone = np.full(len(names), -1, dtype=np.int64)
    spelling = _zone_spellings(snap)
    zones: list[str] = list(spelling.values())
    zone_no = {z: i for i, z in enumerate(spelling)}
    for i, name in enumerate(names):
        bd = snap.brokers.get(name)
        if bd is None:
            continue
        writer[i] = str(MASTER_ID) in bd["brokerAddrs"]
        z = bd.get("zoneName")
        if z is not None:
            zone[i] = zone_no[z.lower()]
    return writer, zone, zones


def _segments(codes: npt.NDArray[np.int64], write: npt.NDArray[np.bool_], starts: npt.NDArray[np.int64],
              zone_of: npt.NDArray[np.int64]) -> tuple[Any, Any, Any]:
    """Per segment (a topic's rows, from `starts`): whether single-group, whether single-zone,
    and the group's or the zone's number."""
    count = np.add.reduceat(write.astype(np.int32), starts)
    single_group = count == 1
    group = np.maximum.reduceat(np.where(write, codes, -1), starts)
    if not (zone_of >= 0).any():
        return single_group, np.zeros(len(starts), dtype=np.bool_), group
    zones = zone_of[codes]
    zmax = np.maximum.reduceat(np.where(write, zones, -1), starts)
    zmin = np.minimum.reduceat(np.where(write, zones, np.iinfo(np.int64).max), starts)
    single_zone = (count >= 2) & (zmin == zmax) & (zmin >= 0)
    return single_group, single_zone, np.where(single_group, group, zmax)


def _arrow_topology(snap: Snapshot, idx: TopicIndex) -> tuple[dict[str, _TopicFacts], dict[str, bool]]:
    """Topic facts and per-group 'has a writable queue' over a TopicIndex's sorted columns.

    Reads the index's own columns (`TopicIndex.columns`), read-only."""
    n = idx.row_count()
    cols = idx.columns()
    groups: list[str] = cols.brokers
    writer, zone_of, zones = _group_tables(snap, groups)
    if not n:
        return dict.fromkeys(_TOPIC_KINDS, _NO_FACTS), {}
    topic: pa.Array = cols.topic
    codes = np.asarray(cols.broker_codes, dtype=np.int64)
    perm = cols.ints["perm"]
    wq = cols.ints["writeQueueNums"]
    perm_w = (perm & PERM_WRITE) != 0
    write = perm_w & (wq > 0) & writer[codes]
    change = pc.not_equal(topic.slice(1), topic.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(change) + 1)).astype(np.int64)
    single_group, single_zone, where = _segments(codes, write, starts, zone_of)
    facts: dict[str, _TopicFacts] = {}
    for kind, mask, labels in ((SINGLE_GROUP_TOPIC.name, single_group, groups), (SINGLE_ZONE_TOPIC.name, single_zone, zones)):
        facts[kind] = _facts(topic.take(pa.array(starts[mask])), where[mask], labels)
    has_rows = np.bincount(codes, minlength=len(groups)) > 0
    any_write = np.bincount(codes, weights=perm_w, minlength=len(groups)) > 0
    return facts, {g: bool(w) for g, r, w in zip(groups, has_rows, any_write, strict=True) if r}


@runtime_checkable
class _BodyFile(Protocol):
    """What a mapped cut file (`snapshots.cutfile.CutFile`) offers that the risks read."""

    topic_count: int
    body_count: int

    def section(self, name: str) -> memoryview: ...

    def body(self, b: int) -> memoryview | None: ...

    def body_keys(self) -> list[bytes | None]: ...


_NO_BODY = 0xFFFFFFFF  # snapshots.cutfile.NO_BODY: a topic without a route


def _verdict(snap: Snapshot, queues: Iterable[Mapping[str, Any]]) -> tuple[str | None, str]:
    """One topic's topic kind (or None) and its group or zone, from its QueueDatas; a zone in lower
    case: what a report spells it is the whole cut's choice (`BodyFacts.label_in`)."""
    writers: list[str] = []
    for q in queues:
        if q["perm"] & PERM_WRITE and q["writeQueueNums"] > 0:
            bd = snap.brokers.get(q["brokerName"])
            if bd is not None and str(MASTER_ID) in bd["brokerAddrs"]:
                writers.append(q["brokerName"])
    if len(writers) == 1:
        return SINGLE_GROUP_TOPIC.name, writers[0]
    if len(writers) >= 2:
        zones = {z.lower() if z is not None else None for z in (snap.brokers[w].get("zoneName") for w in writers)}
        if len(zones) == 1 and None not in zones:
            return SINGLE_ZONE_TOPIC.name, str(zones.pop())
    return None, ""


@dataclass(frozen=True)
class BodyFacts:
    """What the risks read of one route body: its verdict with the zone in lower case, its groups
    and those of them with a writable queue in it."""

    kind: str | None
    label: str
    groups: frozenset[str]
    writable: frozenset[str]

    @staticmethod
    def of(snap: Snapshot, queues: Sequence[Mapping[str, Any]]) -> BodyFacts:
        kind, label = _verdict(snap, queues)
        names = [q["brokerName"] for q in queues]
        writable = [q["brokerName"] for q in queues if q["perm"] & PERM_WRITE]
        groups = frozenset(names)
        return BodyFacts(kind, label, groups, groups if len(writable) == len(names) else frozenset(writable))

    def label_in(self, spelling: Mapping[str, str]) -> str:
        """Its group, or its zone as the cut spells it (`_zone_spellings`)."""
        return spelling[self.label] if self.kind == SINGLE_ZONE_TOPIC.name else self.label


def _any_write(facts: Iterable[BodyFacts]) -> dict[str, bool]:
    """Per group of any of `facts`, whether any of its queues there is writable."""
    seen: set[str] = set()
    writable: set[str] = set()
    for f in facts:
        seen |= f.groups
        writable |= f.writable
    return {g: g in writable for g in seen}


def _file_topology(snap: Snapshot, cut: _BodyFile, orphans: Mapping[str, list[dict[str, Any]]],
                   known: dict[bytes, BodyFacts] | None = None) -> tuple[dict[str, _TopicFacts], dict[str, bool]]:
    """Over a mapped cut file: each distinct route body judged once (its `queueDatas` are the
    topic's whole), then numpy over `body_of` for the topics of each verdict. `known`: the facts
    of the bodies of the cut folded before, by kind key, replaced by this cut's: a body decoded
    once is not decoded again while its key stays (at 100,000 brokers a registration wave's cut
    has 300,000 bodies, 13 of them naming every broker, and decoding them all was 90 % of the
    HTTP server's CPU)."""
    kinds = {SINGLE_GROUP_TOPIC.name: 1, SINGLE_ZONE_TOPIC.name: 2}
    verdict = np.zeros(cut.body_count + 1, dtype=np.int8)  # the last: no body
    where: list[str] = []  # per body: its group or zone
    spelling = _zone_spellings(snap)
    keys = cut.body_keys() if known is not None else [None] * cut.body_count
    facts_of: dict[bytes, BodyFacts] = {}
    judged: list[BodyFacts] = []
    for b in range(cut.body_count):
        key = keys[b]
        facts = known.get(key) if key is not None and known is not None else None
        if facts is None:
            body = cut.body(b)
            # orjson: a wave's cut has 13 new bodies of 20 MB naming every broker
            facts = BodyFacts.of(snap, [] if body is None else json_codec.loads(bytes(body))["queueDatas"])
        if key is not None:
            facts_of[key] = facts
        verdict[b] = 0 if facts.kind is None else kinds[facts.kind]
        where.append(facts.label_in(spelling))
        judged.append(facts)
    if known is not None:
        known.clear()
        known.update(facts_of)
    any_write = _any_write([*judged, *(BodyFacts.of(snap, queues) for queues in orphans.values())])
    body_of = np.frombuffer(cut.section("body_of"), dtype=np.uint32).astype(np.int64)
    body_of[body_of == _NO_BODY] = cut.body_count
    per_topic = verdict[body_of]
    name_off = np.frombuffer(cut.section("name_off"), dtype=np.uint32).astype(np.int64)
    names = pa.LargeStringArray.from_buffers(cut.topic_count, pa.py_buffer(name_off.tobytes()),
                                             pa.py_buffer(bytes(cut.section("names"))))
    facts_by_kind: dict[str, _TopicFacts] = {}
    for kind, code in kinds.items():
        entries = np.flatnonzero(per_topic == code)
        facts_by_kind[kind] = _facts(names.take(pa.array(entries)), body_of[entries], where)
    return facts_by_kind, any_write


def _python_topology(snap: Snapshot) -> tuple[dict[str, _TopicFacts], dict[str, bool]]:
    """Any other topic mapping: a pass over its topics (small cuts)."""
    found: dict[str, tuple[list[str], list[str]]] = {k: ([], []) for k in _TOPIC_KINDS}
    spelling = _zone_spellings(snap)
    judged: list[BodyFacts] = []
    for topic in sorted(snap.topics):
        facts = BodyFacts.of(snap, snap.topics[topic])
        if facts.kind is not None:
            found[facts.kind][0].append(topic)
            found[facts.kind][1].append(facts.label_in(spelling))
        judged.append(facts)
    return {k: _facts(pa.array(names, pa.large_string()), np.arange(len(labels)), labels)
            for k, (names, labels) in found.items()}, _any_write(judged)


def _topic_facts(snap: Snapshot, known: dict[bytes, BodyFacts] | None = None
                 ) -> tuple[dict[str, _TopicFacts], dict[str, bool]]:
    """`known`: over mapped cut files, the facts of the last cut's bodies (`_file_topology`)."""
    idx = snap.topics
    cut = getattr(idx, "cut", None)
    if type(idx) is TopicIndex or isinstance(idx, TopicColumns):
        facts, any_write = _arrow_topology(snap, idx)
    elif isinstance(cut, _BodyFile):
        facts, any_write = _file_topology(snap, cut, getattr(idx, "orphans", {}), known)
    else:
        facts, any_write = _python_topology(snap)
    facts[SINGLE_GROUP_TOPIC.name] = _without_own_topics(facts[SINGLE_GROUP_TOPIC.name])
    return facts, any_write


def _without_own_topics(facts: _TopicFacts) -> _TopicFacts:
    """Single-group topics less each group's own topic (named after the one group it is on). Each
    name is looked up among the distinct labels (a hash of the groups' names) and compared with
    its own label's number, not with a copy of its group's name per topic: a million single-group
    topics made a million-string array here. (Labels may repeat: over a mapped file `where` names
    a topic's route body, and a group's bodies each carry its name.)"""
    if not len(facts):
        return facts
    labels = pa.array(list(facts.labels), pa.large_string())
    distinct = pc.unique(labels)
    label_no = pc.index_in(labels, value_set=distinct).to_numpy(zero_copy_only=False)
    named = pc.index_in(facts.names, value_set=distinct).fill_null(-1).to_numpy(zero_copy_only=False)
    own = named == label_no[facts.where]
    if not own.any():
        return facts
    keep = ~own
    return _TopicFacts(facts.names.filter(pa.array(keep)), facts.where[keep], facts.labels)


def _group_risks(snap: Snapshot, any_write: Mapping[str, bool]) -> dict[str, dict[str, Risk]]:
    """write-perm-wiped and no-live-slave, per BrokerData (since unset)."""
    wiped: dict[str, Risk] = {}
    lonely: dict[str, Risk] = {}
    for name, bd in snap.brokers.items():
        cluster = bd["cluster"]
        if any_write.get(name) is False:
            wiped[name] = Risk(f"{WRITE_PERM_WIPED.name}:{name}", WRITE_PERM_WIPED.name, WRITE_PERM_WIPED.severity,
                               f"no queue of broker group {name} has write permission: producers skip it",
                               None, cluster=cluster, broker_name=name)
        addrs: dict[str, str] = bd["brokerAddrs"]
        master = addrs.get(str(MASTER_ID))
        if master is None:
            continue
        if not any(bid != str(MASTER_ID) and (cluster, a) in snap.live_by_addr for bid, a in addrs.items()):
            lonely[name] = Risk(f"{NO_LIVE_SLAVE.name}:{name}", NO_LIVE_SLAVE.name, NO_LIVE_SLAVE.severity,
                                f"the master {master} of broker group {name} has no live slave",
                                None, cluster=cluster, broker_name=name, address=master)
    return {WRITE_PERM_WIPED.name: wiped, NO_LIVE_SLAVE.name: lonely}


# ---------------------------------------------------------------- history: flapping, data versions


def _version(raw: str) -> tuple[int, int, int]:
    """DataVersion's compare order (§9.3): stateVersion, then counter, then timestamp."""
    dv = json.loads(raw)
    return int(dv.get("stateVersion") or 0), int(dv.get("counter") or 0), int(dv.get("timestamp") or 0)


_LiveKey = tuple[str, str, str]  # (cluster, brokerName, address)
_FlapKey = tuple[str, str]       # (cluster, address)


def _expiries(changes: Iterable[Mapping[str, Any]], snapshot_id: int | None) -> Iterator[tuple[_FlapKey, int, str | None]]:
    for row in changes:
        if row.get("kind") != "BROKER_EXPIRED" or row.get("brokerAddr") is None:
            continue
        sid = row.get("snapshotId")
        if snapshot_id is not None and sid is not None and sid > snapshot_id:
            continue
        yield (str(row.get("clusterName")), str(row["brokerAddr"])), int(row["time"]), row.get("brokerName")


def _flapping(counts: Mapping[_FlapKey, int], names: Mapping[_FlapKey, str | None], settings: Settings) -> dict[str, Risk]:
    out: dict[str, Risk] = {}
    for (cluster, addr), n in counts.items():
        if n > settings.flap_threshold:
            subject = f"{cluster}/{addr}"
            out[subject] = Risk(f"{FLAPPING_BROKER.name}:{subject}", FLAPPING_BROKER.name, FLAPPING_BROKER.severity,
                                f"broker {addr} of cluster {cluster} expired {n} times in the last "
                                f"{_span(settings.window_ms)}", None, cluster=cluster,
                                broker_name=names.get((cluster, addr)), address=addr)
    return out


def _backwards(steps: Mapping[_LiveKey, tuple[int, tuple[int, int, int], tuple[int, int, int]]], at: int,
               settings: Settings) -> dict[str, Risk]:
    out: dict[str, Risk] = {}
    for (cluster, name, addr), (when, before, after) in steps.items():
        if when > at - settings.window_ms:
            subject = f"{cluster}/{name}/{addr}"
            out[subject] = Risk(f"{DATA_VERSION_BACKWARDS.name}:{subject}", DATA_VERSION_BACKWARDS.name,
                                DATA_VERSION_BACKWARDS.severity,
                                f"broker {addr} of group {name} went from DataVersion {_dv(before)} back to "
                                f"{_dv(after)} at {_instant(when)}", None, cluster=cluster, broker_name=name,
                                address=addr)
    return out


def _dv(v: tuple[int, int, int]) -> str:
    return f"(stateVersion {v[0]}, counter {v[1]}, timestamp {v[2]})"


def _instant(ms: int) -> str:
    """Epoch ms as an operator reads it: ISO-8601 UTC to the millisecond."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _span(ms: int) -> str:
    return f"{ms // 3_600_000} h" if ms % 3_600_000 == 0 else f"{ms} ms"


# ---------------------------------------------------------------- reports


@dataclass(frozen=True)
class RiskReport:
    """The risks of one cut, each with its `since`. Topic risks stay name lists until asked for.

    `origin_ms`: the time of the first cut its tracker folded. A risk whose since is that time
    already held there, so it may have held earlier than the tracker could see
    (`since_at_or_before`)."""

    at_ms: int
    snapshot_id: int | None
    _topics: dict[str, _TopicFacts] = field(repr=False)
    _topic_since: dict[str, npt.NDArray[np.int64]] | None = field(repr=False)  # aligned with the names; None: unset
    _others: dict[str, list[Risk]] = field(repr=False)   # kind -> risks in subject order, since set
    origin_ms: int | None = None

    def since_at_or_before(self, risk: Risk) -> bool:
        """Whether `risk.since` is only an upper bound on its start: it held at the first cut its
        tracker folded (the oldest retained cut, say), and what came before was not read."""
        return risk.since is not None and self.origin_ms is not None and risk.since <= self.origin_ms

    def counts(self) -> dict[str, int]:
        """Risks per kind, every kind named (0 included): one gauge per kind."""
        return {k.name: len(self._topics[k.name]) if k.name in self._topics else len(self._others.get(k.name, ()))
                for k in KINDS}

    def __len__(self) -> int:
        return sum(self.counts().values())

    def ids(self) -> set[str]:
        return {r.id for r in self.risks()}

    def risks(self, kind: str | None = None, *, kinds: Collection[str] | None = None, offset: int = 0,
              limit: int | None = None) -> list[Risk]:
        """The risks in KINDS order (by severity: critical first), then by subject, of `kind` or of
        `kinds` (None: every kind); only the page asked for is built."""
        out: list[Risk] = []
        skip = offset
        room = limit
        for k in KINDS:
            if (kind is not None and k.name != kind) or (kinds is not None and k.name not in kinds):
                continue
            size = self.counts()[k.name]
            if skip >= size:
                skip -= size
                continue
            stop = size if room is None else min(size, skip + room)
            out.extend(self._page(k, skip, stop))
            if room is not None:
                room -= stop - skip
                if room <= 0:
                    break
            skip = 0
        return out

    def _page(self, kind: RiskKind, start: int, stop: int) -> list[Risk]:
        facts = self._topics.get(kind.name)
        if facts is None:
            return self._others.get(kind.name, [])[start:stop]
        rows = facts.page(start, stop)
        since: list[int | None] = ([None] * len(rows) if self._topic_since is None else
                                   self._topic_since[kind.name][start:stop].tolist())
        if kind is SINGLE_GROUP_TOPIC:
            return [Risk(f"{kind.name}:{t}", kind.name, kind.severity,
                         f"every writable queue of topic {t} is on broker group {g}: its writes stop when {g}'s master does",
                         s, topic=t, broker_name=g) for (t, g), s in zip(rows, since, strict=True)]
        return [Risk(f"{kind.name}:{t}", kind.name, kind.severity,
                     f"every writable queue of topic {t} is in zone {z}: its writes stop when the zone does",
                     s, topic=t) for (t, z), s in zip(rows, since, strict=True)]


def counts_by_kind(risks: Iterable[Risk]) -> dict[str, int]:
    """Risks per kind over any collection of risks, every kind named (0 included)."""
    out = {k.name: 0 for k in KINDS}
    for r in risks:
        out[r.kind] += 1
    return out


def current_risks(snap: Snapshot) -> list[Risk]:
    """The kinds one cut shows by itself (topics, slaves, write permission), `since` unset:
    flapping and data versions need the history (`RiskTracker`)."""
    topics, any_write = _topic_facts(snap)
    groups = _group_risks(snap, any_write)
    report = RiskReport(snap.commit_time or 0, snap.snapshot_id, topics, None,
                        {k: [rs[s] for s in sorted(rs)] for k, rs in groups.items()})
    return report.risks()


class RiskTracker:
    """Folds cuts in commit order (`fold`) and answers each with its RiskReport (`report`: the
    last one). Holds, between cuts: each risk's since, the expiries within the window, each live
    broker's last DataVersion and its last step back; and the previous cut's topic facts, reused
    while the cut's topic index is the same object and its BrokerDatas are equal, or, over mapped
    cut files, while the files' digests of their topology are (`_topology_of`), and over mapped
    files each route body's facts by its kind key (`_file_topology`). Memory: the current risks,
    the window's expiries, the last mapped cut's body facts, one DataVersion per broker address ever seen live
    (a step back is judged against the address's last one however long ago). One folding thread;
    a report, once made, never changes."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.report: RiskReport | None = None
        self._at: int | None = None
        self._since: dict[str, dict[str, int]] = {k.name: {} for k in KINDS if k.name not in _TOPIC_KINDS}
        self._topic_since: dict[str, tuple[_TopicFacts, npt.NDArray[np.int64]]] = {}
        self._expiries: deque[tuple[int, _FlapKey]] = deque()   # (time, broker), in time order
        self._late: list[tuple[int, _FlapKey]] = []              # folded out of time order (rare)
        self._flap_names: dict[_FlapKey, str | None] = {}
        self._versions: dict[_LiveKey, str] = {}  # each address's last DataVersion JSON, parsed only on a change
        self._steps: dict[_LiveKey, tuple[int, tuple[int, int, int], tuple[int, int, int]]] = {}
        self._last_live: list[dict[str, Any]] | None = None
        self._topics_of: tuple[Any, Any] | None = None
        self._topics: tuple[dict[str, _TopicFacts], dict[str, bool]] | None = None
        self._body_facts: dict[bytes, BodyFacts] = {}  # the last mapped cut's bodies' facts, by kind key
        # the group kinds of the last cut, kept while its topology and its live addresses are the next's
        self._membership: frozenset[tuple[str, str]] | None = None
        self._groups: dict[str, dict[str, Risk]] | None = None
        self._last: dict[str, tuple[dict[str, Risk], list[Risk]]] = {}  # kind -> the last fold's risks, with since
        self.origin: int | None = None  # the first folded cut's time
        # how many folds computed topic facts afresh (a topology that moved): a million-topic cut's
        # computation briefly needs about a hundred MB, which a caller may want given back afterwards
        self.topic_facts_made = 0

    def fold(self, cut: Cut) -> RiskReport:
        at = cut.at
        if self._at is not None and at < self._at:
            raise ValueError(f"cuts are folded in commit order: {at} after {self._at}")
        snap = cut.snapshot
        if self.origin is None:
            self.origin = at
        same_topology = self._topics is not None and _same_topology(self._topics_of, snap)
        if self._topics is None or not same_topology:
            self._topics = _topic_facts(snap, self._body_facts)
            self.topic_facts_made += 1
            self._topics_of = _topology_of(snap)
        topics, any_write = self._topics
        membership = frozenset(snap.live_by_addr)
        if not same_topology or self._groups is None or membership != self._membership:
            # a heartbeat's cut (same topology, same live addresses) has the last cut's group kinds
            self._groups, self._membership = _group_risks(snap, any_write), membership
        groups = dict(self._groups)
        groups[FLAPPING_BROKER.name] = self._fold_expiries(cut, at)
        self._fold_versions(snap, at)
        groups[DATA_VERSION_BACKWARDS.name] = _backwards(self._steps, at, self.settings)
        topic_since = {kind: (facts, _topic_runs(self._topic_since.get(kind), facts, at)) for kind, facts in topics.items()}
        since: dict[str, dict[str, int]] = {}
        others: dict[str, list[Risk]] = {}
        for kind, risks in groups.items():
            before = self._since[kind]
            last = self._last.get(kind)
            if last is not None and last[0] is risks:  # the same risks as the last cut: every run goes on
                since[kind], others[kind] = before, last[1]
                continue
            since[kind] = {s: before.get(s, at) for s in risks}
            others[kind] = [_with(risks[s], since[kind][s]) for s in sorted(risks)]
        self._last = {kind: (groups[kind], others[kind]) for kind in groups}
        self._since, self._topic_since, self._at = since, topic_since, at
        self.report = RiskReport(at, snap.snapshot_id, topics, {k: v[1] for k, v in topic_since.items()}, others,
                                 self.origin)
        return self.report

    def _fold_expiries(self, cut: Cut, at: int) -> dict[str, Risk]:
        for key, when, name in _expiries(cut.changes, cut.snapshot.snapshot_id):
            if self._expiries and when < self._expiries[-1][0]:
                self._late.append((when, key))
            else:
                self._expiries.append((when, key))
            if name is not None:
                self._flap_names[key] = name
        floor = at - self.settings.window_ms
        while self._expiries and self._expiries[0][0] <= floor:
            self._expiries.popleft()
        self._late = [(w, k) for w, k in self._late if w > floor]
        counts: dict[_FlapKey, int] = {}
        for when, key in [*self._expiries, *self._late]:
            if when <= at:
                counts[key] = counts.get(key, 0) + 1
        return _flapping(counts, self._flap_names, self.settings)

    def _fold_versions(self, snap: Snapshot, at: int) -> None:
        if snap.live is self._last_live:
            return
        self._last_live = snap.live
        versions, steps = self._versions, self._steps
        for row in snap.live:
            key = (row["clusterName"], row["brokerName"], row["brokerAddr"])
            raw = row["dataVersion"]
            seen = versions.get(key)
            if seen == raw:
                continue
            if seen is not None:
                before, now = _version(seen), _version(raw)
                if now < before:
                    steps[key] = (at, before, now)
            versions[key] = raw


def _topology_of(snap: Snapshot) -> tuple[Any, Any]:
    """What a cut's topic facts are a function of, as cheap to compare as it can be: a mapped cut
    file's digests of its topic_queue columns and of everything else its route bodies read (the
    BrokerDatas among them: `snapshots.cutfile`), so a new file of the same topology (a cut that
    only moved heartbeats) reuses the facts without holding the old mapping; a history cut's
    `TopicColumns` key and its BrokerDatas, so its columns can go once folded; otherwise the topic
    index itself (a cut loaded from Delta with the previous cut's topic_queue version shares it)
    and the BrokerDatas."""
    cut = snap.cut
    digests = (getattr(cut, "queue_digest", None), getattr(cut, "deps_digest", None))
    if None not in digests:
        return "file", digests
    if isinstance(snap.topics, TopicColumns):
        return ("columns", snap.topics.key), snap.brokers
    return snap.topics, snap.brokers


def _same_topology(before: tuple[Any, Any] | None, snap: Snapshot) -> bool:
    if before is None:
        return False
    now = _topology_of(snap)
    if isinstance(before[0], str | tuple) or isinstance(now[0], str | tuple):  # digests, or a columns key
        return before == now
    return before[0] is now[0] and before[1] == now[1]


def _topic_runs(before: tuple[_TopicFacts, npt.NDArray[np.int64]] | None, facts: _TopicFacts,
               at: int) -> npt.NDArray[np.int64]:
    """Each topic's since: the previous cut's where it showed the kind there too, else `at`."""
    if before is None:
        return np.full(len(facts), at, dtype=np.int64)
    was, since = before
    if was is facts or was.names.equals(facts.names):
        return since  # the same topics as the previous cut: every run goes on
    pos = pc.index_in(facts.names, value_set=was.names)
    found = pos.is_valid().to_numpy(zero_copy_only=False)
    at_pos = pos.fill_null(0).to_numpy(zero_copy_only=False)
    return np.where(found, since[at_pos] if len(since) else at, at).astype(np.int64)


def _with(r: Risk, since: int) -> Risk:
    return Risk(r.id, r.kind, r.severity, r.message, since, r.topic, r.cluster, r.broker_name, r.address)


def report_as_of(cuts: Iterable[Cut], settings: Settings | None = None) -> RiskReport | None:
    """The report of the last of `cuts` (in commit order), folded from the first: `?asOf=` over the
    past cuts up to the instant asked. None when there is no cut."""
    tracker = RiskTracker(settings)
    for cut in cuts:
        tracker.fold(cut)
    return tracker.report


def report_from_scratch(cuts: Sequence[Cut], settings: Settings | None = None) -> list[Risk]:
    """The last cut's risks with their since, recomputed with no state carried between cuts: the
    risks of every cut k are computed from cuts[:k+1] alone, and since is the earliest cut of the
    run ending at the last. Quadratic in the cuts: the reference `RiskTracker` is tested against."""
    settings = settings or Settings()
    if not cuts:
        return []
    sets = [_facts_alone(cuts, k, settings) for k in range(len(cuts))]
    out: list[Risk] = []
    for r in sets[-1].values():
        start = len(cuts) - 1
        while start > 0 and r.id in sets[start - 1]:
            start -= 1
        out.append(_with(r, cuts[start].at))
    order = {k.name: i for i, k in enumerate(KINDS)}
    return sorted(out, key=lambda r: (order[r.kind], r.id))


def _facts_alone(cuts: Sequence[Cut], k: int, settings: Settings) -> dict[str, Risk]:
    """Cut k's risks (since unset) from cuts[:k+1], by the rules' plain reading."""
    cut, at = cuts[k], cuts[k].at
    risks = {r.id: r for r in current_risks(cut.snapshot)}
    counts: dict[_FlapKey, int] = {}
    names: dict[_FlapKey, str | None] = {}
    for earlier in cuts[:k + 1]:
        for key, when, name in _expiries(earlier.changes, cut.snapshot.snapshot_id):
            if name is not None:
                names[key] = name
            if at - settings.window_ms < when <= at:
                counts[key] = counts.get(key, 0) + 1
    risks.update({r.id: r for r in _flapping(counts, names, settings).values()})
    steps: dict[_LiveKey, tuple[int, tuple[int, int, int], tuple[int, int, int]]] = {}
    for j in range(1, k + 1):
        for row in cuts[j].snapshot.live:
            live = (row["clusterName"], row["brokerName"], row["brokerAddr"])
            before = next((_version(r["dataVersion"]) for i in range(j - 1, -1, -1) for r in cuts[i].snapshot.live
                           if (r["clusterName"], r["brokerName"], r["brokerAddr"]) == live), None)
            now = _version(row["dataVersion"])
            if before is not None and now < before:
                steps[live] = (cuts[j].at, before, now)
    risks.update({r.id: r for r in _backwards(steps, at, settings).values()})
    return risks
