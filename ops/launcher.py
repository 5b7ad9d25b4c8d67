"""What `./run.sh` runs: the embedded Kafka broker, the streaming job, the host's cut builder, the
HTTP server and the RocketMQ remoting front.

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
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from conf import Config, describe, load_config
from conf.logs import RotatingLog, as_json_line, header, setup_logging
from conf.tokens import admin_token
from conf.version import __version__, argument_parser
from eventlog.topics import ensure_topic, retention_configs
from ops import embedded_kafka
from ops.net import port_is_free, wait_for_port
from pipelines.sizing import is_auto

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
    log: RotatingLog
    stop_timeout_s: float = 30.0
    port: tuple[str, int, str] | None = None  # (host, port, hint) that must be free before the start
    banner: str = ""
    env: dict[str, str] = field(default_factory=dict)  # settings this child overrides (a replica's ports)
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = field(default=0.0)

    json_lines: bool = False
    prepare: Callable[[], None] | None = None  # run before each start (the embedded Kafka's configuration)
    # Delay of a restart after a stable run: 0, except for a job with a standby beside it, which
    # takes over at once; starting the replacement's JVM then would take the cores it needs.
    calm_restart_s: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.log.path

    def start(self) -> None:
        if self.prepare is not None:
            self.prepare()
        # Own process group: the job's JVM is its child, and must go when the job goes.
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, start_new_session=True,
                                     env={**os.environ, **self.env} if self.env else None)
        self.started_at = time.monotonic()
        threading.Thread(target=self._pump, args=(self.proc.stdout,), name=f"log-{self.name}", daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        """The child's output, line by line, into its rotating log (JSON-wrapped in JSON mode);
        ends when the child and everything that inherited its stdout (the JVM) are gone."""
        source = f"namesrv.{self.name}.stdout"
        for line in iter(stream.readline, b""):
            self.log.write(as_json_line(line, source) if self.json_lines else line)
        stream.close()

    def supervise(self) -> None:
        """Restart the child if it exited: at once after a stable run (it had stayed up for a
        minute: a crash, not a crash loop; every second counts, the job is down) — or after
        `calm_restart_s` when a standby took over — then with exponential backoff (1 s doubling
        to 30 s) while it keeps dying."""
        code = self.proc.poll() if self.proc else None
        if self.proc is not None and code is not None:
            delay = min(30.0, 2.0 ** min(self.restarts - 1, 5)) if self.restarts else self.calm_restart_s
            if time.monotonic() - self.started_at > 60:
                self.restarts, delay = 0, self.calm_restart_s
            log.warning("%s exited with code %s; restarting in %.0f s (see %s)", self.name, code, delay,
                        self.log_path)
            self.reap()
            self.proc = None
            self.restarts += 1
            self.next_start = time.monotonic() + delay
        if self.proc is None and time.monotonic() >= self.next_start:
            try:
                self.start()
            except Exception as exc:  # its preparation failed (the embedded Kafka's disk): try again later
                self.restarts += 1
                self.next_start = time.monotonic() + min(30.0, 2.0 ** min(self.restarts - 1, 5))
                log.error("%s could not be restarted (%s: %s); trying again in %.0f s", self.name,
                          type(exc).__name__, exc, self.next_start - time.monotonic())
                return
            log.info("%s restarted (restart #%d)", self.name, self.restarts)

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


def rotating_log(cfg: Config, role: str) -> RotatingLog:
    """`<logs>/<role>.log`, rotated at NAMESRV_LOG_MAX_BYTES, its first line the version and configuration."""
    return RotatingLog(cfg.log_dir / f"{role}.log", max_bytes=cfg.log_max_bytes, backups=cfg.log_backups,
                       header=header(role, __version__, describe(cfg), cfg.log_format))


def spark_banner(master: str) -> str:
    """The job's master as its banner names it: `auto` is resolved by the job at each start (its log
    names the slots), so the banner says how rather than guess."""
    return "local[N] (NAMESRV_SPARK_MASTER=auto: one slot per task of the stateful stage)" if is_auto(master) else master


def children(cfg: Config) -> list[Child]:
    out = []
    json_lines = cfg.log_format == "json"
    if cfg.roles == "all" and cfg.uses_embedded_kafka:
        out.append(embedded_broker(cfg))
    calm = 15.0 if cfg.job_standby else 0.0
    if cfg.roles in ("all", "job"):
        out.append(Child("job", [sys.executable, "-m", "pipelines.job"], rotating_log(cfg, "job"), 60,
                         banner=f"Spark {spark_banner(cfg.spark_master)}, warehouse {cfg.warehouse}",
                         calm_restart_s=calm))
        if cfg.job_standby:  # the two take turns: whichever holds the lease writes
            out.append(Child("job-standby", [sys.executable, "-m", "pipelines.job"], rotating_log(cfg, "job-standby"),
                             60, banner="a second job, its session up, waiting for the writer's lease",
                             calm_restart_s=calm))
    for i in range(cfg.replicas if cfg.roles in ("all", "serving") else 0):
        rcfg, suffix = cfg.replica(i), "" if i == 0 else f"-{i}"
        ports = {"NAMESRV_HTTP_PORT": str(rcfg.http_port), "NAMESRV_REMOTING_PORT": str(rcfg.remoting_port)}
        out.append(Child(f"http{suffix}", [sys.executable, "-m", "serving"], rotating_log(cfg, f"http{suffix}"), 10,
                         port=(cfg.http_host, rcfg.http_port, "(set NAMESRV_HTTP_PORT)"),
                         banner=f"{http_url(rcfg)}  (try /topics/TopicTest/route, /cluster, /readyz, /dashboard)",
                         env=ports))
        if cfg.remoting_port:
            out.append(Child(f"remoting{suffix}", [sys.executable, "-m", "remoting"],
                             rotating_log(cfg, f"remoting{suffix}"), 10,
                             port=(cfg.remoting_host, rcfg.remoting_port,
                                   "(set NAMESRV_REMOTING_PORT; 0 turns it off)"),
                             banner=f"RocketMQ remoting on {cfg.remoting_host}:{rcfg.remoting_port}  (namesrvAddr "
                                    "for brokers, clients and mqadmin)", env=ports))
    for kid in out:
        kid.json_lines = json_lines
    return out


def cut_builder(cfg: Config) -> list[Child]:
    """The host's cut builder (`snapshots.cutbuilder`), on a host that serves: one per host, not
    per replica, since every serving process of the host maps the one file it writes."""
    if cfg.roles not in ("all", "serving"):
        return []
    kid = Child("cutbuilder", [sys.executable, "-m", "snapshots.cutbuilder"], rotating_log(cfg, "cutbuilder"), 15,
                banner=f"the shared cut file {cfg.data_dir / 'cuts'}/ (what the serving processes map)")
    kid.json_lines = cfg.log_format == "json"
    return [kid]


def builder_lock(cfg: Config) -> Path:
    """`snapshots.cutbuilder`'s lock file (named here: importing that module would load Delta's and
    Arrow's libraries into the launcher)."""
    return cfg.data_dir / "cuts" / "builder.lock"


def wait_for_builder(cfg: Config, builder: Child, timeout_s: float) -> bool:
    """Whether the builder holds the host's lock (its pid written in the lock file) within
    `timeout_s`: a server that starts while no builder holds it writes the file itself."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if builder.proc is None or builder.proc.poll() is not None:
            return False
        try:
            if builder_lock(cfg).read_text().strip() == str(builder.proc.pid):
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def _await_builder(cfg: Config, kids: list[Child]) -> None:
    builder = next((kid for kid in kids if kid.name == "cutbuilder"), None)
    if builder is not None and not wait_for_builder(cfg, builder, 30):
        log.warning("the cut builder did not take %s within 30 s; a server started now writes the cut file "
                    "itself (see %s)", builder_lock(cfg), builder.log_path)


def host_children(cfg: Config) -> list[Child]:
    """What this host's launcher supervises: `children`, and the cut builder before the servers
    it writes for (they wait for its first file), after the job it follows."""
    kids = children(cfg)
    servers = next((i for i, kid in enumerate(kids) if kid.name.startswith(("http", "remoting"))), len(kids))
    return kids[:servers] + cut_builder(cfg) + kids[servers:]


def embedded_broker(cfg: Config) -> Child:
    """The embedded Kafka broker of NAMESRV_KAFKA_EMBEDDED (ops/embedded_kafka.py)."""
    port = ("127.0.0.1", cfg.kafka_embedded_port, "is another ./run.sh running? (or set NAMESRV_KAFKA_EMBEDDED_PORT)")
    if cfg.kafka_embedded == "tansu":
        return Child("kafka", embedded_kafka.tansu_command(cfg.kafka_embedded_port), rotating_log(cfg, "kafka"), 10,
                     port=port, banner=f"embedded Tansu on {cfg.bootstrap}, topic {cfg.kafka_topic} (memory storage: "
                                       "keeps every event until it stops, no retention)")
    log_dir = cfg.data_dir / "kafka"
    return Child("kafka", embedded_kafka.kafka_command(log_dir), rotating_log(cfg, "kafka"), 30, port=port,
                 prepare=lambda: embedded_kafka.prepare_kafka(cfg.kafka_embedded_port, log_dir),
                 banner=f"embedded Apache Kafka on {cfg.bootstrap}, topic {cfg.kafka_topic}, log in {log_dir} "
                        f"(retention {cfg.kafka_retention_ms / 3_600_000:g} h or "
                        f"{cfg.kafka_retention_bytes / 2**30:g} GiB a partition)")


def port_clash(kids: list[Child]) -> str | None:
    """Two children told to listen on one port (replicas shift both port ranges by one each)."""
    owners: dict[int, str] = {}
    for kid in kids:
        if kid.port is None:
            continue
        port = kid.port[1]
        if port in owners:
            return (f"{owners[port]} and {kid.name} would both listen on port {port}: with NAMESRV_REPLICAS the "
                    f"HTTP ports run from NAMESRV_HTTP_PORT and the remoting ports from NAMESRV_REMOTING_PORT, one "
                    f"per replica; move one range (e.g. NAMESRV_REMOTING_PORT=10876)")
        owners[port] = kid.name
    return None


def http_url(cfg: Config) -> str:
    return f"http://{cfg.http_host}:{cfg.http_port}"


def is_ready(cfg: Config) -> bool:
    """Every replica's /readyz answers 200 (it serves a cut and the job has committed a batch)."""
    for i in range(cfg.replicas):
        try:
            with urllib.request.urlopen(http_url(cfg.replica(i)) + "/readyz", timeout=1) as answer:
                if answer.status != 200:
                    return False
        except (OSError, ValueError):  # not listening yet, or 503 (HTTPError is an OSError)
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv", "Start and supervise the embedded Kafka broker, the streaming job and the "
                    "serving replicas, or those of this host's NAMESRV_ROLES (what ./run.sh runs).").parse_args(argv)
    cfg = load_config()
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(cfg.log_format, log=rotating_log(cfg, "launcher"))
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    if admin_token(cfg, create=True) and not cfg.admin_token:
        log.info("admin    bearer token for writes is in %s (or set NAMESRV_ADMIN_TOKEN)", cfg.admin_token_file)
    kids = host_children(cfg)
    clash = port_clash(kids)
    if clash is not None:
        log.error("%s", clash)
        return 1
    for kid in kids:
        if kid.port is not None and not port_is_free(kid.port[1], kid.port[0]):
            log.error("port %s:%d is taken %s", *kid.port)
            return 1
    launched = time.monotonic()
    # The embedded broker's JVM starts while Spark's does (the job waits for the broker and creates
    # the topic itself); the servers start once the topic is there: the remoting front connects at
    # its start, and refuses writes for a while after a failed connect.
    early = [kid for kid in kids if kid.name in ("kafka", "job", "job-standby", "cutbuilder")]
    for kid in early:
        kid.start()
        log.info("%-8s %s (log %s)", kid.name, kid.banner, kid.log_path)
    _await_builder(cfg, kids)
    if any(kid.name == "kafka" for kid in kids):
        wait_for_port(cfg.kafka_embedded_port, 90)
        ensure_topic(cfg.bootstrap, cfg.kafka_topic, cfg.kafka_partitions, retention_configs(cfg))
    for kid in kids:
        if kid not in early:
            kid.start()
            log.info("%-8s %s (log %s)", kid.name, kid.banner, kid.log_path)
    if not cfg.uses_embedded_kafka:
        log.info("kafka    external broker %s, topic %s", cfg.bootstrap, cfg.kafka_topic)

    ready = cfg.roles == "job"  # a driver host serves nothing: the serving hosts' /readyz tell
    while not stopping.wait(0.5):
        for kid in kids:
            kid.supervise()
        if not ready and is_ready(cfg):
            ready = True
            log.info("ready in %.1f s: %s serves routes; publish broker events with './run.sh simulate', "
                     "stop with Ctrl-C", time.monotonic() - launched, http_url(cfg))
    log.info("stopping")
    _stop_all(kids)
    log.info("stopped")
    return 0


def _stop_all(kids: list[Child]) -> None:
    for kid in reversed(kids):
        kid.stop()


if __name__ == "__main__":
    sys.exit(main())
