"""A running pipeline for integration tests: query on the shared SparkSession, a real HTTP
server (waitress) on 127.0.0.1, a publisher, and bounded waits; and `ServerProcess`, the HTTP
server as it runs in production (`python -m serving`, granian) over a pipeline's data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import requests

from conf import Config, load_config
from schemas.progress import covers

ADMIN_TOKEN = "test-admin-token"
REMOTING_AK, REMOTING_SK = "test-ak", "test-sk-0123456789"  # the remoting key pair of `remoting_system`


class Pipeline:
    def __init__(self, spark, bootstrap: str, data_dir: Path, *, broker_timeout_ms: int = 120_000,
                 trigger_ms: int = 500, **env: str) -> None:
        self.spark = spark
        self.cfg: Config = load_config({
            "NAMESRV_DATA_DIR": str(data_dir), "NAMESRV_KAFKA_BOOTSTRAP": bootstrap,
            "NAMESRV_KAFKA_TOPIC": f"namesrv-test-{uuid.uuid4().hex[:8]}",
            "NAMESRV_BROKER_TIMEOUT_MS": str(broker_timeout_ms), "NAMESRV_TRIGGER_INTERVAL_MS": str(trigger_ms),
            "NAMESRV_REFRESH_INTERVAL_MS": "100", "NAMESRV_HTTP_PORT": "0",
            # the broker the tests run on (conftest: 100 ms on Tansu, which answers a fetch when its wait ends)
            "NAMESRV_KAFKA_FETCH_WAIT_MS": os.environ.get("NAMESRV_KAFKA_FETCH_WAIT_MS", "0"),
            # heartbeats alone wait up to 2 s for a batch (exercises the admission; 10 s by default)
            "NAMESRV_HEARTBEAT_DEFER_MS": "2000",
            "NAMESRV_ADMIN_TOKEN": ADMIN_TOKEN, **env})
        self.query = None
        self._server = None
        self.url = ""
        from eventlog.publisher import EventPublisher
        from eventlog.topics import ensure_topic, retention_configs
        ensure_topic(self.cfg.bootstrap, self.cfg.kafka_topic, self.cfg.kafka_partitions, retention_configs(self.cfg))
        self.publisher = EventPublisher(self.cfg.bootstrap, self.cfg.kafka_topic, max_message_bytes=self.cfg.max_message_bytes)

    # -- lifecycle
    def start_job(self) -> Pipeline:
        from pipelines.job import start_query
        self.query = start_query(self.spark, self.cfg, query_name=f"q_{uuid.uuid4().hex[:8]}")
        return self

    def stop_job(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def start_http(self) -> Pipeline:
        from waitress import create_server

        from serving import lifecycle
        from serving.app import create_app
        self.app = create_app(self.cfg)
        lifecycle.start(self.app)  # its first refresh, then its refresher thread; `close` stops it
        self._server = create_server(self.app, host="127.0.0.1", port=0, threads=4)
        self.url = f"http://127.0.0.1:{self._server.effective_port}"
        self._closing = False
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self) -> None:
        try:
            self._server.run()
        except OSError:  # the listening socket was closed under the loop by close()
            if not self._closing:
                raise

    def config_with(self, **env: str) -> Config:
        """This pipeline's settings with `env` (variable → value) overriding some."""
        import dataclasses
        return load_config({**{f.metadata["env"]: str(getattr(self.cfg, f.name)) for f in dataclasses.fields(self.cfg)},
                            **env})

    def start_remoting(self, **env: str) -> Pipeline:
        """The remoting front on a free port, its asyncio loop on a thread of this process
        (`self.remoting_addr`); `env` overrides settings (key pair, networks, timeouts)."""
        from remoting.__main__ import build_front
        self._front_thread = FrontThread(build_front(self.config_with(**env)))
        self.front, self.remoting_addr = self._front_thread.front, self._front_thread.addr
        return self

    def start_signed_system(self, **remoting_env: str) -> Pipeline:
        """Job, HTTP and the remoting front with the tests' key pair (`REMOTING_AK`/`REMOTING_SK`),
        writes answered within 8 s; returns once the first cut is served. `remoting_env` adds settings."""
        self.start_job().start_http().start_remoting(
            NAMESRV_REMOTING_ACCESS_KEY=REMOTING_AK, NAMESRV_REMOTING_SECRET_KEY=REMOTING_SK,
            NAMESRV_REMOTING_WRITE_WAIT_MS="8000", **remoting_env)
        self.wait_for(lambda: self.front.store.current.snapshot_id is not None, 90, "the first snapshot")
        return self

    def stop_remoting(self) -> None:
        if getattr(self, "front", None) is not None:
            self._front_thread.stop()
            self.front.store.stop()
            self.front = None

    def close(self) -> None:
        self.stop_remoting()
        self.stop_job()
        if self._server is not None:
            from serving import lifecycle
            self._closing = True
            self._server.close()
            lifecycle.stop(self.app)
        self.publisher.close()

    # -- I/O
    def publish(self, events: Iterable[dict[str, Any]]) -> list[tuple[int, int]]:
        return self.publisher.publish(events)

    def get(self, path: str) -> tuple[int, Any]:
        r = requests.get(self.url + path, timeout=10)
        return r.status_code, r.json()

    def write(self, method: str, path: str, body: Any = None, *, token: str | None = ADMIN_TOKEN,
              timeout: float = 60) -> tuple[int, Any]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        r = requests.request(method, self.url + path, json=body, headers=headers, timeout=timeout)
        return r.status_code, r.json()

    def route(self, topic: str) -> tuple[int, dict[str, Any] | None]:
        """GET_ROUTEINFO_BY_TOPIC over the remoting front, as a client asks: (code, route or None)."""
        import json

        from remoting import codes
        from remoting.client import RemotingClient
        with RemotingClient(self.remoting_addr) as c:
            answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return answer.code, json.loads(answer.body) if answer.code == codes.SUCCESS else None

    def wait_for(self, probe: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
        """Poll `probe` until it returns a truthy value; fail with `what` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self.check_job()
            last = probe()
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last probe: {last!r}")

    def wait_served(self, coords: list[tuple[int, int]], timeout: float = 60) -> dict[str, Any]:
        """Wait until the served snapshot has consumed every (partition, offset) in `coords`."""
        def probe():
            _, health = self.get("/healthz")
            offsets = health.get("sourceOffsets") or {}
            return health if covers(offsets, coords) else None
        return self.wait_for(probe, timeout, f"offsets {coords} to be served")

    def check_job(self) -> None:
        if self.query is not None and self.query.exception() is not None:
            raise AssertionError(f"streaming query failed: {self.query.exception()}")


class FrontThread:
    """A remoting front serving on 127.0.0.1 (free port) from an asyncio loop on its own thread."""

    def __init__(self, front: Any) -> None:
        import asyncio
        self.front, self.store = front, front.store
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True, name="remoting-front").start()
        self._server = asyncio.run_coroutine_threadsafe(front.serve("127.0.0.1", 0), self._loop).result(10)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        """Close the listener, let the front finish (its in-flight writes), stop the loop."""
        import asyncio

        async def close() -> None:
            self._server.close()
            await self.front.shutdown()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)


class ServerProcess:
    """`python -m serving` on 127.0.0.1 over `cfg`'s data (its store, its cut file, its Kafka
    topic), on one port kept across restarts; `env` overrides settings. Its output is kept and
    shown when it fails."""

    ROOT = Path(__file__).resolve().parents[1]

    def __init__(self, cfg: Config, **env: str) -> None:
        from ops.net import free_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "NAMESRV_DATA_DIR": str(cfg.data_dir), "NAMESRV_KAFKA_BOOTSTRAP": cfg.bootstrap,
                    "NAMESRV_KAFKA_TOPIC": cfg.kafka_topic, "NAMESRV_HTTP_HOST": "127.0.0.1",
                    "NAMESRV_HTTP_PORT": str(self.port), "NAMESRV_REFRESH_INTERVAL_MS": str(cfg.refresh_interval_ms),
                    "NAMESRV_ADMIN_TOKEN": ADMIN_TOKEN, **env}
        self.proc: subprocess.Popen[str] | None = None
        # its output goes to a file: a pipe nobody reads while it runs would block its logging (in
        # the event loop) once the pipe's 64 KiB fill up
        self.log = Path(cfg.data_dir) / f"serving-{self.port}.log"

    @property
    def output(self) -> str:
        """What the server printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self, timeout: float = 60) -> ServerProcess:
        """Start it and return once it answers /healthz with a cut."""
        with self.log.open("a") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "serving"], cwd=self.ROOT, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"python -m serving exited {self.proc.returncode}:\n{self.output}")
            try:
                if requests.get(self.url + "/healthz", timeout=5).json().get("snapshotId") is not None:
                    return self
            except (requests.RequestException, ValueError):
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"python -m serving did not serve a cut within {timeout:.0f} s:\n{self.output}")
            time.sleep(0.1)

    def stop(self, timeout: float = 30) -> float:
        """SIGTERM, as an operator stops it; the seconds it took to exit (killed after `timeout`)."""
        assert self.proc is not None
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"python -m serving did not exit within {timeout:.0f} s of SIGTERM") from None
        return time.monotonic() - began

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
