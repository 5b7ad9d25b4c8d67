"""Issue 5, supervision: what `./run.sh` starts (the launcher) restarts a job or HTTP server that
dies, with backoff, logs the restart, keeps answering lookups from the last snapshot while the job
is down, and stops everything (no orphan) on SIGTERM."""

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

from eventlog.publisher import EventPublisher
from ops.net import free_port, port_is_free
from ops.procs import processes
from ops.rocketmq_software import AdminShell
from remoting import codes
from remoting.client import RemotingClient
from remoting.replies import SNAPSHOT_EXT
from tests.helpers import DEFAULTS, reg, topics, wait

pytestmark = [pytest.mark.integration, pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> dict[str, int]:
    """The launcher's direct children by name: job, tansu, and http / remoting for replica 0,
    http-1 / remoting-1 for replica 1 (a replica is told its ports in its environment)."""
    base = _environ(pid).get("NAMESRV_HTTP_PORT")
    out = {}
    for p in processes():
        if p.ppid != pid:
            continue
        name = p.role
        if name in ("http", "remoting") and _environ(p.pid).get("NAMESRV_HTTP_PORT") != base:
            name = f"{name}-1"
        out[name] = p.pid
    return out


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_text()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)


def two_free_ports() -> int:
    """A free port whose successor is free too (replica 1 listens on port + 1)."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and port_is_free(port + 1):
            return port
    raise AssertionError("no two consecutive free ports")


def replicas_agree(urls: list[str], publish, timeout_s: float = 20.0) -> float:
    """Publish a change, then poll both replicas: answers stamped with the same snapshot id are the
    same; returns how long after one replica served the change the other did too."""
    publish()
    seen: dict[str, float] = {}
    answers: dict[tuple[str, str], bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < len(urls) and time.monotonic() < deadline:
        for u in urls:
            r = requests.get(u + "/topics/SupTopic/route", timeout=2)
            snap = r.headers["X-Namesrv-Snapshot"]
            if answers.setdefault(("SupTopic", snap), r.content) != r.content:
                raise AssertionError(f"replicas disagree at snapshot {snap}")
            if u not in seen and requests.get(u + "/topics/SupRep/route", timeout=2).status_code == 200:
                seen[u] = time.monotonic()
        time.sleep(0.02)
    assert len(seen) == len(urls), f"not every replica served the change: {seen}"
    return max(seen.values()) - min(seen.values())


def remoting_route(port: int, topic: str) -> int | None:
    """The response code of GET_ROUTEINFO_BY_TOPIC over remoting (None: not listening)."""
    try:
        with RemotingClient(f"127.0.0.1:{port}", timeout_s=5) as c:
            return c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code
    except OSError:
        return None


LOG_MAX = 4096


def launcher_log(data: Path) -> str:
    """The launcher's messages across its rotated files, oldest first."""
    files = sorted((data / "logs").glob("launcher.log*"), key=lambda f: -int(f.suffix[1:]) if f.suffix[1:].isdigit() else 0)
    return "".join(json.loads(line)["message"] + "\n" for f in files for line in f.read_text().splitlines())


def check_logs(logs: Path) -> None:
    """Every line of every log parses as JSON; each file starts with the version and configuration
    (secrets masked) and stays within the configured size; logs were rotated."""
    files = sorted(logs.glob("*.log*"))
    assert {f.name for f in files} >= {"kafka.log", "job.log", "http.log", "remoting.log", "launcher.log"}
    assert any(f.name.endswith(".log.1") for f in files), [f.name for f in files]
    for f in files:
        lines = f.read_text().splitlines()
        docs = [json.loads(line) for line in lines]  # raises on any line that is not JSON
        assert all(isinstance(d, dict) and "message" in d and "time" in d for d in docs), f.name
        first = docs[0]
        assert first["version"] and first["configuration"]["NAMESRV_ADMIN_TOKEN"] == "***", f.name
        assert "supervision-secret" not in f.read_text(), f.name
        longest = max(len(line) + 1 for line in lines)
        assert f.stat().st_size <= max(LOG_MAX, len(lines[0]) + 1 + longest), (f.name, f.stat().st_size)


def test_launcher_restarts_what_dies_and_stops_cleanly(tmp_path, figures):
    http_port, kafka_port, remoting_port = two_free_ports(), free_port(), two_free_ports()
    env = {**os.environ, "NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_KAFKA_BOOTSTRAP": "",
           "NAMESRV_KAFKA_EMBEDDED_PORT": str(kafka_port), "NAMESRV_HTTP_PORT": str(http_port),
           "NAMESRV_REMOTING_PORT": str(remoting_port), "NAMESRV_TRIGGER_INTERVAL_MS": "500",
           # logs an operator keeps: JSON lines, rotated at a size small enough to rotate in this test
           "NAMESRV_LOG_FORMAT": "json", "NAMESRV_LOG_MAX_BYTES": str(LOG_MAX), "NAMESRV_LOG_BACKUPS": "100",
           "NAMESRV_ADMIN_TOKEN": "supervision-secret",
           # two serving replicas over the one warehouse (replica 1: both ports + 1)
           "NAMESRV_REPLICAS": "2"}
    url = f"http://127.0.0.1:{http_port}"
    # After set-up nothing needs a repository: an unreachable one changes nothing.
    env["NAMESRV_MAVEN_REPOSITORY"] = "http://127.0.0.1:9/maven2"
    subprocess.run([sys.executable, "-m", "conf.jvm", "resolve"], cwd=ROOT, env=env, check=True, timeout=60)
    launcher = subprocess.Popen([sys.executable, "-m", "ops.launcher"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    started = time.monotonic()
    try:
        wait(lambda: requests.get(url + "/livez", timeout=2).ok, 60, "the server to answer")
        assert requests.get(url + "/readyz", timeout=2).status_code in (200, 503)
        wait(lambda: requests.get(url + "/readyz", timeout=2).status_code == 200, 120, "readiness")
        ready = time.monotonic()
        wait(lambda: "ready in" in launcher_log(tmp_path), 5, "the launcher's 'ready' line")
        # set-up made the driver's class archive; the job's JVM maps it (half the start time)
        assert "driver JVM started from its class archive" in "".join(
            f.read_text() for f in (tmp_path / "logs").glob("job.log*"))
        with EventPublisher(f"127.0.0.1:{kafka_port}", "namesrv-events",
                            max_message_bytes=DEFAULTS.max_message_bytes) as pub:
            pub.publish([reg("sup-a", 0, "127.0.0.1:36911", tps=topics("SupTopic", "SupBase"))])
        wait(lambda: requests.get(url + "/topics/SupTopic/route", timeout=2).status_code == 200, 90, "the route")
        served = time.monotonic()
        figures(f"launcher: start -> /readyz 200 in {ready - started:.1f} s; "
                f"ready -> first registration served in {served - ready:.1f} s")
        assert served - ready < 10, "ready means a registration is served within a few batches"

        # The remoting front is its own process polling the same tables: it serves that cut within
        # a refresh interval or two of the HTTP server (each looks on its own schedule).
        wait(lambda: remoting_route(remoting_port, "SupTopic") == 0, 10, "the remoting front to serve the cut")

        # Replicas: every answer names its cut; the same cut gives the same answer; a change is
        # served by both within a refresh interval or two of each other; a real RocketMQ client
        # (mqadmin) configured with both fronts gets the route.
        urls = [url, f"http://127.0.0.1:{http_port + 1}"]
        wait(lambda: all(requests.get(u + "/topics/SupTopic/route", timeout=2).status_code == 200 for u in urls), 10,
             "replica 1 to serve the cut")
        with EventPublisher(f"127.0.0.1:{kafka_port}", "namesrv-events",
                            max_message_bytes=DEFAULTS.max_message_bytes) as pub:
            spread = replicas_agree(urls, lambda: pub.publish([reg("sup-r", 0, "127.0.0.1:36931",
                                                                   tps=topics("SupRep", "SupTopic"))]))
        figures(f"2 serving replicas: a change served by the second {spread * 1000:.0f} ms after the first "
                f"(refresh interval 200 ms); answers with the same snapshot id identical")
        assert spread < 1.0
        fronts = [remoting_port, remoting_port + 1]
        stamps = []
        for port in fronts:  # each front's own store shows the cut within its refresh
            wait(lambda: remoting_route(port, "SupRep") == 0, 10, f"front {port} to serve the change")  # noqa: B023
            with RemotingClient(f"127.0.0.1:{port}", timeout_s=5) as c:
                answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "SupRep"})
                assert answer.code == codes.SUCCESS
                stamps.append((int(answer.ext[SNAPSHOT_EXT]), answer.body))
        if stamps[0][0] == stamps[1][0]:
            assert stamps[0][1] == stamps[1][1]
        with AdminShell(";".join(f"127.0.0.1:{port}" for port in fronts)) as mqadmin:
            for _ in range(3):
                out = mqadmin.run("topicRoute", "-t", "SupRep")
                assert '"brokerName":"sup-r"' in out.replace(" ", "").replace("\n", ""), out[-800:]
        kids = children(launcher.pid)
        assert {"http", "http-1", "remoting", "remoting-1", "job"} <= set(kids)
        os.kill(kids["remoting"], signal.SIGKILL)
        wait(lambda: remoting_route(remoting_port, "SupTopic") == 0, 60, "the remoting front's restart")
        os.kill(kids["job"], signal.SIGKILL)
        assert requests.get(url + "/topics/SupTopic/route", timeout=5).status_code == 200  # job down: still served
        os.kill(kids["http"], signal.SIGKILL)
        wait(lambda: requests.get(url + "/topics/SupTopic/route", timeout=2).status_code == 200, 60, "http restart")
        # A lookup can be answered by the dying server before the kill lands, and a restarted child
        # is briefly unnamed between fork and exec: wait for both new children by name.
        wait(lambda: all(children(launcher.pid).get(n) not in (None, kids[n]) for n in ("job", "http")), 60,
             "job and http restarts")
        log = launcher_log(tmp_path)
        assert "job exited with code -9; restarting in" in log and "http exited with code -9" in log
        assert "job restarted (restart #1)" in log and "http restarted (restart #1)" in log
        assert "remoting exited with code -9" in log and "remoting restarted (restart #1)" in log
        with EventPublisher(f"127.0.0.1:{kafka_port}", "namesrv-events", max_message_bytes=DEFAULTS.max_message_bytes) as pub:
            pub.publish([reg("sup-b", 0, "127.0.0.1:36921", tps=topics("SupNew", "SupBase"))])
        wait(lambda: requests.get(url + "/topics/SupNew/route", timeout=2).status_code == 200, 90,
             "the restarted job to serve a new registration")
        before = children(launcher.pid)
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(120)
    check_logs(tmp_path / "logs")
    for pid in before.values():
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
