"""The shared cut file (snapshots/cutfile.py): its answers are `route_reads`' byte for byte, an
incremental write is byte-identical to a from-scratch one (its head and its index part), a damaged
head or index part is refused, and a reader keeps its cut while a newer file is renamed over it."""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routeinfo import admin_fanout, route_reads
from routeinfo.snapshot import Snapshot, build_snapshot
from routeinfo.state import topic_keys_digest
from schemas import events as ev
from schemas import fields
from schemas import tables as t
from snapshots import cutfile
from snapshots.cutfile import HEADER, INDEX_HEADER, CutFile, CutFileError, IndexPartError, write_cut
from tests.helpers import cut, reg, topics
from tests.model import ops
from tests.model.pure_system import PureSystem

ABSENT = ["NoSuchTopic", "", "rmq_sys_SYNC_BROKER_MEMBER_", "T9x", "\ud800lone", "ghost"]


# ---------------------------------------------------------------- cuts built without Spark


def switch_rows(**on: bool) -> list[dict[str, Any]]:
    return [{"scope": "namesrv", "key": k, "value": "true" if v else "false"} for k, v in on.items()]


def broker_rows(name: str, cluster: str, addrs: dict[int, str], *, zone: str | None = None,
                acting: bool = False) -> list[dict[str, Any]]:
    return [{"brokerName": name, "cluster": cluster, "brokerId": bid, "brokerAddr": addr, "zoneName": zone,
             "enableActingMaster": acting} for bid, addr in addrs.items()]


def queue_row(topic: str, broker: str, *, perm: int = 6, read: int = 8, write: int = 8, flag: int = 0) -> dict[str, Any]:
    return {"topic": topic, "brokerName": broker, "readQueueNums": read, "writeQueueNums": write, "perm": perm,
            "topicSysFlag": flag}


def live_row(cluster: str, addr: str, name: str, bid: int, last: int = 1) -> dict[str, Any]:
    return {"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "brokerId": bid, "lastUpdateTimestamp": last,
            "heartbeatTimeoutMillis": 120_000, "dataVersion": json.dumps({"counter": 1, "stateVersion": 0, "timestamp": 1}),
            "haServerAddr": None}


def snapshot_row(snapshot_id: int) -> dict[str, Any]:
    return {"snapshotId": snapshot_id, "commitTime": 1_700_000_000_000 + snapshot_id,
            **{t.version_column(x): snapshot_id for x in t.CUT_TABLES}, "sourceOffsets": json.dumps({"0": snapshot_id})}


def fleet_tables(groups: int = 40, per_group: int = 6) -> dict[str, list[dict[str, Any]]]:
    """A fleet with what a route body can carry: masters and slaves, an acting-master group with
    no master and read-only queues, its sync-member topic, zones, filter servers, topics shared by
    several groups, a topic on a group with no BrokerData, order-topic configs, unicode names."""
    tables: dict[str, list[dict[str, Any]]] = {x.name: [] for x in t.STATE_TABLES}
    for g in range(groups):
        name, cluster = f"broker-{g}", f"C{g % 3}"
        addrs = {0: f"10.0.{g}.1:10911", 1: f"10.0.{g}.2:10911"} if g % 4 else {1: f"10.0.{g}.2:10911",
                                                                               2: f"10.0.{g}.3:10911"}
        tables["broker_addr"] += broker_rows(name, cluster, addrs, zone=f"z{g % 2}" if g % 5 else None, acting=g % 4 == 0)
        tables["cluster_addr"].append({"clusterName": cluster, "brokerName": name})
        tables["broker_live"] += [live_row(cluster, a, name, b) for b, a in addrs.items()]
        perm = fields.PERM_READ if g % 4 == 0 else fields.DEFAULT_PERM
        tables["topic_queue"] += [queue_row(f"T-{g}-{i}", name, perm=perm, read=4 + i % 2) for i in range(per_group)]
        tables["topic_queue"] += [queue_row(f"Shared-{g % 7}", name, perm=perm), queue_row(f"主题-{g % 3}-ü", name),
                                  queue_row(f"{route_reads.SYNC_BROKER_MEMBER_PREFIX}{name}", name, perm=perm)]
        if g % 6 == 1:
            tables["filter_server"].append({"clusterName": cluster, "brokerAddr": addrs[0], "brokerName": name,
                                            "filterServer": [f"10.9.{g}.1:7000"]})
    tables["topic_queue"] += [queue_row("OnAGhost", "ghost"), queue_row("Shared-0", "ghost"), queue_row("😀", "broker-1")]
    tables["kv_config"] += [{"namespace": ev.ORDER_TOPIC_CONFIG, "key": "T-1-0", "value": "broker-1:8"},
                            {"namespace": ev.ORDER_TOPIC_CONFIG, "key": "Shared-2", "value": "broker-2:4"},
                            {"namespace": "empty", "key": None, "value": None},
                            {"namespace": "ns", "key": "k", "value": "v"}]
    tables["namesrv_config"] = switch_rows(supportActingMaster=True, orderMessageEnable=True)
    return tables


def fleet(groups: int = 40, per_group: int = 6, snapshot_id: int | None = 7) -> Snapshot:
    row = None if snapshot_id is None else snapshot_row(snapshot_id)
    return build_snapshot(row, fleet_tables(groups, per_group))


def with_tables(snap_tables: dict[str, list[dict[str, Any]]], snapshot_id: int = 8, **changed: Any) -> Snapshot:
    return build_snapshot(snapshot_row(snapshot_id), {**snap_tables, **changed})


# ---------------------------------------------------------------- checks


def assert_answers(snap: Snapshot, path: Path, *, extra: list[str] = ABSENT) -> None:
    """Every topic's body (and some absent names) and the cluster info as route_reads has them;
    the names, the groups and the rest of the cut as the Snapshot has them."""
    with CutFile.open(path) as cf:
        assert cf.snapshot_id == snap.snapshot_id and cf.commit_time == snap.commit_time
        for topic in [*snap.topics, *extra]:
            found = cf.route_body(topic)
            assert (None if found is None else bytes(found)) == route_reads.route_body(snap, topic), topic
            assert (topic in cf) == (topic in snap.topics), topic
        assert bytes(cf.cluster_info_body()) == route_reads.cluster_info_body(snap)
        assert list(cf.topic_names()) == sorted(snap.topics)
        hosts: dict[str, list[str]] = {}
        for topic in sorted(snap.topics):
            for q in snap.topics[topic]:
                if topic not in hosts.setdefault(q["brokerName"], []):
                    hosts[q["brokerName"]].append(topic)
        assert list(cf.group_names()) == sorted(hosts)
        for group, hosted in hosts.items():
            assert cf.topics_of_group(group) == hosted
            assert len(hosted) == route_reads.topics_hosted_by(snap, group)
        assert cf.topics_of_group("no-such-group") == []
        assert_same_rest(cf.rest_snapshot(), snap)


def assert_same_rest(rebuilt: Snapshot, snap: Snapshot) -> None:
    for name in ("snapshot_id", "commit_time", "versions", "source_offsets", "brokers", "clusters", "live", "filters",
                 "kv", "switches", "live_by_addr"):
        assert getattr(rebuilt, name) == getattr(snap, name), name
    assert len(rebuilt.topics) == 0


def index_of(head: Path) -> Path:
    """The index part the head at `head` names."""
    name = cutfile.index_part_named_by(head)
    assert name is not None
    return head.parent / name


def write_both(snap: Snapshot, directory: Path, previous: Path | None) -> tuple[Path, cutfile.CutFileStats]:
    """The cut written incrementally against `previous` and from scratch (in a directory of its
    own, so that nothing of the incremental write is at hand): the same bytes, in both parts."""
    (directory / "scratch").mkdir(exist_ok=True)
    scratch, incremental = directory / "scratch" / "cut", directory / "cut"
    write_cut(snap, scratch)
    stats = write_cut(snap, incremental, previous)
    assert incremental.read_bytes() == scratch.read_bytes()
    assert index_of(incremental).name == index_of(scratch).name == stats.index_path.name
    assert index_of(incremental).read_bytes() == index_of(scratch).read_bytes()
    return incremental, stats


# ---------------------------------------------------------------- answers


def test_every_answer_of_a_fleet_is_route_reads(tmp_path: Path) -> None:
    snap = fleet()
    stats = write_cut(snap, tmp_path / "cut")
    assert_answers(snap, tmp_path / "cut", extra=[*ABSENT, "Shared-99", "T-1-6"])
    assert stats.topics == len(snap.topics) and stats.encoded == stats.kinds
    assert stats.bodies < stats.topics  # alike topics share a body
    assert stats.file_bytes == (tmp_path / "cut").stat().st_size and stats.index_written
    assert stats.index_bytes == stats.index_path.stat().st_size and stats.index_path.parent == tmp_path


def test_the_file_holds_the_route_before_the_zone_filter_with_acting_master_and_order_config(tmp_path: Path) -> None:
    snap = fleet()
    write_cut(snap, tmp_path / "cut")
    with CutFile.open(tmp_path / "cut") as cf:
        def route(topic: str) -> dict[str, Any]:
            body = cf.route_body(topic)
            assert body is not None
            decoded: dict[str, Any] = json.loads(bytes(body))
            return decoded

        acting = route("T-0-0")["brokerDatas"][0]["brokerAddrs"]  # no master, read-only: a slave shown as 0
        assert acting == {"0": "10.0.0.2:10911", "2": "10.0.0.3:10911"}
        sync = route(f"{route_reads.SYNC_BROKER_MEMBER_PREFIX}broker-0")["brokerDatas"][0]["brokerAddrs"]
        assert sync == {"1": "10.0.0.2:10911", "2": "10.0.0.3:10911"}  # a sync-member topic is not rewritten
        assert route("T-1-0")["orderTopicConf"] == "broker-1:8"
        assert "orderTopicConf" not in route("T-1-1")
        assert route("T-1-0")["filterServerTable"] == {"10.0.1.1:10911": ["10.9.1.1:7000"]}
        zones = {bd.get("zoneName") for bd in route("Shared-1")["brokerDatas"]}
        assert {"z0", "z1"} <= zones  # both zones: the client's zone is applied at request time
        assert cf.route_body("OnAGhost") is None and "OnAGhost" in cf  # listed, but TOPIC_NOT_EXIST
    # the rewrite changed a copy: routes share the cut's BrokerDatas
    assert snap.brokers["broker-0"]["brokerAddrs"] == {"1": "10.0.0.2:10911", "2": "10.0.0.3:10911"}
    assert route_reads.topic_route(snap, "T-0-0")["brokerDatas"][0]["brokerAddrs"] == acting  # type: ignore[index]
    assert snap.brokers["broker-0"]["brokerAddrs"] == {"1": "10.0.0.2:10911", "2": "10.0.0.3:10911"}


def test_the_empty_cut(tmp_path: Path) -> None:
    snap = Snapshot.empty()
    stats = write_cut(snap, tmp_path / "cut")
    assert stats.topics == stats.bodies == stats.groups == 0
    assert_answers(snap, tmp_path / "cut")
    with CutFile.open(tmp_path / "cut") as cf:
        assert cf.snapshot_id is None and list(cf.topic_names()) == [] and cf.rest()["snapshot"] is None
    _, stats = write_both(snap, tmp_path, tmp_path / "cut")
    assert stats.reused == "index"


def test_a_cut_the_pure_core_made(tmp_path: Path) -> None:
    """Names as ingestion lets them be (ASCII, with `%` and `|`); the fleets built from rows have
    unicode ones, which the file holds as UTF-8 all the same."""
    snap = cut(reg("broker-b", 0, "10.0.0.3:1"), reg("broker-a", 0, "10.0.0.1:1", zone="z", filters=["10.9.9.9:1"]),
               reg("broker-a", 1, "10.0.0.2:1"),
               reg("broker|c:1", 0, "10.0.0.4:1", tps=topics("%RETRY%group", "a|b", "TopicTest")))
    write_cut(snap, tmp_path / "cut")
    assert_answers(snap, tmp_path / "cut")


def test_the_vectorized_hash_is_topic_hash() -> None:
    rnd = random.Random(36)
    alphabet = "abcXYZ-_%09ü主题😀"
    names = sorted({"".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 40))) for _ in range(2000)})
    array = pa.array(names, pa.string())
    expected = [cutfile.topic_hash(n.encode()) for n in names]
    assert cutfile.hash_names(array).tolist() == expected
    assert cutfile.hash_names(array.slice(5, 50)).tolist() == expected[5:55]  # an array not at its buffers' start


def test_dense_ids_of_many_columns_compact_before_they_overflow() -> None:
    """A topic on a hundred groups is a row of a hundred row kinds: their combined id would pass
    64 bits, so it is compacted on the way; equal rows still get equal ids, unequal ones not."""
    rng = np.random.default_rng(36)
    columns = [rng.integers(0, 3, 500) for _ in range(100)]
    columns[0][250:] = columns[0][:250]  # half the rows repeat the first half in every column
    for c in columns[1:]:
        c[250:] = c[:250]
    ids, count = cutfile.dense_ids(columns)
    rows = list(zip(*(c.tolist() for c in columns), strict=True))
    first: dict[tuple[int, ...], int] = {}
    for row in rows:
        first.setdefault(row, len(first))
    assert ids.tolist() == [first[row] for row in rows] and count == len(first) == 250


def test_slots_past_the_end_wrap_to_the_first_empty_ones() -> None:
    hashes = np.array([7, 15, 23, 6, 1, 9], np.uint64)  # homes 7, 7, 7, 6, 1, 1 in 8 slots
    slots = cutfile.build_slots(hashes, 16 // 2)
    assert sorted(int(s) for s in slots if s) == list(range(1, 7))
    for e, h in enumerate(hashes.tolist()):  # each found by probing from its home, no empty slot before it
        s = h & 7
        while slots[s] != e + 1:
            assert slots[s] != 0, (e, s)
            s = (s + 1) & 7


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.one_of(ops.operations(ops.NAMES), ops.config, ops.config), st.sampled_from([0, 500, 1500])),
                min_size=3, max_size=25))
def test_model_workloads_every_step(tmp_path: Path, workload: list[tuple[tuple[str, dict[str, Any]], int]]) -> None:
    """The model tests' generated workloads (tests/model/ops.py: registrations with slaves, acting
    master, zones, filter servers, topic deletes and admin registrations, KV with order configs)
    and the runtime switches: after every step the file answers as route_reads, and the file
    written against the previous step's is the one written from scratch."""
    pure = PureSystem(timeout_ms=3000)
    now = 1_700_000_000_000
    registrations: list[tuple[dict[str, Any], list[int]]] = []
    previous: Path | None = None
    for step, ((kind, args), dt) in enumerate(workload):
        now += dt
        if kind == "repeat":
            if not registrations:
                continue
            event, offsets = registrations[args["pick"] % len(registrations)]
            pure.run_batch([ev.repeated_registration_event(event, offsets, topic_keys_digest(event["topicConfigTable"]),
                                                           timestamp=now)], now)
        elif kind == "advance":
            pure.run_batch([], now + args["ms"])
        elif kind == "delete_topic":
            pure.run_batch(admin_fanout.delete_topic(pure.snapshot(), args["topic"], args["cluster"]), now)
        elif kind == "register_topic":
            pure.run_batch(admin_fanout.register_topic(pure.snapshot(), args["topic"], args["queueDatas"]), now)
        else:
            event = ops.broker_event(kind, args, timestamp=now)
            first = pure.batches.offset
            pure.run_batch(ops.published(kind, args, event), now)
            if kind == "register":
                registrations.append((event, list(range(first, pure.batches.offset))))
        snap = pure.snapshot()
        directory = tmp_path / f"step{step}"
        directory.mkdir(exist_ok=True)
        path, _ = write_both(snap, directory, previous)
        assert_answers(snap, path, extra=[*ABSENT, *ops.TOPICS, "T9", "Base"])
        previous = path


# ---------------------------------------------------------------- incremental writes


def test_incremental_writes_reuse_what_did_not_change(tmp_path: Path) -> None:
    """A sequence of cuts, each written against the previous file: byte-identical to a write
    from scratch every time, and reusing as much as the change allows."""
    base = fleet_tables()
    changes: list[tuple[str, dict[str, list[dict[str, Any]]]]] = []
    live = [dict(r, lastUpdateTimestamp=r["lastUpdateTimestamp"] + 5) for r in base["broker_live"]]
    changes.append(("liveness only", {**base, "broker_live": live}))
    queues = [dict(r, perm=2) if r["brokerName"] == "broker-5" else r for r in base["topic_queue"]]
    changes.append(("one group's queues", {**base, "topic_queue": queues}))
    queues = queues + [queue_row(f"New-{i}", "broker-6") for i in range(5)]
    changes.append(("new topics", {**base, "topic_queue": queues}))
    brokers = [dict(r, brokerAddr="10.1.1.1:1") if r["brokerName"] == "broker-7" and r["brokerId"] == 1 else r
               for r in base["broker_addr"]]
    changes.append(("one broker's address", {**base, "topic_queue": queues, "broker_addr": brokers}))
    queues = [r for r in queues if r["topic"] != "T-3-0"]
    changes.append(("a topic deleted", {**base, "topic_queue": queues, "broker_addr": brokers}))
    filters = [dict(r, filterServer=["10.9.9.9:1"]) for r in base["filter_server"][:1]] + base["filter_server"][1:]
    changes.append(("a filter server changed", {**base, "topic_queue": queues, "broker_addr": brokers,
                                                "filter_server": filters}))
    changes.append(("acting master off", {**base, "topic_queue": queues, "broker_addr": brokers,
                                          "namesrv_config": switch_rows(orderMessageEnable=True)}))
    kv = base["kv_config"] + [{"namespace": ev.ORDER_TOPIC_CONFIG, "key": "T-2-1", "value": "broker-2:2"}]
    changes.append(("an order config added", {**base, "topic_queue": queues, "broker_addr": brokers, "kv_config": kv}))
    changes.append(("nothing", {**base, "topic_queue": queues, "broker_addr": brokers, "kv_config": kv}))

    first = fleet()
    previous = tmp_path / "0" / "cut"
    previous.parent.mkdir()
    write_cut(first, previous)
    seen: dict[str, cutfile.CutFileStats] = {}
    for i, (what, tables) in enumerate(changes, start=1):
        snap = build_snapshot(snapshot_row(7 + i), tables)
        directory = tmp_path / str(i)
        directory.mkdir()
        path, stats = write_both(snap, directory, previous)
        assert_answers(snap, path)
        assert stats.previous_refused is None, what
        seen[what] = stats
        previous = path
    assert seen["liveness only"].reused == "index" and seen["liveness only"].encoded == 0
    assert seen["nothing"].reused == "index"
    # each cut was written into a directory of its own: the part is written there from the previous mapping
    assert all(stats.index_written for stats in seen.values())
    touched = seen["one group's queues"]
    assert touched.reused == "parts" and touched.reused_hashes == touched.topics
    assert 0 < touched.encoded < touched.kinds / 4  # broker-5's kinds only
    grown = seen["new topics"]
    assert grown.reused_hashes == grown.topics - 5 and grown.encoded == 1  # five alike new topics: one body
    assert 0 < seen["one broker's address"].encoded < seen["one broker's address"].kinds / 4
    assert 0 < seen["a filter server changed"].encoded < seen["a filter server changed"].kinds / 4
    assert seen["acting master off"].encoded > 0


def test_a_previous_file_that_cannot_be_used_is_not(tmp_path: Path) -> None:
    snap = fleet(groups=8)
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a cut file at all" * 100)
    stats = write_cut(snap, tmp_path / "cut", bad)
    assert stats.reused == "none" and stats.previous_refused is not None and "not a cut file" in stats.previous_refused
    missing = write_cut(snap, tmp_path / "cut2", tmp_path / "absent")
    assert missing.reused == "none" and missing.previous_refused is not None
    assert (tmp_path / "cut").read_bytes() == (tmp_path / "cut2").read_bytes()
    assert_answers(snap, tmp_path / "cut")


def test_a_previous_file_already_open_is_reused_and_left_open(tmp_path: Path) -> None:
    snap = fleet(groups=8)
    first = write_cut(snap, tmp_path / "a")
    before = first.index_path.stat()
    with CutFile.open(tmp_path / "a") as prev:
        stats = write_cut(snap, tmp_path / "b", prev)
        assert stats.reused == "index" and not stats.index_written  # the part beside it is the one prev maps
        assert prev.route_body("T-1-0") is not None  # still mapped
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    after = first.index_path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_what_the_previous_cut_had_the_same_is_taken_only_when_it_is(tmp_path: Path) -> None:
    """A builder tells the file it wrote which cut it was written from (`written_from`): a cut
    holding that very TopicIndex is not hashed again, and its head's tables are copied when its
    other tables but the live one are equal too; any other cut is written in full. Every write is
    the one written from scratch."""
    tables = fleet_tables(groups=8)
    first = with_tables(tables, snapshot_id=1)
    write_cut(first, tmp_path / "cut")
    live = [dict(r, lastUpdateTimestamp=9) for r in tables["broker_live"]]
    beat = build_snapshot(snapshot_row(2), {**tables, "topic_queue": first.topics, "broker_live": live})
    moved = with_tables(tables, snapshot_id=3, topic_queue=tables["topic_queue"] + [queue_row("Moved", "broker-2")])
    addr = [dict(r, brokerAddr="10.7.7.7:1") if r["brokerName"] == "broker-3" else r for r in tables["broker_addr"]]
    readdressed = build_snapshot(snapshot_row(4), {**tables, "topic_queue": first.topics, "broker_addr": addr})
    kv = tables["kv_config"] + [{"namespace": "ns", "key": "k2", "value": "v2"}]
    configured = build_snapshot(snapshot_row(5), {**tables, "topic_queue": first.topics, "kv_config": kv})
    for snap, reused, tables_reused in ((beat, "index", True), (moved, "parts", False), (readdressed, "parts", False),
                                        (configured, "index", False)):
        directory = tmp_path / str(snap.snapshot_id)
        directory.mkdir()
        with CutFile.open(tmp_path / "cut") as prev:
            prev.written_from = first
            stats = write_cut(snap, directory / "cut", prev)
        assert (stats.reused, stats.tables_reused) == (reused, tables_reused), snap.snapshot_id
        write_cut(snap, directory / "scratch")
        assert (directory / "cut").read_bytes() == (directory / "scratch").read_bytes()
        assert_answers(snap, directory / "cut")


def test_a_liveness_only_cut_writes_only_the_head_and_a_reader_reads_only_the_head(tmp_path: Path) -> None:
    """The route sections are the index part's; a cut that moved heartbeats writes a new head naming
    the same part, and a reader given the cut it serves shares that cut's mapping of the part."""
    tables = fleet_tables(groups=12)
    path = tmp_path / "current.cut"
    write_cut(with_tables(tables, snapshot_id=1), path)
    index = index_of(path)
    before = index.stat()
    served = CutFile.open(path)
    assert not served.index_reused
    live = [dict(r, lastUpdateTimestamp=r["lastUpdateTimestamp"] + 1000) for r in tables["broker_live"]]
    beating = with_tables(tables, snapshot_id=2, broker_live=live)
    stats = write_cut(beating, path, served)
    assert (stats.reused, stats.index_written, stats.index_path) == ("index", False, index)
    after = index.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["current.cut", index.name])
    with CutFile.open(path, reuse=served) as new:
        assert new.index_reused and new.snapshot_id == 2
        assert new.rest_snapshot().live == beating.live != served.rest_snapshot().live
        served.close()  # the cut it followed goes: the shared part stays mapped for the new one
        for topic in beating.topics:
            body = new.route_body(topic)
            assert (None if body is None else bytes(body)) == route_reads.route_body(beating, topic), topic
    assert_answers(beating, path)


def test_a_reused_part_is_checked_when_it_was_not_verified_or_is_another(tmp_path: Path) -> None:
    path = tmp_path / "current.cut"
    tables = fleet_tables(groups=6)
    write_cut(with_tables(tables, snapshot_id=1), path)
    with CutFile.open(path, verify=False) as unverified:
        with CutFile.open(path, reuse=unverified) as checked:  # a verified open maps and checks it itself
            assert not checked.index_reused
        with CutFile.open(path, verify=False, reuse=unverified) as trusting:
            assert trusting.index_reused
    with CutFile.open(path) as old:
        moved = with_tables(tables, snapshot_id=2, topic_queue=tables["topic_queue"] + [queue_row("New", "broker-1")])
        write_cut(moved, path, old)
        with CutFile.open(path, reuse=old) as new:
            assert not new.index_reused and "New" in new and "New" not in old


# ---------------------------------------------------------------- damaged files


def written(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "cut"
    write_cut(fleet(groups=8), path)
    return path, path.read_bytes()


@pytest.mark.parametrize("keep", [0, 1, HEADER.size - 1, HEADER.size, -1, -100, 0.5])
def test_a_truncated_file_is_refused(tmp_path: Path, keep: float) -> None:
    path, data = written(tmp_path)
    cut_at = int(len(data) * keep) if isinstance(keep, float) else keep if keep >= 0 else len(data) + keep
    path.write_bytes(data[:cut_at])
    for verify in (True, False):
        with pytest.raises(CutFileError, match="truncated"):
            CutFile.open(path, verify=verify)


def test_a_longer_file_is_refused(tmp_path: Path) -> None:
    path, data = written(tmp_path)
    path.write_bytes(data + b"\0" * 8)
    with pytest.raises(CutFileError, match="the header says"):
        CutFile.open(path)


def test_a_truncated_index_part_is_refused(tmp_path: Path) -> None:
    path, _ = written(tmp_path)
    index = index_of(path)
    data = index.read_bytes()
    for keep in (0, INDEX_HEADER.size - 1, len(data) // 2, len(data) - 1):
        index.write_bytes(data[:keep])
        for verify in (True, False):
            with pytest.raises(IndexPartError, match=f"its index part {index.name} cannot be used: .*truncated") as e:
                CutFile.open(path, verify=verify)
            assert e.value.index_path == index


def test_a_wrong_magic_or_version_is_refused(tmp_path: Path) -> None:
    path, data = written(tmp_path)
    path.write_bytes(b"NOTACUT!" + data[8:])
    with pytest.raises(CutFileError, match="not a cut file"):
        CutFile.open(path)
    version = cutfile.FORMAT_VERSION
    path.write_bytes(data[:8] + (version + 1).to_bytes(4, "little") + data[12:])
    with pytest.raises(CutFileError, match=f"format version {version + 1} .*this reader reads version {version}"):
        CutFile.open(path)
    version_1 = (1).to_bytes(4, "little") + (384).to_bytes(4, "little")  # the one-file format's version and header
    path.write_bytes(data[:8] + version_1 + data[16:])
    with pytest.raises(CutFileError, match=f"format version 1 \\(header 384 bytes\\); this reader reads version {version}"):
        CutFile.open(path)
    path.write_bytes(data)
    index = index_of(path)
    part = index.read_bytes()
    index.write_bytes(part[:8] + (version + 1).to_bytes(4, "little") + part[12:])
    with pytest.raises(IndexPartError, match=f"format version {version + 1}"):
        CutFile.open(path)
    index.write_bytes(data)  # a head where the part should be
    with pytest.raises(IndexPartError, match="not a cut file's index part"):
        CutFile.open(path)


def _section_middles(data: bytes, header: Any, names: tuple[str, ...], first: int) -> list[int]:
    layout = header.unpack_from(data)[first:first + 2 * len(names)]
    assert all(layout[1::2])  # every section has bytes to damage
    return [off + length // 2 for off, length in zip(layout[::2], layout[1::2], strict=True)]


def test_a_flipped_byte_anywhere_is_refused(tmp_path: Path) -> None:
    """Every section of both parts, and the headers' fields: a CRC mismatch (or the structure
    broken, or a part that is not the head's), never an answer."""
    path, data = written(tmp_path)
    index = index_of(path)
    part = index.read_bytes()
    # the head: snapshot_id, commit_time, the digests (so the part's name), tables_digest, index_size,
    # index_crc; each section
    head_at = [24, 32, 40, 60, 80, 90, 106, 112, *_section_middles(data, HEADER, cutfile.HEAD_SECTIONS, 13)]
    # the part: the counts, the digests; each section
    index_at = [24, 48, 70, 100, *_section_middles(part, INDEX_HEADER, cutfile.INDEX_SECTIONS, 13)]
    for target, original, places in ((path, data, head_at), (index, part, index_at)):
        for at in places:
            damaged = bytearray(original)
            damaged[at] ^= 0x20
            target.write_bytes(bytes(damaged))
            with pytest.raises(CutFileError):
                CutFile.open(path)
        target.write_bytes(original)


def test_a_count_that_does_not_fit_its_section_is_refused_even_unverified(tmp_path: Path) -> None:
    path, _ = written(tmp_path)
    index = index_of(path)
    data = index.read_bytes()
    fields_ = list(INDEX_HEADER.unpack_from(data))
    fields_[4] += 1  # one topic more than the sections hold
    index.write_bytes(INDEX_HEADER.pack(*fields_) + data[INDEX_HEADER.size:])
    with pytest.raises(IndexPartError, match="section hashes"):
        CutFile.open(path, verify=False)


def test_a_part_that_is_not_the_heads_is_refused_even_unverified(tmp_path: Path) -> None:
    """A part under the head's name whose CRC is not the one the head was written with (another
    write's, say): refused, never read as this cut's."""
    path, _ = written(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    write_cut(fleet(groups=9), other / "cut")
    index_of(path).write_bytes(index_of(other / "cut").read_bytes())  # sound, but another cut's
    for verify in (True, False):
        with pytest.raises(IndexPartError, match="is not the one the head was written with"):
            CutFile.open(path, verify=verify)


def test_a_missing_part_is_refused(tmp_path: Path) -> None:
    path, _ = written(tmp_path)
    index = index_of(path)
    index.unlink()
    with pytest.raises(IndexPartError, match=f"{path}: its index part {index.name} is missing") as e:
        CutFile.open(path)
    assert e.value.index_path == index


def test_a_slot_naming_no_entry_is_refused_at_the_probe(tmp_path: Path) -> None:
    """Unverified, a damaged slot is found where it is read: a CutFileError, not an IndexError."""
    path, _ = written(tmp_path)
    index = index_of(path)
    data = index.read_bytes()
    layout = INDEX_HEADER.unpack_from(data)[13:13 + 2 * len(cutfile.INDEX_SECTIONS)]
    at = 2 * cutfile.INDEX_SECTIONS.index("slots")
    slots_at, slots_len = layout[at], layout[at + 1]
    damaged = bytearray(data)
    damaged[slots_at:slots_at + slots_len] = (0xFFFFFFF0).to_bytes(4, "little") * (slots_len // 4)
    index.write_bytes(bytes(damaged))
    with CutFile.open(path, verify=False) as cf, pytest.raises(CutFileError, match="slot"):
        cf.route_body("T-1-0")


# ---------------------------------------------------------------- a file replaced under a reader


def test_a_reader_keeps_its_cut_while_a_new_file_is_renamed_over_it(tmp_path: Path) -> None:
    path = tmp_path / "cut"
    old = fleet(groups=12, snapshot_id=1)
    write_cut(old, path)
    reader = CutFile.open(path)
    held = reader.route_body("T-1-0")
    assert held is not None
    held_bytes = bytes(held)
    tables = fleet_tables(groups=12)
    new = with_tables(tables, snapshot_id=2,
                      topic_queue=[dict(r, readQueueNums=1) for r in tables["topic_queue"]] + [queue_row("Only-new", "broker-1")])
    write_cut(new, path, path)
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary name is gone
    assert reader.snapshot_id == 1 and "Only-new" not in reader
    for topic in old.topics:
        body = reader.route_body(topic)
        assert (None if body is None else bytes(body)) == route_reads.route_body(old, topic)
    assert bytes(reader.cluster_info_body()) == route_reads.cluster_info_body(old)
    reader.close()
    assert bytes(held) == held_bytes  # an answer handed out stays whole after close
    assert_answers(new, path)


def test_the_crc_covers_the_header_and_every_section(tmp_path: Path) -> None:
    path, data = written(tmp_path)
    part = index_of(path).read_bytes()
    for header, bytes_ in ((HEADER, data), (INDEX_HEADER, part)):
        crc = int.from_bytes(bytes_[header.size - 4:header.size], "little")
        assert crc == zlib.crc32(bytes_[header.size:], zlib.crc32(bytes_[:header.size - 4]))
    fields_ = HEADER.unpack_from(data)
    assert (fields_[10], fields_[11]) == (len(part), int.from_bytes(part[INDEX_HEADER.size - 4:INDEX_HEADER.size], "little"))
    layout = fields_[13:19]
    tables = data[layout[2]:layout[2] + layout[3]]
    assert fields_[9] == hashlib.blake2b(tables, digest_size=16).digest()  # tables_digest
