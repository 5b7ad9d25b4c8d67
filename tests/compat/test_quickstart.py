"""Issue 37: the quick start with real RocketMQ (docs/quickstart-rocketmq.md) works as written.

The page's commands are read from the page itself, from the fenced blocks each preceded by a
`<!-- quickstart:<step> -->` comment, and run as a person runs them, one terminal each: `./run.sh`
(the whole system: embedded Apache Kafka, the streaming job, the HTTP server, the remoting
front), `./run.sh rocketmq broker` (RocketMQ 5.5.0's broker), RocketMQ's quickstart producer and
consumer, mqadmin's topicRoute, the history endpoint and the admin CLI's change log; Ctrl-C
(SIGINT) stops what runs until stopped. The system gets free ports and its own data directory
(the page's "Ports taken?" variables), so another system on this machine does not matter.

Every wait is bounded; every process started here is stopped in `finally` (SIGTERM to its process
group, then SIGKILL to what is left of its process tree), also when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from ops.net import free_port
from ops.procs import tree

pytestmark = [pytest.mark.integration, pytest.mark.compat]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart-rocketmq.md"
STEPS = ["env", "system", "broker", "producer", "consumer", "route", "history", "history-cli", "after-broker"]
BLOCK = re.compile(r"^<!-- quickstart:([\w-]+) -->\n```bash\n(.*?)\n```", re.M | re.S)
MESSAGES = 1000  # what RocketMQ's quickstart Producer sends
# the variables the page's commands read, each set here: RocketMQ's NAMESRV_ADDR and the system's ports
PAGE_VARIABLES = {"NAMESRV_ADDR", "NAMESRV_HTTP_PORT"}


def page_blocks(text: str) -> dict[str, str]:
    """step -> the bash block after its `<!-- quickstart:<step> -->` marker, in page order."""
    return {m.group(1): m.group(2) for m in BLOCK.finditer(text)}


@dataclass
class Terminal:
    """A command of the page running as in a terminal of its own (its own process group), its
    output (stdout and stderr) in a file."""

    step: str
    proc: subprocess.Popen[bytes]
    out: Path

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, probe: Callable[[str], Any], timeout: float, what: str) -> Any:
        """Poll the output with `probe` until truthy; fail (with the output's tail) after `timeout` s
        or when the command exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = probe(self.text())
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        state = "timed out" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
        raise AssertionError(f"{self.step}: {state} waiting for {what}; output:\n{self.text()[-4000:]}")

    def ctrl_c(self, timeout: float) -> int:
        """SIGINT to its process group, as Ctrl-C sends; its exit code, within `timeout` s."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.step} did not stop within {timeout:.0f} s of Ctrl-C:\n"
                                 f"{self.text()[-3000:]}") from None

    def stop(self, timeout: float) -> None:
        """Teardown: SIGTERM to the group, then SIGKILL to every process of its tree still there
        (the broker's JVM and the system's children run in sessions of their own). A command
        that has ended (and was reaped) is left alone: its pid may be another process's by now."""
        if self.proc.poll() is not None:
            return
        procs = _cmdlines(p.pid for p in tree(self.proc.pid))
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        kill_if_same(procs)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def _cmdlines(pids: Iterable[int]) -> dict[int, bytes]:
    out = {}
    for pid in pids:
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            pass
    return out


def kill_if_same(procs: dict[int, bytes]) -> None:
    """SIGKILL each pid that still runs the command line it ran when it was seen."""
    for pid, cmdline in procs.items():
        if _cmdlines([pid]).get(pid) == cmdline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Session:
    """The page's terminals: the environment each gets, the commands started and run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.http_port, self.remoting_port = free_port(), free_port()
        # a person's shell: none of the test run's NAMESRV_* settings (the interpreter and the
        # Maven repository run.sh is told about stay), then what the page says to set
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("NAMESRV_") or k in ("NAMESRV_PYTHON", "NAMESRV_MAVEN_REPOSITORY")}
        self.env = {**env, "NAMESRV_DATA_DIR": str(tmp / "data"), "NAMESRV_HTTP_PORT": str(self.http_port),
                    "NAMESRV_REMOTING_PORT": str(self.remoting_port), "NAMESRV_KAFKA_EMBEDDED_PORT": str(free_port()),
                    "NAMESRV_ADDR": f"127.0.0.1:{self.remoting_port}"}
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.started: list[Terminal] = []

    def start(self, step: str, command: str) -> Terminal:
        out = self.tmp / f"{step}.out"
        with open(out, "wb") as sink:
            proc = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=self.env, stdout=sink,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        terminal = Terminal(step, proc, out)
        self.started.append(terminal)
        return terminal

    def run(self, step: str, command: str, timeout: float) -> str:
        """Run a command to its end (bounded); its output; fails on a non-zero exit."""
        terminal = self.start(step, command)
        try:
            code = terminal.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{step} did not end within {timeout:.0f} s:\n{terminal.text()[-3000:]}") from None
        assert code == 0, f"{step} exited with {code}:\n{terminal.text()[-3000:]}"
        return terminal.text()

    def route(self, topic: str, **params: str) -> tuple[int, Any]:
        r = requests.get(f"{self.url}/topics/{topic}/route", params=params, timeout=10)
        return r.status_code, r.json()


@pytest.fixture
def session(tmp_path) -> Iterator[Session]:
    s = Session(tmp_path)
    try:
        yield s
    finally:  # the broker before the system (it unregisters while the system runs)
        for terminal in reversed(s.started):
            terminal.stop(90 if terminal.step == "system" else 45)
        # a broker whose command was killed before it could stop it: its JVM, by the pid and home it printed
        for pid, home in re.findall(r"\(pid (\d+)\) is registered .* its store and logs are in (\S+) ",
                                    "".join(t.text() for t in s.started)):
            seen = _cmdlines([int(pid)])
            if b"BrokerStartup" in seen.get(int(pid), b"") and home.encode() in seen[int(pid)]:
                kill_if_same(seen)
            shutil.rmtree(home, ignore_errors=True)


def test_the_page_has_every_step_in_order_and_reads_only_what_the_test_sets():
    blocks = page_blocks(PAGE.read_text())
    assert list(blocks) == STEPS
    assert blocks["env"].split("#")[0].split() == ["export", "NAMESRV_ADDR=127.0.0.1:9876"]
    read = {m.group(1) for block in blocks.values() for m in re.finditer(r"\$\{?(\w+)", block)}
    assert read <= PAGE_VARIABLES, read - PAGE_VARIABLES


def _wait(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = probe()
            if found:
                return found
        except (OSError, ValueError):  # not listening yet; not JSON yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_the_quick_start_runs_as_written(session, figures):
    blocks = page_blocks(PAGE.read_text())
    assert list(blocks) == STEPS
    began = time.monotonic()
    marks: dict[str, float] = {}

    # 1. the system, until it says ready
    system = session.start("system", blocks["system"])
    system.wait_for(lambda out: "ready in" in out, 300, "'ready'")
    assert requests.get(session.url + "/readyz", timeout=10).status_code == 200
    marks["ready"] = time.monotonic() - began

    # 2. a broker, until our NameServer lists it
    broker = session.start("broker", blocks["broker"])
    listed = broker.wait_for(lambda out: re.search(r"broker broker-a on (\S+) \(pid \d+\) is registered", out), 240,
                             "the broker to be registered")
    broker_addr = listed.group(1)
    cluster = requests.get(session.url + "/cluster", timeout=10).json()
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert cluster["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": broker_addr}
    marks["broker"] = time.monotonic() - began

    # 3. RocketMQ's quickstart producer: every send SEND_OK, to broker-a; then its consumer gets them all
    sent = session.run("producer", blocks["producer"], 300)
    results = re.findall(r"^SendResult \[sendStatus=(\w+), msgId=(\w+),.*brokerName=([\w-]+),", sent, re.M)
    assert len(results) == MESSAGES, sent[-3000:]
    assert {status for status, _, _ in results} == {"SEND_OK"}
    assert {name for _, _, name in results} == {"broker-a"}
    sent_ids = {msg_id for _, msg_id, _ in results}
    assert len(sent_ids) == MESSAGES
    marks["sent"] = time.monotonic() - began
    consumer = session.start("consumer", blocks["consumer"])
    consumer.wait_for(lambda out: set(re.findall(r"UNIQ_KEY=(\w+)", out)) >= sent_ids, 180,
                      f"the consumer to receive the {MESSAGES} messages")
    received = consumer.text()
    assert "Consumer Started." in received
    assert set(re.findall(r"UNIQ_KEY=(\w+)", received)) == sent_ids
    assert consumer.ctrl_c(30) is not None
    marks["received"] = time.monotonic() - began

    # 4. mqadmin's topicRoute names the broker
    shown = session.run("route", blocks["route"], 120)
    flat = re.sub(r"\s", "", shown)
    assert '"brokerName":"broker-a"' in flat and f'0:"{broker_addr}"' in flat, shown
    assert '"queueDatas":[{"brokerName":"broker-a"' in flat, shown

    # 5. the history endpoint has the topic's registration, in the cut that first served it
    history = json.loads(session.run("history", blocks["history"], 60))
    added = [c for c in history["changes"] if c["kind"] == "QUEUE_ADDED"]
    assert [(c["topic"], c["brokerName"]) for c in added] == [("TopicTest", "broker-a")], history
    cut = added[0]["snapshotId"]
    code, route = session.route("TopicTest", snapshot=str(cut))
    assert code == 200 and [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a"], route
    code, before = session.route("TopicTest", snapshot=str(cut - 1))
    assert code == 404 and before["code"] == "TOPIC_NOT_EXIST", before
    table = session.run("history-cli", blocks["history-cli"], 60)
    for kind in ("BROKER_REGISTERED", "CLUSTER_JOINED", "QUEUE_ADDED"):
        assert kind in table, table
    assert "TopicTest" in table and "DefaultCluster" in table, table

    # 6. Ctrl-C: the broker unregisters on its way out, its routes go, the change log has the row
    stopping = time.monotonic()
    assert broker.ctrl_c(90) == 0, broker.text()[-3000:]
    stopped = time.monotonic()
    _wait(lambda: session.route("TopicTest")[0] == 404, 10, "TopicTest's route to go")
    gone = time.monotonic()
    home = re.search(r"its store and logs are in (\S+) ", broker.text())
    assert home and not Path(home.group(1)).exists(), "the broker's scratch home is removed"
    unregistered = session.run("after-broker", blocks["after-broker"], 60)
    assert "BROKER_UNREGISTERED" in unregistered and broker_addr in unregistered, unregistered
    assert system.ctrl_c(90) == 0, system.text()[-3000:]
    assert "stopped" in system.text()
    figures(f"quick start (docs/quickstart-rocketmq.md, RocketMQ 5.5.0): system ready {marks['ready']:.0f} s, "
            f"broker registered {marks['broker']:.0f} s, {MESSAGES:,} SEND_OK {marks['sent']:.0f} s, all received "
            f"{marks['received']:.0f} s after ./run.sh; the broker's Ctrl-C: stopped in {stopped - stopping:.1f} s, "
            f"its routes gone {gone - stopped:.1f} s later; "
            f"the whole page {time.monotonic() - began:.0f} s")
