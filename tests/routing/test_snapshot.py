"""A Snapshot's derived fields (routeinfo/snapshot.py): `Snapshot.of` derives `live_by_addr` and
`members` from the tables it is given and starts every cache empty; `with_live` is what
`build_snapshot` makes of another cut's snapshots row, topics and live table with this cut's other
tables, keeping (sharing) `members` and `holders`; `with_topics` is the cut over other topics with
every cache empty. Pure: rows built by hand."""

from __future__ import annotations

import dataclasses
from typing import Any

from routeinfo import route_reads
from routeinfo.snapshot import Snapshot, build_snapshot
from routeinfo.topic_index import TopicIndex
from schemas import tables as t
from tests.serving.test_cutfile import fleet_tables, live_row, queue_row, snapshot_row

# every field but the caches and the mapping (compared one by one: `members` is not in __eq__)
FIELDS = [f.name for f in dataclasses.fields(Snapshot) if f.name not in ("route_bodies", "cut_bodies", "holders", "cut")]


def assert_same_fields(got: Snapshot, expected: Snapshot) -> None:
    for name in FIELDS:
        assert getattr(got, name) == getattr(expected, name), name


def test_of_derives_live_by_addr_and_members_from_its_tables() -> None:
    first, again = live_row("C", "10.0.0.1:1", "a", 0, last=5), live_row("C", "10.0.0.1:1", "a-renamed", 0, last=9)
    other = live_row("D", "10.0.0.1:1", "d", 0)
    snap = Snapshot.of(snapshot_id=3, commit_time=30, versions={"broker_live": 3}, source_offsets={"0": 3},
                       topics=TopicIndex.from_rows([]), brokers={}, clusters={"C": ["a", "b"], "D": ["d"]},
                       live=[first, again, other], filters={}, kv={}, switches={})
    assert snap.live_by_addr == {("C", "10.0.0.1:1"): first, ("D", "10.0.0.1:1"): other}  # an address's first row
    assert snap.live_by_addr[("C", "10.0.0.1:1")] is first
    assert snap.members == {("C", "a"), ("C", "b"), ("D", "d")}
    assert snap.route_bodies == snap.cut_bodies == {} and snap.holders == {} and snap.cut is None


def test_build_snapshot_is_of_its_indexed_tables() -> None:
    snap = build_snapshot(snapshot_row(4), fleet_tables(groups=8, per_group=2))
    rebuilt = Snapshot.of(snapshot_id=snap.snapshot_id, commit_time=snap.commit_time, versions=snap.versions,
                          source_offsets=snap.source_offsets, topics=snap.topics, brokers=snap.brokers,
                          clusters=snap.clusters, live=snap.live, filters=snap.filters, kv=snap.kv, switches=snap.switches)
    assert_same_fields(rebuilt, snap)
    assert snap.members == {(c, name) for c, names in snap.clusters.items() for name in names} != frozenset()


def test_with_live_is_the_new_rows_over_the_kept_tables_sharing_members_and_holders() -> None:
    tables = fleet_tables(groups=8, per_group=2)
    previous = build_snapshot(snapshot_row(4), tables)
    assert route_reads.holder_of(previous, "C1", "10.0.1.1:10911") == ("broker-1", 0)  # fills the holders
    assert route_reads.route_body(previous, "T-1-0") is not None and previous.route_bodies  # fills a cache
    route_reads.cluster_info_body(previous)
    assert previous.cut_bodies
    queues = TopicIndex.from_rows([*tables[t.TOPIC_QUEUE.name], queue_row("Added", "broker-1")])
    # a heartbeat's live table, not in its row order: one broker gone, the others a moment later
    live: list[dict[str, Any]] = [dict(r, lastUpdateTimestamp=7) for r in reversed(tables[t.BROKER_LIVE.name][2:])]
    after = previous.with_live(snapshot_row(5), queues, live, None)
    assert_same_fields(after, build_snapshot(snapshot_row(5), {**tables, t.TOPIC_QUEUE.name: queues,
                                                               t.BROKER_LIVE.name: live}))
    assert after.snapshot_id == 5 and after.topics is queues and after.live[0]["lastUpdateTimestamp"] == 7
    assert after.brokers is previous.brokers and after.kv is previous.kv
    assert after.members is previous.members and after.holders is previous.holders
    assert after.route_bodies == after.cut_bodies == {}
    assert previous.route_bodies and previous.cut_bodies  # the served cut's caches are its own
    assert after.with_live(None, queues, [], None).snapshot_id is None  # no cut yet: no row


def test_with_topics_keeps_the_tables_and_empties_every_cache() -> None:
    tables = fleet_tables(groups=8, per_group=2)
    snap = build_snapshot(snapshot_row(4), tables)
    route_reads.holder_of(snap, "C1", "10.0.1.1:10911")
    route_reads.route_body(snap, "T-1-0")
    route_reads.cluster_info_body(snap)
    few = TopicIndex.from_rows([r for r in tables[t.TOPIC_QUEUE.name] if r["topic"] == "T-1-0"])
    only = snap.with_topics(few)
    assert only.topics is few and list(only.topics) == ["T-1-0"]
    assert [getattr(only, n) for n in FIELDS if n != "topics"] == [getattr(snap, n) for n in FIELDS if n != "topics"]
    assert only.route_bodies == only.cut_bodies == {} and only.holders == {}
    assert snap.route_bodies and snap.cut_bodies and snap.holders
    assert route_reads.route_body(only, "T-1-0") == route_reads.route_body(snap, "T-1-0")
