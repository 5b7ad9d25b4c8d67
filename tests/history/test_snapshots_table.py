"""`SnapshotsTable.rows_between`, the filtered read of the `snapshots` table a watch's resume and
the risks' folds make: a small real Delta table written with deltalake in tmp_path (no Spark), a
data file per cut as the sink commits them, so the file count `limit` compares is known."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from deltalake import write_deltalake

from schemas import tables as t
from snapshots.reader import SnapshotsTable, snapshot_bounds


def cut_row(snapshot_id: int) -> dict[str, Any]:
    """A `snapshots` row; committed at snapshot_id seconds (epoch ms), its versions its id."""
    row: dict[str, Any] = {field.name: snapshot_id for field in t.SNAPSHOTS.schema}
    row.update(commitTime=snapshot_id * 1000, sourceOffsets="{}")
    return row


def commit(warehouse: Path, *ids: int) -> None:
    """One Delta commit of one data file holding the rows of `ids`, in that order."""
    write_deltalake(str(warehouse / t.SNAPSHOTS.name), t.SNAPSHOTS.from_rows([cut_row(i) for i in ids]), mode="append")


def ids(rows: list[dict[str, Any]] | None) -> list[int] | None:
    return None if rows is None else [r["snapshotId"] for r in rows]


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """Cuts 1..6 a file each, then 8 and 7 in one file (out of id order within it)."""
    for i in range(1, 7):
        commit(tmp_path, i)
    commit(tmp_path, 8, 7)
    return tmp_path


def test_bounds_are_inclusive_and_open_when_none(warehouse):
    table = SnapshotsTable(warehouse)
    assert ids(table.rows_between(2, 4)) == [2, 3, 4]
    assert ids(table.rows_between(None, 3)) == [1, 2, 3]
    assert ids(table.rows_between(6, None)) == [6, 7, 8]  # sorted by id across and within files
    assert ids(table.rows_between(None, None)) == list(range(1, 9))
    assert table.rows_between(5, 4) == [] and table.rows_between(9, None) == []
    assert ids(table.rows_between(None, None, since_ms=5000)) == [5, 6, 7, 8]
    assert ids(table.rows_between(2, 6, since_ms=5000)) == [5, 6]


def test_columns_are_those_asked_and_rows_whole_otherwise(warehouse):
    table = SnapshotsTable(warehouse)
    assert table.rows_between(2, 3, columns=("commitTime", "snapshotId")) == [
        {"commitTime": 2000, "snapshotId": 2}, {"commitTime": 3000, "snapshotId": 3}]
    assert table.rows_between(7, 8, columns=("commitTime",)) == [{"commitTime": 7000}, {"commitTime": 8000}]  # id order
    assert table.rows_between(4, 4) == [cut_row(4)]


def test_more_files_or_rows_than_the_limit_is_none(warehouse):
    table = SnapshotsTable(warehouse)
    assert ids(table.rows_between(2, 4, limit=3)) == [2, 3, 4]
    assert table.rows_between(2, 4, limit=2) is None  # three files in range
    assert ids(table.rows_between(7, 8, limit=2)) == [7, 8]
    assert table.rows_between(7, 8, limit=1) is None  # one file, two rows
    # the limit counts the files the statistics leave (of eight): pruned on ids, and on commit times
    assert ids(table.rows_between(1, 3, limit=3)) == [1, 2, 3]
    assert ids(table.rows_between(None, None, since_ms=6000, limit=3)) == [6, 7, 8]
    assert table.rows_between(None, None, limit=7) is None


def test_no_table_yet_is_empty_and_new_commits_are_read(tmp_path):
    table = SnapshotsTable(tmp_path)
    assert table.rows_between(None, None) == [] and table.rows_between(1, 5, limit=0) == []
    commit(tmp_path, 1)
    assert ids(table.rows_between(None, None)) == [1]
    commit(tmp_path, 2)  # the kept handle is brought up to date
    assert ids(table.rows_between(1, None)) == [1, 2]


def test_a_table_replaced_under_it_fails_once_then_is_opened_again(warehouse):
    table = SnapshotsTable(warehouse)
    assert ids(table.rows_between(1, 2)) == [1, 2]
    shutil.rmtree(warehouse / t.SNAPSHOTS.name)  # a restored warehouse: other files, the log from version 0
    commit(warehouse, 1, 2)
    with pytest.raises(FileNotFoundError):  # the old handle names the removed files
        table.rows_between(1, 2)
    assert ids(table.rows_between(1, 2)) == [1, 2]  # the handle was dropped: read from the new table
    shutil.rmtree(warehouse / t.SNAPSHOTS.name)
    with pytest.raises(FileNotFoundError):
        table.rows_between(None, None)
    assert table.rows_between(None, None) == []  # gone: as before the first commit


def test_bounds_prune_loosely_and_filter_exactly():
    assert snapshot_bounds(None, None) == (None, None)
    pruning, flt = snapshot_bounds(3, 7, 1500)
    assert pruning == "snapshotId >= 3 AND snapshotId <= 7 AND commitTime >= 1500"
    assert flt is not None and "snapshotId" in str(flt) and "commitTime" in str(flt)
    assert snapshot_bounds(None, 7)[0] == "snapshotId <= 7"
