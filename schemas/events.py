"""The event contract on the `namesrv-events` topic: validation, normalisation and builders.

Producers (simulator, HTTP writes, tests) build events with the `*_event` functions; the
pipeline turns every raw Kafka record into a normalised event with `parse_event`, or into
an `InvalidEvent` whose message is the dead-letter reason. Nothing else interprets the
wire format, so a rule here holds for every path into the system.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

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

# The fields each event type may carry; anything else is refused (no silent fallbacks).
_COMMON = {"type", "timestamp"}
_BROKER = {"clusterName", "brokerAddr", "brokerName", "brokerId"}
FIELDS: dict[str, frozenset[str]] = {
    REGISTER_BROKER: frozenset(_COMMON | _BROKER | {
        "haServerAddr", "zoneName", "heartbeatTimeoutMillis", "enableActingMaster", "dataVersion",
        "topicConfigTable", "filterServerList", "chunk"}),
    BROKER_HEARTBEAT: frozenset(_COMMON | _BROKER | {"dataVersion", "heartbeatTimeoutMillis"}),
    UNREGISTER_BROKER: frozenset(_COMMON | _BROKER),
    WIPE_WRITE_PERM_OF_BROKER: frozenset(_COMMON | {"brokerName"}),
    ADD_WRITE_PERM_OF_BROKER: frozenset(_COMMON | {"brokerName"}),
    DELETE_TOPIC_IN_NAMESRV: frozenset(_COMMON | {"topic", "brokerName", "clusterName"}),
    REGISTER_TOPIC_IN_NAMESRV: frozenset(_COMMON | {"topic", "brokerName", "readQueueNums", "writeQueueNums",
                                                    "perm", "topicSysFlag"}),
    PUT_KV_CONFIG: frozenset(_COMMON | {"namespace", "key", "value"}),
    DELETE_KV_CONFIG: frozenset(_COMMON | {"namespace", "key"}),
    UPDATE_NAMESRV_CONFIG: frozenset(_COMMON | {"key", "value"}),
}
# TopicConfig as brokers serialize it; topicFilterType and attributes are accepted and ignored.
TOPIC_CONFIG_FIELDS = frozenset({"topicName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order",
                                 "topicFilterType", "attributes"})

# Optional Kafka record header naming the event type. The pipeline never trusts it for meaning
# (the value is parsed as always); the source only uses it to let heartbeats wait for a batch.
TYPE_HEADER = "namesrv-type"

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

# RocketMQ constants (PermName, TopicConfig defaults, MixAll.MASTER_ID)
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
DEFAULT_QUEUE_NUMS = 16
DEFAULT_PERM = PERM_READ | PERM_WRITE
MASTER_ID = 0

TOPIC_MAX_LENGTH = 127
RETRY_DLQ_MAX_LENGTH = 255
NAME_MAX_LENGTH = 127
MAX_QUEUE_NUMS = 65535
MAX_BROKER_ID = 2**31 - 1
MAX_TIMEOUT_MS = 24 * 3600 * 1000
# A registration larger than one Kafka message is split into chunks (see `chunk_registration`);
# 10,000 chunks of 1 MiB is far beyond any broker (100,000 topics take about 12).
MAX_CHUNKS = 10_000

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_NAME_RE = re.compile(r"^[a-zA-Z0-9_.:%|-]+$")
_HOST_RE = re.compile(r"^[a-zA-Z0-9_.-]+$")
_KV_TEXT_MAX = 64 * 1024


class InvalidEvent(ValueError):
    """The event breaks the contract; str(exc) is the dead-letter reason."""


# ---------------------------------------------------------------- field checks

def validate_topic(topic: Any, field: str = "topic") -> str:
    """RocketMQ's TopicValidator rules (semantics 9.4); the NameServer itself skips them, we do not."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidEvent(f"{field} must be a non-blank string")
    limit = RETRY_DLQ_MAX_LENGTH if topic.startswith(("%RETRY%", "%DLQ%")) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise InvalidEvent(f"{field} '{topic[:40]}...' is longer than {limit} characters")
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidEvent(f"{field} '{topic}' contains characters outside [%|a-zA-Z0-9_-]")
    return topic


def validate_name(value: Any, field: str) -> str:
    """Cluster, broker and KV names: printable identifiers, so they are safe in paths and predicates."""
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{field} must be a non-empty string")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidEvent(f"{field} is longer than {NAME_MAX_LENGTH} characters")
    if not _NAME_RE.fullmatch(value):
        raise InvalidEvent(f"{field} '{value}' contains characters outside [a-zA-Z0-9_.:%|-]")
    return value


def validate_addr(value: Any, field: str) -> str:
    """A `host:port` address, as brokers announce themselves."""
    if not isinstance(value, str) or ":" not in value:
        raise InvalidEvent(f"{field} must be a 'host:port' string")
    host, _, port = value.rpartition(":")
    if not host or not _HOST_RE.fullmatch(host) or len(value) > 255:
        raise InvalidEvent(f"{field} '{value}' has an invalid host")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidEvent(f"{field} '{value}' has an invalid port")
    return value


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEvent(f"{field} must be an integer")
    if not lo <= value <= hi:
        raise InvalidEvent(f"{field}={value} is outside {lo}..{hi}")
    return value


def _required(obj: Mapping[str, Any], field: str) -> Any:
    if obj.get(field) is None:
        raise InvalidEvent(f"missing required field '{field}'")
    return obj[field]


def _data_version(raw: Any, field: str = "dataVersion") -> dict[str, int]:
    if raw is None:
        return {"timestamp": 0, "counter": 0, "stateVersion": 0}
    if not isinstance(raw, dict):
        raise InvalidEvent(f"{field} must be an object")
    out = {}
    for key in ("timestamp", "counter", "stateVersion"):
        value = raw.get(key, 0)
        out[key] = _int(0 if value is None else value, f"{field}.{key}", 0, 2**63 - 1)
    return out


def queue_fields(raw: Mapping[str, Any], where: str) -> dict[str, int]:
    """readQueueNums, writeQueueNums, perm, topicSysFlag with TopicConfig defaults, validated."""
    def get(name: str, default: int) -> Any:
        value = raw.get(name)
        return default if value is None else value
    return {
        "readQueueNums": _int(get("readQueueNums", DEFAULT_QUEUE_NUMS), f"{where}.readQueueNums", 0, MAX_QUEUE_NUMS),
        "writeQueueNums": _int(get("writeQueueNums", DEFAULT_QUEUE_NUMS), f"{where}.writeQueueNums", 0, MAX_QUEUE_NUMS),
        "perm": _int(get("perm", DEFAULT_PERM), f"{where}.perm", 0, 7),
        "topicSysFlag": _int(get("topicSysFlag", 0), f"{where}.topicSysFlag", 0, 2**31 - 1),
    }


def _topic_config_table(raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidEvent("topicConfigTable must be an object keyed by topic")
    table: dict[str, dict[str, Any]] = {}
    for topic, cfg in raw.items():
        validate_topic(topic, "topicConfigTable key")
        if not isinstance(cfg, dict):
            raise InvalidEvent(f"topicConfigTable['{topic}'] must be an object")
        extra = sorted(set(cfg) - TOPIC_CONFIG_FIELDS)
        if extra:
            raise InvalidEvent(f"topicConfigTable['{topic}'] has unknown field(s) {', '.join(extra)}")
        name = cfg.get("topicName", topic)
        if name != topic:
            raise InvalidEvent(f"topicConfigTable['{topic}'].topicName is '{name}', not its key")
        entry = queue_fields(cfg, f"topicConfigTable['{topic}']")
        order = cfg.get("order", False)
        if not isinstance(order, bool):
            raise InvalidEvent(f"topicConfigTable['{topic}'].order must be a boolean")
        entry["order"] = order
        table[topic] = entry
    return table


def _chunk(raw: Any) -> tuple[int, int] | None:
    """{"index": i, "count": n} of a chunked registration, as (i, n); absent = not chunked."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"index", "count"}:
        raise InvalidEvent("chunk must be an object with exactly the fields index and count")
    count = _int(raw["count"], "chunk.count", 1, MAX_CHUNKS)
    return _int(raw["index"], "chunk.index", 0, count - 1), count


def _addr_list(raw: Any, field: str) -> list[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidEvent(f"{field} must be a list of addresses")
    return [validate_addr(a, f"{field}[{i}]") for i, a in enumerate(raw)]


# ---------------------------------------------------------------- parsing

def group_key(event: Mapping[str, Any]) -> str:
    """The Kafka key (and Spark grouping key) an event must carry: ordering is per key."""
    if event["type"] in KV_EVENT_TYPES:
        return KV_KEY_PREFIX + event["namespace"]
    if event["type"] in CONFIG_EVENT_TYPES:
        return CONFIG_KEY
    return event["brokerName"]


def validate_switch(key: Any, value: Any) -> str:
    """A runtime switch update: an allow-listed key and a boolean ("true"/"false") value."""
    if key not in RUNTIME_SWITCHES:
        raise InvalidEvent(f"'{key}' is not an updatable runtime switch; allowed: {', '.join(sorted(RUNTIME_SWITCHES))}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower()
    raise InvalidEvent(f"'{key}' takes true or false, not {value!r}")


def parse_event(value: bytes | None, *, key: str | None, record_time_ms: int,
                max_message_bytes: int, max_clock_skew_ms: int) -> dict[str, Any]:
    """Validate one raw record and return the normalised event (defaults filled in).

    Raises InvalidEvent with a human-readable reason; the caller quarantines the record.
    """
    record_key = key
    if value is None:
        raise InvalidEvent("empty record value")
    if len(value) > max_message_bytes:
        raise InvalidEvent(f"record of {len(value)} bytes exceeds the {max_message_bytes}-byte limit")
    try:
        raw = json.loads(value.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidEvent("value is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidEvent(f"value is not JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(raw, dict):
        raise InvalidEvent("value must be a JSON object")
    etype = raw.get("type")
    if etype not in EVENT_TYPES:
        raise InvalidEvent(f"unknown event type {etype!r}" if etype is not None else "missing required field 'type'")

    extra = sorted(set(raw) - FIELDS[etype])
    if extra:
        raise InvalidEvent(f"{etype} has unknown field(s) {', '.join(map(str, extra))[:200]}")
    ts = raw.get("timestamp")
    if ts is None:
        time_ms = record_time_ms
    else:
        time_ms = _int(ts, "timestamp", 0, 2**63 - 1)
        if abs(time_ms - record_time_ms) > max_clock_skew_ms:
            raise InvalidEvent(
                f"timestamp {time_ms} is more than {max_clock_skew_ms} ms away from the Kafka record time {record_time_ms}")

    event: dict[str, Any] = {"type": etype, "time": time_ms}
    if etype in CONFIG_EVENT_TYPES:
        key = _required(raw, "key")
        event["key"] = key if isinstance(key, str) else str(key)
        event["value"] = validate_switch(key, _required(raw, "value"))
    elif etype in KV_EVENT_TYPES:
        event["namespace"] = validate_name(_required(raw, "namespace"), "namespace")
        k = _required(raw, "key")
        if not isinstance(k, str) or not k or len(k) > _KV_TEXT_MAX:
            raise InvalidEvent("key must be a non-empty string")
        event["key"] = k
        if etype == PUT_KV_CONFIG:
            v = _required(raw, "value")
            if not isinstance(v, str) or len(v) > _KV_TEXT_MAX:
                raise InvalidEvent(f"value must be a string of at most {_KV_TEXT_MAX} characters")
            event["value"] = v
    else:
        event["brokerName"] = validate_name(_required(raw, "brokerName"), "brokerName")
        if etype in (REGISTER_BROKER, BROKER_HEARTBEAT, UNREGISTER_BROKER):
            event["clusterName"] = validate_name(_required(raw, "clusterName"), "clusterName")
            event["brokerAddr"] = validate_addr(_required(raw, "brokerAddr"), "brokerAddr")
            bid = raw.get("brokerId")
            if bid is None and etype != BROKER_HEARTBEAT:
                raise InvalidEvent("missing required field 'brokerId'")
            event["brokerId"] = None if bid is None else _int(bid, "brokerId", 0, MAX_BROKER_ID)
        if etype == REGISTER_BROKER:
            ha = raw.get("haServerAddr")
            event["haServerAddr"] = None if ha in (None, "") else validate_addr(ha, "haServerAddr")
            zone = raw.get("zoneName")
            event["zoneName"] = None if zone is None else validate_name(zone, "zoneName")
            timeout = raw.get("heartbeatTimeoutMillis")
            event["heartbeatTimeoutMillis"] = None if timeout is None else _int(
                timeout, "heartbeatTimeoutMillis", 1, MAX_TIMEOUT_MS)
            acting = raw.get("enableActingMaster")
            if acting is not None and not isinstance(acting, bool):
                raise InvalidEvent("enableActingMaster must be a boolean")
            event["enableActingMaster"] = acting
            event["dataVersion"] = _data_version(raw.get("dataVersion"))
            event["topicConfigTable"] = _topic_config_table(raw.get("topicConfigTable"))
            event["filterServerList"] = _addr_list(raw.get("filterServerList"), "filterServerList")
            event["chunk"] = _chunk(raw.get("chunk"))
        elif etype == BROKER_HEARTBEAT:
            dv = raw.get("dataVersion")
            event["dataVersion"] = None if dv is None else _data_version(dv)
        elif etype == DELETE_TOPIC_IN_NAMESRV:
            event["topic"] = validate_topic(_required(raw, "topic"))
            cluster = raw.get("clusterName")
            event["clusterName"] = None if cluster in (None, "") else validate_name(cluster, "clusterName")
        elif etype == REGISTER_TOPIC_IN_NAMESRV:
            event["topic"] = validate_topic(_required(raw, "topic"))
            event.update(queue_fields(raw, "queueData"))

    expected = group_key(event)
    if record_key != expected:
        raise InvalidEvent(f"Kafka key {record_key!r} must be {expected!r} so that the group's events stay ordered")
    return event


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


def heartbeat_event(*, cluster: str, broker_name: str, broker_id: int, addr: str,
                    timestamp: int | None = None) -> dict[str, Any]:
    event = {"type": BROKER_HEARTBEAT, "clusterName": cluster, "brokerName": broker_name,
             "brokerId": broker_id, "brokerAddr": addr}
    if timestamp is not None:
        event["timestamp"] = timestamp
    return event


def unregister_broker_event(*, cluster: str, broker_name: str, broker_id: int, addr: str) -> dict[str, Any]:
    return {"type": UNREGISTER_BROKER, "clusterName": cluster, "brokerName": broker_name,
            "brokerId": broker_id, "brokerAddr": addr}


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
    return group_key(event).encode("utf-8"), json.dumps(event, separators=(",", ":")).encode("utf-8")


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
