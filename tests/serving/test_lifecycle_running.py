"""Issue 27, the app's life over a real warehouse: the factory reads nothing, `start` serves the
newest cut from the first answer on and keeps it fresh, `stop` ends that; and `python -m serving`
(granian) starts its app before the first answer and stops it when its worker exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from conf import load_config
from ops.net import free_port
from schemas import events as ev
from serving import lifecycle
from serving.app import create_app
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def warehouse(tmp_path: Path) -> SinkDriver:
    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("life-a", 0, "127.0.0.1:36911", tps=topics("LifeTopic", "LifeBase"))], int(time.time() * 1000))
    return d


def test_start_serves_the_newest_cut_keeps_it_fresh_and_stop_ends_that(tmp_path):
    d = warehouse(tmp_path)
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REFRESH_INTERVAL_MS": "20"}))
    client = app.test_client()
    assert client.get("/healthz").json["snapshotId"] is None  # the factory read nothing
    with lifecycle.running(app):
        assert client.get("/topics/LifeTopic/route").status_code == 200  # the first answer: the newest cut
        first = client.get("/healthz").json["snapshotId"]
        assert first is not None
        d.run_batch([ev.delete_topic_event("LifeTopic", "life-a")], int(time.time() * 1000))
        deadline = time.monotonic() + 30
        while client.get("/topics/LifeTopic/route").status_code != 404:  # the refresher took the new cut
            assert time.monotonic() < deadline, "the refresher did not serve the new cut"
            time.sleep(0.02)
    served = client.get("/healthz").json["snapshotId"]
    assert served > first
    d.run_batch([ev.delete_topic_event("LifeBase", "life-a")], int(time.time() * 1000))
    time.sleep(0.5)  # 25 refresh intervals
    assert client.get("/healthz").json["snapshotId"] == served  # stopped: nothing refreshes it any more
    assert client.get("/topics/LifeBase/route").status_code == 200


def test_the_server_answers_from_the_newest_cut_at_once_and_stops_its_app_on_exit(tmp_path):
    warehouse(tmp_path)
    port = free_port()
    env = {**os.environ, "NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_HTTP_PORT": str(port),
           "NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"}  # nothing listens: the app connects on a write only
    server = subprocess.Popen([sys.executable, "-m", "serving"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[0]
            try:
                first = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "python -m serving did not answer within 60 s"
                time.sleep(0.1)
        assert first.json()["snapshotId"] is not None  # not "starting": the first answer had the cut
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert server.returncode == 0, out
    assert "stopped the snapshot refresher and closed the Kafka clients" in out
