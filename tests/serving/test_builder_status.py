"""The host's cut builder says how it fares in `<data dir>/cuts/builder.json` (issue 36), and a
serving store whose cut is behind the job's, or that finds no cut file, says in its readiness that
the builder failed and why, or that it is not running.

Real files on disk: a warehouse written by the real sink (no Spark), the real builder writing the
real cut file and status, a real serving store mapping it; the failure is a cut writer given to
the builder that raises the disk-full error, the dead builder a real `python -m snapshots.cutbuilder`
killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from conf import Config, load_config
from conf.processes import process_alive, process_start
from routeinfo.snapshot import Snapshot
from schemas import events as ev
from schemas.metrics import SnapshotMetrics
from snapshots import cutbuilder
from snapshots.cutfile import CutFile, CutFileStats, write_cut
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics

ROOT = Path(__file__).resolve().parents[2]


def _job(tmp_path: Path) -> SinkDriver:
    """The job's sink over a warehouse on disk, its instance announced as running (`/readyz` asks)."""
    d = SinkDriver(tmp_path / "delta")
    d.sink.announce_start()
    return d


def _status(cfg: Config) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(cutbuilder.status_path(cfg).read_text())
    return status


def _serving(cfg: Config, metrics: SnapshotMetrics | None = None, grace_s: float = 0.0) -> SnapshotStore:
    store = SnapshotStore(SnapshotReader(cfg.warehouse), 1.0, retention_ms=cfg.history_retention_ms,
                          cut_file=cutbuilder.cut_path(cfg), metrics=metrics)
    store.BUILDER_GRACE_S = grace_s
    return store


class DiskFull:
    """A cut writer that fails as a full disk does while `full` is set."""

    def __init__(self) -> None:
        self.full = False

    def __call__(self, snap: Snapshot, path: Path, previous: CutFile | Path | None) -> CutFileStats:
        if self.full:
            raise OSError(28, "No space left on device")
        return write_cut(snap, path, previous)


def test_a_failing_builder_is_named_by_readiness_until_its_next_cut_clears_it(tmp_path):
    d = _job(tmp_path)
    d.run_batch([reg("bs-a", 0, "127.0.0.1:36921", tps=topics("BsOne", "BsTwo"))], int(time.time() * 1000))
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    disk = DiskFull()
    builder = cutbuilder.InProcessBuilder.start(cfg, write=disk)
    assert builder is not None
    registry = CollectorRegistry()
    served, patient = _serving(cfg, SnapshotMetrics(registry)), _serving(cfg, grace_s=3600.0)
    try:
        first = builder.store.current.snapshot_id
        status = _status(cfg)
        assert (status["pid"], status["lastCut"]["snapshotId"], status["failure"]) == (os.getpid(), first, None)
        served.refresh()
        assert (served.current.snapshot_id, served.not_ready()) == (first, None)

        disk.full = True
        d.run_batch([ev.delete_topic_event("BsTwo", "bs-a")], int(time.time() * 1000))
        for _ in range(3):  # each refresh tries the newest cut again
            builder.refresh()
        second = builder.store.current.snapshot_id
        assert second is not None and first is not None and second > first
        failure = _status(cfg)["failure"]
        assert failure["consecutive"] == 3 and failure["message"] == "OSError: [Errno 28] No space left on device"
        assert _status(cfg)["lastCut"]["snapshotId"] == first

        served.refresh()
        patient.refresh()
        reason = served.not_ready() or ""
        assert reason.startswith(f"the host's cut builder (pid {os.getpid()}) has failed 3 times since "), reason
        assert reason.endswith(f": OSError: [Errno 28] No space left on device; serving cut {first} while the job "
                               f"committed {second}"), reason
        assert registry.get_sample_value("namesrv_snapshot_builder_failures") == 3
        assert patient.not_ready() is None  # within the grace a failure the next attempt mends takes no one out

        disk.full = False
        builder.refresh()
        status = _status(cfg)
        assert (status["failure"], status["lastCut"]["snapshotId"]) == (None, second)
        served.refresh()
        assert (served.current.snapshot_id, served.not_ready()) == (second, None)
        assert registry.get_sample_value("namesrv_snapshot_builder_failures") == 0

        # a failure with the served cut current (the job committed nothing since) is no reason
        builder.builder.status.failed("OSError: an old one")  # type: ignore[union-attr]
        served.refresh()
        assert served.not_ready() is None
        assert registry.get_sample_value("namesrv_snapshot_builder_failures") == 1
    finally:
        builder.stop(5)


def test_a_dead_builder_is_reported_as_not_running(tmp_path):
    d = _job(tmp_path)
    d.run_batch([reg("bs-b", 0, "127.0.0.1:36922", tps=topics("BsThree", "BsFour"))], int(time.time() * 1000))
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    env = {**os.environ, "NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REFRESH_INTERVAL_MS": "50"}
    proc = subprocess.Popen([sys.executable, "-m", "snapshots.cutbuilder"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        first = SnapshotReader(cfg.warehouse).newest_row()["snapshotId"]  # type: ignore[index]
        deadline = time.monotonic() + 30
        while True:
            try:
                status = _status(cfg)
                if status["pid"] == proc.pid and status["lastCut"]["snapshotId"] == first:
                    break
            except (OSError, ValueError):
                pass
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the builder wrote no status naming its first cut within 30 s"
            time.sleep(0.05)
        served = _serving(cfg)
        served.refresh()
        assert (served.current.snapshot_id, served.not_ready()) == (first, None)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        served.refresh()
        assert served.not_ready() is None  # down, but the cut served is the newest: nothing to say yet

        d.run_batch([ev.delete_topic_event("BsFour", "bs-b")], int(time.time() * 1000))
        served.refresh()
        second = served.progress["snapshotId"]  # type: ignore[index]
        reason = served.not_ready() or ""
        assert reason.startswith(f"the cut builder is not running (last seen pid {proc.pid} at "), reason
        assert reason.endswith(f"; serving cut {first} while the job committed {second}"), reason

        cutbuilder.cut_path(cfg).unlink()  # and with no file, the missing file says why
        fresh = _serving(cfg)
        fresh.refresh()
        assert (fresh.not_ready() or "").startswith(
            f"no cut file at {cutbuilder.cut_path(cfg)}: the cut builder is not running (last seen pid {proc.pid} at ")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_pid_taken_by_a_later_process_is_not_the_builder():
    pid = os.getpid()
    started = process_start(pid)
    assert started is not None and process_alive(pid, started) and process_alive(pid, None)
    assert not process_alive(pid, started + 1)  # the same pid, another process's start
    gone = subprocess.Popen(["true"])
    gone.wait(10)
    assert not process_alive(gone.pid, None)  # exited and reaped
