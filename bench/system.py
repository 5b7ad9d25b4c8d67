"""The system under measurement: what `./run.sh` starts (launcher → Tansu, job, HTTP server) on
free loopback ports in a scratch directory, plus the probes' instruments (CPU, RSS, lag)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from conf import Config, load_config
from eventlog.publisher import EventPublisher
from ops.net import free_port
from ops.procs import processes, pss_kib, tree
from schemas.progress import read_progress

ROOT = Path(__file__).resolve().parent.parent
JOB_ROLES = ("job", "job-jvm", "py-worker")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int], *, children: bool = True) -> float:
    """CPU of these processes (utime + stime) and, with `children`, of their children that ended
    (cutime + cstime). List the processes anew for each reading (`System.job_cpu`): a Python
    worker that Spark ended is then still counted, in the CPU its parent collected. A process
    that is gone counts nothing."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return total / _TICKS


class System:
    """Context manager; `env` overrides NAMESRV_* settings for this run. `via_run_sh` starts it as
    a user does (`./run.sh`, its set-up checks included) instead of the launcher module."""

    def __init__(self, *, via_run_sh: bool = False, **env: str) -> None:
        self.argv = ["./run.sh"] if via_run_sh else [sys.executable, "-m", "ops.launcher"]
        self.ready_s: float | None = None  # start → /readyz 200
        self.started_ms = 0  # epoch ms: the start, and /readyz 200 (for the start-up timeline)
        self.ready_ms: int | None = None
        self.data = Path(tempfile.mkdtemp(prefix="namesrv-bench-"))
        self.env = {**os.environ, "NAMESRV_DATA_DIR": str(self.data), "NAMESRV_KAFKA_BOOTSTRAP": "",
                    "NAMESRV_KAFKA_EMBEDDED_PORT": str(free_port()), "NAMESRV_HTTP_PORT": str(free_port()),
                    "NAMESRV_REMOTING_PORT": str(free_port()), "NAMESRV_ADMIN_TOKEN": "bench", **env}
        self.cfg: Config = load_config(self.env)
        self.url = f"http://127.0.0.1:{self.cfg.http_port}"
        self.launcher: subprocess.Popen | None = None
        self.pub: EventPublisher | None = None
        self.sent = 0
        self.http = requests.Session()

    def __enter__(self) -> System:
        log = open(self.data / "launcher.log", "wb")
        started = time.monotonic()
        self.started_ms = int(time.time() * 1000)
        self.launcher = subprocess.Popen(self.argv, cwd=ROOT, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = started + 180
        while True:  # ready: a cut is served and the job has committed a batch since it started
            try:
                if self.http.get(self.url + "/readyz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or self.launcher.poll() is not None:
                raise RuntimeError(f"the system did not become ready; see {self.data / 'launcher.log'}")
            time.sleep(0.1)
        self.ready_s = time.monotonic() - started
        self.ready_ms = int(time.time() * 1000)
        self.pub = EventPublisher(self.cfg.bootstrap, self.cfg.kafka_topic,
                                  max_message_bytes=self.cfg.max_message_bytes)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pub is not None:
            self.pub.close()
        if self.launcher is not None and self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGTERM)
            try:
                self.launcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.launcher.pid, signal.SIGKILL)
                self.launcher.wait(timeout=10)
        shutil.rmtree(self.data, ignore_errors=True)

    # -- I/O
    def publish(self, events: list[dict[str, Any]]) -> list[tuple[int, int]]:
        assert self.pub is not None, "publish inside `with System(...)`"
        coords = self.pub.publish(events)
        self.sent += len(coords)
        return coords

    def route_status(self, topic: str) -> int:
        return self.http.get(f"{self.url}/topics/{topic}/route", timeout=10).status_code

    def consumed(self) -> int:
        progress = read_progress(self.cfg.warehouse) or {}
        return sum(progress.get("sourceOffsets", {}).values())

    def metric(self, name: str) -> list[float]:
        """The values of one sample name in our own /metrics (all label sets)."""
        from prometheus_client.parser import text_string_to_metric_families
        text = self.http.get(self.url + "/metrics", timeout=30).text
        return [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]

    def served_lag_s(self) -> float:
        """Age of the oldest event not yet served (max over partitions)."""
        return max(self.metric("namesrv_consumer_lag_seconds"), default=0.0)

    def disk_bytes(self, what: str = "warehouse") -> int:
        """Bytes on disk under the warehouse (Delta tables) or the checkpoint (Spark's state)."""
        root = self.cfg.warehouse if what == "warehouse" else self.cfg.checkpoint_dir
        assert isinstance(root, Path), "the bench measures a local store"
        return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())

    def lag(self) -> int:
        return self.sent - self.consumed()

    def wait_consumed(self, timeout_s: float = 300) -> float:
        started = time.monotonic()
        while self.lag() > 0:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"lag still {self.lag()} after {timeout_s:.0f} s")
            time.sleep(0.2)
        return time.monotonic() - started

    # -- instruments
    def launcher_pid(self) -> int:
        assert self.launcher is not None, "measure inside `with System(...)`"
        return self.launcher.pid

    def job_pids(self) -> list[int]:
        return [p.pid for p in tree(self.launcher_pid()) if p.role in JOB_ROLES]

    def job_cpu(self) -> float:
        """CPU seconds the job's processes (driver, JVM, Python workers, live or ended) used."""
        return cpu_seconds(self.job_pids())

    def pids(self, role: str) -> list[int]:
        return [p.pid for p in tree(self.launcher_pid()) if p.role == role]

    def rss_mib(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for p in tree(self.launcher_pid()):
            out[p.role] = out.get(p.role, 0.0) + p.rss_kib / 1024
        return out

    def job_exits(self) -> list[str]:
        """Exit codes of the job processes the launcher saw end (restarted), from its log."""
        return [line.split("exited with code ")[1].split(";")[0] for f in sorted((self.data / "logs").glob("launcher.log*"))
                for line in f.read_text().splitlines() if "job exited with code " in line]

    def pss_mib(self) -> dict[str, float]:
        """Per role, like `rss_mib`, but shared pages counted once over all processes."""
        out: dict[str, float] = {}
        for p in tree(self.launcher_pid()):
            out[p.role] = out.get(p.role, 0.0) + pss_kib(p.pid) / 1024
        return out


def machine() -> dict[str, Any]:
    mem_kib = int(next(line for line in Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal")).split()[1])
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1), "cpu": model,
            "python": sys.version.split()[0], "others_running": len(processes())}
