"""Malformed and unusual requests, sent byte for byte alike to RocketMQ's NameServer and to ours,
each on a fresh TCP connection, and what each side did with them compared.

An example is one request (a `Request`: a request code's well-formed base, then one mutation);
it names only things of its own (`bed.Universe` prefix), so one long-lived NameServer per side
serves every example. What is compared:
- whether an answer came, its response code and its remark's class (`remark_class`);
- whether the connection stayed open (a probe request sent right after it is answered);
- the route and KV state left behind (every read of the example's names, `bed.snapshot_of`);
- for reads answered with SUCCESS, the answer itself (normalised as the sequence bed does).

Both sides get the same bytes, signed with the tests' key pair: our front requires a signature
on admin writes, RocketMQ's NameServer (no ACL plugin) ignores the two extra fields.
Deliberate differences are named in `ALLOWED` and recognised by `allowed(...)`; the test counts
them and fails on anything else.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from remoting import acl, bodies, codes
from remoting.client import registration_request
from remoting.protocol import (
    JSON,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    ROCKETMQ,
    Command,
    FrameError,
    _ext_strings,
    _java_int,
    decode,
    next_frame,
)
from remoting.requests import LENIENT_SIGNALS
from tests.differential.bed import Side, Touched, Universe, differences, normalise, snapshot_of

# ------------------------------------------------------------------ deliberate differences

ALLOWED: dict[str, str] = {
    "strict-names": (
        "a name RocketMQ stores as given (empty, over its length, with characters no client can ask for) is "
        "refused here with SYSTEM_ERROR and the reason, and nothing is stored: our tables, HTTP paths and "
        "event log keys need names RocketMQ's own validators would accept (docs/semantics.md §15.5)"),
    "strict-numbers": (
        "a numeric header field that does not parse (brokerId `abc`) is null to RocketMQ, which then fails on "
        "it with a NullPointerException's text, or goes on with a default; here it is refused with "
        "SYSTEM_ERROR naming the field, and nothing is stored (docs/semantics.md §15.5)"),
    "unsigned-admin-write": (
        "admin writes must be signed here (NAMESRV_REMOTING_ACCESS_KEY); a request whose extFields are not an "
        "object (null, or \"\", which fastjson2 reads as null) carries no signature, so it is refused with "
        "NO_PERMISSION and changes nothing, where RocketMQ without its ACL plugin runs it"),
    "kv-null-value": (
        "PUT_KV_CONFIG without a value: RocketMQ stores a null that no GET_KV_CONFIG returns but that keeps the "
        "namespace listed (empty); it is refused here with SYSTEM_ERROR `value is null` and nothing is stored"),
    "altered-signed-request": (
        "a truncated frame completed by the next request's bytes is not the request that was signed: its "
        "signature fails here (NO_PERMISSION) and it changes nothing, where RocketMQ without its ACL plugin runs "
        "the altered request; both close the connection at the bytes after it"),
    "signed-config-allow-list": (
        "UPDATE_NAMESRV_CONFIG (318) changes only the four runtime switches here; RocketMQ sets any "
        "NamesrvConfig property that is not black-listed (and ignores keys it does not know), here such a "
        "request is refused with NO_PERMISSION and changes nothing (docs/semantics.md §15.5)"),
}

PROBE_KEY = "malformed-probe"
# the remarks of our validators (schemas/fields.py, schemas/events.py, remoting/requests.py)
_STRICT_NAME = re.compile(r"(must be a non-blank string|must be a non-empty string|is longer than \d+ characters|"
                          r"contains characters outside|contains control characters|has an invalid (host|port)|"
                          r"must be a 'host:port' string|must be a list of addresses|"
                          r"value must be a string of at most)")
_STRICT_NUMBER = re.compile(r"(is not an integer|missing required (header )?field|must be an integer|"
                            r"is outside -?\d+\.\.\d+)")
# remarks by class: a class names what the remark says, not its words (ours words several more precisely)
_REMARK_CLASSES = (
    (re.compile(r"^ request type -?\d+ not supported$"), "not-supported"),
    (re.compile(r"^crc32 not match$"), "crc"),
    (re.compile(r"^No topic route info in name server for the topic: "), "no-route"),
    (re.compile(r"^No config item, Namespace: "), "no-config"),
    (re.compile(r"^namespace or key is null$"), "kv-null"),
    (re.compile(r"^register broker failed$"), "register-failed"),
    (re.compile(r"^Can not update config in black list\.$"), "config-black-list"),
    (re.compile(r"^not set any response code$"), "not-set"),
    (re.compile(r"^disable$"), "disable"),
)


def remark_class(remark: str | None) -> str | None:
    if remark is None:
        return None
    return next((name for pattern, name in _REMARK_CLASSES if pattern.search(remark)), "other")


# ------------------------------------------------------------------ requests

@dataclass(frozen=True)
class Request:
    """One request before it is framed: a code's base fields and body, and how they are broken."""

    family: str  # the mutation, for the counts
    code: int
    ext: dict[str, Any] | None
    body: bytes = b""
    flag: int = 0
    serialize_type: int = JSON
    version: int = 513  # 5.5.0's MQVersion ordinal
    raw_header: bytes | None = None  # a JSON header replaced by these bytes
    header_fields: dict[str, Any] = field(default_factory=dict)  # JSON header fields overridden
    frame_edit: str | None = None  # "truncate", "header-beyond", "negative", "huge", "tiny"
    header_tail: bytes = b""  # bytes after the JSON header's object, inside its header length

    @property
    def expects_answer(self) -> bool:
        flag = _java_int(self.header_fields.get("flag", self.flag))  # as fastjson2 reads it, None: not at all
        return flag is not None and not flag & (ONEWAY_FLAG | RESPONSE_FLAG)


NOT_UTF8 = b"\xff"  # in an ext value (bytes): a byte that is not UTF-8, which Java decodes as U+FFFD


def server_reads(ext: dict[str, Any]) -> dict[str, str]:
    """extFields as the server reads them: bytes decoded as Java's new String(bytes, UTF_8) does,
    other values converted as fastjson2 converts them."""
    return _ext_strings({k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in ext.items()})


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def _rocketmq_header(code: int, version: int, opaque: int, flag: int, ext: dict[str, Any]) -> bytes:
    """RocketMQSerializable's layout (protocol._rocketmq_header), with values given as bytes kept
    byte for byte."""
    entries = b"".join(struct.pack(">h", len(_raw(k))) + _raw(k) + struct.pack(">i", len(_raw(v))) + _raw(v)
                       for k, v in ext.items())
    return struct.pack(">hbhiii", code, 0, version, opaque, flag, 0) + struct.pack(">i", len(entries)) + entries


def frame(req: Request, opaque: int, keys: tuple[str, str]) -> bytes:
    """The request's bytes, signed with `keys` where its extFields decode to strings."""
    ext = req.header_fields.get("extFields", req.ext)
    if isinstance(ext, dict):  # signed over the values as the server reads them (numbers as their text)
        signed = acl.sign(server_reads(ext), req.body, *keys)
        ext = {**ext, acl.ACCESS_KEY: signed[acl.ACCESS_KEY], acl.SIGNATURE: signed[acl.SIGNATURE]}
    if req.serialize_type == ROCKETMQ:
        header = _rocketmq_header(req.code, req.version, opaque, req.flag, ext or {})
        stype = ROCKETMQ
    elif req.raw_header is not None:
        header, stype = req.raw_header, JSON
    else:
        header, stype = _json_header(req, ext, opaque), req.serialize_type
    body = req.body
    out = struct.pack(">iI", 4 + len(header) + len(body), ((stype & 0xFF) << 24) | len(header)) + header + body
    if req.frame_edit == "truncate":
        return out[:max(5, len(out) - 3)]
    if req.frame_edit == "header-beyond":
        return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | (len(header) + len(body) + 9)) \
            + header + body
    if req.frame_edit == "negative":
        return struct.pack(">i", -5) + out[4:]
    if req.frame_edit == "huge":
        return struct.pack(">i", 16 * 1024 * 1024 + 1) + out[4:]
    if req.frame_edit == "tiny":
        return struct.pack(">i", 2) + out[4:]
    return out


def _json_header(req: Request, ext: Any, opaque: int) -> bytes:
    """The request's JSON header: Java's field order, the request's overrides, ext values given as
    bytes (not UTF-8) written as they are, and the request's tail after the object."""
    h: dict[str, Any] = {"code": req.code}
    if ext is not None:
        h["extFields"] = ext
    h.update(flag=req.flag, language="JAVA", opaque=opaque, serializeTypeCurrentRPC="JSON", version=req.version)
    h.update(req.header_fields)
    if "extFields" in req.header_fields:
        h["extFields"] = ext
    raw: dict[str, bytes] = {}  # bytes values (not UTF-8) go in as they are, in place of a placeholder
    if isinstance(h.get("extFields"), dict):
        for i, (k, v) in enumerate(list(h["extFields"].items())):
            if isinstance(v, bytes):
                raw[f"@raw{i}@"] = v
                h["extFields"] = {**h["extFields"], k: f"@raw{i}@"}
    header = json.dumps(h, separators=(",", ":")).encode("utf-8")
    for placeholder, value in raw.items():
        header = header.replace(placeholder.encode(), value)
    return header + req.header_tail


# the base request of every code we answer, within the example's names
def base(u: Universe, code: int) -> tuple[dict[str, str] | None, bytes]:
    addr, name, cluster = u.addr(0, 0), u.broker(0), u.cluster(0)
    if code == codes.REGISTER_BROKER:
        topics = {u.topic(i): {"topicName": u.topic(i), "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                               "topicSysFlag": 0, "order": False} for i in (0, 1)}
        return registration_request(cluster=cluster, broker_name=name, broker_id=0, addr=addr,
                                    ha_addr=addr[:-1] + "2", topics=topics)
    if code == codes.UNREGISTER_BROKER:
        return {"brokerName": name, "brokerAddr": addr, "clusterName": cluster, "brokerId": "0"}, b""
    if code == codes.BROKER_HEARTBEAT:
        return {"clusterName": cluster, "brokerAddr": addr, "brokerName": name}, b""
    if code == codes.QUERY_DATA_VERSION:
        return ({"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "brokerId": "0"},
                json.dumps({"timestamp": 1, "counter": 1, "stateVersion": 0}).encode())
    if code in (codes.PUT_KV_CONFIG, codes.GET_KV_CONFIG, codes.DELETE_KV_CONFIG):
        ext = {"namespace": u.namespace, "key": u.topic(0)}
        return ({**ext, "value": "v"} if code == codes.PUT_KV_CONFIG else ext), b""
    if code == codes.GET_KVLIST_BY_NAMESPACE:
        return {"namespace": u.namespace}, b""
    if code in (codes.GET_ROUTEINFO_BY_TOPIC, codes.DELETE_TOPIC_IN_NAMESRV):
        return {"topic": u.topic(0)}, b""
    if code == codes.REGISTER_TOPIC_IN_NAMESRV:
        qd = [{"brokerName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}]
        return {"topic": u.topic(2)}, json.dumps({"queueDatas": qd, "brokerDatas": []}).encode()
    if code in (codes.WIPE_WRITE_PERM_OF_BROKER, codes.ADD_WRITE_PERM_OF_BROKER):
        return {"brokerName": name}, b""
    if code == codes.GET_TOPICS_BY_CLUSTER:
        return {"cluster": cluster}, b""
    if code == codes.GET_BROKER_MEMBER_GROUP:
        return {"clusterName": cluster, "brokerName": name}, b""
    if code == codes.UPDATE_NAMESRV_CONFIG:
        return {}, b"enableTopicList=true\n"
    return None, b""  # 106, 206, 304, 311-313, 319: no header


CODES = sorted(codes.REQUEST_CODES)
_field_value = st.sampled_from(["", " ", "x" * 300, "-1", "abc", "1.5", "99999999999999999999", "true",
                                "名字", "a/b", "%s", "\u0000"])
_json_value = st.sampled_from([0, -1, 1.5, True, None, [], {}, ["a"], {"a": 1}, 2**40])
_bodies = st.sampled_from([b"", b"{", b"null", b"[]", b"{}", b"\x00\xff\xfe", b"x" * 70_000, b'{"a":1}',
                           zlib.compress(b"not a registration")])


Draft = tuple[str, int, Any, bytes, dict[str, Any]]  # family, code, ext, body, Request's other fields


def _fields(draw: st.DrawFn, d: Draft) -> Draft:
    family, code, ext, body, kw = d
    names = sorted((ext or {}).keys())
    if not names:
        return d
    name = draw(st.sampled_from(names))
    if family == "missing-field":
        return family, code, {k: v for k, v in ext.items() if k != name}, body, kw
    value = {"empty-field": st.just(""), "oversized-field": st.sampled_from([256, 4096, 70_000]).map(lambda n: "y" * n),
             "odd-value": _field_value, "json-typed": _json_value}[family]
    return family, code, {**ext, name: draw(value)}, body, kw


def _body(draw: st.DrawFn, d: Draft) -> Draft:
    _, code, ext, body, kw = d
    kind = draw(st.sampled_from(["absent", "truncated", "garbage", "compressed-garbage", "crc-mismatch",
                                 "compressed-flag", "other-broker"]))
    ext = dict(ext or {})
    if kind == "absent":
        body = b""
    elif kind == "truncated":
        body = body[:len(body) // 2]
    elif kind == "garbage":
        body = draw(_bodies)
    elif kind == "compressed-garbage":
        body, ext["compressed"] = zlib.compress(b"\x00\x00\x00\x05hello"), "true"
    elif kind == "crc-mismatch":
        ext["bodyCrc32"] = "12345"
    elif kind == "compressed-flag":
        ext["compressed"] = "true"
    elif code == codes.REGISTER_BROKER:  # a body that disagrees with its header: another broker's topics
        body = base(Universe(kw.pop("n") + 500_000, (0, 0, 0)), code)[1]
        ext["bodyCrc32"] = str(bodies.crc32(body))
    kw.pop("n", None)
    return f"body-{kind}", code, ext, body, kw


_HEADER_RAW = {"not-json": b"{code:", "null": b"null", "array": b"[1,2]", "not-utf8": b'{"code":\xff}', "empty": b""}
_HEADER_FIELDS = {"ext-array": {"extFields": ["a"]}, "ext-string": {"extFields": "a"}, "code-string": {"code": "abc"},
                  "opaque-string": {"opaque": "x"}, "flag-string": {"flag": "x"}, "code-float": {}, "code-missing": {},
                  "code-decimal-text": {}, "code-bool": {"code": True}, "language-unknown": {"language": "FORTRAN"},
                  "language-number": {"language": 3}, "version-text": {"version": "V5_5_0"},
                  "flag-float": {"flag": 0.5}, "remark-number": {"remark": 5}, "ext-null": {"extFields": None},
                  "ext-nested": {"extFields": {"topic": {"a": 1}}}, "unknown-key": {"whatever": [1, 2]}}


def _header(draw: st.DrawFn, d: Draft) -> Draft:
    _, code, ext, body, kw = d
    kind = draw(st.sampled_from(sorted([*_HEADER_RAW, *_HEADER_FIELDS])))
    if kind in _HEADER_RAW:
        kw["raw_header"] = _HEADER_RAW[kind]
    elif kind == "code-missing":
        kw["raw_header"] = json.dumps({"extFields": ext, "flag": 0, "opaque": OPAQUE}).encode()
    elif kind == "code-float":
        kw["header_fields"] = {"code": code + 0.5}
    elif kind == "code-decimal-text":
        kw["header_fields"] = {"code": str(code)}
    else:
        kw["header_fields"] = _HEADER_FIELDS[kind]
    return f"header-{kind}", code, ext, body, kw


def _simple(draw: st.DrawFn, d: Draft) -> Draft:
    family, code, ext, body, kw = d
    if family == "one-way":
        kw["flag"] = ONEWAY_FLAG
    elif family == "rocketmq-binary":
        kw["serialize_type"] = ROCKETMQ
    elif family == "extra-field":
        ext = {**(ext or {}), draw(st.sampled_from(["extra", "brokerId", "topic", "__ZONE_NAME"])): draw(_field_value)}
    elif family == "version":
        kw["version"] = draw(st.sampled_from([0, 36, 37, 401, 412, 413, 479, 513, 9999, -1]))
    elif family == "unknown-code":
        code = draw(st.sampled_from([0, 1, 99, 107, 200, 218, 999, 32767, -1, 2**20]))
        kw["flag"] = draw(st.sampled_from([0, 0, ONEWAY_FLAG]))
    elif family == "flag":
        kw["flag"] = draw(st.sampled_from([RESPONSE_FLAG, RESPONSE_FLAG | ONEWAY_FLAG, 4, 8, 2**30]))
    elif family == "serialize-type":
        kw["serialize_type"] = draw(st.sampled_from([2, 3, 0x7F, 0xFF]))
    elif family == "frame":
        kw["frame_edit"] = draw(st.sampled_from(["truncate", "header-beyond", "negative", "huge", "tiny"]))
        family = f"frame-{kw['frame_edit']}"
    return family, code, ext, body, kw


# What fastjson2 lets follow a JSON header's object (RocketMQ answers): its whitespace (NUL, \b, \t, \n, \f,
# \r, space), comments, one comma, anything after its end-of-input character 0x1A; and what it does not
# (RocketMQ closes the connection, "input not end"): other characters, a second value, a second comma.
_TAILS = (b"\x00", b" ", b"\n", b"\x0c", b"\x00\x00", b",", b", ", b"/*c*/", b"//c", b"\x1a", b"\x1axyz",
          b"x", b"}", b"]", b"{}", b",,", b", x", b"\x00x", b"\x0b", b"\x01", b"\xff", b"/", b"/*c*/x")


def _tail(draw: st.DrawFn, d: Draft) -> Draft:
    _, code, ext, body, kw = d
    kw["header_tail"] = draw(st.sampled_from(_TAILS))
    return "header-tail", code, ext, body, kw


HEADER_FIELDS = ("code", "opaque", "flag", "language", "version", "serializeTypeCurrentRPC", "remark", "extFields")
# every JSON type, with the values fastjson2 reads differently: empty and blank text, text that is a
# number or starts with one, objects, arrays of one number, one text, none and two, null, booleans,
# fractions (cut), integers beyond int (fail), fractions beyond int (clamped)
_TYPED = {"empty-text": "", "blank-text": " ", "text": "abc", "number-text": "12", "fraction-text": "1.5",
          "number-then-char": "12x", "object": {}, "object-with-key": {"a": 1}, "empty-array": [],
          "number-array": [1], "text-array": ["a"], "null-array": [None], "two-array": [1, 2], "null": None,
          "true": True, "false": False, "fraction": 1.5, "negative": -1, "zero": 0, "int-overflow": 2**31,
          "huge-fraction": 1e300, "ordinal": 13, "past-ordinal": 14, "enum-name": "JSON"}


def _typed(draw: st.DrawFn, d: Draft) -> Draft:
    """A header field of RemotingCommand given as another JSON type (fastjson2 converts some, fails on others)."""
    _, code, ext, body, kw = d
    name = draw(st.sampled_from(HEADER_FIELDS))
    kind = draw(st.sampled_from(sorted(_TYPED)))
    value = _TYPED[kind]
    if name == "code" and kind in ("number-text", "number-array", "fraction"):  # the request's own code, typed
        value = {"number-text": str(code), "number-array": [code], "fraction": code + 0.5}[kind]
    if name == "extFields" and kind in ("object", "object-with-key"):
        value = {**(ext or {}), **value}  # the request's fields, with one more
    kw["header_fields"] = {name: value}
    return f"header-typed-{name}", code, ext, body, kw


# the requests that store nothing (lookups, and liveness signals that refresh an entry they find) and the
# names they look up; remoting.requests.LENIENT_SIGNALS names the signals, the reads have no validator to be lenient in
LOOKUP_NAMES = {codes.BROKER_HEARTBEAT: ("clusterName", "brokerAddr", "brokerName"),
                codes.QUERY_DATA_VERSION: ("clusterName", "brokerAddr", "brokerName", "brokerId"),
                codes.GET_ROUTEINFO_BY_TOPIC: ("topic",), codes.GET_KV_CONFIG: ("namespace", "key"),
                codes.GET_KVLIST_BY_NAMESPACE: ("namespace",), codes.GET_TOPICS_BY_CLUSTER: ("cluster",),
                codes.GET_BROKER_MEMBER_GROUP: ("clusterName", "brokerName")}
_ODD_NAMES = {"missing": None, "empty": "", "blank": " ", "object": {"a": 1}, "array": ["a", "b"], "number": 7,
              "null": None, "not-utf8": NOT_UTF8, "not-utf8-inside": b"ab\xc3(cd", "replacement-char": "\ufffd",
              "other-group": "-other"}


def _lookup(draw: st.DrawFn, d: Draft) -> Draft:
    """One name of a request that stores nothing, missing, empty, of another JSON type or not UTF-8
    (in the ROCKETMQ encoding, which Netty decodes with U+FFFD, or in JSON, where fastjson2 reads a
    lead byte with the bytes it announces and fails on a byte that cannot lead)."""
    _, code, ext, body, kw = d
    code = draw(st.sampled_from(sorted(LOOKUP_NAMES)))
    ext, body = base(Universe(kw["n"], (0, 0, 0)), code)
    ext = dict(ext or {})
    name = draw(st.sampled_from(LOOKUP_NAMES[code]))
    kind = draw(st.sampled_from(sorted(_ODD_NAMES)))
    value = _ODD_NAMES[kind]
    if kind == "missing":
        ext.pop(name, None)
    elif kind == "other-group":  # a valid name that does not hold the address: nothing to refresh either
        ext[name] = ext[name] + value
    else:
        ext[name] = value
    if isinstance(value, bytes) or (kind not in ("object", "array", "number", "null")
                                    and draw(st.booleans())):
        kw["serialize_type"] = draw(st.sampled_from([ROCKETMQ, ROCKETMQ, JSON]))
    if kw.get("serialize_type") == ROCKETMQ and not all(isinstance(v, (str, bytes)) for v in ext.values()):
        kw.pop("serialize_type")
    if code in (codes.BROKER_HEARTBEAT, codes.QUERY_DATA_VERSION) and draw(st.integers(0, 3)) == 0:
        kw["flag"] = ONEWAY_FLAG  # as 5.x brokers send them (nothing to compare but the connection)
    return f"lookup-{kind}", code, ext, body, kw


_MUTATIONS = {"missing-field": _fields, "empty-field": _fields, "oversized-field": _fields, "odd-value": _fields,
              "json-typed": _fields, "body": _body, "header": _header, "header-tail": _tail,
              "header-typed": _typed, "lookup": _lookup}
FAMILIES = ("well-formed", "well-formed", "one-way", "rocketmq-binary", "missing-field", "extra-field", "empty-field",
            "oversized-field", "odd-value", "json-typed", "body", "body", "version", "unknown-code", "flag",
            "serialize-type", "header", "frame", "header-tail", "header-typed", "header-typed", "lookup", "lookup")


@st.composite
def requests(draw: st.DrawFn, u: Universe) -> Request:
    """One request: a code's base (`base`), broken by one family's mutation."""
    code = draw(st.sampled_from(CODES))
    ext, body = base(u, code)
    family = draw(st.sampled_from(FAMILIES))
    family, code, ext, body, kw = _MUTATIONS.get(family, _simple)(draw, (family, code, ext, body, {"n": u.n}))
    kw.pop("n", None)
    return Request(family=family, code=code, ext=ext, body=body, **kw)


# ------------------------------------------------------------------ what one side did

@dataclass(frozen=True)
class Seen:
    answered: bool
    code: int | None
    remark: str | None
    open: bool
    answer: Command | None = None

    @property
    def comparable(self) -> tuple[Any, ...]:
        return self.answered, self.code, remark_class(self.remark), self.open


OPAQUE, PROBE_OPAQUE = 4242, 4243
# reads whose SUCCESS answers are compared (319's properties are each server's own settings)
COMPARED_READS = frozenset({
    codes.GET_KV_CONFIG, codes.GET_ROUTEINFO_BY_TOPIC, codes.GET_BROKER_CLUSTER_INFO,
    codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, codes.GET_KVLIST_BY_NAMESPACE, codes.GET_TOPICS_BY_CLUSTER,
    codes.GET_SYSTEM_TOPIC_LIST_FROM_NS, codes.GET_UNIT_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_TOPIC_LIST,
    codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, codes.GET_BROKER_MEMBER_GROUP})


def observe(addr: str, req: Request, u: Universe, keys: tuple[str, str], *, wait_s: float = 3.0) -> Seen:
    """Send the request, then a probe (GET_KV_CONFIG) on the same connection: the probe's answer
    says the connection is open; EOF says it was closed; silence until `wait_s` says it is open but
    waits for bytes (a partial frame). The request's own answer is awaited until the probe's, and a
    little after it when one is expected (RocketMQ answers from several executors)."""
    host, _, port = addr.rpartition(":")
    probe = frame(Request("probe", codes.GET_KV_CONFIG, {"namespace": u.namespace, "key": PROBE_KEY}), PROBE_OPAQUE,
                  keys)
    with socket.create_connection((host, int(port)), timeout=wait_s) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.sendall(frame(req, OPAQUE, keys))
            time.sleep(0.005)  # two writes, as two requests arrive (5.x waits for 12 bytes of a first write)
            s.sendall(probe)
        except OSError:
            return Seen(False, None, None, False)
        buf = bytearray()
        answer: Command | None = None
        probed, closed = False, False
        deadline = time.monotonic() + wait_s
        while not closed and time.monotonic() < deadline and not (probed and (answer or not req.expects_answer)):
            if probed:  # the probe came first: give the request's answer a moment
                deadline = min(deadline, time.monotonic() + 0.5)
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            buf += chunk
            while True:
                try:
                    found = next_frame(buf, 64 * 1024 * 1024)
                except FrameError:
                    found = None
                if found is None:
                    break
                raw, size = found
                del buf[:size]
                cmd = decode(raw)
                if cmd.opaque == PROBE_OPAQUE and not probed:
                    probed = True
                elif cmd.opaque == OPAQUE and answer is None:
                    answer = cmd
    if answer is None:
        return Seen(False, None, None, not closed)
    return Seen(True, answer.code, answer.remark, not closed, answer)


def touched_by(u: Universe) -> Touched:
    t = Touched()
    t.topics.update(u.topic(i) for i in (0, 1, 2))
    t.clusters.add(u.cluster(0))
    t.groups.add((u.cluster(0), u.broker(0)))
    t.addrs.add((u.cluster(0), u.addr(0, 0)))
    t.namespaces.add(u.namespace)
    t.keys.add(u.topic(0))
    return t


# ------------------------------------------------------------------ one example, both sides

@dataclass
class Tally:
    examples: int = 0
    alike: int = 0
    allowed: Counter[str] = field(default_factory=Counter)
    families: Counter[str] = field(default_factory=Counter)
    closed: int = 0  # examples where both sides closed the connection
    # names only RocketMQ stored (a write ours refused as strict-names): a later read of them differs
    refused_names: set[str] = field(default_factory=set)


_NAME_FIELDS = ("namespace", "key", "topic", "brokerName", "clusterName", "cluster")


def _names(req: Request) -> set[str]:
    return {v for k, v in server_reads(req.ext).items() if k in _NAME_FIELDS} if isinstance(req.ext, dict) else set()


def allowed(req: Request, java: Seen, ours: Seen, state_diff: dict[str, Any], tally: Tally) -> str | None:
    """The ALLOWED difference this is, or None. Each is recognised narrowly: RocketMQ accepted
    (or failed inside a handler) where ours refused with a reason, and the connection fate agrees;
    or a read names what only RocketMQ stored when ours refused an earlier write of it."""
    if req.code in COMPARED_READS and java.open == ours.open and _names(req) & tally.refused_names:
        return "strict-names"
    if java.open != ours.open or (java.answered != ours.answered and req.frame_edit != "truncate"):
        return None
    if not (ours.code == codes.SYSTEM_ERROR or ours.code == codes.NO_PERMISSION):
        return None
    remark = ours.remark or ""
    if ours.code == codes.NO_PERMISSION and remark.startswith("this request must be signed") \
            and req.header_fields.get("extFields", {}) in (None, ""):  # fastjson2 reads "" as null
        return "unsigned-admin-write"
    if req.code == codes.UPDATE_NAMESRV_CONFIG and ours.code == codes.NO_PERMISSION \
            and remark.startswith("Can not update config ") and not state_diff:
        return "signed-config-allow-list"
    if req.frame_edit == "truncate" and not java.open and not ours.open and ours.code == codes.NO_PERMISSION \
            and remark.startswith("the Signature does not match"):
        return "altered-signed-request"
    if ours.code != codes.SYSTEM_ERROR:
        return None
    if remark == "value is null" and req.code == codes.PUT_KV_CONFIG:
        return "kv-null-value"
    if req.code in LENIENT_SIGNALS:  # they store nothing: never strict (docs/semantics.md §15.5)
        return None
    if _STRICT_NUMBER.search(remark):
        return "strict-numbers"
    if _STRICT_NAME.search(remark):
        return "strict-names"
    return None


def compare(java_addr: str, ours_addr: str, req: Request, u: Universe, keys: tuple[str, str], tally: Tally,
            java: Side, ours: Side) -> str | None:
    """Send `req` to both sides; None if alike (or an allowed difference, counted), else the report."""
    tally.examples += 1
    tally.families[req.family] += 1
    seen_j = observe(java_addr, req, u, keys)
    seen_o = observe(ours_addr, req, u, keys)
    touched = touched_by(u)
    deadline = time.monotonic() + 3.0
    while True:
        state = differences(snapshot_of(java, u, touched), snapshot_of(ours, u, touched))
        if not state or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    answer_diff: Any = None
    if seen_j.answer is not None and seen_o.answer is not None and seen_j.code == seen_o.code == codes.SUCCESS \
            and req.code in COMPARED_READS:
        a, b = normalise(req.code, seen_j.answer, u), normalise(req.code, seen_o.answer, u)
        answer_diff = None if a == b else (a, b)
    if seen_j.comparable == seen_o.comparable and not state and answer_diff is None:
        tally.alike += 1
        if not seen_j.open:
            tally.closed += 1
        return None
    undo(java, req, seen_o)
    reason = allowed(req, seen_j, seen_o, state, tally)
    if reason is not None and answer_diff is not None and not _names(req) & tally.refused_names:
        reason = None  # an answer that differs is allowed only as the residue of a refused write
    if reason == "strict-names" and req.code not in COMPARED_READS:
        tally.refused_names |= _names(req)
    if reason is not None:
        tally.allowed[reason] += 1
        return None
    return (f"{req.family}: code {req.code} ext {_short(req.ext)} body {req.body[:80]!r} flag {req.flag} "
            f"serialize {req.serialize_type} version {req.version} header {req.header_fields or req.raw_header!r} "
            f"frame {req.frame_edit} tail {req.header_tail!r}\n  RocketMQ: {_seen(seen_j)}\n  ours:     {_seen(seen_o)}"
            + (f"\n  state: {state}" if state else "") + (f"\n  answer: {answer_diff}" if answer_diff else ""))


def _seen(s: Seen) -> str:
    return f"answered={s.answered} code={s.code} remark={(s.remark or '')[:160]!r} open={s.open}"


def _short(ext: Any) -> str:
    text = repr(ext)
    return text if len(text) < 300 else text[:300] + "…"


def undo(java: Side, req: Request, ours: Seen) -> None:
    """What RocketMQ stored from a write ours refused, under a name outside the example's prefix
    (an empty or oversized one), is removed, so a later example's reads do not meet it.
    Registrations need nothing: the closed connection unregisters them on both sides."""
    if ours.code == codes.SUCCESS or not isinstance(req.ext, dict):
        return
    ext = {k: v for k, v in server_reads(req.ext).items() if k in ("namespace", "key", "topic")}
    if req.code == codes.PUT_KV_CONFIG:
        java.admin.call(codes.DELETE_KV_CONFIG, ext)
    elif req.code == codes.REGISTER_TOPIC_IN_NAMESRV:
        java.admin.call(codes.DELETE_TOPIC_IN_NAMESRV, ext)

