"""A blocking remoting client (one connection, one request at a time): for tests, the benchmark
and operators' scripts. Java's own clients are what brokers and applications use."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from remoting import acl, bodies, codes
from remoting.protocol import JSON, Command, decode, encode_request


class RemotingClient:
    def __init__(self, addr: str, *, timeout_s: float = 10.0, serialize_type: int = JSON,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.serialize_type = serialize_type
        self.keys = (access_key, secret_key) if access_key and secret_key else None
        self._opaque = itertools.count(1)

    def send(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", *, oneway: bool = False) -> int:
        """Send one request (signed when the client has a key pair); returns its opaque."""
        opaque = next(self._opaque)
        fields = dict(ext or {})
        if self.keys is not None:
            fields = acl.sign(fields, body, *self.keys)
        self.sock.sendall(encode_request(code, opaque, ext=fields, body=body, oneway=oneway,
                                         serialize_type=self.serialize_type))
        return opaque

    def receive(self) -> Command:
        (length,) = struct.unpack(">i", self._exactly(4))
        return decode(self._exactly(length))

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> Command:
        opaque = self.send(code, ext, body)
        answer = self.receive()
        if answer.opaque != opaque:
            raise RuntimeError(f"answer to opaque {answer.opaque}, expected {opaque}")
        return answer

    def register_broker(self, **registration: Any) -> Command:
        """REGISTER_BROKER (103) as a 5.x broker sends it (see `registration_request`)."""
        return self.call(codes.REGISTER_BROKER, *registration_request(**registration))

    def _exactly(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def registration_request(*, cluster: str, broker_name: str, broker_id: int, addr: str,
                         topics: dict[str, dict[str, Any]], ha_addr: str | None = None,
                         data_version: dict[str, int] | None = None, compressed: bool = False,
                         acting: bool | None = False, filter_servers: list[str] | None = None,
                         ext: dict[str, str] | None = None) -> tuple[dict[str, str], bytes]:
    """A REGISTER_BROKER's header and body: body, CRC, header (`ext` adds or overrides; `acting`
    None leaves enableActingMaster out, as a 4.x broker does)."""
    body = bodies.encode_registration(topics, data_version or {"timestamp": 1, "counter": 1, "stateVersion": 0},
                                      compressed=compressed, filter_servers=filter_servers)
    fields = {"brokerName": broker_name, "brokerAddr": addr, "clusterName": cluster, "brokerId": str(broker_id),
              "compressed": "false", "bodyCrc32": str(bodies.crc32(body))}
    if acting is not None:
        fields["enableActingMaster"] = str(acting).lower()
    if ha_addr is not None:
        fields["haServerAddr"] = ha_addr
    return {**fields, **(ext or {})}, body
