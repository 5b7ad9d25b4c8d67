"""The cut file in two parts (snapshots/cutfile.py): the host's builder (snapshots/cutbuilder.py)
writes a cut that changes no route as a new head only, a serving store (snapshots/store.py) then
reads only that head, a head whose index part is missing or damaged is refused with the last cut
kept, and the builder removes old index parts, keeping the ones a reader may still be opening.

Real files in a temporary directory, the real builder and a real serving store over them; the
cuts are Snapshots built from rows (no Delta is read: the store's warehouse is empty)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from snapshots import cutbuilder, cutfile
from snapshots.cutfile import CutFile, write_cut
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore
from tests.serving.test_cutfile import fleet_tables, queue_row, with_tables

TABLES = fleet_tables(groups=10, per_group=4)


def beating(snapshot_id: int, tables: dict[str, list[dict[str, Any]]] = TABLES) -> Snapshot:
    """A cut that moved only the heartbeats (and its id and commit time)."""
    live = [dict(r, lastUpdateTimestamp=r["lastUpdateTimestamp"] + 1000 * snapshot_id) for r in tables["broker_live"]]
    return with_tables(tables, snapshot_id=snapshot_id, broker_live=live)


def tables_of(n: int) -> dict[str, list[dict[str, Any]]]:
    """The fleet with a topic of its own, `Only-<n>`: routes of their own."""
    return {**TABLES, "topic_queue": TABLES["topic_queue"] + [queue_row(f"Only-{n}", "broker-1")]}


def routed(snapshot_id: int) -> Snapshot:
    """A cut whose routes changed."""
    return with_tables(tables_of(snapshot_id), snapshot_id=snapshot_id)


def parts(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("index-*.idx")}


def serving(path: Path) -> SnapshotStore:
    return SnapshotStore(SnapshotReader(path.parent / "no-warehouse"), 1.0, retention_ms=60_000, cut_file=path)


def assert_routes(store: SnapshotStore, snap: Snapshot) -> None:
    assert store.current.snapshot_id == snap.snapshot_id
    for topic in [*snap.topics, "NoSuchTopic"]:
        assert route_reads.route_body(store.current, topic) == route_reads.route_body(snap, topic), topic
    assert route_reads.cluster_info_body(store.current) == route_reads.cluster_info_body(snap)


def test_a_liveness_only_cut_rewrites_only_the_head_and_readers_serve_its_live_table(tmp_path: Path) -> None:
    path = tmp_path / "cuts" / "current.cut"
    builder = cutbuilder.CutBuilder(path)
    store = serving(path)
    try:
        builder(beating(1), True)
        assert store.refresh()
        first = store.current.cut
        assert isinstance(first, CutFile) and not first.index_reused
        (index,) = parts(path.parent)
        before, head_before = (path.parent / index).stat(), path.stat()

        for snapshot_id in (2, 3):
            snap = beating(snapshot_id)
            builder(snap, True)
            assert builder.last is not None and (builder.last.reused, builder.last.index_written) == ("index", False)
            after = (path.parent / index).stat()
            assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # the part untouched
            assert path.stat().st_ino != head_before.st_ino  # a new head
            assert store.refresh()
            served = store.current.cut
            assert isinstance(served, CutFile) and served.index_reused and served.index_path.name == index
            assert store.current.live == snap.live and store.current.live != first.rest_snapshot().live
            assert_routes(store, snap)
        assert parts(path.parent) == {index}

        snap = routed(4)
        builder(snap, True)
        assert builder.last is not None and builder.last.index_written
        assert store.refresh()
        served = store.current.cut
        assert isinstance(served, CutFile) and not served.index_reused and served.index_path.name != index
        assert_routes(store, snap)
    finally:
        builder.close()


def test_a_head_naming_a_missing_or_damaged_part_is_refused_and_the_last_cut_kept(tmp_path: Path) -> None:
    path = tmp_path / "current.cut"
    first = routed(1)
    write_cut(first, path)
    store = serving(path)
    assert store.refresh() and store.cut_problem is None

    second = routed(2)
    stats = write_cut(second, path, path)
    part = stats.index_path.read_bytes()
    stats.index_path.unlink()  # as a builder that removed it after newer cuts
    assert not store.refresh()
    assert_routes(store, first)
    problem = store.cut_problem or ""
    assert problem.startswith(f"the cut file {path} cannot be served: IndexPartError: {path}: its index part "
                              f"{stats.index_path.name} is missing"), problem
    assert store.not_ready() == problem
    assert not store.refresh() and store.cut_problem == problem  # nothing changed: nothing tried

    stats.index_path.write_bytes(part)  # the part is back (the head unchanged): tried again, served
    assert store.refresh() and store.cut_problem is None
    assert_routes(store, second)

    third = routed(3)
    stats = write_cut(third, path, path)
    damaged = bytearray(stats.index_path.read_bytes())
    damaged[-3] ^= 0x40  # a byte of the last section
    stats.index_path.write_bytes(bytes(damaged))
    assert not store.refresh()
    assert_routes(store, second)
    problem = store.cut_problem or ""
    assert f"its index part {stats.index_path.name} cannot be used: " in problem and "corrupted: CRC-32" in problem

    write_cut(third, path)  # the builder writes it again (a from-scratch write renames a sound part over it)
    assert store.refresh() and store.cut_problem is None
    assert_routes(store, third)


def test_old_index_parts_are_pruned_keeping_the_heads_and_the_one_before(tmp_path: Path) -> None:
    path = tmp_path / "current.cut"
    builder = cutbuilder.CutBuilder(path)
    held: list[tuple[CutFile, Snapshot]] = []
    try:
        named: list[str] = []  # the part each head named, in order
        for snapshot_id in range(1, 9):
            # every third cut moves only the heartbeats of the one before
            snap = routed(snapshot_id) if snapshot_id % 3 else beating(snapshot_id, tables_of(snapshot_id - 1))
            builder(snap, True)
            head = cutfile.index_part_named_by(path)
            assert head is not None
            named.append(head)
            distinct = list(dict.fromkeys(reversed(named)))  # newest first
            assert parts(tmp_path) == set(distinct[:2]), snapshot_id  # the head's and the last other one
            held.append((CutFile.open(path), snap))
        # a reader that mapped a cut whose part was removed since still answers it whole
        old, snap = held[0]
        assert not old.index_path.exists()
        for topic in snap.topics:
            body = old.route_body(topic)
            assert (None if body is None else bytes(body)) == route_reads.route_body(snap, topic), topic

        # a dead writer's temporary part goes at the next write; a head's temporary file is not a part
        leftover = tmp_path / f".{cutfile.INDEX_PREFIX}{'0' * 32}{cutfile.INDEX_SUFFIX}.{2**22 + 1}.tmp"
        other = tmp_path / f".current.cut.{2**22 + 1}.tmp"
        leftover.write_bytes(b"x")
        other.write_bytes(b"x")
        builder(routed(20), True)
        assert not leftover.exists() and other.exists() and len(parts(tmp_path)) == 2
    finally:
        builder.close()
        for f, _ in held:
            f.close()

    # a restarted builder keeps the part of the head it finds, as the one before its first write's
    kept = cutfile.index_part_named_by(path)
    again = cutbuilder.CutBuilder(path)
    try:
        again(routed(21), True)
        assert parts(tmp_path) == {kept, cutfile.index_part_named_by(path)}
    finally:
        again.close()
