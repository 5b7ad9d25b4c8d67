"""Several remoting front processes on one port (NAMESRV_REMOTING_PROCESSES=2, SO_REUSEPORT).

`python -m remoting` runs as a user starts it, over a warehouse the real sink wrote (no Spark:
`SinkDriver`) and no cut builder on the host, so one of its processes writes the cut file and
both map it. Connections spread over both processes (seen in each one's own metrics file), both
answer every topic byte for byte as `route_reads` does over the cut, their metrics add up in the
port's file (and stay added up when one dies), a killed process is replaced while the port keeps
answering, and SIGTERM stops them all. The metrics sum itself is checked as a pure function.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

from conf import load_config
from ops.net import free_port
from remoting import codes, metrics_sum, processes
from remoting.client import RemotingClient
from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from schemas.metrics import RemotingMetrics, metrics_file, remoting_role
from snapshots import cutbuilder
from snapshots.reader import SnapshotReader
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics

ROOT = Path(__file__).resolve().parents[2]
N = 2
LOOKUP = str(codes.GET_ROUTEINFO_BY_TOPIC)
DEATH_GRACE_S = 0.2


@dataclass
class Fronts:
    proc: subprocess.Popen[bytes]
    port: int
    data: Path
    output: Path
    snap: Snapshot

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def children(self) -> list[int]:
        pid = self.proc.pid
        try:
            return sorted(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
        except OSError:
            return []

    def counts(self, role: str) -> dict[str, float]:
        """The counters of one metrics file that these tests read (0 when absent)."""
        try:
            families = metrics_sum.parse(metrics_file(self.data, role).read_text())
        except OSError:
            families = {}
        out: dict[str, float] = {}
        for fam in families.values():
            for (name, labels), (_, value) in fam.samples.items():
                if name == "namesrv_remoting_requests_total" and dict(labels)["request_code"] == LOOKUP:
                    out["lookups"] = out.get("lookups", 0) + value
                elif name in ("namesrv_remoting_connections_opened_total", "namesrv_remoting_snapshot_id",
                              "namesrv_remoting_connections"):
                    out[name] = value
        return out

    def child_counts(self) -> list[dict[str, float]]:
        return [self.counts(processes.child_role(self.port, i)) for i in range(N)]

    def summed(self) -> dict[str, float]:
        return self.counts(remoting_role(self.port))


def _until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.05)


def _start(data: Path, port: int, output: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NAMESRV_DATA_DIR": str(data), "NAMESRV_REMOTING_PORT": str(port),
           "NAMESRV_REMOTING_PROCESSES": str(N), "NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"}
    with output.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "remoting"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _gone(pid: int) -> bool:
    """Exited (a zombie has closed its sockets already)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fronts]:
    data = tmp_path_factory.mktemp("reuseport")
    SinkDriver(data / "delta").run_batch(
        [reg(f"rp-{b}", 0, f"127.0.0.1:{37000 + b}", tps=topics(*(f"Rp{b}-{t}" for t in range(10))),
             cluster="RpCluster" if b % 2 else "DefaultCluster") for b in range(10)], int(time.time() * 1000))
    reader = SnapshotReader(data / "delta")
    snap = reader.load(reader.newest_row())
    port, output = free_port(), data / "remoting.out"
    proc = _start(data, port, output)
    f = Fronts(proc, port, data, output, snap)
    try:
        _until("both processes listen", lambda: "processes on the one port" in f.log() or proc.poll() is not None)
        assert proc.poll() is None, f.log()
        yield f
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _ask_everything(addr: str, names: list[str], connections: int) -> list[tuple[str, int, bytes]]:
    """Every topic's route (and one unknown) and the cluster info, on each of `connections` new
    connections, held open together so the kernel spreads them over the port's sockets."""
    clients = [RemotingClient(addr, timeout_s=10) for _ in range(connections)]
    try:
        out = []
        for c in clients:
            for topic in [*names, "NoSuchTopic"]:
                answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                out.append((topic, answer.code, bytes(answer.body)))
            info = c.call(codes.GET_BROKER_CLUSTER_INFO, {})
            out.append(("<cluster>", info.code, bytes(info.body)))
        return out
    finally:
        for c in clients:
            c.close()


def _expected(snap: Snapshot, topic: str) -> tuple[int, bytes]:
    if topic == "<cluster>":
        return codes.SUCCESS, route_reads.cluster_info_body(snap)
    body = route_reads.route_body(snap, topic)
    return (codes.TOPIC_NOT_EXIST, b"") if body is None else (codes.SUCCESS, bytes(body))


@pytest.mark.integration
def test_connections_spread_over_both_processes_and_each_answers_every_topic_byte_for_byte(fronts):
    cfg = load_config({"NAMESRV_DATA_DIR": str(fronts.data)})
    kids = fronts.children()
    assert len(kids) == N
    # the host has no cut builder: exactly one of the processes writes the file, the other maps it
    assert fronts.log().count("this process writes the host's cut file") == 1, fronts.log()
    assert int(cutbuilder.cut_dir(cfg).joinpath(cutbuilder.LOCK_FILE).read_text()) in kids
    names = sorted(fronts.snap.topics)
    assert len(names) == 100
    _until("both processes serve the cut", lambda: all(
        c.get("namesrv_remoting_snapshot_id") == fronts.snap.snapshot_id for c in fronts.child_counts()))
    before = fronts.child_counts()
    connections = 24  # all on one process: 2 in 2^24
    answers = _ask_everything(fronts.addr, names, connections)
    assert len(answers) == connections * (len(names) + 2)
    for topic, code, body in answers:
        assert (code, body) == _expected(fronts.snap, topic), topic
    asked = connections * (len(names) + 1)

    def counted() -> bool:
        after = fronts.child_counts()
        return sum(a.get("lookups", 0) - b.get("lookups", 0) for a, b in zip(after, before, strict=True)) == asked

    _until("each process's file counts its lookups", counted)
    after = fronts.child_counts()
    opened = [a["namesrv_remoting_connections_opened_total"] - b.get("namesrv_remoting_connections_opened_total", 0)
              for a, b in zip(after, before, strict=True)]
    looked_up = [a["lookups"] - b.get("lookups", 0) for a, b in zip(after, before, strict=True)]
    assert sum(opened) == connections and min(opened) >= 1, opened
    # each process answered whole connections, so every topic at least once: both answered all alike
    assert looked_up == [n * (len(names) + 1) for n in opened], (looked_up, opened)


@pytest.mark.integration
def test_the_ports_metrics_are_the_sum_of_its_processes(fronts):
    before = sum(k.get("lookups", 0) for k in fronts.child_counts())
    with RemotingClient(fronts.addr, timeout_s=10) as c:
        for _ in range(50):
            assert c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Rp3-3"}).code == codes.SUCCESS

        def settled() -> bool:
            kids, summed = fronts.child_counts(), fronts.summed()
            return sum(k.get("lookups", 0) for k in kids) == before + 50 and \
                sum(k.get("namesrv_remoting_connections", 0) for k in kids) == 1 and \
                summed.get("lookups") == before + 50 and summed.get("namesrv_remoting_connections") == 1

        # this connection open on one process, its lookups counted there: the sum says the same
        _until("the sum catches up with the processes' files", settled)
        summed = fronts.summed()
        # the served cut's id is not summed: the lowest any process serves
        assert summed["namesrv_remoting_snapshot_id"] == fronts.snap.snapshot_id


@pytest.mark.integration
def test_a_killed_process_is_replaced_while_the_port_keeps_answering(fronts):
    cfg = load_config({"NAMESRV_DATA_DIR": str(fronts.data)})
    kids = fronts.children()
    builder = int(cutbuilder.cut_dir(cfg).joinpath(cutbuilder.LOCK_FILE).read_text())
    summed_before = fronts.summed()["lookups"]
    os.kill(builder, signal.SIGKILL)  # the one writing the cut file: its lock goes with it
    _until("the killed process is gone", lambda: _gone(builder), 10)
    # A connection racing the kernel's removal of the dead socket from the port's group can be
    # reset (seen once in a few runs when connecting the instant the process is a zombie; a client
    # connects again); a moment later the port answers on the survivor alone, on every connection.
    time.sleep(DEATH_GRACE_S)
    for _ in range(20):
        with RemotingClient(fronts.addr, timeout_s=10) as c:
            answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Rp7-1"})
            assert (answer.code, bytes(answer.body)) == _expected(fronts.snap, "Rp7-1")
    _until("a new process replaces it", lambda: len(fronts.children()) == N and builder not in fronts.children())
    replacement = next(p for p in fronts.children() if p not in kids)
    _until("the new process listens", lambda: f"(pid {replacement}) listening" in fronts.log())
    # its replacement serves the same cut, and both answer alike again
    names = sorted(fronts.snap.topics)
    for topic, code, body in _ask_everything(fronts.addr, names[:10], 16):
        assert (code, body) == _expected(fronts.snap, topic), topic
    # what the killed process counted stays in the port's sum
    _until("the sum counts the new lookups", lambda: fronts.summed().get("lookups", 0) >= summed_before + 20 + 16 * 11)


@pytest.mark.integration
def test_a_second_supervisor_on_a_port_in_use_refuses_to_share_it(fronts):
    out = fronts.data / "second.out"
    second = _start(fronts.data, fronts.port, out)
    assert second.wait(60) == 1
    assert "is in use" in out.read_text()


@pytest.mark.integration
def test_sigterm_stops_every_process(fronts):
    kids = fronts.children()
    assert len(kids) == N
    fronts.proc.send_signal(signal.SIGTERM)
    assert fronts.proc.wait(15) == 0
    assert all(_gone(k) for k in kids)
    with socket.socket() as s:  # nothing listens any more
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", fronts.port))


# ------------------------------------------------------------ the sum, as a pure function

def _exposition(lookups: int, snapshot_id: int, connections: int) -> str:
    m = RemotingMetrics(codes.REQUEST_CODES)
    for i in range(lookups):
        m.answered(codes.GET_ROUTEINFO_BY_TOPIC, codes.SUCCESS, 0.0004 * (i % 5))
    m.answered(codes.GET_BROKER_CLUSTER_INFO, codes.SUCCESS, 0.002)
    m.snapshot_id.set(snapshot_id)
    m.connections.set(connections)
    return generate_latest(m.registry).decode()


def _values(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {key: value for fam in metrics_sum.parse(text.decode()).values() for key, (_, value) in fam.samples.items()}


def test_one_process_sum_is_its_own_exposition_byte_for_byte():
    text = _exposition(7, 12, 3)
    assert metrics_sum.summed([text]) == text.encode()


def test_counters_and_histograms_add_up_gauges_add_up_and_the_cut_id_is_the_lowest():
    a, b = _exposition(3, 12, 2), _exposition(5, 11, 4)
    got = _values(metrics_sum.summed([a, b]))
    lookups = ("namesrv_remoting_requests_total", (("request_code", LOOKUP), ("response_code", "0")))
    assert got[lookups] == 8
    count = ("namesrv_remoting_request_duration_seconds_count", (("request_code", LOOKUP),))
    assert got[count] == 8
    bucket = ("namesrv_remoting_request_duration_seconds_bucket", (("le", "0.0005"), ("request_code", LOOKUP)))
    assert got[bucket] == _values(a.encode())[bucket] + _values(b.encode())[bucket]
    assert got[("namesrv_remoting_connections", ())] == 6
    assert got[("namesrv_remoting_snapshot_id", ())] == 11


def test_what_an_ended_process_counted_stays_but_not_its_gauges():
    ended = metrics_sum.cumulative(metrics_sum.parse(_exposition(4, 9, 5)))
    got = _values(metrics_sum.summed([_exposition(1, 12, 1)], ended))
    assert got[("namesrv_remoting_requests_total", (("request_code", LOOKUP), ("response_code", "0")))] == 5
    assert got[("namesrv_remoting_connections", ())] == 1
    assert got[("namesrv_remoting_snapshot_id", ())] == 12


def test_each_process_takes_its_share_of_a_host_bound():
    assert [processes.share(10_016, n) for n in (1, 2, 3, 64)] == [10_016, 5_008, 3_339, 157]
    assert processes.share(1, 4) == 1


def test_a_process_that_keeps_dying_takes_the_supervisor_down(tmp_path):
    """A front that dies within a minute of each start is forked again after 1 s, 2 s, ...; after
    MAX_QUICK_DEATHS such deaths in a row (1 here) the supervisor stops and exits 1, for the
    launcher to restart the whole."""
    script = (
        "import logging, sys, time\n"
        "from pathlib import Path\n"
        "from remoting import processes\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "processes.MAX_QUICK_DEATHS = 1\n"
        f"files = processes.MetricsFiles(Path({str(tmp_path)!r}), 9999, 2)\n"
        "sys.exit(processes.Supervisor(2, lambda index, listening: 3 if index else time.sleep(60) or 0, files).run())\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "front process 1 died 2 times in a row, each within 60 s of its start (the last time it exited with " \
        "code 3)" in done.stdout, done.stdout
    assert "exited with code 3 after" in done.stdout and "forking it again in 1 s" in done.stdout
    assert "front process 0" not in done.stdout  # the other one ran until it was stopped
