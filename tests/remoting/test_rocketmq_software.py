"""Issue 12: RocketMQ's own software uses this system as its NameServer, unchanged.

Real 5.3.3 brokers (BrokerStartup), RocketMQ's Java producer and consumer, and mqadmin
(MQAdminStartup), all from the jars `./run.sh` resolved, are pointed at the remoting front of a
running system (real Kafka, Spark job, Delta tables). Brokers and mqadmin sign with their
standard ACL settings (`innerClientAuthenticationCredentials`, conf/tools.yml).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time

import pytest

from bench.broker_fleet import system_topics
from ops import rocketmq_software as rmq
from remoting import codes
from remoting.bodies import loads_lenient
from remoting.client import RemotingClient
from tests.harness import REMOTING_AK as AK
from tests.harness import REMOTING_SK as SK
from tests.harness import Pipeline

pytestmark = pytest.mark.integration

if shutil.which("java") is None or shutil.which("javac") is None:
    pytest.skip("a JDK (java and javac) is needed to run RocketMQ's software", allow_module_level=True)


@pytest.fixture(scope="module")
def system(remoting_system):
    return remoting_system


@pytest.fixture(scope="module")
def master(system, acting_master):
    broker = rmq.start_broker(system.remoting_addr, broker_name="broker-a", access_key=AK, secret_key=SK)
    system.wait_for(lambda: route_code(system, "broker-a") == codes.SUCCESS, 60, "broker-a's own topic")
    yield broker
    broker.cleanup()


def route_code(system: Pipeline, topic: str) -> int:
    return system.route(topic)[0]


def route(system: Pipeline, topic: str) -> dict | None:
    return system.route(topic)[1]


@pytest.fixture(scope="module")
def mqadmin(system):
    """mqadmin, signing with the front's key pair (conf/tools.yml), and one that does not sign."""
    with rmq.AdminShell(system.remoting_addr, access_key=AK, secret_key=SK) as signed, \
            rmq.AdminShell(system.remoting_addr) as unsigned:
        yield signed, unsigned


def test_a_real_master_and_slave_register_and_the_slave_learns_its_master(system, master):
    # the HTTP server's store refreshes on its own schedule: it shows the front's cut within a refresh or two
    cluster = system.wait_for(lambda: (r := system.get("/cluster"))[0] == 200
                              and "DefaultCluster" in r[1]["clusterAddrTable"] and r[1], 10, "cluster info")
    assert cluster["clusterAddrTable"]["DefaultCluster"] == ["broker-a"]
    assert cluster["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": master.addr}
    # the broker's own system topics, over remoting: what the benchmark's fleet registers as a default broker
    registered = _topics_of_cluster(system, "DefaultCluster")
    expected = system_topics("DefaultCluster", "broker-a")
    assert registered == set(expected), registered ^ set(expected)
    for topic, cfg in expected.items():
        (queues,) = [q for q in route(system, topic)["queueDatas"] if q["brokerName"] == "broker-a"]
        assert (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"]) == \
            (cfg["readQueueNums"], cfg["writeQueueNums"], cfg["perm"]), topic
    slave = rmq.start_broker(system.remoting_addr, broker_name="broker-a", broker_id=1, access_key=AK, secret_key=SK)
    try:
        system.wait_for(lambda: (route(system, "broker-a") or {}).get("brokerDatas", [{}])[0].get("brokerAddrs") ==
                        {"0": master.addr, "1": slave.addr}, 60, "the slave in the route")
        # the slave replicates from the master whose address our registration answer gave it
        system.wait_for(lambda: master.extra["ha"].split(":")[1] in _ha_peer(slave), 60, "the slave's HA link")
    finally:
        slave.cleanup()
    system.wait_for(lambda: (route(system, "broker-a") or {}).get("brokerDatas", [{}])[0].get("brokerAddrs") ==
                    {"0": master.addr}, 30, "the killed slave to leave")


def _topics_of_cluster(system: Pipeline, cluster: str) -> set[str]:
    with RemotingClient(system.remoting_addr) as c:
        answer = c.call(codes.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
    assert answer.code == codes.SUCCESS, answer.remark
    return set(json.loads(answer.body)["topicList"])


def _ha_peer(slave: rmq.JavaProcess) -> str:
    """What the slave's logs say about its master (HAClient connects to the master's HA address)."""
    logs = slave.home / "logs" / "rocketmqlogs"
    return " ".join(p.read_text(errors="replace") for p in logs.glob("*.log")) if logs.exists() else ""


def test_messages_flow_through_a_broker_found_only_through_us(system, master, mqadmin, figures):
    created = mqadmin[0].run("updateTopic", "-c", "DefaultCluster", "-t", "FlowTopic")
    assert "success" in created, created
    assert route(system, "FlowTopic") is not None  # at once: updateTopic returned after the route was served
    started = time.monotonic()
    sent = rmq.run_client("Produce", system.remoting_addr, "FlowTopic", "1000")
    assert sent.returncode == 0 and "SENT 1000" in sent.stdout, sent.stdout + sent.stderr[-2000:]
    got = rmq.run_client("Consume", system.remoting_addr, "FlowTopic", "1000", "90")
    assert got.returncode == 0 and "RECEIVED 1000" in got.stdout, got.stdout + got.stderr[-2000:]
    # binary (ROCKETMQ) headers, as RocketMQ's benchmark tools send them
    binary = rmq.run_client("Produce", system.remoting_addr, "FlowTopic", "10", serialize_type="ROCKETMQ")
    assert binary.returncode == 0 and "SENT 10" in binary.stdout, binary.stdout + binary.stderr[-2000:]
    figures(f"real broker: 1,000 messages produced and 1,000 consumed through our NameServer in "
            f"{time.monotonic() - started:.1f} s (+10 sent with ROCKETMQ binary headers)")


def test_mqadmin_commands(system, master, mqadmin):
    admin, reader = mqadmin
    listed = reader.run("clusterList")
    assert "DefaultCluster" in listed and "broker-a" in listed and master.addr in listed, listed
    shown = reader.run("topicRoute", "-t", "TBW102")
    assert loads_lenient(shown[shown.index("{"):])["queueDatas"], shown
    assert "TBW102" in reader.run("topicList").split()

    assert "success" in admin.run("updateTopic", "-c", "DefaultCluster", "-t", "AdminTopic")
    at_once = reader.run("topicRoute", "-t", "AdminTopic")  # no wait: read-your-writes, as with RocketMQ
    assert '"queueDatas"' in at_once and "Exception" not in at_once, at_once
    deleted = admin.run("deleteTopic", "-t", "AdminTopic", "-c", "DefaultCluster")
    assert "delete topic [AdminTopic] from NameServer success" in deleted, deleted
    assert "No topic route info" in reader.run("topicRoute", "-t", "AdminTopic")

    # The broker re-registers its own perms every 30 s (RocketMQ's wipe lasts until then too), so
    # the effect is read from the change log, and the count from the cut the answer came from.
    with RemotingClient(system.remoting_addr) as c:
        topics = json.loads(c.call(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    routes = [route(system, t) for t in topics]
    hosted = sum(1 for r in routes if r and any(q["brokerName"] == "broker-a" for q in r["queueDatas"]))
    wiped = admin.run("wipeWritePerm", "-b", "broker-a")
    assert (m := re.search(r"OK, (\d+)", wiped)) and abs(int(m.group(1)) - hosted) <= 2, (wiped, hosted)
    added = admin.run("addWritePerm", "-b", "broker-a")
    assert (m := re.search(r"OK, (\d+)", added)) and int(m.group(1)) > 0, added
    for kind, perm in (("WRITE_PERM_WIPED", 5), ("WRITE_PERM_ADDED", 6)):
        rows = system.wait_for(lambda k=kind: system.get(f"/history/changes?topic=TBW102&kind={k}")[1]["changes"],
                               20, f"{kind} of TBW102 in the change log")
        assert rows[-1]["after"]["perm"] == perm and rows[-1]["brokerName"] == "broker-a"
    refused = reader.run("wipeWritePerm", "-b", "broker-a")
    assert "OK" not in refused and "Failed" in refused, refused  # unsigned: NO_PERMISSION
    assert len(system.get("/history/changes?topic=TBW102&kind=WRITE_PERM_WIPED")[1]["changes"]) == 1

    assert "success" in admin.run("updateKvConfig", "-s", "AdminNs", "-k", "k1", "-v", "v1")
    with RemotingClient(system.remoting_addr) as c:  # mqadmin has no getKvConfig; code 101 as a client asks it
        assert c.call(codes.GET_KV_CONFIG, {"namespace": "AdminNs", "key": "k1"}).ext["value"] == "v1"
        assert "success" in admin.run("deleteKvConfig", "-s", "AdminNs", "-k", "k1")
        assert c.call(codes.GET_KV_CONFIG, {"namespace": "AdminNs", "key": "k1"}).code == codes.QUERY_NOT_FOUND

    assert re.search(r"enableTopicList\s+=\s+true", reader.run("getNamesrvConfig"))
    allowed = admin.run("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert "success" in allowed, allowed
    assert re.search(r"orderMessageEnable\s+=\s+true", reader.run("getNamesrvConfig"))
    refused = admin.run("updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/evil")
    assert "success" not in refused and "CODE: 16" in refused, refused
    assert "success" in admin.run("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")


def test_a_killed_broker_leaves_routes_within_seconds_and_a_stopped_one_unregisters(system, figures):
    victim = rmq.start_broker(system.remoting_addr, broker_name="broker-kill", access_key=AK, secret_key=SK)
    polite = rmq.start_broker(system.remoting_addr, broker_name="broker-stop", access_key=AK, secret_key=SK)
    try:
        killed = _gone_after(system, victim, victim.kill, 5)  # no unregister: its connection closes
        stopped = _gone_after(system, polite, polite.stop, 30)  # RocketMQ's shutdown sends UNREGISTER_BROKER
        figures(f"real broker SIGKILLed: routes gone after {killed:.2f} s (limit 5 s); "
                f"stopped cleanly (SIGTERM, its shutdown included): gone after {stopped:.2f} s")
    finally:
        victim.cleanup()
        polite.cleanup()


def _gone_after(system: Pipeline, broker: rmq.JavaProcess, end, limit_s: float) -> float:
    name = broker.extra["brokerName"]
    system.wait_for(lambda: route_code(system, name) == codes.SUCCESS, 60, f"{name}'s route")
    started = time.monotonic()
    end()
    system.wait_for(lambda: route_code(system, name) == codes.TOPIC_NOT_EXIST, limit_s, f"{name}'s routes to go")
    return time.monotonic() - started


def test_fqdn_named_and_compressed_registering_brokers(system):
    """A broker named after a host (it registers a topic of that name), and one with
    compressedRegister=true (a zlib body that 5.x brokers flag compressed=false)."""
    brokers = [
        rmq.start_broker(system.remoting_addr, broker_name="broker1.example.com", cluster="FqdnCluster",
                         access_key=AK, secret_key=SK),
        rmq.start_broker(system.remoting_addr, broker_name="broker-zip", extra={"compressedRegister": "true"},
                         access_key=AK, secret_key=SK),
    ]
    try:
        for topic in ("broker1.example.com", "FqdnCluster", "FqdnCluster_REPLY_TOPIC", "broker-zip", "TBW102"):
            system.wait_for(lambda t=topic: route_code(system, t) == codes.SUCCESS, 60, f"{topic}'s route")
        zipped = route(system, "broker-zip")
        assert zipped["brokerDatas"][0]["brokerAddrs"] == {"0": brokers[1].addr}
    finally:
        for b in brokers:
            b.cleanup()


@pytest.fixture(scope="module")
def acting_master(system):
    """An acting-master broker (1 s one-way QUERY_DATA_VERSION heartbeats, a 10 s timeout), started
    first and watched every second while the module's other tests run."""
    broker = rmq.start_broker(system.remoting_addr, broker_name="broker-acting", cluster="ActingCluster",
                              extra={"enableSlaveActingMaster": "true", "brokerNotActiveTimeoutMillis": "10000"},
                              access_key=AK, secret_key=SK)
    system.wait_for(lambda: route_code(system, "broker-acting") == codes.SUCCESS, 60, "broker-acting's route")
    watch = {"started": time.monotonic(), "checks": 0, "missing": [], "stop": threading.Event()}

    def run() -> None:
        while not watch["stop"].wait(1.0):
            code = route_code(system, "broker-acting")
            watch["checks"] += 1
            if code != codes.SUCCESS:
                watch["missing"].append(round(time.monotonic() - watch["started"], 1))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield watch
    watch["stop"].set()
    thread.join(5)
    broker.cleanup()


def test_an_acting_master_broker_is_never_wrongly_expired(system, acting_master, figures):
    remaining = 60 - (time.monotonic() - acting_master["started"])
    if remaining > 0:
        time.sleep(remaining)
    live = [r for r in system.get("/brokers/live")[1] if r["brokerName"] == "broker-acting"]
    assert live and live[0]["heartbeatTimeoutMillis"] == 10000
    assert acting_master["checks"] >= 55 and not acting_master["missing"], acting_master
    figures(f"acting-master broker (10 s timeout, 1 s one-way heartbeats): present at all {acting_master['checks']} "
            f"checks over {time.monotonic() - acting_master['started']:.0f} s")
