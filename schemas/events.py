"""The event contract on the `namesrv-events` topic: validation, normalisation and builders.

Producers (simulator, HTTP writes, tests) build events with the `*_event` functions; the
pipeline turns every raw Kafka record into a normalised event with `parse_event`, or into
an `InvalidInput` whose message is the dead-letter reason. Nothing else interprets the
wire format, so a rule here holds for every path into the system.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from schemas import json_codec
from schemas.fields import (
    DEFAULT_PERM,
    DEFAULT_QUEUE_NUMS,
    KV_TEXT_MAX,
    MAX_BROKER_ID,
    MAX_CHUNKS,
    MAX_TIMEOUT_MS,
    InvalidInput,
    addr_list,
    chunk,
    data_version,
    int_in_range,
    queue_fields,
    repeats,
    required,
    topic_config_table,
    validate_addr,
    validate_broker_topic,
    validate_name,
    validate_topic,
)

REGISTER_BROKER = "REGISTER_BROKER"
BROKER_HEARTBEAT = "BROKER_HEARTBEAT"
UNREGISTER_BROKER = "UNREGISTER_BROKER"
WIPE_WRITE_PERM_OF_BROKER = "WIPE_WRITE_PERM_OF_BROKER"
ADD_WRITE_PERM_OF_BROKER = "ADD_WRITE_PERM_OF_BROKER"
DELETE_TOPIC_IN_NAMESRV = "DELETE_TOPIC_IN_NAMESRV"
REGISTER_TOPIC_IN_NAMESRV = "REGISTER_TOPIC_IN_NAMESRV"
PUT_KV_CONFIG = "PUT_KV_CONFIG"
DELETE_KV_CONFIG = "DELETE_KV_CONFIG"
UPDATE_NAMESRV_CONFIG = "UPDATE_NAMESRV_CONFIG"

BROKER_EVENT_TYPES = frozenset({
    REGISTER_BROKER, BROKER_HEARTBEAT, UNREGISTER_BROKER, WIPE_WRITE_PERM_OF_BROKER,
    ADD_WRITE_PERM_OF_BROKER, DELETE_TOPIC_IN_NAMESRV, REGISTER_TOPIC_IN_NAMESRV,
})
KV_EVENT_TYPES = frozenset({PUT_KV_CONFIG, DELETE_KV_CONFIG})
CONFIG_EVENT_TYPES = frozenset({UPDATE_NAMESRV_CONFIG})
EVENT_TYPES = BROKER_EVENT_TYPES | KV_EVENT_TYPES | CONFIG_EVENT_TYPES
# What an operator's hand publishes (HTTP writes, signed remoting writes, the admin CLI): nobody
# sends these again, unlike a broker's registration, so they are noted (eventlog/journal.py).
ADMIN_EVENT_TYPES = EVENT_TYPES - {REGISTER_BROKER, BROKER_HEARTBEAT, UNREGISTER_BROKER}

# The fields each event type may carry; anything else is refused (no silent fallbacks).
_COMMON = {"type", "timestamp"}
_BROKER = {"clusterName", "brokerAddr", "brokerName", "brokerId"}
FIELDS: dict[str, frozenset[str]] = {
    REGISTER_BROKER: frozenset(_COMMON | _BROKER | {
        "haServerAddr", "zoneName", "heartbeatTimeoutMillis", "enableActingMaster", "dataVersion",
        "topicConfigTable", "filterServerList", "chunk", "repeats"}),
    BROKER_HEARTBEAT: frozenset(_COMMON | _BROKER | {"dataVersion", "heartbeatTimeoutMillis"}),
    UNREGISTER_BROKER: frozenset(_COMMON | _BROKER | {"registrationOffset"}),
    WIPE_WRITE_PERM_OF_BROKER: frozenset(_COMMON | {"brokerName"}),
    ADD_WRITE_PERM_OF_BROKER: frozenset(_COMMON | {"brokerName"}),
    DELETE_TOPIC_IN_NAMESRV: frozenset(_COMMON | {"topic", "brokerName", "clusterName"}),
    REGISTER_TOPIC_IN_NAMESRV: frozenset(_COMMON | {"topic", "brokerName", "readQueueNums", "writeQueueNums",
                                                    "perm", "topicSysFlag"}),
    PUT_KV_CONFIG: frozenset(_COMMON | {"namespace", "key", "value"}),
    DELETE_KV_CONFIG: frozenset(_COMMON | {"namespace", "key"}),
    UPDATE_NAMESRV_CONFIG: frozenset(_COMMON | {"key", "value"}),
}
# Optional Kafka record header naming the event type. The pipeline never trusts it for meaning
# (the value is parsed as always); the source only uses it to let heartbeats wait for a batch.
TYPE_HEADER = "namesrv-type"
# Optional Kafka record header of a REGISTER_BROKER: the fingerprint its producer computed on the
# request it came from (liveness/fingerprint.py), so that the job's ledger tells a repeat from a
# change by the same fingerprint the remoting front did. Never trusted for meaning either.
FINGERPRINT_HEADER = "namesrv-fingerprint"


def fingerprint_header(fingerprint: bytes) -> tuple[str, bytes]:
    """The record header carrying a request's fingerprint (hex)."""
    return FINGERPRINT_HEADER, fingerprint.hex().encode()


def header_fingerprint(value: bytes | None) -> bytes | None:
    """The fingerprint a FINGERPRINT_HEADER value carries; None when absent or not hex (the
    ledger then fingerprints the event itself)."""
    try:
        return None if value is None else bytes.fromhex(value.decode("ascii"))
    except ValueError:
        return None


class Fingerprinted(dict[str, Any]):
    """An event (a plain dict to everything else, encoded as one) with the fingerprint of the
    request it came from, which the publisher sends in FINGERPRINT_HEADER, and its record,
    `encode(event)`, once the front made it (and validated it, unless the same request was accepted
    before): the bytes checked are the bytes published, encoded once (a first registration's JSON
    was encoded twice, a fifth of the front's CPU for it). The event is not changed once its record
    is made; a copy without its topic table may carry it to the publisher (`remoting.requests.to_publish`),
    which sends the record."""

    def __init__(self, event: Mapping[str, Any], fingerprint: bytes, record: tuple[bytes, bytes] | None = None) -> None:
        super().__init__(event)
        self.fingerprint = fingerprint
        self.record = record

KV_KEY_PREFIX = "kv/"
CONFIG_KEY = "config/namesrv"

# Runtime switches of the NameServer that may be changed while it runs (UPDATE_NAMESRV_CONFIG).
# An allow-list, unlike RocketMQ's blacklist: no key names a file or a path (CVE-2023-33246,
# CVE-2023-37582). Values are RocketMQ's "true"/"false" strings.
RUNTIME_SWITCHES: dict[str, bool] = {
    "enableAllTopicList": True,
    "enableTopicList": True,
    "orderMessageEnable": False,
    "supportActingMaster": False,
}
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

# ---------------------------------------------------------------- parsing

def group_key(event: Mapping[str, Any]) -> str:
    """The Kafka key (and Spark grouping key) an event must carry: ordering is per key."""
    if event["type"] in KV_EVENT_TYPES:
        return KV_KEY_PREFIX + str(event["namespace"])
    if event["type"] in CONFIG_EVENT_TYPES:
        return CONFIG_KEY
    return str(event["brokerName"])


def is_broker_group(key: str | None) -> bool:
    """Whether a record key (`group_key`) names a broker group, not a KV namespace or the switches."""
    return key is not None and not key.startswith(KV_KEY_PREFIX) and key != CONFIG_KEY


def validate_switch(key: Any, value: Any) -> str:
    """A runtime switch update: an allow-listed key and a boolean ("true"/"false") value."""
    if key not in RUNTIME_SWITCHES:
        raise InvalidInput(f"'{key}' is not an updatable runtime switch; allowed: {', '.join(sorted(RUNTIME_SWITCHES))}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower()
    raise InvalidInput(f"'{key}' takes true or false, not {value!r}")


def parse_event(value: bytes | None, *, key: str | None, record_time_ms: int,
                max_message_bytes: int, max_clock_skew_ms: int) -> dict[str, Any]:
    """Validate one raw record and return the normalised event (defaults filled in).

    Raises InvalidInput with a human-readable reason; the caller quarantines the record.
    """
    raw = _decode(value, max_message_bytes)
    etype = raw.get("type")
    if etype not in EVENT_TYPES:
        raise InvalidInput(f"unknown event type {etype!r}" if etype is not None else "missing required field 'type'")
    extra = sorted(set(raw) - FIELDS[etype])
    if extra:
        raise InvalidInput(f"{etype} has unknown field(s) {', '.join(map(str, extra))[:200]}")
    event: dict[str, Any] = {"type": etype, "time": _event_time(raw, record_time_ms, max_clock_skew_ms)}
    if etype in BROKER_EVENT_TYPES:
        event["brokerName"] = validate_name(required(raw, "brokerName"), "brokerName")
    _PARSERS[etype](raw, event)
    expected = group_key(event)
    if key != expected:
        raise InvalidInput(f"Kafka key {key!r} must be {expected!r} so that the group's events stay ordered")
    return event


def _decode(value: bytes | None, max_message_bytes: int) -> dict[str, Any]:
    if value is None:
        raise InvalidInput("empty record value")
    if len(value) > max_message_bytes:
        raise InvalidInput(f"record of {len(value)} bytes exceeds the {max_message_bytes}-byte limit")
    try:
        raw = json_codec.loads(value)
    except UnicodeDecodeError:
        raise InvalidInput("value is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"value is not JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(raw, dict):
        raise InvalidInput("value must be a JSON object")
    return raw


def _event_time(raw: Mapping[str, Any], record_time_ms: int, max_clock_skew_ms: int) -> int:
    """The record's time: RocketMQ measures liveness on the NameServer's clock at receipt, so
    the log's time counts (the job bounds it further by what it has read, `offset_log.LogClock`),
    not the producer's. An event `timestamp` is the producer's claim, refused when it is further
    than the allowed skew from the record time (a producer whose clock is that far off)."""
    ts = raw.get("timestamp")
    if ts is not None:
        time_ms = int_in_range(ts, "timestamp", 0, 2**63 - 1)
        if abs(time_ms - record_time_ms) > max_clock_skew_ms:
            raise InvalidInput(f"timestamp {time_ms} is more than {max_clock_skew_ms} ms away from the Kafka "
                               f"record time {record_time_ms}")
    return record_time_ms


def _broker_identity(raw: Mapping[str, Any], event: dict[str, Any], *, id_required: bool = True) -> None:
    event["clusterName"] = validate_name(required(raw, "clusterName"), "clusterName")
    event["brokerAddr"] = validate_addr(required(raw, "brokerAddr"), "brokerAddr")
    bid = raw.get("brokerId")
    if bid is None and id_required:
        raise InvalidInput("missing required field 'brokerId'")
    event["brokerId"] = None if bid is None else int_in_range(bid, "brokerId", 0, MAX_BROKER_ID)


def _parse_register_broker(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    _broker_identity(raw, event)
    ha = raw.get("haServerAddr")
    event["haServerAddr"] = None if ha in (None, "") else validate_addr(ha, "haServerAddr")
    zone = raw.get("zoneName")
    event["zoneName"] = None if zone is None else validate_name(zone, "zoneName")
    timeout = raw.get("heartbeatTimeoutMillis")
    event["heartbeatTimeoutMillis"] = None if timeout is None else int_in_range(
        timeout, "heartbeatTimeoutMillis", 0, MAX_TIMEOUT_MS)
    acting = raw.get("enableActingMaster")
    if acting is not None and not isinstance(acting, bool):
        raise InvalidInput("enableActingMaster must be a boolean")
    event["enableActingMaster"] = acting
    event["dataVersion"] = data_version(raw.get("dataVersion"))
    event["filterServerList"] = addr_list(raw.get("filterServerList"), "filterServerList")
    event["repeats"] = repeats(raw.get("repeats"))
    if event["repeats"] is not None:
        # a repeat names the registration it repeats instead of carrying its topic table again
        for absent in ("topicConfigTable", "chunk"):
            if raw.get(absent) is not None:
                raise InvalidInput(f"a REGISTER_BROKER with repeats carries no {absent}")
        event["topicConfigTable"], event["chunk"] = None, None
        return
    event["topicConfigTable"] = topic_config_table(raw.get("topicConfigTable"))
    event["chunk"] = chunk(raw.get("chunk"))


def _parse_heartbeat(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    _broker_identity(raw, event, id_required=False)
    dv = raw.get("dataVersion")
    event["dataVersion"] = None if dv is None else data_version(dv)


def _parse_unregister_broker(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    """`registrationOffset` (optional): the log offset of the registration this unregistration
    undoes (a remoting front sets it when a broker's connection closes); the job skips it when
    the address registered again later, through another connection or front."""
    _broker_identity(raw, event)
    offset = raw.get("registrationOffset")
    event["registrationOffset"] = None if offset is None else int_in_range(offset, "registrationOffset", 0, 2**63 - 1)


def _parse_broker_only(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    """WIPE/ADD_WRITE_PERM_OF_BROKER carry nothing but the brokerName."""


def _parse_delete_topic(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    # Any name a broker could have registered can be deleted (§9.4); creating stays strict.
    event["topic"] = validate_broker_topic(required(raw, "topic"))
    cluster = raw.get("clusterName")
    event["clusterName"] = None if cluster in (None, "") else validate_name(cluster, "clusterName")


def _parse_register_topic(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    event["topic"] = validate_topic(required(raw, "topic"))
    event.update(queue_fields(raw, "queueData"))


def _parse_kv(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    event["namespace"] = validate_name(required(raw, "namespace"), "namespace")
    k = required(raw, "key")
    if not isinstance(k, str) or not k or len(k) > KV_TEXT_MAX:
        raise InvalidInput("key must be a non-empty string")
    event["key"] = k
    if event["type"] == PUT_KV_CONFIG:
        v = required(raw, "value")
        if not isinstance(v, str) or len(v) > KV_TEXT_MAX:
            raise InvalidInput(f"value must be a string of at most {KV_TEXT_MAX} characters")
        event["value"] = v


def _parse_config(raw: Mapping[str, Any], event: dict[str, Any]) -> None:
    key = required(raw, "key")
    event["key"] = key if isinstance(key, str) else str(key)
    event["value"] = validate_switch(key, required(raw, "value"))


_PARSERS: dict[str, Callable[[Mapping[str, Any], dict[str, Any]], None]] = {
    REGISTER_BROKER: _parse_register_broker,
    BROKER_HEARTBEAT: _parse_heartbeat,
    UNREGISTER_BROKER: _parse_unregister_broker,
    WIPE_WRITE_PERM_OF_BROKER: _parse_broker_only,
    ADD_WRITE_PERM_OF_BROKER: _parse_broker_only,
    DELETE_TOPIC_IN_NAMESRV: _parse_delete_topic,
    REGISTER_TOPIC_IN_NAMESRV: _parse_register_topic,
    PUT_KV_CONFIG: _parse_kv,
    DELETE_KV_CONFIG: _parse_kv,
    UPDATE_NAMESRV_CONFIG: _parse_config,
}


# ---------------------------------------------------------------- builders (producers)

def topic_config(topic: str, *, read: int = DEFAULT_QUEUE_NUMS, write: int = DEFAULT_QUEUE_NUMS,
                 perm: int = DEFAULT_PERM, sys_flag: int = 0, order: bool = False) -> dict[str, Any]:
    return {"topicName": topic, "readQueueNums": read, "writeQueueNums": write, "perm": perm,
            "topicSysFlag": sys_flag, "order": order}


def register_broker_event(*, cluster: str, broker_name: str, broker_id: int, addr: str,
                          ha_addr: str | None = None, topics: Mapping[str, Mapping[str, Any]] | None = None,
                          data_version: Mapping[str, int] | None = None, timeout_ms: int | None = None,
                          enable_acting_master: bool | None = False, zone: str | None = None,
                          filter_servers: list[str] | None = None, timestamp: int | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": REGISTER_BROKER, "clusterName": cluster, "brokerName": broker_name, "brokerId": broker_id,
        "brokerAddr": addr, "haServerAddr": ha_addr, "enableActingMaster": enable_acting_master,
        "dataVersion": dict(data_version or {"timestamp": 0, "counter": 0, "stateVersion": 0}),
        "topicConfigTable": {name: dict(cfg) for name, cfg in (topics or {}).items()},
    }
    if timeout_ms is not None:
        event["heartbeatTimeoutMillis"] = timeout_ms
    if zone is not None:
        event["zoneName"] = zone
    if filter_servers is not None:
        event["filterServerList"] = list(filter_servers)
    if timestamp is not None:
        event["timestamp"] = timestamp
    return event


def repeated_registration_event(registration: Mapping[str, Any], offsets: list[int], topic_keys: str, *,
                                timestamp: int | None = None) -> dict[str, Any]:
    """A REGISTER_BROKER that repeats `registration` (a full one, or its first chunk) field for
    field, published at `offsets` of the same partition, whose topic names digest to
    `topic_keys` (routeinfo.state.topic_keys_digest): its header without the topic table. The job
    applies it as the full registration; it reads the registration's body from the log only when
    the topic table is needed (routeinfo.route_writes.NeedsBody)."""
    event = {k: v for k, v in registration.items() if k not in ("topicConfigTable", "chunk", "timestamp")}
    event["repeats"] = {"offsets": list(offsets), "topicKeys": topic_keys}
    if timestamp is not None:
        event["timestamp"] = timestamp
    return event


def heartbeat_event(*, cluster: str, broker_name: str, broker_id: int | None, addr: str,
                    timestamp: int | None = None) -> dict[str, Any]:
    """`broker_id` None: a 5.x BROKER_HEARTBEAT (904), which carries no id."""
    event: dict[str, Any] = {"type": BROKER_HEARTBEAT, "clusterName": cluster, "brokerName": broker_name,
                             "brokerAddr": addr}
    if broker_id is not None:
        event["brokerId"] = broker_id
    if timestamp is not None:
        event["timestamp"] = timestamp
    return event


def unregister_broker_event(*, cluster: str, broker_name: str, broker_id: int, addr: str,
                            timestamp: int | None = None, registration_offset: int | None = None) -> dict[str, Any]:
    """`registration_offset`: undo only the registration at that log offset (a closed connection's)."""
    event: dict[str, Any] = {"type": UNREGISTER_BROKER, "clusterName": cluster, "brokerName": broker_name,
                             "brokerId": broker_id, "brokerAddr": addr}
    if timestamp is not None:
        event["timestamp"] = timestamp
    if registration_offset is not None:
        event["registrationOffset"] = registration_offset
    return event


def chunk_registration(event: Mapping[str, Any], max_message_bytes: int) -> list[dict[str, Any]]:
    """Split a REGISTER_BROKER whose encoding exceeds `max_message_bytes` into chunks that each
    fit: the same header (data version included) with `chunk` {index, count} and a disjoint
    slice of topicConfigTable. The pipeline applies the registration once all chunks arrived.
    A registration that fits is returned as it is."""
    if event["type"] != REGISTER_BROKER:
        raise ValueError(f"only REGISTER_BROKER can be chunked, not {event['type']}")
    if len(encode(event)[1]) <= max_message_bytes:
        return [dict(event)]
    header = {k: v for k, v in event.items() if k != "topicConfigTable"}
    # Room for the header, the chunk field at its widest, and the table's braces.
    room = max_message_bytes - len(encode({**header, "topicConfigTable": {},
                                           "chunk": {"index": MAX_CHUNKS, "count": MAX_CHUNKS}})[1])
    slices: list[dict[str, Any]] = [{}]
    used = 0
    for name, cfg in event["topicConfigTable"].items():
        size = len(json.dumps({name: cfg}, separators=(",", ":"))) - 1  # "name":{...} plus a comma
        if size > room:
            raise ValueError(f"topic {name} alone does not fit in a {max_message_bytes}-byte message")
        if used + size > room and slices[-1]:
            slices.append({})
            used = 0
        slices[-1][name] = cfg
        used += size
    if len(slices) > MAX_CHUNKS:
        raise ValueError(f"registration needs {len(slices)} chunks, more than {MAX_CHUNKS}")
    return [{**header, "topicConfigTable": tbl, "chunk": {"index": i, "count": len(slices)}}
            for i, tbl in enumerate(slices)]


def encode(event: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) bytes for a Kafka record carrying `event`."""
    return group_key(event).encode("utf-8"), json_codec.dumps(event)


def record_of(event: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The (key, value) a publisher sends for `event`: the front's record when it made one (its
    event may then carry no topic table, `remoting.requests.to_publish`), else `encode(event)`."""
    record = event.record if isinstance(event, Fingerprinted) else None
    return encode(event) if record is None else record


def wipe_write_perm_event(broker_name: str) -> dict[str, Any]:
    return {"type": WIPE_WRITE_PERM_OF_BROKER, "brokerName": broker_name}


def add_write_perm_event(broker_name: str) -> dict[str, Any]:
    return {"type": ADD_WRITE_PERM_OF_BROKER, "brokerName": broker_name}


def delete_topic_event(topic: str, broker_name: str, cluster: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": DELETE_TOPIC_IN_NAMESRV, "topic": topic, "brokerName": broker_name}
    if cluster:
        event["clusterName"] = cluster
    return event


def register_topic_event(topic: str, queue_data: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": REGISTER_TOPIC_IN_NAMESRV, "topic": topic, "brokerName": queue_data["brokerName"],
            **{k: queue_data[k] for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")}}


def put_kv_event(namespace: str, key: str, value: str) -> dict[str, Any]:
    return {"type": PUT_KV_CONFIG, "namespace": namespace, "key": key, "value": value}


def delete_kv_event(namespace: str, key: str) -> dict[str, Any]:
    return {"type": DELETE_KV_CONFIG, "namespace": namespace, "key": key}


def update_config_event(key: str, value: str) -> dict[str, Any]:
    return {"type": UPDATE_NAMESRV_CONFIG, "key": key, "value": value}
