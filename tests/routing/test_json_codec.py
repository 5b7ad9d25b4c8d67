"""schemas/json_codec.py against the standard library it stands in for: the same values, the same
errors, and the differences its docstring names."""

from __future__ import annotations

import json
import random
import string

import pytest

from schemas import events as ev
from schemas import json_codec
from schemas.fields import InvalidInput

CASES = [
    b'{"a":1}', b' {"a": [1, -2, 3.5, true, false, null]} \n', b'{"a":1,"a":2}', b'"\\u00e9\\u0000"', b'-0', b"-0.0",
    b"18446744073709551615", b"-9223372036854775808", b"1e308", b"0.1e1",
    # what orjson refuses, decoded or refused by the standard library as before
    b"NaN", b"Infinity", b"[-Infinity]", b"[1e999]", b'"\\ud800"', b"[" * 2000 + b"]" * 2000,
    b"", b"[1,]", b'{"a":1,}', b"0x10", b'"\t"', b"\xef\xbb\xbf{}", b'{"a":"\xff"}', b'{"a":1} x',
]


def _outcome(f, data):
    try:
        return "value", repr(f(data))
    except Exception as exc:  # the exception's type and text are what callers see
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("data", CASES)
def test_loads_gives_what_the_standard_library_gives(data):
    expected = _outcome(lambda d: json.loads(d.decode("utf-8")), data)
    assert _outcome(json_codec.loads, data) == expected
    if expected[0] != "UnicodeDecodeError":
        assert _outcome(json_codec.loads, data.decode("utf-8")) == expected


def test_loads_of_random_json_and_its_mutations_matches_the_standard_library():
    rng = random.Random(11)
    alphabet = string.printable + "é中😀"

    def value(depth):
        kind = rng.randrange(7 if depth < 4 else 4)
        return [lambda: rng.randint(-2**63, 2**64 - 1), lambda: rng.random() * 10 ** rng.randint(-5, 20),
                lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))), lambda: rng.choice([True, None]),
                lambda: [value(depth + 1) for _ in range(rng.randint(0, 4))],
                lambda: {"".join(rng.choice(alphabet) for _ in range(3)): value(depth + 1) for _ in range(3)},
                lambda: {"k": value(depth + 1)}][kind]()
    for _ in range(300):
        text = json.dumps(value(0)).encode("utf-8")
        for data in (text, text[:rng.randrange(len(text) + 1)], text.replace(b",", b"", 1), text + b"]"):
            assert _outcome(json_codec.loads, data) == _outcome(lambda d: json.loads(d.decode("utf-8")), data)


def test_an_integer_past_64_bits_reads_as_a_float_and_is_refused_either_way():
    assert json_codec.loads(b"18446744073709551616") == float(2**64)
    raw = {"type": ev.BROKER_HEARTBEAT, "clusterName": "c", "brokerName": "b", "brokerAddr": "10.0.0.1:1",
           "brokerId": 2**70}
    value = json.dumps(raw).encode()
    with pytest.raises(InvalidInput, match="brokerId must be an integer"):
        ev.parse_event(value, key="b", record_time_ms=1_700_000_000_000, max_message_bytes=1 << 20,
                       max_clock_skew_ms=10 ** 12)


def test_dumps_writes_the_standard_librarys_compact_json_but_utf8():
    event = {"type": "REGISTER_BROKER", "n": 2**63 - 1, "f": [1.5, -0.0, 0.1], "t": {"x": {"perm": 6}}, "b": None}
    assert json_codec.dumps(event) == json.dumps(event, separators=(",", ":")).encode()
    floats = [1e-7, 1e16, 5e-324, 123456.789]  # an exponent may be written otherwise (1e-7, not 1e-07): the same number
    assert json.loads(json_codec.dumps(floats)) == floats
    assert json_codec.dumps({"topic": "é中😀"}) == '{"topic":"é中😀"}'.encode()
    assert json_codec.dumps({0: "a"}) == b'{"0":"a"}'  # a non-string key, as json.dumps writes it
    assert json_codec.dumps({"big": 2**70}) == b'{"big":1180591620717411303424}'  # past orjson: the standard library
    for v in ({"topic": "é中😀"}, {"s": "\x00\u2028"}):
        assert json.loads(json_codec.dumps(v)) == v


def test_dumps_sorted_writes_the_standard_librarys_sorted_compact_text_exactly():
    """What the operator's state stores (a topic table) is compared as text, and what the fronts
    answer (`dumps_sorted_utf8`, non-ASCII as it is) is compared byte for byte with RocketMQ's
    answers: not one byte may differ from the standard library's."""
    def std(v):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)

    def std_utf8(v):
        return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")
    rng = random.Random(5)
    alphabet = string.printable + "\x7f\x00\x1fé中😀"

    def value(depth):
        kind = rng.randrange(6 if depth < 4 else 3)
        return [lambda: rng.choice([rng.randint(-2**63, 2**63 - 1), rng.randint(0, 1 << 20), 2**64 + 1]),
                lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))),
                lambda: rng.choice([True, False, None]),
                lambda: [value(depth + 1) for _ in range(rng.randint(0, 4))],
                lambda: {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))): value(depth + 1)
                         for _ in range(rng.randint(0, 4))},
                lambda: {f"%RETRY%G{rng.randint(0, 99)}": {"perm": 6, "readQueueNums": 1, "order": False}}][kind]()
    for _ in range(2000):
        v = value(0)
        assert json_codec.dumps_sorted(v) == std(v), v
        assert json_codec.dumps_sorted_utf8(v) == std_utf8(v), v
    table = {f"Topic{i}": {"writeQueueNums": 8, "readQueueNums": 8, "perm": 6, "topicSysFlag": 0, "order": False}
             for i in range(100, 0, -1)}
    assert json_codec.dumps_sorted(table) == std(table)
    for v in ({"é": 1, "e": 2}, {"a\x7f": 0}, {1: "int key", 0: "sorted as numbers"}):  # written by the standard library
        assert json_codec.dumps_sorted(v) == std(v)
        assert json_codec.dumps_sorted_utf8(v) == std_utf8(v)


def test_dumps_is_copied_to_its_size_and_dumps_text_is_its_text():
    """orjson's bytes keep the capacity its buffer grew to; `dumps`' may be held (a queued record)."""
    import tracemalloc
    table = {f"T-{i}": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "order": False} for i in range(100)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [json_codec.dumps(table) for _ in range(50)]
        per = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per < len(kept[0]) * 1.2, (per, len(kept[0]))
    assert json_codec.dumps_text(table) == kept[0].decode() == json.dumps(table, separators=(",", ":"))
    assert json_codec.dumps_text({"big": 2**70}) == '{"big":1180591620717411303424}'
