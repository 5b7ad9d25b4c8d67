"""Issue 24: a standby takes over from a paused writer, and the writer, resumed, writes nothing.

`./run.sh` with NAMESRV_JOB_STANDBY: the writer's whole process group (its Python driver, JVM and
Python workers) is stopped with SIGSTOP, as a frozen host would be. The standby takes over once
the lease is stale; a registration published during the pause is served. Then the old writer is
resumed: no Delta commit of its epoch follows the takeover, it leaves on its own (exit code 3,
`pipelines/writer_lease.py`), and the launcher starts it again as the new standby.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.utils import floatToGoString

from eventlog.publisher import EventPublisher
from ops.net import free_port
from pipelines import planner_daemons, sizing, writer_lease
from schemas import tables as t
from tests.helpers import DEFAULTS, reg, topics, wait

pytestmark = [pytest.mark.integration, pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[2]


def commits(table: Path) -> list[tuple[int, dict]]:
    """(version, commitInfo) of every commit in a Delta table's log."""
    out = []
    for f in sorted((table / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                out.append((int(f.stem), action["commitInfo"]))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def planner_daemons_under(pid: int) -> set[str]:
    """Which of Spark's data source planner daemons run under a job's process (its JVM's children)."""
    return {m for child in _descendants(pid) for m in planner_daemons.PLANNER_MODULES if m in _cmdline(child)}


def test_a_paused_writer_is_taken_over_and_writes_nothing_when_resumed(tmp_path):
    http_port, kafka_port = free_port(), free_port()
    env = {**os.environ, "NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_KAFKA_BOOTSTRAP": "",
           "NAMESRV_KAFKA_EMBEDDED_PORT": str(kafka_port), "NAMESRV_HTTP_PORT": str(http_port),
           "NAMESRV_REMOTING_PORT": "0", "NAMESRV_JOB_STANDBY": "true", "NAMESRV_ADMIN_TOKEN": "takeover"}
    url = f"http://127.0.0.1:{http_port}"
    warehouse = tmp_path / "delta"
    launcher = subprocess.Popen([sys.executable, "-m", "ops.launcher"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    stopped: int | None = None
    try:
        wait(lambda: requests.get(url + "/readyz", timeout=2).status_code == 200, 180, "readiness")
        pub = EventPublisher(f"127.0.0.1:{kafka_port}", "namesrv-events", max_message_bytes=DEFAULTS.max_message_bytes)
        pub.publish([reg("take-a", 0, "127.0.0.1:37911", tps=topics("TakeA", "TakeBase"))])
        wait(lambda: requests.get(url + "/topics/TakeA/route", timeout=2).status_code == 200, 60, "the first route")
        first = writer_lease.newest(tmp_path)
        assert first is not None
        old_epoch, old_pid = first[0], first[1]["pid"]
        # The writer's JVM runs with the heap pipelines/sizing.py chose for the fleet it started with
        # (none: the floor) and, with NAMESRV_SPARK_MASTER=auto (the default), one task slot per task
        # of the stateful stage, which its log names and its metrics export.
        assert sizing.is_auto(DEFAULTS.spark_master)
        slots = sizing.resolve_master(DEFAULTS.spark_master, partitions=DEFAULTS.shuffle_partitions,
                                      cores=sizing.host_cores())
        assert slots.master == f"local[{min(DEFAULTS.shuffle_partitions, sizing.host_cores())}]"
        heap = sizing.driver_heap("auto", None, host_memory=sizing.host_memory_bytes(), buckets=DEFAULTS.state_buckets,
                                  slots=slots.slots)
        jvms = [c for c in _descendants(old_pid) if _cmdline(c).split(" ")[0].endswith("java")]
        assert len(jvms) == 1 and f"-Xmx{heap.size} " in _cmdline(jvms[0]), [_cmdline(c)[:300] for c in jvms]
        assert f"spark.master={slots.master} " in _cmdline(jvms[0]), _cmdline(jvms[0])
        job_log = "".join(f.read_text() for f in (tmp_path / "logs").glob("job*.log"))
        assert f"driver heap {heap.size} (the floor" in job_log
        assert f"{slots.describe()}\n" in job_log
        gauges = [f'namesrv_job_driver_heap_bytes{{kind="heap"}} {floatToGoString(heap.bytes)}',
                  f"namesrv_job_task_slots {floatToGoString(slots.slots)}"]
        wait(lambda: all(g in (tmp_path / "metrics" / "job.prom").read_text() for g in gauges), 30,
             "the driver's heap and task slots in the job's metrics")
        # The standby is up and waiting (its SparkSession built) before the writer is paused.
        wait(lambda: "standby: job" in "".join(f.read_text() for f in (tmp_path / "logs").glob("job*.log")), 120,
             "the standby")
        # The writer stopped Spark's planner daemons after its first batch; the standby keeps its own warm.
        wait(lambda: not planner_daemons_under(old_pid), 60, "the writer to stop Spark's planner daemons")
        standby = [c for c in _descendants(launcher.pid) if "pipelines.job" in _cmdline(c) and c != old_pid]
        assert len(standby) == 1, standby
        wait(lambda: planner_daemons_under(standby[0]), 90, "the standby's planner daemons, kept warm")

        stopped = os.getpgid(old_pid)
        os.killpg(stopped, signal.SIGSTOP)
        paused_at = time.time()
        pub.publish([reg("take-b", 0, "127.0.0.1:37921", tps=topics("TakeB", "TakeBase"))])
        wait(lambda: requests.get(url + "/topics/TakeB/route", timeout=2).status_code == 200, 90,
             "the standby to take over and serve a registration published during the pause")
        lease = writer_lease.newest(tmp_path)
        assert lease is not None and lease[0] > old_epoch and lease[1]["pid"] != old_pid
        new_epoch = lease[0]
        taken_after = lease[1]["takenAt"] / 1000 - paused_at
        assert taken_after >= writer_lease.STALE_S - 1, f"taken over {taken_after:.1f} s into the pause: too soon"
        fenced = {table.name: max(v for v, info in commits(warehouse / table.name)
                                  if info.get("operation") == "SET TBLPROPERTIES") for table in t.ALL_TABLES}

        os.killpg(stopped, signal.SIGCONT)
        stopped = None
        pub.publish([reg("take-c", 0, "127.0.0.1:37931", tps=topics("TakeC", "TakeBase"))])
        wait(lambda: requests.get(url + "/topics/TakeC/route", timeout=2).status_code == 200, 60,
             "the new writer to serve after the old one resumed")

        # The old writer leaves on its own; the launcher starts a new standby in its place.
        wait(lambda: not Path(f"/proc/{old_pid}").exists(), 30, "the old writer to leave")
        log = "".join(f.read_text() for f in (tmp_path / "logs").glob("job*.log*"))
        assert f"writer epoch {old_epoch} was taken over by epoch {new_epoch}" in log
        # Nothing it prepared was committed after the takeover: every later commit is the new epoch's.
        for table in t.ALL_TABLES:
            later = [(v, info) for v, info in commits(warehouse / table.name) if v > fenced[table.name]]
            wrong = [(v, info.get(writer_lease.EPOCH_PROPERTY)) for v, info in later
                     if info.get("operation") != "SET TBLPROPERTIES"
                     and info.get(writer_lease.EPOCH_PROPERTY) != str(new_epoch)]
            assert not wrong, f"{table.name}: commits after the takeover not by epoch {new_epoch}: {wrong}"
        assert writer_lease.newest(tmp_path)[0] == new_epoch  # the resumed job did not take the role back
    finally:
        if stopped is not None:
            os.killpg(stopped, signal.SIGCONT)
        launcher.send_signal(signal.SIGTERM)
        try:
            launcher.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=10)
