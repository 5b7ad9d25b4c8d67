"""The remoting front's pure parts: frames and both header encodings, bodies, signatures."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
import zlib

import pytest

from liveness import fingerprint
from remoting import acl, bodies
from remoting.protocol import JSON, ROCKETMQ, FrameError, decode, encode_request, encode_response, next_frame

# RocketMQ's own numbers: a JSON request for 105 `TopicTest`, opaque 7, is 139 bytes
# (`00000087 00000083`); the same with a ROCKETMQ header is 49 bytes (`0000002d 01000029`).
JAVA_105 = (b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,'
            b'"serializeTypeCurrentRPC":"JSON","version":479}')


def test_requests_are_framed_as_java_frames_them():
    frame = encode_request(105, 7, ext={"topic": "TopicTest"})
    assert frame[:8].hex() == "0000008700000083" and frame[8:] == JAVA_105
    binary = encode_request(105, 7, ext={"topic": "TopicTest"}, serialize_type=ROCKETMQ)
    assert len(binary) == 49 and binary[:8].hex() == "0000002d01000029"


@pytest.mark.parametrize("stype", [JSON, ROCKETMQ])
def test_both_header_encodings_decode_to_the_same_command(stype):
    frame = encode_request(322, 42, ext={"brokerName": "b", "brokerId": "1"}, body=b"{}", oneway=True,
                           serialize_type=stype)
    found = next_frame(frame + b"\x00\x00")
    assert found is not None and found[1] == len(frame)
    cmd = decode(found[0])
    assert (cmd.code, cmd.opaque, cmd.oneway, cmd.ext, cmd.body, cmd.version, cmd.language) == (
        322, 42, True, {"brokerName": "b", "brokerId": "1"}, b"{}", 479, "JAVA")
    assert cmd.serialize_type == stype


def test_incomplete_frames_wait_and_bad_lengths_fail_at_once():
    frame = encode_request(105, 1, ext={"topic": "T"})
    assert next_frame(frame[:3]) is None and next_frame(frame[:-1]) is None
    for length in (0, 3, -1, 16 * 1024 * 1024 + 1):
        with pytest.raises(FrameError):
            next_frame(struct.pack(">i", length) + b"xxxx")
    assert next_frame(b"junk" + frame, start=4) == (frame[4:], len(frame))


@pytest.mark.parametrize("frame, reason", [
    (struct.pack(">I", 100) + b"{}", "exceeds the frame"),
    (struct.pack(">I", 2) + b"{x", "does not parse"),
    (struct.pack(">I", 2) + b"[]", "not an object"),
    (struct.pack(">I", 12) + b'{"code":"x"}', "32-bit integer"),
    (struct.pack(">I", (7 << 24) | 2) + b"{}", "unknown serialize type"),
    (struct.pack(">I", (1 << 24) | 5) + b"\x00\x69\x00\x01\xdf", "truncated"),
])
def test_undecodable_headers_are_frame_errors(frame, reason):
    with pytest.raises(FrameError, match=reason):
        decode(frame)


def test_ext_values_are_strings_as_java_sees_them():
    header = json.dumps({"code": 105, "extFields": {"a": 1, "b": True, "c": None, "d": [1], "e": "x"}}).encode()
    cmd = decode(struct.pack(">I", len(header)) + header)
    assert cmd.ext == {"a": "1", "b": "true", "d": "[1]", "e": "x"} and cmd.opaque == 0


def test_answers_are_json_with_fastjsons_field_order():
    frame = encode_response(9, 17, remark="r", body=b"B")
    cmd = decode(frame[4:])
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.body, cmd.language) == (17, 9, 1, "r", b"B", "JAVA")
    header = frame[8:-1]
    assert header == (b'{"code":17,"flag":1,"language":"JAVA","opaque":9,"remark":"r",'
                      b'"serializeTypeCurrentRPC":"JSON","version":513}')
    assert b'"extFields":{}' in encode_response(1, 0, ext={})  # a header class always has extFields


def test_registration_bodies_plain_zlib_and_raw_deflate():
    topics = {"T": {"readQueueNums": 4, "writeQueueNums": 2, "perm": 7}, "broker1.example.com": {}}
    dv = {"timestamp": 5, "counter": 6, "stateVersion": 0}
    plain = bodies.decode_registration(bodies.encode_registration(topics, dv), version=479, compressed=False)
    zipped_body = bodies.encode_registration(topics, dv, compressed=True)
    zipped = bodies.decode_registration(zipped_body, version=479, compressed=False)  # 5.x flags it false
    assert plain.data_version == zipped.data_version == dv
    for reg in (plain, zipped):
        assert reg.topics["T"]["readQueueNums"] == 4 and reg.topics["T"]["perm"] == 7 and reg.filter_servers == []
        assert set(reg.topics) == set(topics)
    raw = zlib.decompress(zipped_body)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw_deflate = deflater.compress(raw) + deflater.flush()
    assert bodies.decode_registration(raw_deflate, version=479, compressed=True).topics == zipped.topics
    old = bodies.decode_registration(json.dumps({"topicConfigTable": {"T": {}}}).encode(), version=36, compressed=False)
    assert old.filter_servers is None and set(old.topics) == {"T"}  # pre-3.0.11: leave filter servers
    assert bodies.decode_registration(b"", version=479, compressed=False).data_version == bodies.ZERO_VERSION
    with pytest.raises(bodies.BodyError, match="RegisterBrokerBody"):
        bodies.decode_registration(b"\x78\x9c garbage", version=479, compressed=False)


def test_fastjson_unquoted_keys_and_properties_text():
    assert bodies.loads_lenient('{"a":{0:"x:1",12:"{3:4}"}}') == {"a": {"0": "x:1", "12": "{3:4}"}}
    assert bodies.parse_properties("# c\n! c\na=1\nb : 2\nc 3\nd=x\\\n  y\ne=\\u0041\\t\n") == {
        "a": "1", "b": "2", "c": "3", "d": "xy", "e": "A\t"}
    assert bodies.format_properties({"b": "2", "a": "1"}) == b"a=1\nb=2\n"
    assert bodies.crc32(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF


@pytest.mark.parametrize("size", [0, 1, 2046, 2047, 2048, 5119, 5120, 5121, 3 * 5120 + 7, 100_000])
def test_checks_of_a_body_are_the_same_however_it_is_sliced(size):
    """The front feeds bodies to crc32 and the fingerprint in slices its interpreter lock is kept
    for (bodies.CRC_HELD_BYTES, fingerprint.HELD_BYTES): the result is the whole body's."""
    body = bytes((i * 7 + 3) % 251 for i in range(size))
    assert bodies.crc32(body) == zlib.crc32(body) & 0x7FFFFFFF
    whole = hashlib.blake2b(digest_size=16)
    for part in (json.dumps(sorted({"brokerName": "b"}.items()), separators=(",", ":")).encode(), b"453", body):
        whole.update(part)
    assert fingerprint.of_request({"brokerName": "b"}, 453, body) == whole.digest()


def test_acl_signature_matches_aclclientrpchooks():
    ext = {"namespace": "ns", "key": "k", "value": "v"}
    signed = acl.sign(ext, b"body", "ak", "sk")
    content = ("ak" + "k" + "ns" + "v").encode() + b"body"  # values sorted by key: AccessKey, key, namespace, value
    expected = base64.b64encode(hmac.new(b"sk", content, hashlib.sha1).digest()).decode()
    assert signed["Signature"] == expected and signed["AccessKey"] == "ak"
    assert acl.check(signed, b"body", "ak", "sk") is None
    assert "does not match" in (acl.check(signed, b"other", "ak", "sk") or "")
    assert "unknown AccessKey" in (acl.check(signed, b"body", "other", "sk") or "")
    assert "must be signed" in (acl.check(ext, b"", "ak", "sk") or "")
    zoned = {**signed, "__ZONE_NAME": "z", "__ZONE_MODE": "true"}  # added after signing by Java clients
    assert acl.check(zoned, b"body", "ak", "sk") is None


def test_broker_networks():
    nets = acl.parse_networks("127.0.0.0/8, ::1/128")
    assert acl.in_networks("127.0.0.1", nets) and acl.in_networks("::1", nets)
    assert acl.in_networks("::ffff:127.0.0.1", nets) and not acl.in_networks("10.0.0.1", nets)
    with pytest.raises(ValueError, match="not a network"):
        acl.parse_networks("10.0.0.0/8,nonsense")


def test_unsigned_brokers_are_accepted_only_when_allowed_and_a_signed_request_is_always_checked():
    nets, keys, ext = acl.parse_networks("127.0.0.0/8"), ("ak", "sk"), {"brokerName": "b", "brokerId": "0"}
    signed, forged = acl.sign(ext, b"body", "ak", "sk"), acl.sign(ext, b"body", "ak", "wrong")

    def refusal(fields, peer="127.0.0.1", *, keys=keys, unsigned_ok=False):
        return acl.broker_refusal(fields, b"body", peer, nets, keys, unsigned_ok=unsigned_ok)
    assert refusal(ext, keys=None) is None and refusal(signed) is None
    assert "must be signed" in (refusal(ext) or "")  # a 4.9 broker, by default
    assert refusal(ext, unsigned_ok=True) is None  # ... and with NAMESRV_REMOTING_UNSIGNED_BROKERS
    assert "does not match" in (refusal(forged, unsigned_ok=True) or "")
    assert "must be signed" in (refusal({**ext, "AccessKey": "ak"}, unsigned_ok=True) or "")  # half a signature
    assert "NAMESRV_REMOTING_BROKER_NETWORKS" in (refusal(ext, "10.0.0.1", keys=None, unsigned_ok=True) or "")


def test_remoting_settings_are_checked_by_variable():
    from conf import load_config
    from remoting.__main__ import configuration_problem
    assert configuration_problem(load_config({})) is None
    bad = load_config({"NAMESRV_REMOTING_BROKER_NETWORKS": "10.0.0.0/8,x"})
    assert "NAMESRV_REMOTING_BROKER_NETWORKS" in (configuration_problem(bad) or "")
    half = load_config({"NAMESRV_REMOTING_ACCESS_KEY": "ak"})
    assert "set together" in (configuration_problem(half) or "")
    tiny = load_config({"NAMESRV_REMOTING_SOCKET_RCVBUF": "100"})
    assert "NAMESRV_REMOTING_SOCKET_RCVBUF=100" in (configuration_problem(tiny) or "")
    assert configuration_problem(load_config({"NAMESRV_REMOTING_SOCKET_RCVBUF": "0"})) is None


def _header(raw: bytes):
    return decode(struct.pack(">I", len(raw)) + raw)


_CORE = b'{"code":206,"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}'


@pytest.mark.parametrize("tail, answered", [
    (b"\x00", True), (b" ", True), (b"\x0c", True), (b"\x00\x00", True), (b",", True), (b", ", True),
    (b"/*c*/", True), (b"//c", True), (b"\x1a", True), (b"\x1axyz\xff", True),
    (b"x", False), (b"}", False), (b"{}", False), (b",,", False), (b", x", False), (b"\x00x", False),
    (b"\x0b", False), (b"\xff", False), (b"/", False), (b"/*c*/x", False),
])
def test_bytes_after_the_header_object_as_fastjson2_reads_them(tail, answered):
    """Seen from 5.5.0's NameServer: fastjson2 skips its whitespace (NUL included) and comments, one
    comma, and anything after its end-of-input character 0x1A; anything else is "input not end"."""
    if answered:
        cmd = _header(_CORE + tail)
        assert (cmd.code, cmd.opaque, cmd.version) == (206, 7, 479)
    else:
        with pytest.raises(FrameError, match=r"after its value|not UTF-8"):
            _header(_CORE + tail)
    assert _header(b"\x00 " + _CORE).code == 206  # and before it


@pytest.mark.parametrize("value, expected", [
    ('""', 0), ("{}", 0), ('{"a":1}', 0), ("null", 0), ("true", 1), ("false", 0), ("1.5", 1), ("-1.5", -1),
    ("1e300", 2**31 - 1), ("-3e9", -2**31), ('"12"', 12), ('"12x"', 12), ('"1.5"', 1), ('"1e2"', 100),
    ('"+5"', 5), ('"1e10"', 2**31 - 1), ("[1]", 1), ('["206"]', 206), ("[1.5]", 1), ("[2147483648]", -2**31),
    ('" "', None), ('"abc"', None), ('" 12"', None), ('"12  "', None), ('"0x10"', None), ('"2147483648"', None),
    ("2147483648", None), ("[]", None), ('["a"]', None), ("[1,2]", None), ("[null]", None), ("[true]", None),
    ("[{}]", None), ('["1.5"]', None),
])
def test_int_header_fields_of_every_json_type_as_fastjson2_converts_them(value, expected):
    """code, opaque, flag and version (5.5.0's RemotingCommand, read by fastjson2, seen with its jar)."""
    for name in ("code", "opaque", "flag", "version"):
        raw = f'{{"{name}":{value}}}'.encode()
        if expected is None:
            with pytest.raises(FrameError, match=f"{name} must be a 32-bit integer"):
                _header(raw)
        else:
            assert getattr(_header(raw), name) == expected


def test_language_serialize_type_remark_and_extfields_of_other_json_types():
    assert _header(b'{"code":1,"language":"FORTRAN"}').language == "FORTRAN"  # LanguageCode null in Java: fine
    assert _header(b'{"code":1,"language":null}').code == 1
    assert _header(b'{"code":1,"language":13.9}').language == "NODE_JS"  # an ordinal, cut
    for bad in (b'["a"]', b"{}", b"true", b"14", b"-1", b"1e2"):  # RocketMQ closes: no such LanguageCode
        with pytest.raises(FrameError, match="LanguageCode"):
            _header(b'{"code":1,"language":' + bad + b"}")
    for fine in (b'"XML"', b'""', b"null", b"1", b"0.5"):
        assert _header(b'{"code":1,"serializeTypeCurrentRPC":' + fine + b"}").code == 1
    for bad in (b"2", b"{}", b"[]", b"true"):
        with pytest.raises(FrameError, match="SerializeType"):
            _header(b'{"code":1,"serializeTypeCurrentRPC":' + bad + b"}")
    assert _header(b'{"code":1,"remark":{"a":1}}').remark == '{"a":1}'
    assert _header(b'{"code":1,"remark":["a"]}').remark == "a"
    assert _header(b'{"code":1,"remark":1e300}').remark == "1.0E300"
    assert _header(b'{"code":1,"extFields":""}').ext == {}  # fastjson2 reads "" as null
    for bad in (b'"a"', b"1", b"true", b"[]", b'["a"]'):
        with pytest.raises(FrameError, match="extFields"):
            _header(b'{"code":1,"extFields":' + bad + b"}")


@pytest.mark.parametrize("raw, expected", [
    (b"\xc3(", "\ufffd("), (b"ab\xc3(cd", "ab\ufffd(cd"), (b"\xe2((", "\ufffd(("), (b"\xc0\x80", "\ufffd\ufffd"),
    (b"\xc3\xa9", "\u00e9"), (b"\xff", None), (b"\x80", None), (b"a\x80b", None), (b"x\xc3", None),
])
def test_json_header_strings_that_are_not_utf8_as_fastjson2_reads_them(raw, expected):
    """A lead byte takes the bytes it announces and a sequence that is not UTF-8 is U+FFFD; a byte that
    cannot lead fails ("malformed input"), and so does a sequence that swallows the closing quote."""
    header = b'{"code":101,"extFields":{"key":"' + raw + b'"},"remark":"' + raw + b'"}'
    if expected is None:
        with pytest.raises(FrameError):
            _header(header)
    else:
        cmd = _header(header)
        assert cmd.ext == {"key": expected} and cmd.remark == expected


def test_rocketmq_header_strings_that_are_not_utf8_read_as_replacement_characters():
    frame = encode_request(904, 3, ext={"brokerAddr": "AB"}, serialize_type=ROCKETMQ)
    cmd = decode(frame[4:].replace(b"AB", b"A\xff"))  # Netty's readCharSequence: U+FFFD, as new String(b, UTF_8)
    assert cmd.ext == {"brokerAddr": "A\ufffd"}
