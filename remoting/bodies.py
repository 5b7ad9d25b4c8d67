"""Request bodies brokers and mqadmin send a NameServer, decoded (pure).

RegisterBrokerBody arrives as fastjson text or, with `compressedRegister=true`, as a zlib
stream; 5.x brokers flag even the zlib stream `compressed=false` (a RocketMQ bug since RIP-32),
so the first bytes decide, not the flag: JSON starts with `{`, zlib with `0x78`. TopicConfigs
map explicitly onto the fields the event contract knows; anything else a broker adds is dropped
here, so a future getter cannot dead-letter every registration.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from remoting.protocol import V3_0_11, V5_0_0
from schemas import json_codec


class BodyError(ValueError):
    """A body that cannot be decoded; answered with SYSTEM_ERROR and the reason."""


# The most bytes one zlib.crc32 call is given: above 5 KiB zlib lets go of the interpreter lock,
# and taking it back on the front's loop waits behind its busy threads (as liveness.fingerprint's
# hash updates did). The CRC does not depend on the slicing.
CRC_HELD_BYTES = 5 * 1024


def crc32(body: bytes) -> int:
    """UtilAll.crc32: CRC-32 of the body as sent, masked to a non-negative int."""
    crc, view = 0, memoryview(body)
    for at in range(0, len(view), CRC_HELD_BYTES):
        crc = zlib.crc32(view[at:at + CRC_HELD_BYTES], crc)
    return crc & 0x7FFFFFFF


_UNQUOTED_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)')


def loads_lenient(text: bytes | str) -> Any:
    """JSON, also with fastjson's unquoted integer map keys (`{0:"a"}`), re-quoted outside strings."""
    try:
        return json_codec.loads(text)
    except json.JSONDecodeError:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        fixed = _UNQUOTED_KEY.sub(lambda m: m.group(1) or f'{m.group(2)}"{m.group(3)}"{m.group(4)}', text)
        return json.loads(fixed)


@dataclass(frozen=True)
class Registration:
    """What a REGISTER_BROKER body says: topic configs (event-contract fields), the broker's
    DataVersion, and its filter servers (None: an old body without the list, "leave them")."""

    topics: dict[str, dict[str, Any]]
    data_version: dict[str, int]
    filter_servers: list[str] | None


ZERO_VERSION = {"timestamp": 0, "counter": 0, "stateVersion": 0}


def decode_registration(body: bytes, *, version: int, compressed: bool) -> Registration:
    """RegisterBrokerBody (or, from brokers older than 3.0.11, a bare TopicConfigSerializeWrapper)."""
    if not body:
        return Registration({}, dict(ZERO_VERSION), [] if version >= V3_0_11 else None)
    try:
        if _is_zlib(body) or compressed:
            return _decode_compressed(_inflate(body), version)
        raw = loads_lenient(body)
    except (ValueError, UnicodeDecodeError, zlib.error, struct.error, RecursionError) as exc:
        raise BodyError(f"Failed to decode RegisterBrokerBody: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(raw, dict):
        raise BodyError("Failed to decode RegisterBrokerBody: not an object")
    if version < V3_0_11:
        wrapper, filters = raw, None
    else:
        wrapper = raw.get("topicConfigSerializeWrapper") or {}
        filters = raw.get("filterServerList")
        filters = [] if filters is None else filters
        if not isinstance(wrapper, dict) or not isinstance(filters, list):
            raise BodyError("Failed to decode RegisterBrokerBody: unexpected field types")
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise BodyError("Failed to decode RegisterBrokerBody: topicConfigTable is not an object")
    topics = {str(name): _topic_config(str(name), cfg) for name, cfg in table.items()}
    return Registration(topics, _data_version(wrapper.get("dataVersion")),
                        None if filters is None else [str(f) for f in filters])


def _is_zlib(body: bytes) -> bool:
    return len(body) >= 2 and body[0] == 0x78 and ((body[0] << 8) | body[1]) % 31 == 0


def _inflate(body: bytes) -> bytes:
    try:
        return zlib.decompress(body)
    except zlib.error:
        return zlib.decompress(body, -15)  # raw deflate, as rocketmq-rust writes it


def _decode_compressed(data: bytes, version: int) -> Registration:
    """RegisterBrokerBody.encode(true): int32-length-prefixed DataVersion JSON, a count of
    TopicConfig text forms (`name read write perm filterType [attributes]`), the filter-server
    JSON list and, from 5.0.0 on, static-topic mapping entries (read past, not used)."""
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise ValueError(f"length {n} exceeds the body")
        pos += 4 + n
        return data[pos - n:pos]

    dv = _data_version(loads_lenient(chunk()))
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    topics: dict[str, dict[str, Any]] = {}
    for _ in range(count):
        parts = chunk().decode("utf-8").split(" ")
        if len(parts) < 5:
            raise ValueError(f"TopicConfig text {' '.join(parts)[:80]!r} has fewer than 5 fields")
        name = parts[0]
        topics[name] = {"topicName": name, "readQueueNums": int(parts[1]), "writeQueueNums": int(parts[2]),
                        "perm": int(parts[3]), "topicSysFlag": 0, "order": False}
    filters = loads_lenient(chunk())
    if version >= V5_0_0 and pos < len(data):
        (mappings,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(mappings):
            chunk()
    return Registration(topics, dv, [str(f) for f in filters or []])


def _topic_config(name: str, cfg: Any) -> dict[str, Any]:
    if not isinstance(cfg, dict):
        raise BodyError(f"Failed to decode RegisterBrokerBody: TopicConfig of {name[:80]} is not an object")
    out: dict[str, Any] = {"topicName": cfg.get("topicName", name)}
    for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "order"):
        if cfg.get(key) is not None:
            out[key] = cfg[key]
    return out


def _data_version(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return dict(ZERO_VERSION)
    out = {}
    for key in ("timestamp", "counter", "stateVersion"):
        value = raw.get(key, 0)
        out[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return out


def data_version_or_none(body: bytes) -> dict[str, int] | None:
    """QUERY_DATA_VERSION's DataVersion body; absent (or JSON null) reads as "changed" (None).
    A body that is not a DataVersion object is a BodyError: RocketMQ's decode throws, it answers
    SYSTEM_ERROR and the broker's liveness is not refreshed."""
    if not body:
        return None
    try:
        raw = loads_lenient(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BodyError(f"DataVersion does not parse: {exc}"[:200]) from None
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BodyError("DataVersion must be a JSON object")
    return _data_version(raw)


def queue_datas(body: bytes) -> list[dict[str, Any]]:
    """REGISTER_TOPIC_IN_NAMESRV's TopicRouteData body: its queueDatas."""
    try:
        raw = loads_lenient(body) if body else {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BodyError(f"TopicRouteData does not parse: {exc}"[:200]) from None
    if raw is not None and not isinstance(raw, dict):
        raise BodyError("TopicRouteData must be a JSON object")
    qds = raw.get("queueDatas") if raw is not None else None
    if qds is None:
        return []
    if not isinstance(qds, list) or not all(isinstance(q, dict) for q in qds):
        raise BodyError("queueDatas must be a list of QueueData objects")
    return qds


# ---------------------------------------------------------------- java.util.Properties text

def parse_properties(text: str) -> dict[str, str]:
    """Properties.load's line format, as mqadmin writes it (`key=value` lines): `#`/`!` comments,
    `=`, `:` or blanks between key and value, backslash escapes and continuations."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continued(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        key, value = _split_property(line)
        out[key] = value
    return out


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    key: list[str] = []
    j = 0
    while j < len(line):
        c = line[j]
        if c == "\\" and j + 1 < len(line):
            key.append(line[j:j + 2])
            j += 2
            continue
        if c in "=: \t\f":
            break
        key.append(c)
        j += 1
    rest = line[j:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape("".join(key)), _unescape(rest)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return re.sub(r"\\u([0-9a-fA-F]{4})|\\(.)", lambda m: chr(int(m.group(1), 16)) if m.group(1) else
                  {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(m.group(2), m.group(2)), text)


def format_properties(values: dict[str, str]) -> bytes:
    """GET_NAMESRV_CONFIG's body: sorted `key=value` lines."""
    return "".join(f"{k}={v}\n" for k, v in sorted(values.items())).encode("utf-8")


# ---------------------------------------------------------------- encoding (as a Java broker does)

def encode_registration(topics: dict[str, dict[str, Any]], data_version: dict[str, int], *,
                        compressed: bool = False, filter_servers: list[str] | None = None) -> bytes:
    """A RegisterBrokerBody as RegisterBrokerBody.encode(compressed) writes it (tests, benchmarks)."""
    filters = list(filter_servers or [])
    if not compressed:
        configs = {name: {"attributes": {}, "order": cfg.get("order", False), "perm": cfg.get("perm", 6),
                          "readQueueNums": cfg.get("readQueueNums", 8), "topicFilterType": "SINGLE_TAG",
                          "topicName": name, "topicSysFlag": cfg.get("topicSysFlag", 0),
                          "writeQueueNums": cfg.get("writeQueueNums", 8)} for name, cfg in topics.items()}
        wrapper = {"dataVersion": data_version, "mappingDataVersion": dict(ZERO_VERSION),
                   "topicConfigTable": configs, "topicQueueMappingDetailMap": {}, "topicQueueMappingInfoMap": {}}
        return json.dumps({"filterServerList": filters, "topicConfigSerializeWrapper": wrapper},
                          separators=(",", ":")).encode("utf-8")

    def prefixed(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    out = [prefixed(json.dumps(data_version).encode()), struct.pack(">i", len(topics))]
    for name, cfg in topics.items():
        text = f"{name} {cfg.get('readQueueNums', 8)} {cfg.get('writeQueueNums', 8)} {cfg.get('perm', 6)} SINGLE_TAG {{}}"
        out.append(prefixed(text.encode("utf-8")))
    out += [prefixed(json.dumps(filters).encode()), struct.pack(">i", 0)]
    return zlib.compress(b"".join(out), 9)
