"""RocketMQ's remoting frames and command headers (pure): decoding requests, encoding answers.

A frame is `int32 length | int32 (serializeType << 24 | headerLength) | header | body`, the
length counting everything after itself. Headers come in two encodings, JSON (0, Java's
default) and ROCKETMQ (1, a binary layout the official benchmark tools switch to); a Java
NameServer decodes both and answers in its own configured encoding, JSON, whatever the request
used; so do we. Anything that does not decode is a `FrameError`: the caller closes that one
connection, as RocketMQ's NettyDecoder does.
"""

from __future__ import annotations

import decimal
import functools
import json
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any

JSON, ROCKETMQ = 0, 1
MAX_FRAME_BYTES = 16 * 1024 * 1024  # com.rocketmq.remoting.frameMaxLength's default
RESPONSE_FLAG, ONEWAY_FLAG = 1, 2
# MQVersion.Version ordinals that change how a NameServer reads or answers (see docs/remoting.md)
V3_0_11, V4_9_4, V5_0_0, V5_3_3, V5_5_0 = 37, 401, 413, 479, 513
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST", "NODE_JS")


_DECIMAL = re.compile(r"-?[0-9]+")


class FrameError(ValueError):
    """A frame that cannot be decoded; the connection it came on is closed."""


@dataclass
class Command:
    """One decoded request (or, in tests and the benchmark client, a response)."""

    code: int
    opaque: int
    flag: int = 0
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    version: int = 0
    language: str = "JAVA"
    remark: str | None = None
    serialize_type: int = JSON

    @property
    def oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def asked(self) -> Asked:
        return Asked(self.code, self.opaque, self.flag)


@dataclass(frozen=True, slots=True)
class Asked:
    """What answering a request needs of it: its code (for the metrics), opaque and flag. A write
    waiting for the served cut keeps this, not its Command, whose body it has decoded: held by
    10,000 registrations of 100 topics waiting together, the bodies (19 KB each) and their decoded
    events (49 KB) were most of the front's memory."""

    code: int
    opaque: int
    flag: int = 0

    @property
    def oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)


def next_frame(buf: bytearray | bytes, max_frame_bytes: int = MAX_FRAME_BYTES, start: int = 0) -> tuple[bytes, int] | None:
    """The first complete frame in `buf[start:]` (without its length field) and the bytes it
    used, or None while it is incomplete. A length below 4 or above the limit is a FrameError at
    once: waiting for 2 GiB that will never be accepted would only hold memory."""
    if len(buf) - start < 4:
        return None
    (length,) = struct.unpack_from(">i", buf, start)
    if length < 4 or length > max_frame_bytes:
        raise FrameError(f"frame length {length} is outside 4..{max_frame_bytes}")
    if len(buf) - start < 4 + length:
        return None
    return bytes(buf[start + 4:start + 4 + length]), 4 + length


def decode(frame: bytes) -> Command:
    """A frame's header and body (the frame without its leading length field)."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its header-length field")
    (mark,) = struct.unpack_from(">I", frame, 0)
    stype, header_len = mark >> 24, mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} exceeds the frame ({len(frame) - 4} bytes)")
    header = frame[4:4 + header_len]
    body = frame[4 + header_len:]
    if stype == JSON:
        cmd = _decode_json(header)
    elif stype == ROCKETMQ:
        cmd = _decode_rocketmq(header)
    else:
        raise FrameError(f"unknown serialize type {stype}")
    cmd.body = body
    cmd.serialize_type = stype
    return cmd


def _decode_json(header: bytes) -> Command:
    """A JSON header as fastjson2 reads it into RemotingCommand (5.5.0's `JSON.parseObject(bytes,
    RemotingCommand.class)`, seen on the wire; docs/remoting.md, "Malformed requests"). What every
    client sends takes the fast path: one `json.loads`, fields already of their types. Only a header
    that fails it is read again, leniently (`_lenient_json`)."""
    try:
        raw = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raw = _lenient_json(header)
    if not isinstance(raw, dict):
        raise FrameError("JSON header is not an object")
    ext = raw.get("extFields")
    if ext is not None and not isinstance(ext, dict):
        if ext != "":  # fastjson2 reads an empty string as null, anything else that is not an object fails
            raise FrameError("extFields is not an object")
        ext = None
    language = raw.get("language", "JAVA")
    if type(language) is not str:
        language = _language(language)
    if "serializeTypeCurrentRPC" in raw:
        _serialize_type(raw["serializeTypeCurrentRPC"])
    remark = raw.get("remark")
    return Command(code=_int(raw.get("code"), "code"), opaque=_int(raw.get("opaque"), "opaque"),
                   flag=_int(raw.get("flag"), "flag"), ext=_ext_strings(ext or {}),
                   version=_int(raw.get("version"), "version"), language=language,
                   remark=remark if remark is None or isinstance(remark, str) else _ext_strings({"r": remark}).get("r"))


# fastjson2's whitespace (JSONReader.SPACE, and NUL, which its UTF-8 reader skips as well), and its comments
_JSON_SPACE = r"(?:[\x00\x08\t\n\x0c\r ]|/\*.*?\*/|//[^\n]*(?:\n|\Z))*"
_LEADING = re.compile(_JSON_SPACE, re.S)
# what fastjson2 lets follow the object: space, at most one comma, and anything after its end-of-input
# character (EOI, 0x1A); anything else is "input not end" and the frame fails
_TRAILING = re.compile(_JSON_SPACE + "(?:," + _JSON_SPACE + ")?(?:\x1a.*)?", re.S)
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_RAW_DECODE = json.JSONDecoder().raw_decode


def _lenient_json(header: bytes) -> Any:
    """A header `json.loads` refused, as fastjson2 reads it: the object may be preceded and followed
    by its whitespace and comments, and followed by one comma or by bytes after an EOI character
    (`{"code":206,...}\x00` and `{...},` are answered by RocketMQ; `{...}x` closes the connection);
    the object itself must be UTF-8."""
    text = _fastjson_utf8(header)
    start = _LEADING.match(text).end()  # type: ignore[union-attr]  # matches the empty string at least
    try:
        raw, end = _RAW_DECODE(text, start)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise FrameError(f"JSON header does not parse: {exc}") from None
    if _NOT_UTF8.search(text, start, end):
        raise FrameError("JSON header is not UTF-8")
    if not _TRAILING.fullmatch(text, end):
        raise FrameError(f"JSON header has bytes after its value: {text[end:end + 20]!r}")
    return raw


_HIGH = re.compile(rb"[\x80-\xff]")


def _fastjson_utf8(header: bytes) -> str:
    """The header as fastjson2's UTF-8 reader sees it: a lead byte takes as many bytes after it as it
    announces, whatever they are, and a sequence that is not UTF-8 reads as U+FFFD (Java's decoder);
    a quote taken that way is part of the string. A byte that cannot lead (0x80-0xBF, 0xF8-0xFF), or a
    sequence cut by the header's end, becomes a lone surrogate: an error where the object holds it."""
    out: list[str] = []
    pos, end = 0, len(header)
    while (m := _HIGH.search(header, pos)) is not None:
        i = m.start()
        out.append(header[pos:i].decode("ascii"))
        lead = header[i]
        more = 1 if 0xC0 <= lead < 0xE0 else 2 if 0xE0 <= lead < 0xF0 else 3 if 0xF0 <= lead < 0xF8 else -1
        if more < 0 or i + 1 + more > end:
            out.append(chr(0xDC00 + lead))
            pos = i + 1
            continue
        group = header[i:i + 1 + more].decode("utf-8", "replace")
        out.append(group.replace("\\", "\\\\").replace('"', '\\"'))
        pos = i + 1 + more
    out.append(header[pos:].decode("ascii"))
    return "".join(out)


# text fastjson2 reads as a number into an int field: a number, then at most one other character
_NUMBER_TEXT = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?).?", re.S)
_INT_MIN, _INT_MAX = -2**31, 2**31 - 1


def _int(value: Any, name: str) -> int:
    """An int field of RemotingCommand as fastjson2 reads it: absent or null is 0 (Java's default),
    a fraction is cut and clamped to int's range (322.5 is 322, 1e300 is 2147483647), an integer
    beyond int's range fails, `true` is 1, an object is skipped (0), a one-element array is its
    number, text is the number it starts with ("" is 0); anything else fails the frame."""
    if type(value) is int and _INT_MIN <= value <= _INT_MAX:  # what every client sends
        return value
    out = _java_int(value)
    if out is None:
        raise FrameError(f"header field {name} must be a 32-bit integer, not {value!r}"[:200])
    return out


def _java_int(value: Any) -> int | None:
    if value is None or isinstance(value, dict):
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _INT_MAX else None
    if isinstance(value, float):
        return max(_INT_MIN, min(_INT_MAX, int(value))) if math.isfinite(value) else None
    if isinstance(value, str):
        return _java_int_of_text(value)
    if isinstance(value, list) and len(value) == 1:
        return _java_int_of_element(value[0])
    return None


def _java_int_of_text(value: str) -> int | None:
    if value == "":
        return 0
    m = _NUMBER_TEXT.fullmatch(value)
    if m is None:
        return None
    number = m.group(1)
    return _java_int(int(number) if _DECIMAL.fullmatch(number.lstrip("+")) else float(number))


def _java_int_of_element(item: Any) -> int | None:
    """A one-element array's element, read as a long and cast to int (which wraps)."""
    if isinstance(item, float) and not isinstance(item, bool):
        return _java_int(item)
    if isinstance(item, str) and re.fullmatch(r"[+-]?[0-9]+", item):
        item = int(item)
    if type(item) is not int or not -2**63 <= item < 2**63:
        return None
    return (item + 2**31) % 2**32 - 2**31


def _language(value: Any) -> str:
    """`language` that is not text (LanguageCode, an enum): null is null (JAVA here), a number is
    the constant of that ordinal (a fraction cut); anything else, or an ordinal out of range, fails."""
    if value is None:
        return "JAVA"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ordinal = _java_int(value)
        if ordinal is not None and 0 <= ordinal < len(LANGUAGES):
            return LANGUAGES[ordinal]
    raise FrameError(f"language {value!r} is not a LanguageCode"[:200])


def _serialize_type(value: Any) -> None:
    """`serializeTypeCurrentRPC` (SerializeType, an enum; ignored once read): text or null is
    accepted, a number must be the ordinal 0 or 1 (a fraction cut); anything else fails."""
    if value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _java_int(value) in (0, 1):
        return
    raise FrameError(f"serializeTypeCurrentRPC {value!r} is not a SerializeType"[:200])


def _ext_strings(ext: dict[str, Any]) -> dict[str, str]:
    """extFields as Java sees them, a Map<String,String>, converted as fastjson2 does (seen on
    the wire from 5.5.0): numbers and booleans become their text, nulls are dropped, a
    one-element array of a string or null is that element, other arrays and objects their
    compact JSON text."""
    if all(type(value) is str for value in ext.values()):  # what every client sends: nothing to convert
        return ext
    out: dict[str, str] = {}
    for key, value in ext.items():
        if isinstance(value, list) and len(value) == 1 and (value[0] is None or isinstance(value[0], str)):
            value = value[0]
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str):
            out[key] = value
        elif isinstance(value, float):
            out[key] = _java_double(value)
        elif isinstance(value, int):
            out[key] = str(value)
        else:
            out[key] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return out


def _java_double(x: float) -> str:
    """Double.toString's text (fastjson2 writes a JSON fraction into a String this way)."""
    if x == 0 or not math.isfinite(x):
        return "0.0" if x == 0 else str(x)
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)
    d = decimal.Decimal(repr(x))  # the shortest digits that read back as x, as Java's
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:] or '0'}E{d.adjusted()}"


def _decode_rocketmq(header: bytes) -> Command:
    """RocketMQSerializable's layout: code(int16) language(int8) version(int16) opaque(int32)
    flag(int32) remark(int32 len + UTF-8) ext(int32 len + {int16 len key, int32 len value}*).
    A string of length 0 is null, as in Java."""
    try:
        code, lang, version, opaque, flag = struct.unpack_from(">hbhii", header, 0)
        pos = 13
        remark, pos = _string(header, pos, 4)
        (ext_len,) = struct.unpack_from(">i", header, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > len(header):
            raise FrameError(f"extFields length {ext_len} exceeds the header")
        end = pos + ext_len
        ext: dict[str, str] = {}
        while pos < end:
            key, pos = _string(header, pos, 2, end)
            value, pos = _string(header, pos, 4, end)
            if key is not None and value is not None:
                ext[key] = value
    except struct.error:
        raise FrameError("ROCKETMQ header is truncated") from None
    language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return Command(code=code, opaque=opaque, flag=flag, ext=ext, version=version, language=language, remark=remark)


def _string(buf: bytes, pos: int, width: int, end: int | None = None) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h" if width == 2 else ">i", buf, pos)
    pos += width
    limit = len(buf) if end is None else end
    if n < 0 or pos + n > limit:
        raise FrameError(f"string length {n} exceeds the header")
    if n == 0:
        return None, pos
    # Netty's readCharSequence: bytes that are not UTF-8 become U+FFFD, as Java's new String(bytes, UTF_8)
    return buf[pos:pos + n].decode("utf-8", "replace"), pos + n


# ---------------------------------------------------------------- encoding

def encode_response(opaque: int, code: int, *, remark: str | None = None, ext: dict[str, str] | None = None,
                    body: bytes | memoryview = b"") -> bytes:
    """An answer as a Java NameServer of the newest line (5.5.0) writes it: a JSON header with
    fastjson2's field order (alphabetical, nulls omitted) and escaping (Python's with
    ensure_ascii off is byte for byte the same), `language` JAVA, the response flag set."""
    return _response_head(opaque, code, remark, ext, len(body)) + body


def encode_response_parts(opaque: int, code: int, *, remark: str | None = None, ext: dict[str, str] | None = None,
                          body: bytes | memoryview = b"") -> tuple[bytes, bytes | memoryview]:
    """`encode_response` as (everything before the body, the body itself): a body shared by many
    answers (a cut's cluster info, pre-encoded once; any body of the shared cut file, a view of
    its mapping) is then written as that one object, not copied into each answer."""
    return _response_head(opaque, code, remark, ext, len(body)), body


def _response_head(opaque: int, code: int, remark: str | None, ext: dict[str, str] | None, body_len: int) -> bytes:
    # fastjson2's order is alphabetical: code, extFields, flag, language, opaque, remark,
    # serializeTypeCurrentRPC, version. Built from pieces rather than one json.dumps per answer:
    # every read answer carries the same extFields (the cut's id) until the next cut, encoded once.
    head = b'{"code":%d' % code
    if ext is not None:
        head += b',"extFields":' + _ext_json(tuple(ext.items()))
    head += b',"flag":1,"language":"JAVA","opaque":%d' % opaque
    if remark is not None:
        head += b',"remark":' + json.dumps(remark, ensure_ascii=False).encode("utf-8")
    return _frame_head(JSON, head + b',"serializeTypeCurrentRPC":"JSON","version":%d}' % V5_5_0, body_len)


@functools.lru_cache(maxsize=256)
def _ext_json(items: tuple[tuple[str, str], ...]) -> bytes:
    """An answer's extFields as JSON, remembered: they repeat (a read's is the cut's id)."""
    return json.dumps(dict(items), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_request(code: int, opaque: int, *, ext: dict[str, str] | None = None, body: bytes = b"",
                   oneway: bool = False, serialize_type: int = JSON, version: int = V5_3_3,
                   language: str = "JAVA") -> bytes:
    """A request as a Java client writes it (for tests, the benchmark and the fuzzer)."""
    flag = ONEWAY_FLAG if oneway else 0
    if serialize_type == ROCKETMQ:
        return _frame(ROCKETMQ, _rocketmq_header(code, LANGUAGES.index(language), version, opaque, flag, None,
                                                 ext or {}), body)
    header: dict[str, Any] = {"code": code}
    if ext is not None:
        header["extFields"] = ext
    header.update(flag=flag, language=language, opaque=opaque, serializeTypeCurrentRPC="JSON", version=version)
    return _frame(JSON, json.dumps(header, separators=(",", ":")).encode("utf-8"), body)


def _rocketmq_header(code: int, lang: int, version: int, opaque: int, flag: int, remark: str | None,
                     ext: dict[str, str]) -> bytes:
    parts = [struct.pack(">hbhii", code, lang, version, opaque, flag)]
    r = (remark or "").encode("utf-8")
    parts.append(struct.pack(">i", len(r)) + r)
    entries = b"".join(struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
                       for k, v in ext.items())
    parts.append(struct.pack(">i", len(entries)) + entries)
    return b"".join(parts)


def _frame(stype: int, header: bytes, body: bytes) -> bytes:
    return _frame_head(stype, header, len(body)) + body


def _frame_head(stype: int, header: bytes, body_len: int) -> bytes:
    return struct.pack(">iI", 4 + len(header) + body_len, (stype << 24) | len(header)) + header
