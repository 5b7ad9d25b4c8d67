"""`./run.sh soak --minutes N`: the whole system under an accelerated broker fleet, memory drawn.

Starts what `./run.sh` starts (the launcher: embedded Kafka, job, HTTP server, remoting front) on
free loopback ports in a scratch data directory and runs a broker fleet that publishes straight to
Kafka, for N minutes. By default (`--topics 0`) `--brokers` brokers heartbeat every `--period` s;
with `--topics M` each broker instead publishes its whole REGISTER_BROKER with M topics every
`--period` s, as RocketMQ brokers do (every 30 s), each on its own timer, spread evenly over the
period. Either way, every minute 10 brokers fall silent (and expire), 10 join and 5 switch masters.

Every `--sample` s it samples each process's RSS and PSS by role (Kafka's included), the events
topic's size (records held, and the embedded Apache Kafka's log on disk), the consumer lag, the
time to open the newest snapshot, the snapshot count and, with `--topics`, how many
re-registrations were due and how many were sent. It prints a table, keeps the samples in
`<out>/soak-memory.json`, draws `<out>/soak-memory.png` (PSS of each role and in all over time, the
topic's size below), and exits non-zero when a figure does not stay flat. Memory is flat when, for
each role and in all, the median PSS of the run's last third is at most 10 % above that of minutes
10-15 (a run shorter than 20 minutes: of the first sample after a third of the run).

The issue's target, 10,000 brokers × 100 topics re-registering for an hour:
`./run.sh soak --minutes 60 --brokers 10000 --topics 100 --period 30`.
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from conf import Config, load_config
from conf.version import argument_parser
from eventlog.publisher import EventPublisher
from fleet import soak_report
from ops.net import free_port
from ops.procs import pss_kib, tree
from schemas import events as ev
from schemas import tables as t
from schemas.progress import read_progress
from snapshots.reader import SnapshotReader

ROOT = Path(__file__).resolve().parent.parent
CHURN_EVERY_S = 60.0
BATCH = 1000  # re-registrations published together at most (a fleet running late catches up in these)


def memory_mib(root_pid: int) -> tuple[dict[str, float], dict[str, float]]:
    """RSS and PSS of the launcher's process tree, summed by role (MiB)."""
    rss: dict[str, float] = {}
    pss: dict[str, float] = {}
    for proc in tree(root_pid):
        rss[proc.role] = rss.get(proc.role, 0.0) + proc.rss_kib / 1024
        pss[proc.role] = pss.get(proc.role, 0.0) + pss_kib(proc.pid) / 1024
    return rss, pss


class Fleet:
    """The soak's brokers, on a thread of their own so that sampling never holds them up.

    `topics` 0: every broker heartbeats every `period` s, all together. `topics` M: every broker
    re-registers with M topics of its own every `period` s, broker i at i/N of the period, on a
    fixed schedule: a publisher running late keeps its schedule, so what is due and what was sent
    part ways (`due`, `registered`), and `take_late` tells how late the latest ones went out.
    Each minute 10 brokers fall silent (they expire), 10 join and 5 switch masters."""

    def __init__(self, cfg: Config, brokers: int, period: float, topics: int = 0, seed: int = 1) -> None:
        self.pub = EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes)
        self.brokers, self.period, self.topics, self.rnd = brokers, period, topics, random.Random(seed)
        self.alive: dict[int, int] = {}  # group -> master's address id (0 or 1 after a switch)
        self.next_group = 0
        self.lock = threading.Lock()
        self.sent = 0  # records published (a chunked registration counts each chunk)
        self.chunks = 1  # the most records one re-registration took
        self.registered = 0  # scheduled re-registrations sent
        self.popped = 0  # scheduled re-registrations taken from the schedule (sent or failed)
        self.errors, self.last_error = 0, ""
        self._late = 0.0
        self._schedule: list[tuple[float, int]] = []  # (monotonic time due, group)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def addr(self, g: int, bid: int) -> str:
        return f"127.0.0.1:{10000 + (g % 5000) * 2 + bid}"

    def topic_table(self, g: int) -> dict[str, dict[str, Any]]:
        names = ([f"SoakTopic-{g}-{i}" for i in range(self.topics)] if self.topics
                 else [f"SoakTopic{g % 100}", "SoakBase"])
        return {n: ev.topic_config(n) for n in names}

    def register(self, g: int, bid: int) -> dict[str, Any]:
        """Group `g`'s master at address `bid`, its whole topic table."""
        return ev.register_broker_event(cluster="SoakCluster", broker_name=f"soak-{g}", broker_id=0,
                                        addr=self.addr(g, bid), timeout_ms=int(self.period * 3000),
                                        topics=self.topic_table(g))

    def start(self, until: float) -> None:
        """Register the fleet (heartbeats) or schedule it (re-registrations), then run it on its
        thread until `until` (time.monotonic) or `stop`."""
        now = time.monotonic()
        with self.lock:
            groups = [self._new_group() for _ in range(self.brokers)]
            if self.topics:
                self._schedule = [(now + i * self.period / len(groups), g) for i, g in enumerate(groups)]
                heapq.heapify(self._schedule)
        if not self.topics:
            for i in range(0, len(groups), 500):
                self._publish([self.register(g, 0) for g in groups[i:i + 500]])
        self._thread = threading.Thread(target=self._run, args=(until,), name="soak-fleet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.pub.close()

    def progress(self) -> tuple[int, int]:
        """(due, sent): scheduled re-registrations due by now and those sent, since the start."""
        now = time.monotonic()
        with self.lock:
            return self.popped + sum(1 for d, g in self._schedule if d <= now and g in self.alive), self.registered

    def take_late(self) -> float:
        """How late (s) the latest re-registration sent since the last call was acknowledged."""
        with self.lock:
            late, self._late = self._late, 0.0
            return late

    def _new_group(self) -> int:
        g = self.next_group
        self.next_group += 1
        self.alive[g] = 0
        return g

    def _publish(self, events: list[dict[str, Any]]) -> int:
        """Publish; the records sent (0 when Kafka refused: counted in `errors`, the fleet goes on)."""
        if not events:
            return 0
        try:
            n = len(self.pub.publish(events))
        except Exception as e:  # a Kafka hiccup must not end the fleet silently: shown in the next sample
            with self.lock:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"[:200]
            return 0
        with self.lock:
            self.sent += n
        return n

    def _run(self, until: float) -> None:
        next_churn = next_beat = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= until:
                return
            if now >= next_churn:
                self.churn()
                next_churn += CHURN_EVERY_S
            if self.topics:
                self.reregister(now)
                with self.lock:
                    wake = self._schedule[0][0] if self._schedule else until
            else:
                if now >= next_beat:
                    self.heartbeat()
                    next_beat = now + self.period
                wake = next_beat
            self._stop.wait(max(0.0, min(wake, next_churn, until) - time.monotonic()))

    def reregister(self, now: float) -> None:
        """Publish the re-registrations due by `now` (at most BATCH), each rescheduled a period later."""
        batch: list[tuple[int, int]] = []
        oldest = now
        with self.lock:
            while self._schedule and self._schedule[0][0] <= now and len(batch) < BATCH:
                due, g = heapq.heappop(self._schedule)
                if g not in self.alive:
                    continue  # fell silent: off the schedule
                heapq.heappush(self._schedule, (due + self.period, g))
                self.popped += 1
                oldest = min(oldest, due)
                batch.append((g, self.alive[g]))
        records = self._publish([self.register(g, bid) for g, bid in batch])
        if records:
            with self.lock:
                self.registered += len(batch)
                self.chunks = max(self.chunks, -(-records // len(batch)))
                self._late = max(self._late, time.monotonic() - oldest)

    def churn(self) -> None:
        with self.lock:
            groups = list(self.alive)
            for g in self.rnd.sample(groups, min(10, len(groups))):
                del self.alive[g]  # silent from now on: expires
            joined = [self._new_group() for _ in range(10)]
            if self.topics:
                for g in joined:
                    heapq.heappush(self._schedule, (time.monotonic() + self.period, g))
        self._publish([self.register(g, 0) for g in joined])
        events = []
        with self.lock:
            for g in self.rnd.sample(list(self.alive), min(5, len(self.alive))):
                old = self.alive[g]
                self.alive[g] = 1 - old  # the other address becomes the master
                events += [ev.unregister_broker_event(cluster="SoakCluster", broker_name=f"soak-{g}", broker_id=0,
                                                      addr=self.addr(g, old)), self.register(g, 1 - old)]
        self._publish(events)

    def heartbeat(self) -> None:
        with self.lock:
            events = [ev.heartbeat_event(cluster="SoakCluster", broker_name=f"soak-{g}", broker_id=0,
                                         addr=self.addr(g, bid)) for g, bid in self.alive.items()]
        self._publish(events)


class LogSize:
    """The events topic's size: records held (end minus beginning offsets, summed over partitions,
    through a kafka-python consumer) and the embedded Apache Kafka's `<data dir>/kafka` on disk."""

    def __init__(self, bootstrap: str, topic: str, disk: Path) -> None:
        self.bootstrap, self.topic, self.disk = bootstrap, topic, disk
        self._consumer: Any = None

    def records(self) -> int | None:
        from kafka import TopicPartition

        from eventlog.consumer import consumer, true_end
        try:
            if self._consumer is None:
                self._consumer = consumer(self.bootstrap, bootstrap_timeout_ms=5000)
            c = self._consumer
            tps = [TopicPartition(self.topic, p) for p in sorted(c.partitions_for_topic(self.topic) or set())]
            begins, ends = c.beginning_offsets(tps), c.end_offsets(tps)
            # Tansu reports a batch's base offset as the end: true_end reads the last batch
            return int(sum(true_end(c, tp, ends[tp]) - begins[tp] for tp in tps))
        except Exception:  # a sample without the figure rather than no sample
            self.close()
            return None

    def disk_mib(self) -> float | None:
        """Allocated blocks (as du counts them: Kafka's preallocated index files count as used)."""
        if not self.disk.is_dir():
            return None
        used = 0
        for dirpath, _, files in os.walk(self.disk):
            for name in files:
                try:
                    used += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass  # a segment deleted by retention meanwhile
        return used / 2**20

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:
                pass
            self._consumer = None


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("./run.sh soak", __doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10, help="how long the fleet runs (default 10; 0: no fleet)")
    ap.add_argument("--brokers", type=int, default=1000, help="broker groups, one master each (default 1000)")
    ap.add_argument("--topics", type=int, default=0, metavar="M",
                    help="0 (default): brokers heartbeat; M > 0: each broker re-registers its whole REGISTER_BROKER "
                         "with M topics of its own every --period s instead, each on its own timer")
    ap.add_argument("--period", type=float, default=5.0,
                    help="seconds between a broker's heartbeats, or re-registrations with --topics (default 5, "
                         "accelerated; RocketMQ brokers re-register every 30); brokers expire after 3 periods")
    ap.add_argument("--sample", type=float, default=30.0, help="sampling interval (s, default 30)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", metavar="DIR",
                    help="where soak-memory.json (the samples) and soak-memory.png (memory over time) go "
                         "(default docs/)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the scratch data directory (Kafka's log, the tables, the logs) after a run that "
                         "passed; one that failed keeps it anyway")
    ap.add_argument("--kills", type=int, default=0,
                    help="afterwards, run the crash-safety test with this many SIGKILLs (e.g. 50)")
    ap.add_argument("--differential", type=int, default=0, metavar="SEQUENCES",
                    help="afterwards, compare this many generated request sequences with RocketMQ's own NameServer "
                         "(e.g. 1500, about 22,000 steps)")
    ap.add_argument("--catch-up", action="store_true",
                    help="afterwards, stop the job for 3 minutes under a 1,000-broker fleet (120 s timeout) and check "
                         "that catching up expires nobody")
    ap.add_argument("--malformed", type=int, default=0, metavar="REQUESTS",
                    help="afterwards, send this many generated malformed requests to RocketMQ's own NameServer and to "
                         "ours and compare what each does (e.g. 5000; a fresh seed each run, printed)")
    args = ap.parse_args(argv)
    if args.brokers < 1 or args.topics < 0 or args.period <= 0 or args.sample <= 0:
        ap.error("--brokers must be at least 1, --topics at least 0, --period and --sample above 0")
    seed = random.randrange(2**32)
    # stage -> (title, its pytest arguments, its environment); the fleet runs here, the others in pytest
    later = {
        "catch-up": ("catch-up after a 3-minute outage, 1,000 brokers", ["tests/expiry/test_catch_up.py"],
                     {"NAMESRV_CATCHUP_BROKERS": "1000", "NAMESRV_CATCHUP_TIMEOUT_MS": "120000",
                      "NAMESRV_CATCHUP_OUTAGE_S": "180"}) if args.catch_up else None,
        "differential": (f"differential test against RocketMQ's NameServer, {args.differential} sequences",
                         ["-k", "ours_answer", "tests/routing/test_differential.py"],
                         {"NAMESRV_DIFF_SEQUENCES": str(args.differential)}) if args.differential else None,
        "malformed": (f"malformed requests against RocketMQ's NameServer, {args.malformed} requests, seed {seed}",
                      ["tests/routing/test_malformed_differential.py"],
                      {"NAMESRV_MALFORMED_EXAMPLES": str(args.malformed), "NAMESRV_MALFORMED_SEED": str(seed)})
        if args.malformed else None,
        "crash safety": (f"crash safety with {args.kills} kills", ["--faults", "tests/recovery/test_crash_safety.py"],
                         {"NAMESRV_CRASH_KILLS": str(args.kills)}) if args.kills else None,
    }
    stages = (["fleet"] if args.minutes > 0 else []) + [name for name, stage in later.items() if stage]
    print(f"soak: {len(stages)} stage(s): {', '.join(stages) or 'none'}", flush=True)
    ok = soak(args) if args.minutes > 0 else True
    for name, stage in later.items():
        if stage is None:
            continue
        title, pytest_args, env = stage
        print(f"\n[stage {stages.index(name) + 1}/{len(stages)}] {title}:", flush=True)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                              cwd=ROOT, env={**os.environ, **env})
        ok = ok and done.returncode == 0
    return 0 if ok else 1


def describe(args: argparse.Namespace) -> str:
    if args.topics:
        what = (f"{args.brokers:,} brokers × {args.topics} topics re-registering every {args.period:g} s "
                "(each on its own timer)")
    else:
        what = f"{args.brokers:,} brokers heartbeating every {args.period:g} s"
    return f"{what}, churn each minute, {args.minutes:g} min"


HEADER = (f"{'min':>5} {'sent':>9} {'regs due/sent':>15} {'late s':>6} {'lag':>7} {'open ms':>8} {'snapshots':>9} "
          f"{'live':>6} {'log recs':>9} {'log MiB':>7}  PSS MiB by process (RSS total)")


def wait_healthy(url: str, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if requests.get(url + "/healthz", timeout=2).status_code in (200, 503):
                return
        except requests.RequestException:
            pass
        time.sleep(1)


def stop_tree(launcher: subprocess.Popen[bytes]) -> None:
    """SIGTERM the launcher (it stops its children), SIGKILL whatever of its tree is left after 90 s."""
    procs = tree(launcher.pid)  # its children have sessions of their own: remember them now
    os.killpg(launcher.pid, signal.SIGTERM)
    try:
        launcher.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
    deadline = time.time() + 20
    while time.time() < deadline and any(Path(f"/proc/{p.pid}").exists() for p in procs):
        time.sleep(0.5)
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def take_sample(cfg: Config, url: str, launcher_pid: int, fleet: Fleet, log: LogSize, start: float,
                previous: dict[str, Any] | None) -> dict[str, Any]:
    now = time.time()
    progress = read_progress(cfg.warehouse) or {}
    lag = fleet.sent - sum(progress.get("sourceOffsets", {}).values())
    started = time.perf_counter()
    reader = SnapshotReader(cfg.warehouse)
    row = reader.newest_row()
    if row is not None:
        reader.load(row)
    open_ms = (time.perf_counter() - started) * 1000
    count = len(reader._table(t.SNAPSHOTS).to_pyarrow_table()) if row is not None else 0
    try:
        live: int | None = len(requests.get(url + "/brokers/live", timeout=30).json())
    except (requests.RequestException, ValueError):
        live = None
    rss, pss = memory_mib(launcher_pid)
    due, registered = fleet.progress()
    return {"min": (now - start) / 60, "time": now, "sent": fleet.sent, "lag": lag, "open": open_ms,
            "snapshots": count, "live": live, "rss_mib": rss, "pss_mib": pss,
            "log_records": log.records(), "log_disk_mib": log.disk_mib(),
            "due": due, "registered": registered, "late_s": fleet.take_late(),
            "due_window": due - (previous or {}).get("due", 0),
            "registered_window": registered - (previous or {}).get("registered", 0),
            "publish_errors": fleet.errors}


def sample_line(r: dict[str, Any], topics: int) -> str:
    regs = f"{r['due_window']}/{r['registered_window']}" if topics else "-"
    late = f"{r['late_s']:.2f}" if topics else "-"
    live = "?" if r["live"] is None else str(r["live"])
    recs = "?" if r["log_records"] is None else str(r["log_records"])
    disk = "-" if r["log_disk_mib"] is None else f"{r['log_disk_mib']:.0f}"
    mem = " ".join(f"{k}={v:.0f}" for k, v in sorted(r["pss_mib"].items()) if v)
    return (f"{r['min']:5.1f} {r['sent']:9d} {regs:>15} {late:>6} {r['lag']:7d} {r['open']:8.1f} {r['snapshots']:9d} "
            f"{live:>6} {recs:>9} {disk:>7}  total={soak_report.total(r['pss_mib']):.0f} {mem} "
            f"({soak_report.total(r['rss_mib']):.0f})")


def soak(args: argparse.Namespace) -> bool:
    data = Path(tempfile.mkdtemp(prefix="namesrv-soak-"))
    env = {**os.environ, "NAMESRV_DATA_DIR": str(data), "NAMESRV_KAFKA_BOOTSTRAP": "",
           "NAMESRV_KAFKA_EMBEDDED_PORT": str(free_port()), "NAMESRV_HTTP_PORT": str(free_port()),
           "NAMESRV_ADMIN_TOKEN": "soak", "NAMESRV_MAINTENANCE_INTERVAL_MS": "120000"}
    cfg = load_config(env)
    out = Path(args.out)
    json_path, png_path = out / "soak-memory.json", out / "soak-memory.png"
    launcher = subprocess.Popen([sys.executable, "-m", "ops.launcher"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{cfg.http_port}"
    rows: list[dict[str, Any]] = []
    record: dict[str, Any] = {
        "run": describe(args), "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "settings": {"minutes": args.minutes, "brokers": args.brokers, "topics": args.topics, "period_s": args.period,
                     "sample_s": args.sample, "kafka": cfg.kafka_embedded if cfg.uses_embedded_kafka else "external"},
        "data_dir": str(data), "samples": rows}
    fleet: Fleet | None = None
    log = LogSize(cfg.bootstrap, cfg.kafka_topic, cfg.data_dir / "kafka")
    try:
        wait_healthy(url)
        fleet = Fleet(cfg, args.brokers, args.period, args.topics)
        print(f"soak: {describe(args)}; data in {data}", flush=True)
        print(HEADER, flush=True)
        start = time.time()
        fleet.start(time.monotonic() + args.minutes * 60)
        while time.time() - start < args.minutes * 60:
            rows.append(take_sample(cfg, url, launcher.pid, fleet, log, start, rows[-1] if rows else None))
            print(sample_line(rows[-1], args.topics), flush=True)
            if fleet.errors and (len(rows) < 2 or rows[-2]["publish_errors"] < fleet.errors):
                print(f"      the fleet's publishes failed {fleet.errors} time(s), last: {fleet.last_error}", flush=True)
            soak_report.write_json(json_path, record)
            wake = min(start + args.minutes * 60, time.time() + args.sample)
            time.sleep(max(0.0, wake - time.time()))
    finally:
        if fleet is not None:
            fleet.stop()
        log.close()
        stop_tree(launcher)
    ok, record["checks"], verdict = judge(rows, args, fleet.chunks if fleet else 1)
    if verdict is not None:
        record["memory"] = verdict.as_dict()
    soak_report.write_json(json_path, record)
    if rows:
        kafka = {"kafka": "embedded Apache Kafka", "tansu": "embedded Tansu"}.get(record["settings"]["kafka"], "external Kafka")
        soak_report.plot(rows, png_path, title=f"soak: {describe(args)}\n{kafka}; PSS of every process of ./run.sh's tree",
                         minutes=args.minutes)
        print(f"\nsamples: {json_path}\nplot:    {png_path}")
    if ok and not args.keep:
        shutil.rmtree(data, ignore_errors=True)  # an hour of a large fleet leaves gigabytes
    else:
        print(f"data kept: {data} (logs in {data / 'logs'})")
    return ok


def judge(rows: list[dict[str, Any]], args: argparse.Namespace,
          chunks: int) -> tuple[bool, dict[str, bool], soak_report.MemoryVerdict | None]:
    """Print the summary and the verdicts; (all passed, each check, the memory verdict)."""
    if len(rows) < 4:
        print("soak: too short to judge (fewer than 4 samples)")
        return True, {}, None
    # "warm": the samples after the first minute's start-up; "end": the last third of the run
    warm_rows = [r for r in rows[1:] if r["min"] >= 1.0][: max(1, len(rows) // 3)] or rows[1:2]
    end_rows = rows[-max(1, len(rows) // 3):]
    warm, end = warm_rows[0], rows[-1]

    def rss(r: dict[str, Any]) -> float:
        return soak_report.total(r["rss_mib"])

    def med(rs: list[dict[str, Any]], f: Any) -> float:
        return soak_report.median([f(r) for r in rs])

    memory = soak_report.memory_verdict(rows, args.minutes)
    checks = {
        "lag stays bounded (< 2 periods of the fleet's signals)":
            max(r["lag"] for r in end_rows) <= 2 * args.brokers * chunks + 100,
        "RSS flat (end third <= 1.5 x warm)": med(end_rows, rss) <= 1.5 * med(warm_rows, rss),
        "snapshot open time flat (end third <= 2 x warm + 50 ms)":
            med(end_rows, lambda r: r["open"]) <= 2 * med(warm_rows, lambda r: r["open"]) + 50,
        "memory flat within 10 % after the first 10 minutes (PSS, each role and in all)": memory.passed,
    }
    if args.topics:
        late = max(r["late_s"] for r in rows)
        checks["the fleet kept its pace (re-registrations sent >= 99 % of those due, none a period late)"] = (
            rows[-1]["registered"] >= 0.99 * rows[-1]["due"] and late < args.period)
    print("\nsummary          start     warm      end")
    figures: list[tuple[str, Any, str]] = [
        ("lag", lambda r: r["lag"], ">8"), ("RSS MiB (all)", rss, ">8.0f"),
        ("PSS MiB (all)", lambda r: soak_report.total(r["pss_mib"]), ">8.0f"),
        ("open ms", lambda r: r["open"], ">8.1f"), ("snapshots", lambda r: r["snapshots"], ">8"),
        ("live brokers", lambda r: r["live"] if r["live"] is not None else -1, ">8"),
        ("log records", lambda r: r["log_records"] if r["log_records"] is not None else -1, ">8")]
    if args.topics:
        figures += [("regs due", lambda r: r["due"], ">8"), ("regs sent", lambda r: r["registered"], ">8")]
    for label, f, fmt in figures:
        print(f"{label:<16} {f(rows[0]):{fmt}} {f(warm):{fmt}} {f(end):{fmt}}")
    print()
    for line in memory.lines():
        print(line)
    print()
    for name, passed in checks.items():
        print(f"{'ok  ' if passed else 'FAIL'} {name}")
    if not memory.reference.startswith("median"):
        print(f"     (memory's warm reference: {memory.reference})")
    return all(checks.values()), checks, memory


if __name__ == "__main__":
    sys.exit(main())
