"""Field rules shared by every way into the system: RocketMQ's constants and name rules, and
the checks that turn a raw value into a valid one or an `InvalidInput` with a readable reason.

The event parser (`schemas.events`), the HTTP handlers and the coming remoting front all
validate through these functions, so a rule holds on every path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

# RocketMQ constants (PermName, TopicConfig defaults, MixAll.MASTER_ID)
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1  # §9.1
DEFAULT_QUEUE_NUMS = 16
DEFAULT_PERM = PERM_READ | PERM_WRITE
MASTER_ID = 0

TOPIC_MAX_LENGTH = 127
RETRY_DLQ_MAX_LENGTH = 255
NAME_MAX_LENGTH = 127
MAX_QUEUE_NUMS = 65535
MAX_BROKER_ID = 2**31 - 1
# RocketMQ takes any Long; the bound keeps `last update + timeout` inside a signed 64-bit deadline.
MAX_TIMEOUT_MS = 2**62
# A registration larger than one Kafka message is split into chunks (`events.chunk_registration`);
# 10,000 chunks of 1 MiB is far beyond any broker (100,000 topics take about 12).
MAX_CHUNKS = 10_000

# TopicConfig as brokers serialize it; topicFilterType and attributes are accepted and ignored.
TOPIC_CONFIG_FIELDS = frozenset({"topicName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order",
                                 "topicFilterType", "attributes"})

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_NAME_RE = re.compile(r"^[a-zA-Z0-9_.:%|-]+$")
_HOST_RE = re.compile(r"^[a-zA-Z0-9_.-]+$")
_IPV6_RE = re.compile(r"^\[[0-9a-fA-F:.]+(%[a-zA-Z0-9_.-]+)?\]$")  # NetworkUtil writes "[addr]:port"
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
KV_TEXT_MAX = 64 * 1024


class InvalidInput(ValueError):
    """Input breaks the contract: an event (str(exc) is its dead-letter reason) or an HTTP
    parameter (str(exc) is the 400 answer's remark)."""


# ---------------------------------------------------------------- field checks

def validate_topic(topic: Any, field: str = "topic") -> str:
    """RocketMQ's TopicValidator rules (§9.4); the NameServer itself skips them, we do not."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidInput(f"{field} must be a non-blank string")
    limit = RETRY_DLQ_MAX_LENGTH if topic.startswith(("%RETRY%", "%DLQ%")) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise InvalidInput(f"{field} '{topic[:40]}...' is longer than {limit} characters")
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidInput(f"{field} '{topic}' contains characters outside [%|a-zA-Z0-9_-]")
    return topic


def validate_broker_topic(topic: Any, field: str = "topic") -> str:
    """What a broker may register (§9.4): RocketMQ's NameServer takes any name, and 5.x brokers
    create topics named after their cluster and broker names (`broker1.example.com`), POP retry
    topics with `+`. Only blank, over-long or control-character names are refused."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidInput(f"{field} must be a non-blank string")
    if len(topic) > RETRY_DLQ_MAX_LENGTH:
        raise InvalidInput(f"{field} '{topic[:40]}...' is longer than {RETRY_DLQ_MAX_LENGTH} characters")
    if _CONTROL_RE.search(topic):
        raise InvalidInput(f"{field} {topic[:40]!r} contains control characters")
    return topic


def validate_name(value: Any, field: str) -> str:
    """Cluster, broker and KV names: printable identifiers, so they are safe in paths and predicates."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty string")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidInput(f"{field} is longer than {NAME_MAX_LENGTH} characters")
    if not _NAME_RE.fullmatch(value):
        raise InvalidInput(f"{field} '{value}' contains characters outside [a-zA-Z0-9_.:%|-]")
    return value


def validate_addr(value: Any, field: str) -> str:
    """A `host:port` address, as brokers announce themselves; IPv6 hosts in brackets (`[::1]:10911`)."""
    if not isinstance(value, str) or ":" not in value:
        raise InvalidInput(f"{field} must be a 'host:port' string")
    host, _, port = value.rpartition(":")
    if not host or not (_HOST_RE.fullmatch(host) or _IPV6_RE.fullmatch(host)) or len(value) > 255:
        raise InvalidInput(f"{field} '{value}' has an invalid host")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(f"{field} '{value}' has an invalid port")
    return value


def int_in_range(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be an integer")
    if not lo <= value <= hi:
        raise InvalidInput(f"{field}={value} is outside {lo}..{hi}")
    return value


def required(obj: Mapping[str, Any], field: str) -> Any:
    if obj.get(field) is None:
        raise InvalidInput(f"missing required field '{field}'")
    return obj[field]


def data_version(raw: Any, field: str = "dataVersion") -> dict[str, int]:
    if raw is None:
        return {"timestamp": 0, "counter": 0, "stateVersion": 0}
    if not isinstance(raw, dict):
        raise InvalidInput(f"{field} must be an object")
    out = {}
    for key in ("timestamp", "counter", "stateVersion"):
        value = raw.get(key, 0)
        out[key] = int_in_range(0 if value is None else value, f"{field}.{key}", 0, 2**63 - 1)
    return out


# (field, TopicConfig's default, lowest, highest) of a queue's numbers, in the order they are checked
_QUEUE_FIELDS = (("readQueueNums", DEFAULT_QUEUE_NUMS, 0, MAX_QUEUE_NUMS),
                 ("writeQueueNums", DEFAULT_QUEUE_NUMS, 0, MAX_QUEUE_NUMS),
                 ("perm", DEFAULT_PERM, 0, 7), ("topicSysFlag", 0, 0, 2**31 - 1))


def queue_fields(raw: Mapping[str, Any], where: str | Callable[[], str]) -> dict[str, int]:
    """readQueueNums, writeQueueNums, perm, topicSysFlag with TopicConfig defaults, validated.
    `where` names the object in an error; a callable is called only then (a registration checks
    tens of thousands of these, and a name formatted for each cost more than the check)."""
    out: dict[str, int] = {}
    for name, default, lo, hi in _QUEUE_FIELDS:
        value = raw.get(name)
        if value is None:
            value = default
        elif type(value) is not int or not lo <= value <= hi:  # bool is not int here, as in int_in_range
            int_in_range(value, f"{where() if callable(where) else where}.{name}", lo, hi)
        out[name] = value
    return out


def _table_entry(topic: str) -> str:
    return f"topicConfigTable['{topic}']"


def topic_config_table(raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidInput("topicConfigTable must be an object keyed by topic")
    table: dict[str, dict[str, Any]] = {}
    for topic, cfg in raw.items():
        validate_broker_topic(topic, "topicConfigTable key")
        if not isinstance(cfg, dict):
            raise InvalidInput(f"topicConfigTable['{topic}'] must be an object")
        if not cfg.keys() <= TOPIC_CONFIG_FIELDS:
            extra = sorted(set(cfg) - TOPIC_CONFIG_FIELDS)
            raise InvalidInput(f"topicConfigTable['{topic}'] has unknown field(s) {', '.join(extra)}")
        name = cfg.get("topicName", topic)
        if name != topic:
            raise InvalidInput(f"topicConfigTable['{topic}'].topicName is '{name}', not its key")
        entry = queue_fields(cfg, partial(_table_entry, topic))
        order = cfg.get("order", False)
        if not isinstance(order, bool):
            raise InvalidInput(f"topicConfigTable['{topic}'].order must be a boolean")
        entry["order"] = order
        table[topic] = entry
    return table


def chunk(raw: Any) -> tuple[int, int] | None:
    """{"index": i, "count": n} of a chunked registration, as (i, n); absent = not chunked."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"index", "count"}:
        raise InvalidInput("chunk must be an object with exactly the fields index and count")
    count = int_in_range(raw["count"], "chunk.count", 1, MAX_CHUNKS)
    return int_in_range(raw["index"], "chunk.index", 0, count - 1), count


def repeats(raw: Any) -> dict[str, Any] | None:
    """{"offsets": [...], "topicKeys": hex} of a repeated registration (absent: a full one): the
    log offsets, in this record's partition, of the full registration it repeats (one, or its
    chunks in order), and the digest of that registration's topic names."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"offsets", "topicKeys"}:
        raise InvalidInput("repeats must be an object with exactly the fields offsets and topicKeys")
    offsets = raw["offsets"]
    if not isinstance(offsets, list) or not 1 <= len(offsets) <= MAX_CHUNKS:
        raise InvalidInput(f"repeats.offsets must be a list of 1 to {MAX_CHUNKS} log offsets")
    out = [int_in_range(o, "repeats.offsets[]", 0, 2**63 - 1) for o in offsets]
    keys = raw["topicKeys"]
    if not isinstance(keys, str) or len(keys) != 32 or any(c not in "0123456789abcdef" for c in keys):
        raise InvalidInput("repeats.topicKeys must be 32 lowercase hex digits")
    return {"offsets": out, "topicKeys": keys}


def addr_list(raw: Any, field: str) -> list[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidInput(f"{field} must be a list of addresses")
    return [validate_addr(a, f"{field}[{i}]") for i, a in enumerate(raw)]
