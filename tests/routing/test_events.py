"""The event contract (schemas.events): what is accepted, normalised, and rejected with which reason."""

from __future__ import annotations

import json

import pytest

from schemas import events as ev
from schemas import fields
from tests.helpers import reg

T0 = 1_700_000_000_000


def parse(raw, key="broker-a", time_ms=T0, skew=300_000, max_bytes=1 << 20):
    value = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    return ev.parse_event(value, key=key, record_time_ms=time_ms, max_message_bytes=max_bytes,
                          max_clock_skew_ms=skew)


def test_registration_defaults_are_filled_in():
    e = parse({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
               "brokerAddr": "127.0.0.1:10911", "topicConfigTable": {"T": {}}})
    assert e["time"] == T0
    assert e["topicConfigTable"]["T"] == {"readQueueNums": 16, "writeQueueNums": 16, "perm": 6,
                                          "topicSysFlag": 0, "order": False}
    assert e["dataVersion"] == {"timestamp": 0, "counter": 0, "stateVersion": 0}
    assert e["enableActingMaster"] is None and e["heartbeatTimeoutMillis"] is None
    assert e["filterServerList"] is None and e["haServerAddr"] is None


def test_record_time_wins_over_the_producers_timestamp():
    """Liveness runs on the receiver's clock (RocketMQ stamps at receipt): the log's time counts;
    the event's own timestamp is only checked against it."""
    e = parse({**reg("broker-a", 0, "127.0.0.1:1"), "timestamp": T0 - 1000})
    assert e["time"] == T0


def test_builders_round_trip():
    key, value = ev.encode(reg("broker-a", 1, "127.0.0.1:1", timeout_ms=5000, zone="z", filters=[]))
    e = ev.parse_event(value, key=key.decode(), record_time_ms=T0, max_message_bytes=1 << 20, max_clock_skew_ms=1)
    assert (e["brokerId"], e["heartbeatTimeoutMillis"], e["zoneName"], e["filterServerList"]) == (1, 5000, "z", [])


@pytest.mark.parametrize("raw, key, reason", [
    (b"not json", "broker-a", "not JSON"),
    (b"\xff\xfe", "broker-a", "not UTF-8"),
    ([1, 2], "broker-a", "JSON object"),
    ({"type": "NOPE"}, "broker-a", "unknown event type"),
    ({"brokerName": "broker-a"}, "broker-a", "missing required field 'type'"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerId": 0, "brokerAddr": "1.2.3.4:5"}, "broker-a",
     "missing required field 'brokerName'"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": "0",
      "brokerAddr": "1.2.3.4:5"}, "broker-a", "brokerId must be an integer"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": -1,
      "brokerAddr": "1.2.3.4:5"}, "broker-a", "brokerId=-1 is outside"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "nope"}, "broker-a", "host:port"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "1.2.3.4:5", "topicConfigTable": {"bad\ntopic": {}}}, "broker-a", "control characters"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "1.2.3.4:5", "topicConfigTable": {"T": {"perm": 8}}}, "broker-a", "perm=8 is outside"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "1.2.3.4:5", "topicConfigTable": {"T": {"readQueueNums": -1}}}, "broker-a", "readQueueNums=-1"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "1.2.3.4:5", "topicConfigTable": {"T": {"topicName": "U"}}}, "broker-a", "not its key"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "1.2.3.4:5", "timestamp": 5}, "broker-a", "away from the Kafka record time"),
    ({"type": "BROKER_HEARTBEAT", "clusterName": "C", "brokerName": "broker-a", "brokerAddr": "1.2.3.4:5"},
     "broker-b", "Kafka key 'broker-b' must be 'broker-a'"),
    ({"type": "BROKER_HEARTBEAT", "clusterName": "C", "brokerName": "broker-a", "brokerAddr": "1.2.3.4:5"},
     None, "Kafka key None"),
    ({"type": "PUT_KV_CONFIG", "namespace": "ns", "key": "k"}, "kv/ns", "missing required field 'value'"),
    ({"type": "PUT_KV_CONFIG", "namespace": "ns", "key": "k", "value": "v", "evil": 1}, "kv/ns",
     "unknown field(s) evil"),
    ({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
      "brokerAddr": "1.2.3.4:5", "topicConfigTable": {"T": {"perm": 6, "bogus": True}}}, "broker-a",
     "unknown field(s) bogus"),
])
def test_invalid_events_are_rejected_with_a_reason(raw, key, reason):
    with pytest.raises(fields.InvalidInput, match=None) as info:
        parse(raw, key=key)
    assert reason in str(info.value)


def test_oversize_record_is_rejected_before_parsing():
    with pytest.raises(fields.InvalidInput, match="exceeds the 100-byte limit"):
        parse(b"{" + b" " * 200 + b"}", max_bytes=100)


@pytest.mark.parametrize("topic, ok", [
    ("TopicTest", True), ("a|b%c_d-e", True), ("x" * 127, True), ("x" * 128, False),
    ("%RETRY%" + "x" * 240, True), ("%DLQ%" + "x" * 251, False), ("", False), (" ", False), ("tópico", False),
])
def test_topic_validator_rules(topic, ok):
    if ok:
        assert fields.validate_topic(topic) == topic
    else:
        with pytest.raises(fields.InvalidInput):
            fields.validate_topic(topic)


def test_kv_events_are_keyed_by_namespace():
    e = parse({"type": "PUT_KV_CONFIG", "namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "b:4"},
              key="kv/ORDER_TOPIC_CONFIG")
    assert ev.group_key(e) == "kv/ORDER_TOPIC_CONFIG" and e["value"] == "b:4"


def test_broker_serialized_topic_configs_are_accepted():
    e = parse({"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": "broker-a", "brokerId": 0,
               "brokerAddr": "1.2.3.4:5", "topicConfigTable": {"T": {
                   "topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0,
                   "order": False, "topicFilterType": "SINGLE_TAG", "attributes": {}}}})
    assert e["topicConfigTable"]["T"]["readQueueNums"] == 4


def test_names_with_a_trailing_newline_are_refused():
    # `$` in a regex matches before a final newline; the validators must match the whole string.
    for check, value in ((fields.validate_topic, "TopicTest\n"), (lambda v: fields.validate_name(v, "brokerName"), "b\n"),
                         (lambda v: fields.validate_addr(v, "brokerAddr"), "127.0.0.1\n:10911")):
        with pytest.raises(fields.InvalidInput):
            check(value)


def test_what_real_brokers_send_is_accepted_and_admin_names_stay_strict():
    """A 5.3 broker named after its host registers topics of that name, may announce an IPv6
    address and any timeout RocketMQ takes (§9.4); creating topics by admin stays strict."""
    name = "broker1.example.com"
    raw = {"type": "REGISTER_BROKER", "clusterName": "C", "brokerName": name, "brokerId": 0,
           "brokerAddr": "[::1]:10911", "haServerAddr": "[fe80::1%eth0]:10912", "heartbeatTimeoutMillis": 0,
           "topicConfigTable": {name: {}, "C": {}, "%RETRY%g+T": {}, "rmq_sys_SYNC_BROKER_MEMBER_" + name: {}}}
    event = parse(raw, name)
    assert set(event["topicConfigTable"]) == set(raw["topicConfigTable"])
    assert event["heartbeatTimeoutMillis"] == 0 and event["brokerAddr"] == "[::1]:10911"
    assert parse({**raw, "heartbeatTimeoutMillis": 30 * 24 * 3600 * 1000}, name)["heartbeatTimeoutMillis"] > 0
    deleted = parse({"type": "DELETE_TOPIC_IN_NAMESRV", "topic": name, "brokerName": name}, name)
    assert deleted["topic"] == name  # whatever a broker registered can be deleted
    with pytest.raises(fields.InvalidInput, match="characters outside"):
        parse({"type": "REGISTER_TOPIC_IN_NAMESRV", "topic": name, "brokerName": name}, name)
    with pytest.raises(fields.InvalidInput, match="invalid host"):
        parse({**raw, "brokerAddr": "[not-ipv6]:1"}, name)
