"""This project's own programs on a bed host: a driver host (the job) or a serving host.

Each host runs what `./run.sh` runs on it in a deployment: the launcher (`ops.launcher`), told by
`NAMESRV_ROLES` which programs this host has, which supervises and restarts them; inside the
host's network namespace, with the host's own data directory (logs, metrics files) and the shared
store (`NAMESRV_STORE_URI`, HDFS) for the tables, the checkpoint and the writer's leases. The tests
and `./run.sh cluster up` start them through here, so what is tested is what a person deploys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ops.netbed import Host
from ops.procs import kill_tree

ROOT = Path(__file__).resolve().parents[1]
HTTP_PORT, REMOTING_PORT = 9877, 9876


@dataclass
class Program:
    """A host's launcher and what it supervises (`roles`: "job" or "serving")."""

    roles: str
    host: Host
    proc: subprocess.Popen[bytes]
    data_dir: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the launcher and every process under it at once (a host that dies)."""
        kill_tree(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)

    def log(self, name: str) -> str:
        """A supervised program's log (`job`, `http`, `remoting`, `launcher`), rotated parts first."""
        parts = sorted((self.data_dir / "logs").glob(f"{name}.log*"), key=lambda f: f.name, reverse=True)
        return "".join(f.read_text(errors="replace") for f in parts)

    def tail(self, lines: int = 30) -> str:
        names = ["launcher", "job"] if self.roles == "job" else ["launcher", "http", "remoting"]
        return "\n".join(f"-- {n}:\n" + "\n".join(self.log(n).splitlines()[-lines:]) for n in names)


@dataclass
class Site:
    """What every host of one deployment shares: the event log, the store, and settings."""

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
                # the driver binds to the host's address: executors on other hosts connect back to it
                "SPARK_LOCAL_IP": host.addr, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
                "PYTHONPATH": str(ROOT), **self.settings, **more}

    def start(self, roles: str, host: Host, **more: str) -> Program:
        """The host's launcher with NAMESRV_ROLES=`roles` ("job" or "serving")."""
        env = self.env(host, NAMESRV_ROLES=roles, **more)
        data = Path(env["NAMESRV_DATA_DIR"])
        with open(data / "launcher.out", "ab") as out:
            proc = subprocess.Popen(host.argv([sys.executable, "-m", "ops.launcher"]), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    cwd=ROOT, env=env)
        return Program(roles, host, proc, data)


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
