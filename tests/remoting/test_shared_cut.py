"""Serving processes answer from the host's shared cut file (issue 36, snapshots/mapped.py).

Two real serving processes (the HTTP server and the remoting front) over one builder's file
answer every topic's route and the cluster info byte for byte alike, and as `route_reads` answers
over the cut loaded from Delta; both map the file rather than load the cut. A file replaced under
a reader many times never yields a torn answer: each is wholly the cut it is stamped with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from conf import load_config
from ops.net import free_port
from ops.procs import stop_group
from remoting import codes
from remoting.client import RemotingClient
from remoting.front import Front
from remoting.replies import SNAPSHOT_EXT
from routeinfo import route_reads
from snapshots import cutbuilder
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore
from tests.delta_history import SinkDriver
from tests.differential.in_memory import InMemoryLog
from tests.harness import FrontThread
from tests.helpers import reg, topics
from tests.remoting.test_cut_swap import BROKERS, OCTET, QUEUES, SwappingReader

ROOT = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def _maps_file(pid: int, path: Path | str) -> bool:
    """Whether the process (or one it started: granian's worker) maps the file (the cut file; a
    part of a path: a package's libraries)."""
    for p in _descendants(pid):
        try:
            if str(path) in Path(f"/proc/{p}/maps").read_text():
                return True
        except OSError:
            continue
    return False


def _start(module: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _stop(proc: subprocess.Popen[str]) -> None:
    stop_group(proc, 15)


@pytest.mark.integration
def test_two_serving_processes_answer_identically_from_one_shared_cut(tmp_path):
    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("sc-a", 0, "127.0.0.1:36911", tps=topics("ScOne", "ScBoth"), zone="az1"),
                 reg("sc-a", 1, "127.0.0.1:36912", tps=topics("ScOne", "ScBoth")),
                 reg("sc-b", 0, "127.0.0.1:36913", tps=topics("ScBoth", "ScTwo", "Ünïcode"), cluster="Other")],
                int(time.time() * 1000))
    reader = SnapshotReader(tmp_path / "delta")
    snap = reader.load(reader.newest_row())
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    builder = cutbuilder.InProcessBuilder.start(cfg)  # the host's builder: both servers only read its file
    assert builder is not None
    http_port, remoting_port = free_port(), free_port()
    env = {**os.environ, "NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_HTTP_PORT": str(http_port),
           "NAMESRV_REMOTING_PORT": str(remoting_port), "NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"}
    http, front = _start("serving", env), _start("remoting", env)
    try:
        def up() -> bool:
            for proc in (http, front):
                assert proc.poll() is None, proc.communicate()[0]
            try:
                served = requests.get(f"http://127.0.0.1:{http_port}/healthz", timeout=5).json()["snapshotId"]
                with RemotingClient(f"127.0.0.1:{remoting_port}", timeout_s=5) as c:
                    stamp = c.call(codes.GET_BROKER_CLUSTER_INFO, {}).ext.get(SNAPSHOT_EXT)
            except (OSError, ValueError):
                return False
            return served == snap.snapshot_id and stamp == str(snap.snapshot_id)

        deadline = time.monotonic() + 60
        while not up():
            assert time.monotonic() < deadline, "the two servers did not serve the cut within 60 s"
            time.sleep(0.1)
        names = sorted(snap.topics)
        assert len(names) == 4
        with RemotingClient(f"127.0.0.1:{remoting_port}", timeout_s=10) as c:
            for topic in [*names, "NoSuchTopic"]:
                expected = route_reads.route_body(snap, topic)
                over_http = requests.get(f"http://127.0.0.1:{http_port}/topics/{topic}/route", timeout=10)
                over_remoting = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                if expected is None:
                    assert (over_http.status_code, over_remoting.code) == (404, codes.TOPIC_NOT_EXIST)
                    continue
                assert over_http.content == over_remoting.body == expected, topic
            zoned = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "ScOne", "__ZONE_MODE": "true", "__ZONE_NAME": "az1"})
            assert zoned.body == route_reads.encode_body(route_reads.topic_route(snap, "ScOne", zone="az1"))
            info = c.call(codes.GET_BROKER_CLUSTER_INFO, {})
            assert requests.get(f"http://127.0.0.1:{http_port}/cluster", timeout=10).content == info.body \
                == route_reads.cluster_info_body(snap)
            listed = c.call(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
            assert json.loads(listed.body) == route_reads.all_topics(snap)
        path = cutbuilder.cut_path(cfg)
        assert _maps_file(http.pid, path) and _maps_file(front.pid, path)
        # A serving process refuses pandas (conf/imports.py), which pyarrow would import unasked:
        # the HTTP server's read paths answer without it, and neither server has loaded it.
        for read in ("/cluster", "/brokers/live", "/topics", "/topics/system", "/risks", "/history/snapshots",
                     "/history/changes", "/metrics", "/dashboard/api/groups", "/dashboard/api/topics", "/kv/none",
                     f"/topics/ScOne/route?snapshot={snap.snapshot_id}", "/openapi.json"):
            answer = requests.get(f"http://127.0.0.1:{http_port}{read}", timeout=10)
            assert answer.status_code < 500, (read, answer.status_code, answer.text[:300])
        assert not _maps_file(http.pid, "/pandas/_libs/") and not _maps_file(front.pid, "/pandas/_libs/")
    finally:
        _stop(front)
        _stop(http)
        builder.stop(5)


def test_a_cut_file_replaced_under_a_reader_never_yields_a_torn_answer(tmp_path):
    """The builder writes a new file for every cut (ids alternating between two different cuts),
    as fast as it can; a front over the file answers route lookups and the cluster info meanwhile."""
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    lock = cutbuilder.BuilderLock.acquire(cutbuilder.cut_dir(cfg), wait=False)
    assert lock is not None
    source = SnapshotStore(SwappingReader(cfg.warehouse), 0.001, retention_ms=cfg.history_retention_ms)
    builder = cutbuilder.CutBuilder(cutbuilder.cut_path(cfg))
    source.add_listener(builder)
    source.refresh()
    served = SnapshotStore(SnapshotReader(cfg.warehouse), 0.001, retention_ms=cfg.history_retention_ms,
                           cut_file=cutbuilder.cut_path(cfg))
    served.refresh()
    assert served.current.cut is not None, served.not_ready()
    front = FrontThread(Front(cfg, served, lambda: InMemoryLog(cfg.broker_timeout_ms)))  # type: ignore[arg-type]
    served.start()
    written: list[Any] = []
    source.add_listener(lambda snap, swapped: written.append(snap.snapshot_id))
    source.start()
    seen = {"a": 0, "b": 0}
    stamps: set[str] = set()
    try:
        with RemotingClient(front.addr, timeout_s=30) as client:
            stop = time.monotonic() + 3.0
            while time.monotonic() < stop:
                answer = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Swapped"})
                assert answer.code == codes.SUCCESS, answer.remark
                stamps.add(answer.ext[SNAPSHOT_EXT])
                side = "a" if int(answer.ext[SNAPSHOT_EXT]) % 2 else "b"
                seen[side] += 1
                route = json.loads(answer.body)
                brokers = {b["brokerName"] for b in route["brokerDatas"]}
                assert brokers == {f"{side}{i}" for i in range(BROKERS)}, (side, route)
                assert {q["readQueueNums"] for q in route["queueDatas"]} == {QUEUES[side]}, (side, route)
                assert all(b["brokerAddrs"]["0"].startswith(f"10.{OCTET[side]}.") for b in route["brokerDatas"])
                info = client.call(codes.GET_BROKER_CLUSTER_INFO, {})
                info_side = "a" if int(info.ext[SNAPSHOT_EXT]) % 2 else "b"
                assert set(json.loads(info.body)["clusterAddrTable"]) == {f"C{info_side}"}
                only = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "OnlyA"})
                only_side = "a" if int(only.ext[SNAPSHOT_EXT]) % 2 else "b"
                assert only.code == (codes.SUCCESS if only_side == "a" else codes.TOPIC_NOT_EXIST)
    finally:
        source.stop(timeout_s=10)
        served.stop(timeout_s=10)
        front.stop()
        builder.close()
        lock.release()
    # the file really was replaced under the lookups, many times, and both cuts were answered from
    assert builder.last is not None and len(stamps) >= 10 and min(seen.values()) >= 10, (len(stamps), seen)


def test_a_store_over_a_missing_or_damaged_file_says_so_and_loads_nothing_from_delta(tmp_path):
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("sc-c", 0, "127.0.0.1:36914", tps=topics("ScThree"))], int(time.time() * 1000))
    path = cutbuilder.cut_path(cfg)
    store = SnapshotStore(SnapshotReader(cfg.warehouse), 1.0, retention_ms=cfg.history_retention_ms, cut_file=path)
    store.refresh()
    assert store.current.snapshot_id is None and "no cut file at" in (store.not_ready() or "")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"RMQNSCUT" + b"\0" * 500)
    store.refresh()
    assert store.current.snapshot_id is None and "cannot be served" in (store.not_ready() or "")
    path.unlink()
    builder = cutbuilder.InProcessBuilder.start(cfg)  # a builder writes the file: the store maps it
    assert builder is not None
    builder.stop(5)
    store.refresh()
    newest = SnapshotReader(cfg.warehouse).newest_row()
    assert store.current.cut is not None and newest is not None and store.current.snapshot_id == newest["snapshotId"]
    assert "cut file" not in (store.not_ready() or "")
