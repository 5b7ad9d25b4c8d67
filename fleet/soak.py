"""`./run.sh soak --minutes N`: the whole system under a churning 1,000-broker fleet.

Starts what `./run.sh` starts (the launcher: embedded Kafka, job, HTTP server) on free
loopback ports in a scratch data directory, runs an accelerated fleet with churn (deaths that
expire, joins, master switches), samples every process's RSS, the consumer lag, the time to
open the newest snapshot and the snapshot count, prints a table, and exits non-zero when a
figure does not stay flat. Bounded: it stops after N minutes.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from conf import Config, load_config
from conf.version import argument_parser
from eventlog.publisher import EventPublisher
from ops.net import free_port
from ops.procs import tree
from schemas import events as ev
from schemas import tables as t
from schemas.progress import read_progress
from snapshots.reader import SnapshotReader

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(root_pid: int) -> dict[str, float]:
    """RSS of the launcher's process tree, by role (MiB)."""
    out: dict[str, float] = {}
    for proc in tree(root_pid):
        out[proc.role] = out.get(proc.role, 0) + proc.rss_kib / 1024
    return out


class Fleet:
    """Brokers heartbeat every `period` s; each minute some die, some join, some switch masters."""

    def __init__(self, cfg: Config, brokers: int, period: float, seed: int = 1) -> None:
        self.pub = EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes)
        self.period, self.rnd = period, random.Random(seed)
        self.alive: dict[int, int] = {}  # group -> master id (0 or 1 after a switch)
        self.next_group = 0
        self.sent = 0
        for _ in range(brokers):
            self.join()

    def addr(self, g: int, bid: int) -> str:
        return f"127.0.0.1:{10000 + (g % 5000) * 2 + bid}"

    def register(self, g: int, bid: int) -> dict:
        return ev.register_broker_event(cluster="SoakCluster", broker_name=f"soak-{g}", broker_id=bid,
                                        addr=self.addr(g, bid), timeout_ms=int(self.period * 3000),
                                        topics={f"SoakTopic{g % 100}": ev.topic_config(f"SoakTopic{g % 100}"),
                                                "SoakBase": ev.topic_config("SoakBase")})

    def join(self) -> None:
        g = self.next_group
        self.next_group += 1
        self.alive[g] = 0
        self.sent += len(self.pub.publish([self.register(g, 0)]))

    def churn(self) -> None:
        groups = list(self.alive)
        for g in self.rnd.sample(groups, min(10, len(groups))):
            del self.alive[g]  # silent from now on: expires
        for _ in range(10):
            self.join()
        for g in self.rnd.sample(list(self.alive), min(5, len(self.alive))):
            old = self.alive[g]
            new_addr_id = 1 - old
            events = [ev.unregister_broker_event(cluster="SoakCluster", broker_name=f"soak-{g}", broker_id=0,
                                                 addr=self.addr(g, old)), self.register(g, new_addr_id)]
            events[1]["brokerId"] = 0  # the other address becomes the master
            self.alive[g] = new_addr_id
            self.sent += len(self.pub.publish(events))

    def heartbeat(self) -> None:
        events = [ev.heartbeat_event(cluster="SoakCluster", broker_name=f"soak-{g}", broker_id=0,
                                     addr=self.addr(g, bid)) for g, bid in self.alive.items()]
        self.sent += len(self.pub.publish(events))


def main(argv: list[str] | None = None) -> int:
    ap = argument_parser("./run.sh soak", __doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--brokers", type=int, default=1000)
    ap.add_argument("--period", type=float, default=5.0, help="heartbeat period, accelerated (s)")
    ap.add_argument("--sample", type=float, default=30.0, help="sampling interval (s)")
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
        "crash safety": (f"crash safety with {args.kills} kills", ["tests/recovery/test_crash_safety.py"],
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


def soak(args: argparse.Namespace) -> bool:
    data = Path(tempfile.mkdtemp(prefix="namesrv-soak-"))
    env = {**os.environ, "NAMESRV_DATA_DIR": str(data), "NAMESRV_KAFKA_BOOTSTRAP": "",
           "NAMESRV_KAFKA_EMBEDDED_PORT": str(free_port()), "NAMESRV_HTTP_PORT": str(free_port()),
           "NAMESRV_ADMIN_TOKEN": "soak", "NAMESRV_MAINTENANCE_INTERVAL_MS": "120000"}
    cfg = load_config(env)
    launcher = subprocess.Popen([sys.executable, "-m", "ops.launcher"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{cfg.http_port}"
    rows, ok = [], True
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if requests.get(url + "/healthz", timeout=2).status_code in (200, 503):
                    break
            except requests.RequestException:
                time.sleep(1)
        fleet = Fleet(cfg, args.brokers, args.period)
        print(f"soak: {args.brokers} brokers, heartbeat every {args.period} s, churn each minute, "
              f"{args.minutes} min; data in {data}", flush=True)
        print(f"{'min':>5} {'sent':>8} {'lag':>7} {'open ms':>8} {'snapshots':>9} {'live':>6}  RSS MiB by process",
              flush=True)
        start = time.time()
        next_beat = next_churn = next_sample = start
        while time.time() - start < args.minutes * 60:
            now = time.time()
            if now >= next_churn:
                fleet.churn()
                next_churn = now + 60
            if now >= next_beat:
                fleet.heartbeat()
                next_beat = now + args.period
            if now >= next_sample:
                progress = read_progress(cfg.warehouse) or {}
                lag = fleet.sent - sum(progress.get("sourceOffsets", {}).values())
                started = time.perf_counter()
                reader = SnapshotReader(cfg.warehouse)
                row = reader.newest_row()
                if row is not None:
                    reader.load(row)
                open_ms = (time.perf_counter() - started) * 1000
                count = len(reader._table(t.SNAPSHOTS).to_pyarrow_table()) if row is not None else 0
                live = len(requests.get(url + "/brokers/live", timeout=10).json())
                mem = rss_mb(launcher.pid)
                rows.append({"min": (now - start) / 60, "sent": fleet.sent, "lag": lag, "open": open_ms,
                             "snapshots": count, "live": live, "rss": mem})
                print(f"{rows[-1]['min']:5.1f} {fleet.sent:8d} {lag:7d} {open_ms:8.1f} {count:9d} {live:6d}  "
                      + " ".join(f"{k}={v:.0f}" for k, v in sorted(mem.items()) if v), flush=True)
                next_sample = now + args.sample
            time.sleep(0.2)
    finally:
        os.killpg(launcher.pid, signal.SIGTERM)
        try:
            launcher.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
    if len(rows) >= 4:
        # "warm": the samples after the first minute's start-up; "end": the last third of the run
        warm_rows = [r for r in rows[1:] if r["min"] >= 1.0][: max(1, len(rows) // 3)] or rows[1:2]
        end_rows = rows[-max(1, len(rows) // 3):]
        warm, end = warm_rows[0], rows[-1]
        total = lambda r: sum(r["rss"].values())  # noqa: E731
        med = lambda rs, f: sorted(f(r) for r in rs)[len(rs) // 2]  # noqa: E731
        checks = {
            "lag stays bounded (< 2 periods of heartbeats)": max(r["lag"] for r in end_rows) <= 2 * args.brokers + 100,
            "RSS flat (end third <= 1.5 x warm)": med(end_rows, total) <= 1.5 * med(warm_rows, total),
            "snapshot open time flat (end third <= 2 x warm + 50 ms)":
                med(end_rows, lambda r: r["open"]) <= 2 * med(warm_rows, lambda r: r["open"]) + 50,
        }
        print("\nsummary          start     warm      end")
        for label, f, fmt in (("lag", lambda r: r["lag"], ">8"), ("RSS MiB (all)", total, ">8.0f"),
                              ("open ms", lambda r: r["open"], ">8.1f"), ("snapshots", lambda r: r["snapshots"], ">8"),
                              ("live brokers", lambda r: r["live"], ">8")):
            print(f"{label:<16} {f(rows[0]):{fmt}} {f(warm):{fmt}} {f(end):{fmt}}")
        for name, passed in checks.items():
            print(f"{'ok  ' if passed else 'FAIL'} {name}")
            ok = ok and passed
    else:
        print("soak: too short to judge (fewer than 4 samples)")
    return ok


if __name__ == "__main__":
    sys.exit(main())
