"""The kernel's notice of a replaced file (snapshots/file_watch.py), and a store woken by it instead
of its timers (snapshots/store.py): a new progress record is seen at once, and an idle store
refreshes once per WATCHED_REFRESH_S, not every refresh interval."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from conf.store import replace_text
from schemas.progress import PROGRESS_FILE
from snapshots import store as store_module
from snapshots.file_watch import FileWatch
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore


def _assert_refreshed_at_once(store: SnapshotStore, refreshes: list[float], warehouse, batch_id: int) -> None:
    """The job rewrites its progress record: the store refreshes within 0.2 s and reads it."""
    before = len(refreshes)
    written = time.monotonic()
    replace_text(warehouse / PROGRESS_FILE, f'{{"batchId": {batch_id}}}')
    deadline = time.monotonic() + 2
    while len(refreshes) == before and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(refreshes) > before and refreshes[before] - written < 0.2
    assert store.progress == {"batchId": batch_id}


def _watched_store(warehouse) -> tuple[SnapshotStore, list[float]]:
    """A started store (a 50 ms refresh interval) over a local warehouse, once its first refresh
    has set its watch up, and the times of its refreshes."""
    refreshes: list[float] = []
    store = SnapshotStore(SnapshotReader(warehouse), 0.05, retention_ms=1000)
    store.add_listener(lambda _snap, _swapped: refreshes.append(time.monotonic()))
    store.start()
    deadline = time.monotonic() + 5
    while store._watch is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store._watch is not None, "a local warehouse's files are watched"
    return store, refreshes


def test_a_watch_hears_its_files_replaced_written_and_removed_and_nothing_else(tmp_path):
    heard = threading.Semaphore(0)
    watched, other = tmp_path / "a.json", tmp_path / "b.json"
    watch = FileWatch([watched], heard.release)
    try:
        replace_text(other, "x")  # a sibling's rename (and its temporary file's write) is not the watched file's
        assert not heard.acquire(timeout=0.3)
        replace_text(watched, "1")
        assert heard.acquire(timeout=2)
        watched.write_text("2")  # written in place and closed
        assert heard.acquire(timeout=2)
        watched.unlink()
        assert heard.acquire(timeout=2)
    finally:
        watch.close()
    replace_text(watched, "3")  # closed: no more calls
    assert not heard.acquire(timeout=0.3)


def test_a_directory_that_is_not_there_cannot_be_watched(tmp_path):
    with pytest.raises(OSError, match="inotify_add_watch"):
        FileWatch([tmp_path / "missing" / "a.json"], lambda: None)


def test_a_watched_store_refreshes_on_the_jobs_write_and_otherwise_once_per_safety_interval(tmp_path):
    store, refreshes = _watched_store(tmp_path)
    try:
        time.sleep(0.3)
        idle_start = len(refreshes)
        time.sleep(2.0)
        # a 50 ms interval would have refreshed ~40 times; the watched store's safety net twice
        assert len(refreshes) - idle_start <= 2.0 / store_module.WATCHED_REFRESH_S + 1
        _assert_refreshed_at_once(store, refreshes, tmp_path, 1)
    finally:
        assert store.stop(5)
    assert store._watch is None  # closed with the refresher


def test_a_watch_whose_directory_is_replaced_says_so_and_the_store_watches_the_new_one(tmp_path):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    heard = threading.Semaphore(0)
    watch = FileWatch([warehouse / PROGRESS_FILE], heard.release)
    try:
        warehouse.rename(tmp_path / "old")
        assert heard.acquire(timeout=2) and watch.broken
    finally:
        watch.close()
    warehouse.mkdir()  # a warehouse restored in its place
    store, refreshes = _watched_store(warehouse)
    try:
        first = store._watch
        shutil.rmtree(warehouse)
        warehouse.mkdir()
        deadline = time.monotonic() + 5
        while (store._watch is first or store._watch is None) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store._watch is not None and store._watch is not first, "the new directory is watched"
        time.sleep(0.1)
        _assert_refreshed_at_once(store, refreshes, warehouse, 7)
    finally:
        assert store.stop(5)
