"""JSON on the paths every registration takes: orjson, where it reads and writes what the
standard library does.

A registration crosses JSON five times on its way: the remoting front decodes the broker's body,
encodes the event and decodes it again to check it (`remoting.requests`), and the job's planner
(`liveness.ledger`) and its step decode it. In a 10,000 × 100 first-registration wave the
standard library's codec was 35 % of the front's CPU (py-spy --gil, 2026-11-28: decoding 18.7,
encoding 16.3), and the front was that wave's busiest process. orjson decodes a 100-topic event
in 54 µs instead of 132, the broker's 19 KB body in 56 instead of 177, and encodes the event in
13 instead of 178 (by hand, min of 7 × 200).

Where the two differ, and what this module does about it:
- `loads`: what orjson refuses (NaN and Infinity, a number past a float's range, a lone
  surrogate escape, nesting past 1,024 levels, bytes that are not UTF-8) goes to the standard
  library, which decodes it or fails exactly as before (bytes as UTF-8). One difference is kept:
  an integer literal outside 64 bits is read as a float (the standard library reads an int).
  Every integer of the event contract is range-checked inside 64 bits, so such a value is
  refused either way, as "must be an integer" instead of "outside lo..hi"; a RocketMQ broker
  writes Java longs and ints, never such a literal.
- `dumps`: non-ASCII characters are written as UTF-8, not as `\\u` escapes, and a float's
  exponent without padding (`1e-7`, not `1e-07`): the same JSON values to any reader, ours
  included (the contract's fields are integers and strings); what orjson cannot write (an
  integer past 64 bits) goes to the standard library.
- `dumps_sorted`: the standard library's bytes exactly, for what is stored and compared as text
  (a group's topic table in the operator's state): orjson's output is taken only when every byte
  of it is printable ASCII, where the two write the same; otherwise the standard library writes it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS  # a non-string key written as a string, as json.dumps does


def loads(data: bytes | str) -> Any:
    """`json.loads(data)` (bytes: decoded as UTF-8 first), faster: the same value or the same
    exception, but for the integers outside 64 bits above."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)


def dumps(value: Any) -> bytes:
    """`json.dumps(value, separators=(",", ":"))` as UTF-8, faster; non-ASCII unescaped."""
    try:
        # Copied to its size: orjson's bytes keep the capacity its buffer grew to (32 KB for 9 KB
        # of JSON, by tracemalloc), and an event's record is held while it waits to be published
        # and for its cut: in a 10,000 x 100 wave the front's PSS went from 187 to 471 MiB.
        return bytes(memoryview(orjson.dumps(value, option=_DUMPS_OPTIONS)))
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, or a type json knows how to write
        return json.dumps(value, separators=(",", ":")).encode("utf-8")


def dumps_text(value: Any) -> str:
    """`dumps` as text, for what is decoded soon after and not held (the step's rows to the sink):
    not copied to its size first, the text is a copy."""
    try:
        return orjson.dumps(value, option=_DUMPS_OPTIONS).decode("utf-8")
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def dumps_sorted(value: Any) -> str:
    """`json.dumps(value, separators=(",", ":"), sort_keys=True)`, the same text, faster, for values
    of strings, integers, booleans, None, lists and string-keyed dicts. orjson writes those as the
    standard library does whenever its output is printable ASCII: it writes non-ASCII characters
    and DEL unescaped, so such output is written again by the standard library. (A float would
    differ in its exponent, `1e16` for `1e+16`: no caller stores one, their values are validated
    integers and booleans.)"""
    out = _printable_sorted(value)
    return out.decode("ascii") if out is not None else json.dumps(value, separators=(",", ":"), sort_keys=True)


def _printable_sorted(value: Any) -> bytes | None:
    """orjson's sorted compact JSON of `value` when it is printable ASCII, where it is the
    standard library's byte for byte (with or without `ensure_ascii`); None otherwise (non-ASCII
    text, DEL, an integer past 64 bits, a key that is not a string)."""
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return out if out.isascii() and b"\x7f" not in out else None


def dumps_sorted_utf8(value: Any) -> bytes:
    """`json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)` as UTF-8, the
    same bytes, faster: what the remoting front and the HTTP server answer (`route_reads.encode_body`).
    orjson's output is taken when it is printable ASCII, where the two write the same; otherwise
    (non-ASCII text, which `ensure_ascii=False` writes as it is, or control characters) the
    standard library writes it. At 100,000 brokers a system topic's route names every broker: 20 MB,
    which the standard library encoded in 5.3 s and orjson in 0.3 s (by hand, the host loaded)."""
    out = _printable_sorted(value)
    if out is not None:
        return bytes(memoryview(out))  # copied to its size (see `dumps`): bodies are kept with their cut
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")
