"""Issue 12: the remoting front over real Kafka, the real job and real Delta tables, spoken to
over TCP with RocketMQ's frames (both header encodings), as a Java broker or mqadmin would.

RocketMQ's own software drives the front in test_rocketmq_software.py; here every request is
crafted, so each code, remark and edge (CRC, zlib bodies, signatures, one-way, channel close,
bad frames, idle and many connections) is checked precisely.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import time

import pytest

from remoting import acl, bodies, codes
from remoting.client import RemotingClient
from remoting.protocol import JSON, ROCKETMQ, encode_request
from remoting.replies import SNAPSHOT_EXT
from schemas import events as ev
from tests.harness import REMOTING_AK as AK
from tests.harness import REMOTING_SK as SK
from tests.harness import FrontThread, Pipeline

pytestmark = pytest.mark.integration
DV = {"counter": 1, "stateVersion": 0, "timestamp": 1_700_000_000_000}


@pytest.fixture(scope="module")
def system(remoting_system):
    return remoting_system


def client(system: Pipeline, *, signed: bool = True, **kw) -> RemotingClient:
    """A connection that signs with the front's key pair (brokers must, once a pair is set)."""
    keys = {"access_key": AK, "secret_key": SK} if signed else {}
    return RemotingClient(system.remoting_addr, **{**keys, **kw})


def register(c: RemotingClient, name: str, addr: str, topics: dict, *, cluster: str = "RemCluster", broker_id: int = 0,
             compressed: bool = False, ext: dict | None = None):
    return c.register_broker(cluster=cluster, broker_name=name, broker_id=broker_id, addr=addr, topics=topics,
                             ha_addr=addr[:-1] + "2", data_version=DV, compressed=compressed, ext=ext)


def route(c: RemotingClient, topic: str):
    return c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


@pytest.fixture(scope="module")
def rem_a(system):
    """Broker rem-a (master) registered over a connection that stays open for the module: closing
    it would unregister the broker (RocketMQ's onChannelDestroy)."""
    c = client(system)
    answer = register(c, "rem-a", "127.0.0.1:40911", {"RemTopic": {"readQueueNums": 4, "writeQueueNums": 4},
                                                      "rem-a": {}})
    yield c, answer
    c.close()


def test_a_registration_is_answered_once_served_and_routes_match_http(system, rem_a):
    _, answer = rem_a
    assert (answer.code, answer.ext, answer.body) == (codes.SUCCESS, {}, b"")  # a master: no master address
    with client(system) as c:
        found = route(c, "RemTopic")  # right after the answer: the topic is served (read-your-writes)
        assert found.code == codes.SUCCESS
        http = system.wait_for(lambda: (r := system.get("/topics/RemTopic/route"))[0] == 200 and r[1], 10, "HTTP")
        assert json.loads(found.body) == http  # the same read model, the same answer
        assert json.loads(found.body)["queueDatas"] == [
            {"brokerName": "rem-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}]
        info = c.call(codes.GET_BROKER_CLUSTER_INFO)
        assert json.loads(info.body)["clusterAddrTable"]["RemCluster"] == ["rem-a"]
        # a slave learns its live master's addresses from its registration's answer
        slave = register(c, "rem-a", "127.0.0.1:40921", {"RemTopic": {"readQueueNums": 4, "writeQueueNums": 4},
                                                         "rem-a": {}}, broker_id=1)
        assert slave.ext == {"masterAddr": "127.0.0.1:40911", "haServerAddr": "127.0.0.1:40912"}
        # ... and, as from RocketMQ, a lookup right after that answer sees the slave (read-your-writes
        # for a registration that adds no topic)
        assert json.loads(route(c, "RemTopic").body)["brokerDatas"][0]["brokerAddrs"] == {
            "0": "127.0.0.1:40911", "1": "127.0.0.1:40921"}


def test_real_broker_names_ipv6_and_compressed_bodies_with_binary_headers(system):
    """What 5.3 brokers really send: topics named after an FQDN broker, `[::1]` addresses, a zlib
    body flagged compressed=false, ROCKETMQ (binary) headers; all registered, none dead-lettered."""
    with client(system, serialize_type=ROCKETMQ) as c:
        name = "broker1.example.com"
        topics = {name: {"readQueueNums": 1, "writeQueueNums": 1}, "RemCluster6": {}, "%RETRY%g+Topic": {}}
        answer = register(c, name, "[::1]:40931", topics, cluster="RemCluster6", compressed=True,
                          ext={"heartbeatTimeoutMillis": str(30 * 24 * 3600 * 1000)})  # over a day
        assert answer.code == codes.SUCCESS, answer.remark
        found = route(c, name)
        assert found.code == codes.SUCCESS, found.remark
        assert json.loads(found.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "[::1]:40931"}
        assert route(c, "%RETRY%g+Topic").code == codes.SUCCESS


def test_errors_carry_rocketmqs_codes_and_remarks(system, rem_a):
    with client(system) as c:
        missing = route(c, "NoSuchTopic")
        assert missing.code == codes.TOPIC_NOT_EXIST
        assert missing.remark == ("No topic route info in name server for the topic: NoSuchTopic\n"
                                  "See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
        assert (c.call(4242).code, c.call(4242).remark) == (codes.REQUEST_CODE_NOT_SUPPORTED, " request type 4242 not supported")
        kv = c.call(codes.GET_KV_CONFIG, {"namespace": "NoNs", "key": "k"})
        assert (kv.code, kv.remark) == (codes.QUERY_NOT_FOUND, "No config item, Namespace: NoNs Key: k")
        body = bodies.encode_registration({"CrcTopic": {}, "CrcTopicBase": {}}, DV)
        bad = c.call(codes.REGISTER_BROKER, {"brokerName": "rem-crc", "brokerAddr": "127.0.0.1:40941",
                                             "clusterName": "RemCluster", "brokerId": "0",
                                             "bodyCrc32": str(bodies.crc32(body) ^ 1)}, body)
        assert (bad.code, bad.remark) == (codes.SYSTEM_ERROR, "crc32 not match")
        assert route(c, "CrcTopic").code == codes.TOPIC_NOT_EXIST
        single = register(c, "rem-single", "127.0.0.1:40942", {"OnlyTopic": {}})
        assert (single.code, single.remark) == (codes.SYSTEM_ERROR, "register broker failed")  # §3.2.7
        garbage = c.call(codes.REGISTER_BROKER, {"brokerName": "rem-x", "brokerAddr": "127.0.0.1:40951",
                                                 "clusterName": "RemCluster", "brokerId": "0"}, b"{not json")
        assert garbage.code == codes.SYSTEM_ERROR and "RegisterBrokerBody" in garbage.remark
        # every list code answers SUCCESS with a body (Java clients throw on a SUCCESS without one)
        for code in (codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, codes.GET_SYSTEM_TOPIC_LIST_FROM_NS,
                     codes.GET_UNIT_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_TOPIC_LIST,
                     codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, codes.GET_NAMESRV_CONFIG):
            answer = c.call(code)
            assert answer.code == codes.SUCCESS and answer.body, code
        by_cluster = c.call(codes.GET_TOPICS_BY_CLUSTER, {"cluster": "RemCluster"})
        assert "RemTopic" in json.loads(by_cluster.body)["topicList"]


def test_admin_writes_need_the_acl_signature_and_are_read_your_writes(system, rem_a):
    ext = {"namespace": "RemNs", "key": "k1", "value": "v1"}
    with client(system, signed=False) as unsigned:
        refused = unsigned.call(codes.PUT_KV_CONFIG, ext)
        assert refused.code == codes.NO_PERMISSION and "signed" in refused.remark
        broker = register(unsigned, "rem-unsigned", "127.0.0.1:40901", {"UnsignedTopic": {}, "UnsignedTopicBase": {}})
        assert broker.code == codes.NO_PERMISSION  # a key pair is set: brokers must sign too
        assert unsigned.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "UnsignedTopic"}).code == codes.TOPIC_NOT_EXIST
    with client(system, access_key=AK, secret_key="wrong") as wrong:
        assert wrong.call(codes.PUT_KV_CONFIG, ext).code == codes.NO_PERMISSION
    with client(system, signed=False) as c:  # reads need no signature
        assert c.call(codes.GET_KV_CONFIG, {"namespace": "RemNs", "key": "k1"}).code == codes.QUERY_NOT_FOUND
    with client(system) as admin:
        assert admin.call(codes.PUT_KV_CONFIG, ext).code == codes.SUCCESS
        got = admin.call(codes.GET_KV_CONFIG, {"namespace": "RemNs", "key": "k1"})
        stamp = int(got.ext.pop(SNAPSHOT_EXT))  # the cut the answer came from (serving replicas compare it)
        assert (got.code, got.ext) == (codes.SUCCESS, {"value": "v1"})
        assert stamp <= system.front.store.current.snapshot_id
        table = admin.call(codes.GET_KVLIST_BY_NAMESPACE, {"namespace": "RemNs"})
        assert json.loads(table.body) == {"table": {"k1": "v1"}}
        assert admin.call(codes.PUT_KV_CONFIG, {"key": "k"}).remark == "namespace or key is null"
        assert admin.call(codes.DELETE_KV_CONFIG, {"namespace": "RemNs", "key": "k1"}).code == codes.SUCCESS
        assert admin.call(codes.GET_KV_CONFIG, {"namespace": "RemNs", "key": "k1"}).code == codes.QUERY_NOT_FOUND

        wiped = admin.call(codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "rem-a"})
        assert (wiped.code, wiped.ext) == (codes.SUCCESS, {"wipeTopicCount": "2"})
        assert json.loads(admin.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "RemTopic"}).body)["queueDatas"][0]["perm"] == 4
        added = admin.call(codes.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "rem-a"})
        assert (added.code, added.ext) == (codes.SUCCESS, {"addTopicCount": "2"})

        config = admin.call(codes.UPDATE_NAMESRV_CONFIG, body=b"enableTopicList=false\n")
        assert config.code == codes.SUCCESS
        assert admin.call(codes.GET_TOPICS_BY_CLUSTER, {"cluster": "RemCluster"}).remark == "disable"
        assert b"enableTopicList=false" in admin.call(codes.GET_NAMESRV_CONFIG).body
        refused = admin.call(codes.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/x\n")
        assert refused.code == codes.NO_PERMISSION and "kvConfigPath" in refused.remark
        assert admin.call(codes.UPDATE_NAMESRV_CONFIG, body=b"enableTopicList=true\n").code == codes.SUCCESS


def test_broker_codes_are_refused_outside_the_broker_networks(system):
    system.front._networks = acl.parse_networks("10.0.0.0/8")
    try:
        with client(system) as c:
            answer = register(c, "rem-net", "127.0.0.1:40961", {"NetTopic": {}, "NetTopicBase": {}})
            assert answer.code == codes.NO_PERMISSION and "NAMESRV_REMOTING_BROKER_NETWORKS" in answer.remark
    finally:
        system.front._networks = acl.parse_networks("127.0.0.0/8")


def test_closing_a_brokers_connection_unregisters_it_unless_it_registered_again_elsewhere(system):
    a = client(system)
    register(a, "rem-close", "127.0.0.1:40971", {"CloseTopic": {}, "CloseTopicBase": {}})
    a.close()
    with client(system) as c:
        system.wait_for(lambda: route(c, "CloseTopic").code == codes.TOPIC_NOT_EXIST, 10, "the route to go")
        first, second = client(system), client(system)
        register(first, "rem-keep", "127.0.0.1:40981", {"KeepTopic": {}, "KeepTopicBase": {}})
        register(second, "rem-keep", "127.0.0.1:40981", {"KeepTopic": {}, "KeepTopicBase": {}})  # newer, over another connection
        first.close()
        time.sleep(3)
        assert route(c, "KeepTopic").code == codes.SUCCESS
        second.close()
        system.wait_for(lambda: route(c, "KeepTopic").code == codes.TOPIC_NOT_EXIST, 10, "the route to go")


def test_oneway_requests_are_not_answered_and_pipelined_answers_match_by_opaque(system):
    with client(system) as c:
        register(c, "rem-hb", "127.0.0.1:40991", {"HbTopic": {}, "HbTopicBase": {}})
        c.send(codes.QUERY_DATA_VERSION, {"brokerName": "rem-hb", "brokerAddr": "127.0.0.1:40991",
                                          "clusterName": "RemCluster", "brokerId": "0"},
               json.dumps(DV).encode(), oneway=True)
        c.send(codes.BROKER_HEARTBEAT, {"brokerName": "rem-hb", "brokerAddr": "127.0.0.1:40991",
                                        "clusterName": "RemCluster"}, oneway=True)
        opaques = [c.send(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": t}) for t in ("HbTopic", "Nope", "HbTopic")]
        answers = [c.receive() for _ in opaques]
        assert [a.opaque for a in answers] == opaques  # nothing for the one-way requests
        assert [a.code for a in answers] == [codes.SUCCESS, codes.TOPIC_NOT_EXIST, codes.SUCCESS]
        version = c.call(codes.QUERY_DATA_VERSION, {"brokerName": "rem-hb", "brokerAddr": "127.0.0.1:40991",
                                                    "clusterName": "RemCluster", "brokerId": "0"},
                         json.dumps(DV).encode())
        assert version.code == codes.SUCCESS and version.ext["changed"] in ("true", "false")


# ---------------------------------------------------------------- robustness

def fuzz_frames(rng: random.Random, n: int):
    valid = encode_request(codes.GET_ROUTEINFO_BY_TOPIC, 1, ext={"topic": "RemTopic"})
    for i in range(n):
        kind = i % 10
        if kind == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        elif kind == 1:
            yield valid[:rng.randrange(1, len(valid))] + b"\xff" * 0  # truncated, then closed
        elif kind == 2:
            yield struct.pack(">i", rng.choice([0, 1, 3, -1, -2**31, 16 * 1024 * 1024 + 1, 2**31 - 1]))
        elif kind == 3:
            header = b"{}"
            yield struct.pack(">iI", 4 + 2, 2**24 - 1) + header  # header length beyond the frame
        elif kind == 4:
            header = rng.choice([b"{", b"[1,2]", b"null", b"\xff\xfe", b'{"code":"x"}', b'{"code":1e99}',
                                 b'{"code":105,"extFields":[1]}', b'{"code":true}'])
            yield struct.pack(">iI", 4 + len(header), len(header)) + header
        elif kind == 5:
            odd = rng.choice([1, None, True, [1], {"a": 1}])
            header = json.dumps({"code": 105, "opaque": 3, "extFields": {"topic": odd}}).encode()
            yield struct.pack(">iI", 4 + len(header), len(header)) + header  # odd types: still answered
        elif kind == 6:
            header = bytes(rng.randrange(256) for _ in range(rng.randrange(13, 40)))
            yield struct.pack(">iI", 4 + len(header), (ROCKETMQ << 24) | len(header)) + header
        elif kind == 7:
            yield struct.pack(">iI", 8, (7 << 24) | 4) + b"abcd"  # unknown serialize type
        elif kind == 8:
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
            yield encode_request(codes.REGISTER_BROKER, 9, ext={"brokerName": "fz", "brokerAddr": "127.0.0.1:1",
                                                                "clusterName": "F", "brokerId": "0"}, body=body)
        else:
            yield valid


def test_a_frame_fuzzer_never_takes_the_front_down(system, rem_a, figures):
    rng = random.Random(12)
    cases, closed = 600, 0
    with client(system) as bystander:
        for frame in fuzz_frames(rng, cases):
            s = socket.create_connection(("127.0.0.1", int(system.remoting_addr.rsplit(":", 1)[1])), timeout=5)
            try:
                s.sendall(frame)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(5)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            except OSError:
                pass
            finally:
                s.close()
            closed += 1
        assert route(bystander, "RemTopic").code == codes.SUCCESS  # the other connection was never disturbed
    figures(f"remoting fuzzer: {cases} malformed or odd frames, each on its own connection, 0 crashes")


def test_bad_frame_closes_only_its_connection(system, rem_a):
    with client(system) as good, client(system) as bad:
        bad.sock.sendall(struct.pack(">i", -5))
        bad.sock.settimeout(5)
        assert bad.sock.recv(10) == b""  # closed by the front
        assert route(good, "RemTopic").code == codes.SUCCESS


def test_a_thousand_connections_are_held_and_silent_ones_closed_when_idle(system, rem_a):
    port = int(system.remoting_addr.rsplit(":", 1)[1])
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(1000)]
    try:
        frame = encode_request(codes.GET_ROUTEINFO_BY_TOPIC, 5, ext={"topic": "RemTopic"})
        for s in socks:
            s.sendall(frame)
        for s in socks:
            (length,) = struct.unpack(">i", _read(s, 4))
            assert b'"code":0' in _read(s, length)
        assert len(system.front.connections) >= 1000
        system.front.idle_timeout_s = 2.0  # NAMESRV_REMOTING_IDLE_TIMEOUT_MS, shortened for this check
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # rem-a's connection stays busy, as a broker's does
            assert rem_a[0].call(codes.GET_BROKER_CLUSTER_INFO).code == codes.SUCCESS
            time.sleep(0.5)
        for s in socks[:50]:
            s.settimeout(5)
            assert s.recv(1) == b""
        assert len(system.front.connections) < 10
    finally:
        system.front.idle_timeout_s = system.front.cfg.remoting_idle_timeout_ms / 1000
        for s in socks:
            s.close()


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "connection closed early"
        data += chunk
    return data


def test_binary_and_json_headers_get_the_same_answers(system, rem_a):
    with client(system, serialize_type=JSON) as j, client(system, serialize_type=ROCKETMQ) as r:
        for code, ext in ((codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "RemTopic"}),
                          (codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"}), (codes.GET_BROKER_CLUSTER_INFO, {}),
                          (codes.GET_KV_CONFIG, {"namespace": "x", "key": "y"}), (777, {})):
            a, b = j.call(code, ext), r.call(code, ext)
            assert (a.code, a.remark, a.ext, a.body) == (b.code, b.remark, b.ext, b.body)
            assert b.serialize_type == JSON  # answers are JSON, as a Java NameServer's


def _front_on_thread(cfg_env: dict[str, str], store, system: Pipeline) -> FrontThread:
    """Another front (its own loop and thread) over `store`, configured like the system's plus `cfg_env`."""
    from remoting.__main__ import build_front
    return FrontThread(build_front(system.config_with(NAMESRV_REMOTING_ACCESS_KEY=AK, NAMESRV_REMOTING_SECRET_KEY=SK,
                                                      **cfg_env), store=store))


def test_kafka_unreachable_refuses_writes_clearly_and_keeps_serving_reads(system, rem_a):
    from ops.net import free_port
    other = _front_on_thread({"NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"}, system.front.store, system)
    try:
        with RemotingClient(other.addr, access_key=AK, secret_key=SK, timeout_s=60) as c:
            started = time.monotonic()
            put = c.call(codes.PUT_KV_CONFIG, {"namespace": "DownNs", "key": "k", "value": "v"})
            assert put.code == codes.SYSTEM_ERROR and "unavailable" in put.remark and "nothing was written" in put.remark
            assert time.monotonic() - started < 5  # within mqadmin's request timeout
            started = time.monotonic()
            reg = register(c, "rem-down", "127.0.0.1:40999", {"DownTopic": {}, "DownBase": {}})
            assert reg.code == codes.SYSTEM_ERROR and "unavailable" in reg.remark
            assert time.monotonic() - started < 1  # the outage is known: no second wait
            assert route(c, "RemTopic").code == codes.SUCCESS  # reads are served from the snapshot
    finally:
        other.stop()


def test_no_snapshot_yet_answers_name_server_not_ready(system, tmp_path):
    from snapshots.reader import SnapshotReader
    from snapshots.store import SnapshotStore
    empty = SnapshotStore(SnapshotReader(tmp_path), 0.1, retention_ms=3_600_000)
    other = _front_on_thread({}, empty, system)
    try:
        with RemotingClient(other.addr) as c:
            answer = route(c, "RemTopic")
            assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, "name server not ready")
            assert c.call(codes.GET_BROKER_CLUSTER_INFO).remark == "name server not ready"
    finally:
        other.stop()


def test_zone_mode_filters_routes_like_rocketmqs_zone_hook(system, rem_a):
    with client(system) as c:
        register(c, "rem-zone", "127.0.0.1:40995", {"ZoneTopic": {}, "rem-zone": {}}, ext={"__ZONE_NAME": "az1"})
        register(c, "rem-zone2", "127.0.0.1:40996", {"ZoneTopic": {}, "rem-zone2": {}}, ext={"__ZONE_NAME": "az2"})
        whole = json.loads(route(c, "ZoneTopic").body)
        assert {b["brokerName"] for b in whole["brokerDatas"]} == {"rem-zone", "rem-zone2"}
        zoned = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "ZoneTopic", "__ZONE_NAME": "az1", "__ZONE_MODE": "true"})
        assert [b["brokerName"] for b in json.loads(zoned.body)["brokerDatas"]] == ["rem-zone"]
        assert json.loads(zoned.body)["brokerDatas"][0]["zoneName"] == "az1"


def test_a_registration_record_carries_its_requests_fingerprint(system, rem_a):
    """The front fingerprints a registration once, on the request, and the record carries it to
    the job's ledger (liveness/fingerprint.py, schemas.events.FINGERPRINT_HEADER)."""
    from kafka import TopicPartition

    from eventlog.consumer import consumer
    c = consumer(system.cfg.bootstrap, offset_reset="earliest")
    try:
        tps = [TopicPartition(system.cfg.kafka_topic, p) for p in sorted(c.partitions_for_topic(system.cfg.kafka_topic))]
        c.assign(tps)
        c.seek_to_beginning()
        found, deadline = [], time.monotonic() + 20
        while not found and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                found += [r for r in records if r.key == b"rem-a" and b'"127.0.0.1:40911"' in r.value
                          and b'"repeats"' not in r.value]
    finally:
        c.close()
    assert found, "rem-a's registration is not in the events topic"
    headers = dict(found[0].headers)
    assert headers[ev.TYPE_HEADER] == ev.REGISTER_BROKER.encode()
    fingerprint = ev.header_fingerprint(headers.get(ev.FINGERPRINT_HEADER))
    assert fingerprint is not None and len(fingerprint) == 16
