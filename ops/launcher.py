"""What `./run.sh` runs: the embedded Kafka broker, the streaming job and the HTTP server.

It supervises them: a child that dies is restarted with exponential backoff (logged), and
Ctrl-C / SIGTERM stops them in reverse order, each given time to finish cleanly. Children die
with the launcher (PR_SET_PDEATHSIG), so no process is orphaned even if it is killed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from conf import Config, load_config
from conf.logs import setup_logging
from conf.tokens import admin_token
from eventlog.topics import ensure_topic
from ops import embedded_kafka
from ops.net import port_is_free, wait_for_port

log = logging.getLogger("namesrv.launcher")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    stop_timeout_s: float = 30.0
    proc: subprocess.Popen | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = field(default=0.0)

    def start(self) -> None:
        out = open(self.log_path, "ab")
        # Own process group: the job's JVM is its child, and must go when the job goes.
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent, start_new_session=True)
        out.close()
        self.started_at = time.monotonic()

    def reap(self) -> None:
        """Kill whatever is left of the child's process group (e.g. the JVM of a crashed job)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.reap()
            return
        self.proc.terminate()
        try:
            self.proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s; killing it", self.name, self.stop_timeout_s)
        self.reap()
        self.proc.wait()


def children(cfg: Config) -> list[Child]:
    logs = cfg.log_dir
    out = []
    if cfg.uses_embedded_kafka:
        out.append(Child("kafka", embedded_kafka.tansu_command(cfg.kafka_embedded_port), logs / "kafka.log", 10))
    out.append(Child("job", [sys.executable, "-m", "pipelines.job"], logs / "job.log", 60))
    out.append(Child("http", [sys.executable, "-m", "serving"], logs / "http.log", 10))
    return out


def main() -> int:
    cfg = load_config()
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(cfg.log_dir / "launcher.log")
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    if admin_token(cfg, create=True) and not cfg.admin_token:
        log.info("admin    bearer token for writes is in %s (or set NAMESRV_ADMIN_TOKEN)", cfg.admin_token_file)
    kids = children(cfg)
    for kid in kids:
        if kid.name == "kafka" and not port_is_free(cfg.kafka_embedded_port):
            log.error("port 127.0.0.1:%d is taken: is another ./run.sh running? (or set NAMESRV_KAFKA_EMBEDDED_PORT)",
                      cfg.kafka_embedded_port)
            return 1
        if kid.name == "http" and not port_is_free(cfg.http_port, cfg.http_host):
            log.error("port %s:%d is taken (set NAMESRV_HTTP_PORT)", cfg.http_host, cfg.http_port)
            _stop_all(kids)
            return 1
        kid.start()
        if kid.name == "kafka":
            wait_for_port(cfg.kafka_embedded_port)
            ensure_topic(cfg.bootstrap, cfg.kafka_topic, cfg.kafka_partitions)
            log.info("kafka    embedded Tansu on %s, topic %s (memory storage; log %s)",
                     cfg.bootstrap, cfg.kafka_topic, kid.log_path)
        elif kid.name == "job":
            log.info("job      Spark %s, warehouse %s (log %s)", cfg.spark_master, cfg.warehouse, kid.log_path)
        else:
            log.info("http     http://%s:%d  (try /topics/TopicTest/route, /cluster, /healthz; log %s)",
                     cfg.http_host, cfg.http_port, kid.log_path)
    if not cfg.uses_embedded_kafka:
        log.info("kafka    external broker %s, topic %s", cfg.bootstrap, cfg.kafka_topic)
    log.info("running; publish broker events with './run.sh simulate', stop with Ctrl-C")

    while not stopping.wait(0.5):
        for kid in kids:
            code = kid.proc.poll() if kid.proc else None
            if kid.proc is not None and code is not None:
                delay = min(30.0, 2.0 ** min(kid.restarts, 5))
                if time.monotonic() - kid.started_at > 60:
                    kid.restarts, delay = 0, 1.0
                log.warning("%s exited with code %s; restarting in %.0f s (see %s)", kid.name, code, delay, kid.log_path)
                kid.reap()
                kid.proc = None
                kid.restarts += 1
                kid.next_start = time.monotonic() + delay
            if kid.proc is None and time.monotonic() >= kid.next_start:
                kid.start()
                log.info("%s restarted (restart #%d)", kid.name, kid.restarts)
    log.info("stopping")
    _stop_all(kids)
    log.info("stopped")
    return 0


def _stop_all(kids: list[Child]) -> None:
    for kid in reversed(kids):
        kid.stop()


if __name__ == "__main__":
    sys.exit(main())
