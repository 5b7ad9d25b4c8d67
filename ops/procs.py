"""The namesrv processes on this machine, read from /proc (for the soak and supervision tests)."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    rss_kib: int
    role: str  # kafka, tansu, job-jvm, job, http, remoting, cutbuilder, launcher, py-worker, other


def _role(cmd: str) -> str:
    """The role of a command line (its arguments joined by spaces). The embedded Apache Kafka is a
    JVM too: its main class (an argument of its own, `ops.embedded_kafka.kafka_command`) is looked
    for before `java`, which is otherwise Spark's JVM."""
    if "kafka.Kafka" in cmd.split():
        return "kafka"
    for marker, role in (("tansu", "tansu"), ("java", "job-jvm"), ("pipelines.job", "job"), ("-m serving", "http"),
                         ("-m remoting", "remoting"), ("-m snapshots.cutbuilder", "cutbuilder"),
                         ("ops.launcher", "launcher"), ("pyspark", "py-worker")):
        if marker in cmd:
            return role
    return "other"


def processes() -> list[Proc]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        out.append(Proc(int(entry.name), int(fields["PPid"].strip()),
                        int(fields.get("VmRSS", "0 kB").split()[0]), _role(cmd)))
    return out


def pss_kib(pid: int) -> int:
    """Proportional set size: resident pages, each shared page divided among the processes that
    map it. Summed over processes it is their memory (RSS summed counts every shared library
    and the JVM's class archive once per process); 0 for a process that is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(root_pid: int) -> list[Proc]:
    """`root_pid` and all its descendants."""
    procs = processes()
    children: dict[int, list[Proc]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    found = [p for p in procs if p.pid == root_pid]
    stack = list(found)
    while stack:
        for child in children.get(stack.pop().pid, []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(root_pid: int) -> None:
    """SIGKILL `root_pid` and all its descendants, children first seen last (a launcher's children
    have sessions of their own, so killing its process group would leave them)."""
    for p in reversed(tree(root_pid)):
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_group(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM the process group `proc` leads (started with start_new_session), SIGKILL it after
    `timeout_s`: what a test or a bench part does with the servers it started, so that a server's
    own children go with it."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
