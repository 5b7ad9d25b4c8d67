"""Which records only keep a broker alive: RocketMQ's liveness signals, told apart in the log.

RocketMQ keeps liveness (`brokerLiveTable`) apart from the route tables: a BROKER_HEARTBEAT
(904), a QUERY_DATA_VERSION (322) and, above all, the full REGISTER_BROKER that a broker with
default settings re-sends every `registerNameServerPeriod` (30 s, `forceRegister` true) with an
unchanged data version touch one small entry. Here every record still reaches the route rules in
log order, so a record's *outcome* never depends on this module; what depends on it is *when*
it is read: a liveness signal may wait for company (`pipelines/admission.py`), a change is
served at once.

A REGISTER_BROKER is a liveness signal when the log shows that it cannot change the route
tables (`LivenessLedger.observe`):

- it is a repeat the remoting front published small (`repeats`: it names the registration it
  repeats instead of carrying its topic table), or it is, field for field except its time, the
  previous registration of the same address in the same group (RocketMQ's
  `isBrokerTopicConfigChanged` is false and every other field it writes is equal);
- no record of that group came between that may make the same registration change something
  again: an UNREGISTER, an admin write (a deleted topic is re-added), a chunked registration,
  or another address's registration that takes a known address's broker id or moves what the
  group shares (its cluster, acting-master flag or zone: every registration writes them). A
  slave's or a master's own changes do not: a slave's registration never touches the topics
  and an address's registration writes only its own id, live entry and filter servers;
- neither this address nor any other address of the group seen in the log went silent for
  half its heartbeat timeout since: an expiry changes a group without a record in the log.

What the ledger cannot see (the group's state from before the job started, an expiry of an
address it never saw) can only make it call a change a liveness signal; that record is then
served up to NAMESRV_HEARTBEAT_DEFER_MS later than a change, with the same outcome. The ledger
is rebuilt from the log: it starts empty (everything is a change until seen once), and is
cleared whenever a batch reads records it did not look at.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import events as ev

# Fields of a REGISTER_BROKER that are not what it registers: the producer's claimed time.
_NOT_REGISTERED = frozenset({"timestamp"})


@dataclass
class _Address:
    fingerprint: bytes  # of its newest registration
    broker_id: Any
    last_signal_ms: int  # record time of its newest registration or heartbeat
    timeout_ms: int


@dataclass
class _Group:
    shared: tuple[Any, ...]  # what every registration writes for the whole group
    addresses: dict[tuple[str, str], _Address] = field(default_factory=dict)


@dataclass
class LivenessLedger:
    """Per broker group, its addresses' newest registration and liveness as the log shows them.

    `default_timeout_ms` is the job's NAMESRV_BROKER_TIMEOUT_MS (a registration without
    heartbeatTimeoutMillis)."""

    default_timeout_ms: int
    groups: dict[str, _Group] = field(default_factory=dict)

    def clear(self) -> None:
        self.groups.clear()

    def observe(self, key: str | None, event_type: str | None, value: bytes | None, record_time_ms: int) -> bool:
        """Record one log record (in log order) and say whether it is only a liveness signal."""
        if key is None or not ev.is_broker_group(key):
            return False  # KV and runtime switches: changes, and no broker group of theirs
        if event_type == ev.BROKER_HEARTBEAT:
            return self._heartbeat(key, _decode(value), record_time_ms)
        if event_type == ev.REGISTER_BROKER:
            return self._registration(key, value, record_time_ms)
        self.groups.pop(key, None)  # an unregistration or an admin write: the group changed
        return False

    def _heartbeat(self, group: str, raw: Mapping[str, Any] | None, now_ms: int) -> bool:
        if raw is not None:
            known = self.groups.get(group)
            entry = None if known is None else known.addresses.get((str(raw.get("clusterName")),
                                                                   str(raw.get("brokerAddr"))))
            if entry is not None:
                entry.last_signal_ms = max(entry.last_signal_ms, now_ms)
        return True  # a heartbeat never changes the route tables (§4), even one the ledger cannot read

    def _registration(self, group: str, value: bytes | None, now_ms: int) -> bool:
        raw = _decode(value)
        if raw is not None and raw.get("repeats") is not None:
            # published small by the remoting front because it repeats its address's previous
            # registration: a liveness signal like a heartbeat (one that needs its body after
            # all, the address having expired meanwhile, is served up to the deferral later)
            return self._heartbeat(group, raw, now_ms)
        if raw is None or raw.get("chunk") is not None:
            self.groups.pop(group, None)  # unreadable (the step dead-letters it) or a chunk: a change
            return False
        address = (str(raw.get("clusterName")), str(raw.get("brokerAddr")))
        timeout = raw.get("heartbeatTimeoutMillis")
        timeout_ms = timeout if isinstance(timeout, int) and timeout > 0 else self.default_timeout_ms
        fingerprint = _fingerprint(raw)
        shared = (raw.get("clusterName"), raw.get("enableActingMaster"), raw.get("zoneName"))
        known = self.groups.get(group)
        previous = None if known is None else known.addresses.get(address)
        if (known is not None and previous is not None and previous.fingerprint == fingerprint
                and all(now_ms - a.last_signal_ms < a.timeout_ms // 2 for a in known.addresses.values())):
            previous.last_signal_ms = max(previous.last_signal_ms, now_ms)
            return True
        broker_id = raw.get("brokerId")
        if known is None or known.shared != shared or any(
                a.broker_id == broker_id for other, a in known.addresses.items() if other != address):
            known = self.groups[group] = _Group(shared)  # the others may now register differently
        known.addresses[address] = _Address(fingerprint, broker_id, now_ms, timeout_ms)
        return False


def _decode(value: bytes | None) -> Mapping[str, Any] | None:
    if value is None:
        return None
    try:
        raw = json.loads(value)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None


def _fingerprint(raw: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in raw.items() if k not in _NOT_REGISTERED}
    return hashlib.blake2b(json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), digest_size=16).digest()
