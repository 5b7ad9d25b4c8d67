"""A log that went back under the job (a wiped or recreated log): the source counts the reset in the
batch's offsets (`kafka_source.count_resets`, `offset_log.RESETS`), and a write published into the
new log is told served only once the served cut counts it (`snapshots.freshness.includes`). Before,
a write whose offset was below the old log's consumed offset was answered at once from a cut that
did not hold it (seen in CI: a KV PUT answered `{"value": null}` after Kafka lost its log)."""

from __future__ import annotations

from pipelines.kafka_source import count_resets
from pipelines.offset_log import LOG_CLOCK, RESETS, log_resets, partition_offsets
from routeinfo.snapshot import Snapshot, build_snapshot
from schemas import tables as t
from snapshots.freshness import LogMark, includes, log_mark, served_mark


def _cut(snapshot_id: int, offsets: str = "{}") -> Snapshot:
    row = {"snapshotId": snapshot_id, "commitTime": 0, "sourceOffsets": offsets,
           **{t.version_column(x): 0 for x in t.CUT_TABLES}}
    return build_snapshot(row, {x.name: [] for x in t.STATE_TABLES})


def _includes(snap: Snapshot, progress: dict | None, coords: list[tuple[int, int]],
              mark: LogMark | None = None) -> bool:
    return includes(served_mark(snap, progress), coords, mark)


def _progress(snapshot_id: int, offsets: dict[str, int], resets: dict[str, int] | None = None) -> dict:
    return {"snapshotId": snapshot_id, "sourceOffsets": offsets, **({"resets": resets} if resets is not None else {})}


def test_a_batch_whose_offset_goes_back_counts_one_reset_and_carries_the_earlier_ones():
    assert count_resets({"0": 41, "1": 2}, {"0": 45, "1": 2}) == {}
    assert count_resets({"0": 41, "1": 2}, {"0": 1, "1": 2}) == {"0": 1}
    assert count_resets({"0": 1, "1": 2, RESETS: {"0": 1}}, {"0": 3, "1": 0}) == {"0": 1, "1": 1}
    assert count_resets({"0": 5, RESETS: {"0": 1}}, {"0": 0}) == {"0": 2}
    # a partition new to the job (no start offset) did not go back
    assert count_resets({"0": 5}, {"0": 5, "1": 0}) == {}


def test_the_resets_entry_is_not_taken_for_the_connectors_per_topic_offsets():
    raw = {"0": 3, "1": 7, "tick": 2, LOG_CLOCK: {"0": 10}, RESETS: {"1": 1}}
    assert partition_offsets(raw) == {"0": 3, "1": 7}
    assert log_resets(raw) == {"1": 1}
    assert log_resets({"0": 3}) == {}


def test_a_write_into_the_same_log_is_served_by_offsets():
    before = log_mark(_progress(5, {"0": 10, "1": 2}))
    assert not _includes(_cut(5), _progress(5, {"0": 10, "1": 2}), [(1, 2)], before)
    assert _includes(_cut(6), _progress(6, {"0": 10, "1": 3}), [(1, 2)], before)


def test_a_write_into_a_log_that_went_back_waits_for_the_reset_to_be_counted():
    before = log_mark(_progress(5, {"0": 41, "1": 2}))
    coords = [(1, 0)]  # the new log's first record: the old log's consumed offset (2) is past it
    # the job still stands at the old log's offset: no answer from it (the bug: this said served)
    assert not _includes(_cut(5), _progress(5, {"0": 41, "1": 2}), coords, before)
    # without the mark only offsets are compared, and they cannot tell
    assert _includes(_cut(5), _progress(5, {"0": 41, "1": 2}), coords)
    # the job believed the reset and read the new log: served
    assert _includes(_cut(6), _progress(6, {"0": 41, "1": 1}, {"1": 1}), coords, before)
    # read from the new log, but not up to the write yet
    assert not _includes(_cut(6), _progress(6, {"0": 41, "1": 0}, {"1": 1}), coords, before)
    # the progress is ahead of the served cut: the cut's own row does not say which log it read
    assert not _includes(_cut(5, '{"0": 41, "1": 2}'), _progress(6, {"0": 41, "1": 1}, {"1": 1}), coords, before)


def test_a_reset_counted_before_the_write_does_not_stand_for_a_later_one():
    before = log_mark(_progress(8, {"1": 3}, {"1": 1}))
    assert before == LogMark({"1": 3}, {"1": 1})
    assert not _includes(_cut(8), _progress(8, {"1": 3}, {"1": 1}), [(1, 0)], before)
    assert _includes(_cut(9), _progress(9, {"1": 1}, {"1": 2}), [(1, 0)], before)


def test_without_progress_nothing_is_taken_for_gone():
    assert log_mark(None) == LogMark({}, {})
    assert not _includes(_cut(1), None, [(0, 0)], log_mark(None))  # the empty cut's offsets cover nothing
    assert _includes(_cut(1, '{"0": 1}'), None, [(0, 0)], log_mark(None))
