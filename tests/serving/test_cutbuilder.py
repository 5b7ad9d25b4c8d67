"""The host's cut builder (snapshots/cutbuilder.py): `python -m snapshots.cutbuilder` writes the
file of the newest cut, replaces it when the job commits a new one, holds the host's lock while it
runs, and a restarted builder leaves a file that already holds the newest cut alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conf import load_config
from routeinfo import route_reads
from schemas import events as ev
from snapshots import cutbuilder
from snapshots.cutfile import CutFile, CutFileError
from snapshots.reader import SnapshotReader
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _file(path: Path) -> tuple[int, int | None] | None:
    """(inode, snapshot id) of the cut file, or None while there is none."""
    try:
        with CutFile.open(path) as f:
            return path.stat().st_ino, f.snapshot_id
    except (OSError, CutFileError):
        return None


def _wait(probe, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None or found is False:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return found


def _newest(tmp_path: Path):
    reader = SnapshotReader(tmp_path / "delta")
    return reader.load(reader.newest_row())


def test_the_builder_process_writes_the_newest_cut_and_replaces_it_when_the_job_commits(tmp_path):
    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("cb-a", 0, "127.0.0.1:36911", tps=topics("CbTopic", "CbBase"))], int(time.time() * 1000))
    path = tmp_path / "cuts" / "current.cut"
    env = {**os.environ, "NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REFRESH_INTERVAL_MS": "50"}
    proc = subprocess.Popen([sys.executable, "-m", "snapshots.cutbuilder"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        first = _newest(tmp_path)
        ino, held = _wait(lambda: _file(path), 60, "the first cut file")
        assert held == first.snapshot_id
        with CutFile.open(path) as f:
            for topic in ("CbTopic", "CbBase", "Nope"):
                body = f.route_body(topic)
                assert (None if body is None else bytes(body)) == route_reads.route_body(first, topic)
            assert bytes(f.cluster_info_body()) == route_reads.cluster_info_body(first)
        assert cutbuilder.BuilderLock.acquire(path.parent, wait=False) is None  # the builder holds it

        d.run_batch([ev.delete_topic_event("CbTopic", "cb-a")], int(time.time() * 1000))
        second = _newest(tmp_path)
        new_ino, new_held = _wait(lambda: (f := _file(path)) is not None and f[1] != held and f, 30, "the new cut")
        assert (new_ino != ino, new_held) == (True, second.snapshot_id)
        with CutFile.open(path) as f:
            assert f.route_body("CbTopic") is None and bytes(f.route_body("CbBase")) == \
                route_reads.route_body(second, "CbBase")
            assert f.index_path.exists() and 1 <= len(list(path.parent.glob("index-*.idx"))) <= 2
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lock = cutbuilder.BuilderLock.acquire(path.parent, wait=False)  # released with the process
    assert lock is not None
    lock.release()


def test_a_restarted_builder_keeps_a_file_that_holds_the_newest_cut_and_writes_the_empty_cut_once(tmp_path):
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    path = cutbuilder.cut_path(cfg)
    empty = cutbuilder.InProcessBuilder.start(cfg)  # no warehouse yet: the empty cut, so servers answer as before
    assert empty is not None and cutbuilder.InProcessBuilder.start(cfg) is None  # one builder per host
    empty.stop(5)
    assert _file(path)[1] is None

    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("cb-b", 0, "127.0.0.1:36912", tps=topics("CbOther"))], int(time.time() * 1000))
    built = cutbuilder.InProcessBuilder.start(cfg)
    assert built is not None
    built.stop(5)
    ino, held = _file(path)
    assert held == _newest(tmp_path).snapshot_id and built.builder.last is not None
    again = cutbuilder.InProcessBuilder.start(cfg)
    assert again is not None
    again.stop(5)
    assert _file(path) == (ino, held) and again.builder.last is None  # not written again


def test_a_restarted_builder_rewrites_a_damaged_head_or_index_part_of_the_newest_cut(tmp_path):
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("cb-d", 0, "127.0.0.1:36913", tps=topics("CbDamaged"))], int(time.time() * 1000))
    built = cutbuilder.InProcessBuilder.start(cfg)
    assert built is not None
    built.stop(5)
    path = cutbuilder.cut_path(cfg)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the header still names the newest cut; a body byte is not what was written
    path.write_bytes(bytes(data))
    again = cutbuilder.InProcessBuilder.start(cfg)
    assert again is not None
    again.stop(5)
    assert again.builder.last is not None and _file(path)[1] == _newest(tmp_path).snapshot_id

    with CutFile.open(path) as f:  # the head sound, its index part damaged: written again too
        index = f.index_path
    part = bytearray(index.read_bytes())
    part[-1] ^= 0xFF
    index.write_bytes(bytes(part))
    third = cutbuilder.InProcessBuilder.start(cfg)
    assert third is not None
    third.stop(5)
    assert third.builder.last is not None and third.builder.last.index_written
    assert _file(path)[1] == _newest(tmp_path).snapshot_id and index.read_bytes() != bytes(part)
