"""serving.lifecycle (issue 27): creating the app only wires it — no table read, no thread, no
connection — and `start` / `stop` are what refresh the store, run its refresher thread and end
it, and close the Kafka clients."""

from __future__ import annotations

import socket
import threading
from typing import ClassVar

import pytest
from flask import Flask

from conf import load_config
from serving import lifecycle, writes
from serving.app import create_app
from serving.context import EXTENSION
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore


def new_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t not in before and t.is_alive()}


def test_creating_the_app_reads_nothing_starts_no_thread_and_connects_nowhere(tmp_path):
    kafka = socket.socket()  # a listener standing in for the broker: it sees any connection attempt
    kafka.bind(("127.0.0.1", 0))
    kafka.listen()
    kafka.setblocking(False)
    missing = tmp_path / "no-such-dir"
    before = set(threading.enumerate())
    with kafka:
        app = create_app(load_config({"NAMESRV_DATA_DIR": str(missing),
                                      "NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka.getsockname()[1]}"}))
        assert new_threads(before) == set()
        store = app.extensions[EXTENSION]
        assert store.last_check is None and store.current.snapshot_id is None  # never refreshed
        assert not missing.exists()
        client = app.test_client()
        health = client.get("/healthz").json
        assert health["status"] == "starting" and health["lastCheckAgeMs"] is None
        ready = client.get("/readyz")  # an app not started is not ready: no cut is served
        assert ready.status_code == 503 and ready.json["reason"].startswith("no snapshot is served yet")
        with pytest.raises(BlockingIOError):
            kafka.accept()  # nobody connected
        assert new_threads(before) == set()


def test_start_refreshes_then_runs_the_refresher_and_stop_ends_it(tmp_path):
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path / "no-such-dir")}))
    store = app.extensions[EXTENSION]
    before = set(threading.enumerate())
    lifecycle.start(app)
    assert store.last_check is not None  # the first refresh ran before start returned
    started = new_threads(before)
    assert [t.name for t in started] == ["snapshot-refresh"]
    lifecycle.start(app)  # a second start changes nothing
    assert new_threads(before) == started
    lifecycle.stop(app)
    assert new_threads(before) == set()  # joined: gone when stop returns
    lifecycle.stop(app)  # a second stop does nothing
    with pytest.raises(RuntimeError, match="stopped"):
        lifecycle.start(app)
    assert new_threads(before) == set()


def test_running_stops_the_refresher_whatever_happens_inside(tmp_path):
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path)}))
    before = set(threading.enumerate())
    with pytest.raises(ZeroDivisionError), lifecycle.running(app):
        assert [t.name for t in new_threads(before)] == ["snapshot-refresh"]
        1 / 0  # noqa: B018
    assert new_threads(before) == set()


class FakeClient:
    instances: ClassVar[list[FakeClient]] = []

    def __init__(self, *args: object, fail_close: bool = False, **kwargs: object) -> None:
        self.closed, self.fail_close = False, fail_close
        FakeClient.instances.append(self)

    def warm(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        if self.fail_close:
            raise OSError("the connection is gone")


def test_stop_closes_the_kafka_clients_the_factory_built(tmp_path, monkeypatch):
    monkeypatch.setattr("serving.app.EventPublisher", FakeClient)
    monkeypatch.setattr("serving.app.LagProbe", FakeClient)
    FakeClient.instances.clear()
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path)}))
    app.extensions[writes.PUBLISHER].connect()  # as the first write does
    lag, producer = FakeClient.instances
    assert not lag.closed and not producer.closed
    lifecycle.stop(app)  # never started: its clients are closed all the same
    assert lag.closed and producer.closed


def test_a_client_that_fails_to_close_does_not_keep_the_others_open(tmp_path):
    app = Flask("t")
    broken, other = FakeClient(fail_close=True), FakeClient()
    lifecycle.init_app(app, SnapshotStore(SnapshotReader(tmp_path), 1.0, retention_ms=1000), closing=(broken, other))
    lifecycle.stop(app)
    assert broken.closed and other.closed
