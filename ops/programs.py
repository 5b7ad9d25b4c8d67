"""This project's own programs on a bed host: the job (active or standby) and a serving replica.

Each runs as `./run.sh` runs it (the same modules, the same environment variables), inside the
host's network namespace, with the host's own data directory (logs, metrics files, the admin
token) and the shared store (`NAMESRV_STORE_URI`, HDFS) for the tables, the checkpoint and the
writer's leases. The tests and `./run.sh cluster up` start them through here, so what is tested is
what a person tries.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ops.netbed import Host

ROOT = Path(__file__).resolve().parents[1]
HTTP_PORT, REMOTING_PORT = 9877, 9876


@dataclass
class Program:
    """One of our processes on a host (its process group is its own: a kill takes Spark's JVM too)."""

    role: str  # "job", "http", "remoting"
    host: Host
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return f"(no log at {self.log})"


@dataclass
class Site:
    """What every program of one deployment shares: the event log, the store, and settings."""

    bootstrap: str  # Kafka, host:port,...
    store_uri: str  # hdfs://namenode:port/path
    work_dir: Path  # the hosts' data directories are <work_dir>/<host>
    settings: dict[str, str] = field(default_factory=dict)  # more NAMESRV_* for every program

    def env(self, host: Host, **more: str) -> dict[str, str]:
        data = self.work_dir / host.name
        data.mkdir(parents=True, exist_ok=True)
        python = str(Path(sys.executable))
        return {**os.environ, "NAMESRV_KAFKA_BOOTSTRAP": self.bootstrap, "NAMESRV_STORE_URI": self.store_uri,
                "NAMESRV_DATA_DIR": str(data), "NAMESRV_HTTP_HOST": host.addr, "NAMESRV_REMOTING_HOST": host.addr,
                "NAMESRV_HTTP_PORT": str(HTTP_PORT), "NAMESRV_REMOTING_PORT": str(REMOTING_PORT),
                # a local-mode driver binds its own services to the host's loopback
                "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
                "PYTHONPATH": str(ROOT), **self.settings, **more}

    def start(self, role: str, host: Host, **more: str) -> Program:
        module = {"job": "pipelines.job", "http": "serving", "remoting": "remoting"}[role]
        env = self.env(host, **more)
        log = Path(env["NAMESRV_DATA_DIR"]) / f"{role}.out"
        with open(log, "ab") as out:
            proc = subprocess.Popen(host.argv([sys.executable, "-m", module]), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT, env=env)
        return Program(role, host, proc, log)

    def serve(self, host: Host, **more: str) -> list[Program]:
        """A serving replica: HTTP and the remoting front."""
        return [self.start("http", host, **more), self.start("remoting", host, **more)]


def http_get(host: Host, path: str, timeout_s: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """GET http://<host>:HTTP_PORT<path> from this machine: (status, headers, body); status 0 when
    the host does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host.addr}:{HTTP_PORT}{path}", timeout=timeout_s) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (OSError, urllib.error.URLError):
        return 0, {}, b""


def http_json(host: Host, path: str) -> object:
    status, _, body = http_get(host, path)
    return json.loads(body) if status == 200 else None


def wait_ready(host: Host, timeout_s: float) -> float:
    """Until the host's /readyz says ready; the seconds it took."""
    started = time.monotonic()
    while http_get(host, "/readyz")[0] != 200:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{host.name} not ready after {timeout_s:.0f} s: {http_get(host, '/readyz')}")
        time.sleep(0.5)
    return time.monotonic() - started
