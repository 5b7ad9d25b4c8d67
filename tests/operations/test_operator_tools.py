"""Issue 14: what operators run it with — Prometheus metrics and the admin CLI — against the
running system (job, HTTP server, remoting front), as a scraper and a shell user see them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from remoting import codes
from remoting.client import RemotingClient
from tests.harness import ADMIN_TOKEN
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of GET /metrics, parsed by Prometheus' own text parser."""
    r = requests.get(url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = s.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def assert_gauges_describe_the_served_cut(url: str, *, expect_broker: str | None, absent: str | None = None) -> None:
    """The cut-size gauges equal what the same cut answers (other tests share this system, so
    counts are compared with the cut, not with numbers from before)."""
    for _ in range(50):
        samples = scrape(url)
        cluster = requests.get(url + "/cluster", timeout=5)
        topic_list = requests.get(url + "/topics", timeout=5)
        snap = value(samples, "namesrv_snapshot_id")
        if float(cluster.headers["X-Namesrv-Snapshot"]) == float(topic_list.headers["X-Namesrv-Snapshot"]) == snap:
            brokers = cluster.json()["brokerAddrTable"]
            assert value(samples, "namesrv_broker_groups") == len(brokers)
            assert value(samples, "namesrv_clusters") == len(cluster.json()["clusterAddrTable"])
            assert value(samples, "namesrv_topics") == len(topic_list.json()["topicList"])
            assert expect_broker is None or expect_broker in brokers
            assert absent is None or absent not in brokers
            return
        time.sleep(0.1)
    raise AssertionError("the served cut kept changing between scrape and lookups")


def test_metrics_parse_and_move_when_a_broker_registers_and_expires(remoting_system):
    p = remoting_system
    before = scrape(p.url)
    for name in ("namesrv_snapshot_id", "namesrv_snapshot_age_seconds", "namesrv_broker_groups", "namesrv_topics",
                 "namesrv_brokers_live", "namesrv_job_batches_total", "namesrv_snapshot_refresh_duration_seconds_count",
                 "namesrv_remoting_connections", "namesrv_remoting_snapshot_id"):
        assert (name, ()) in before, f"{name} missing from /metrics"
    assert any(k[0] == "namesrv_consumer_lag_records" for k in before)
    assert value(before, "namesrv_kafka_up") == 1

    p.wait_served(p.publish([reg("metrics-a", 0, "127.0.0.1:39101", tps=topics("MetricsTopic", "MetricsBase"),
                                 timeout_ms=8000, cluster="MetricsCluster")]))
    assert requests.get(p.url + "/topics/MetricsTopic/route", timeout=5).status_code == 200
    assert requests.get(p.url + "/topics/MetricsTopic/route", timeout=5).status_code == 200  # the fast path
    with RemotingClient(p.remoting_addr) as c:  # the front's own store serves the cut within its refresh
        p.wait_for(lambda: c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "MetricsTopic"}).code == codes.SUCCESS,
                   5, "the remoting front to serve the registration")
    time.sleep(1.5)  # the front writes its metrics file every second
    after = scrape(p.url)
    assert value(after, "namesrv_job_route_changes_total", kind="BROKER_REGISTERED") >= \
        value(before, "namesrv_job_route_changes_total", kind="BROKER_REGISTERED") + 1
    assert value(after, "namesrv_snapshot_id") > value(before, "namesrv_snapshot_id")
    assert_gauges_describe_the_served_cut(p.url, expect_broker="metrics-a")
    assert value(after, "namesrv_job_batches_total") > value(before, "namesrv_job_batches_total")
    fast = "namesrv_http_requests_total"
    assert value(after, fast, endpoint="routes.topic_route", method="GET", code="200") >= \
        value(before, fast, endpoint="routes.topic_route", method="GET", code="200") + 2
    assert value(after, "namesrv_remoting_requests_total", request_code="105", response_code="0") >= 1

    # silent for its 8 s timeout: expired by the job, gone from the served cut
    p.wait_for(lambda: requests.get(p.url + "/topics/MetricsTopic/route", timeout=5).status_code == 404, 30,
               "the silent broker to expire")
    gone = scrape(p.url)
    assert value(gone, "namesrv_job_route_changes_total", kind="BROKER_EXPIRED") >= \
        value(before, "namesrv_job_route_changes_total", kind="BROKER_EXPIRED") + 1
    assert_gauges_describe_the_served_cut(p.url, expect_broker=None, absent="metrics-a")

    # a bad record: counted by its reason class
    p.publisher.publish_raw([(b"MetricsCluster:bad", b"{not json")])
    p.wait_for(lambda: value(scrape(p.url), "namesrv_job_dead_letters_total", reason_class="encoding") >= 1, 30,
               "the dead letter to be counted")


# ---------------------------------------------------------------- the admin CLI


def admin(p, *args: str, token: str | None = ADMIN_TOKEN, url: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NAMESRV_DATA_DIR": str(p.cfg.data_dir)}
    env.pop("NAMESRV_ADMIN_TOKEN", None)
    if token is not None:
        env["NAMESRV_ADMIN_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "admin", "--url", url or p.url, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def ok(cp: subprocess.CompletedProcess) -> str:
    assert cp.returncode == 0, f"exit {cp.returncode}: {cp.stderr}"
    return cp.stdout


def test_every_admin_command_against_the_running_system_with_time_travel(remoting_system):
    p = remoting_system
    p.wait_served(p.publish([reg("cli-a", 0, "127.0.0.1:39201", tps=topics("CliTopic", "CliBase"),
                                 cluster="CliCluster"),
                             reg("cli-a", 1, "127.0.0.1:39202", tps=topics("CliTopic", "CliBase"),
                                 cluster="CliCluster")]))
    time.sleep(0.05)
    t_registered = int(time.time() * 1000)

    out = ok(admin(p, "clusterList", "-c", "CliCluster"))
    assert "CliCluster" in out and "cli-a" in out and "127.0.0.1:39201" in out and "127.0.0.1:39202" in out
    route = json.loads(ok(admin(p, "-o", "json", "topicRoute", "-t", "CliTopic")))
    assert [q["brokerName"] for q in route["queueDatas"]] == ["cli-a"]
    assert "CliTopic" in ok(admin(p, "topicList")).split()
    assert "CliTopic" in ok(admin(p, "topicList", "-c", "CliCluster")).split()
    status = ok(admin(p, "brokerStatus", "-b", "cli-a"))
    assert "master" in status and "slave" in status and "2 topic(s)" in status

    ok(admin(p, "updateKvConfig", "-s", "CliNs", "-k", "answer", "-v", "42"))
    assert ok(admin(p, "getKvConfig", "-s", "CliNs", "-k", "answer")).strip() == "42"
    assert "answer" in ok(admin(p, "getKvConfig", "-s", "CliNs"))
    assert "cli-a: 2 topic(s)" in ok(admin(p, "wipeWritePerm", "-b", "cli-a"))
    assert json.loads(ok(admin(p, "-o", "json", "topicRoute", "-t", "CliTopic")))["queueDatas"][0]["perm"] == 4
    assert "cli-a: 2 topic(s)" in ok(admin(p, "addWritePerm", "-b", "cli-a"))
    assert "orderMessageEnable" in ok(admin(p, "getNamesrvConfig"))
    ok(admin(p, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true"))
    assert json.loads(ok(admin(p, "-o", "json", "getNamesrvConfig")))["config"]["orderMessageEnable"] is True
    ok(admin(p, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false"))
    assert "cli-a" in ok(admin(p, "deleteTopic", "-t", "CliTopic"))
    ok(admin(p, "deleteKvConfig", "-s", "CliNs", "-k", "answer"))

    # what mqadmin cannot do: the route as it was, the change log, the diff, the cuts
    gone = admin(p, "topicRoute", "-t", "CliTopic")
    assert gone.returncode == 1 and "TOPIC_NOT_EXIST" in gone.stderr
    then = json.loads(ok(admin(p, "-o", "json", "topicRoute", "-t", "CliTopic", "--as-of", str(t_registered))))
    assert then["queueDatas"][0]["perm"] == 6
    log = ok(admin(p, "changes", "--since", str(t_registered - 60_000), "-b", "cli-a"))
    assert "BROKER_REGISTERED" in log and "TOPIC_DELETED" in log
    kinds = {c["kind"] for c in json.loads(ok(admin(p, "-o", "json", "changes", "-b", "cli-a")))["changes"]}
    assert {"BROKER_REGISTERED", "TOPIC_DELETED", "KV_PUT"} - kinds == {"KV_PUT"}  # KV changes have no broker
    diff = ok(admin(p, "diff", "--from", str(t_registered), "--to", str(int(time.time() * 1000))))
    assert "- topic CliTopic" in diff
    cuts = json.loads(ok(admin(p, "-o", "json", "snapshots", "--limit", "5")))
    assert len(cuts["snapshots"]) == 5 and cuts["total"] >= 5

    # errors a shell user can act on
    no_token = admin(p, "updateKvConfig", "-s", "CliNs", "-k", "x", "-v", "1", token="wrong")
    assert no_token.returncode == 4 and "401" in no_token.stderr
    bad = admin(p, "topicRoute", "-t", "CliTopic", "--as-of", "yesterday")
    assert bad.returncode == 1 and "asOf must be ISO-8601" in bad.stderr
    unreachable = admin(p, "clusterList", url="http://127.0.0.1:9")
    assert unreachable.returncode == 3 and "cannot reach" in unreachable.stderr
    usage = admin(p, "topicRoute")
    assert usage.returncode == 2 and "--topic" in usage.stderr
    for command in ("clusterList", "topicRoute", "topicList", "brokerStatus", "updateKvConfig", "getKvConfig",
                    "deleteKvConfig", "wipeWritePerm", "addWritePerm", "deleteTopic", "getNamesrvConfig",
                    "updateNamesrvConfig", "changes", "diff", "snapshots"):
        assert "Usage:" in ok(admin(p, command, "--help")), command
