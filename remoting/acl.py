"""RocketMQ's ACL request signature (AclClientRPCHook), checked on admin writes and broker codes.

RocketMQ 4.9 brokers cannot sign their NameServer requests (their BrokerOuterAPI has no RPC hook);
`broker_refusal` accepts them unsigned from the broker networks when the operator says so.

The signer adds `AccessKey` to the extFields, concatenates the values of all extFields sorted
by key (except `Signature`) as UTF-8, appends the body, and sends
`Signature = Base64(HmacSHA1(secretKey, that))`. mqadmin (conf/tools.yml) and the broker
(`innerClientAuthenticationCredentials`) sign this way with their standard settings.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
from collections.abc import Mapping

# the broker networks (NAMESRV_REMOTING_BROKER_NETWORKS), a tuple: `in_networks` remembers by it
Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

ACCESS_KEY, SIGNATURE, SECURITY_TOKEN = "AccessKey", "Signature", "SecurityToken"
# DynamicalExtFieldRPCHook runs after the ACL hook in Java clients, so zone fields are unsigned.
_UNSIGNED_BY_CLIENTS = ("__ZONE_NAME", "__ZONE_MODE")


def signature(ext: Mapping[str, str], body: bytes, secret_key: str) -> str:
    content = "".join(v for k, v in sorted(ext.items()) if k != SIGNATURE).encode("utf-8") + (body or b"")
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode("ascii")


def sign(ext: dict[str, str], body: bytes, access_key: str, secret_key: str) -> dict[str, str]:
    """`ext` with AccessKey and Signature added, as AclClientRPCHook does (tests, benchmarks)."""
    signed = {**ext, ACCESS_KEY: access_key}
    signed[SIGNATURE] = signature(signed, body, secret_key)
    return signed


def check(ext: Mapping[str, str], body: bytes, access_key: str, secret_key: str) -> str | None:
    """None if the request is signed with this key pair; else why not (the NO_PERMISSION remark)."""
    given_key, given_sig = ext.get(ACCESS_KEY), ext.get(SIGNATURE)
    if given_key is None or given_sig is None:
        return "this request must be signed (AccessKey and Signature, RocketMQ's ACL client hook)"
    if not hmac.compare_digest(given_key.encode(), access_key.encode()):
        return f"unknown AccessKey {given_key[:64]}"
    candidates = [dict(ext)]
    if any(k in ext for k in _UNSIGNED_BY_CLIENTS):
        candidates.append({k: v for k, v in ext.items() if k not in _UNSIGNED_BY_CLIENTS})
    for fields in candidates:
        if hmac.compare_digest(signature(fields, body, secret_key).encode(), given_sig.encode()):
            return None
    return "the Signature does not match the request (check the secret key)"


def broker_refusal(ext: Mapping[str, str], body: bytes, peer: str,
                   networks: Networks,
                   keys: tuple[str, str] | None, *, unsigned_ok: bool) -> str | None:
    """None if a broker request (register, unregister, heartbeat, data version) from `peer` is
    accepted; else why not (the NO_PERMISSION remark). It must come from `networks`; with a key pair
    it must be signed with it, unless `unsigned_ok` and it carries no signature at all (a signed
    request is always checked)."""
    if not in_networks(peer, networks):
        return f"broker requests are not accepted from {peer} (NAMESRV_REMOTING_BROKER_NETWORKS)"
    if keys is None or (unsigned_ok and ACCESS_KEY not in ext and SIGNATURE not in ext):
        return None
    return check(ext, body, *keys)


def parse_networks(text: str) -> Networks:
    """A comma-separated CIDR list (NAMESRV_REMOTING_BROKER_NETWORKS); raises ValueError naming the bad entry."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if item:
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"{item!r} is not a network (CIDR such as 127.0.0.0/8 or ::1/128)") from None
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def in_networks(host: str, networks: Networks) -> bool:
    """Remembered per (host, networks): a fleet sends from few hosts, and parsing the peer's address
    for each of its requests was a visible share of the front's loop at 100,000 brokers."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr in net for net in networks)
