"""Which records only keep a broker alive: RocketMQ's liveness signals, told apart in the log.

RocketMQ keeps liveness (`brokerLiveTable`) apart from the route tables: a BROKER_HEARTBEAT
(904), a QUERY_DATA_VERSION (322) and, above all, the full REGISTER_BROKER that a broker with
default settings re-sends every `registerNameServerPeriod` (30 s, `forceRegister` true) with an
unchanged data version touch one small entry. Here every record still reaches the route rules in
log order, so a record's *outcome* never depends on this module; what depends on it is *when*
it is read: a liveness signal may wait for company (`liveness/admission.py`), a change is
served at once.

A REGISTER_BROKER is a liveness signal when the log shows that it cannot change the route
tables (`LivenessLedger.observe`):

- it is, field for field except its time, the previous registration of the same address in the
  same group (RocketMQ's `isBrokerTopicConfigChanged` is false and every other field it writes is
  equal: the two have one fingerprint, `liveness/fingerprint.py`), or a repeat the remoting
  front published small (`repeats`: it names the registration it repeats instead of carrying its
  topic table) that names that previous registration and writes the same shared fields;
- no record of that group came between that may make the same registration change something
  again: an UNREGISTER, an admin write (a deleted topic is re-added), a chunked registration,
  or another address's registration that takes a known address's broker id or moves what the
  group shares (its cluster, acting-master flag or zone: every registration writes them). A
  slave's or a master's own changes do not: a slave's registration never touches the topics
  and an address's registration writes only its own id, live entry and filter servers;
- neither this address nor any other address of the group seen in the log went silent for
  half its heartbeat timeout since: an expiry changes a group without a record in the log.

A group whose records made the ledger forget it (a change) stays known as changed, so that a
small repeat there is a change too. What the ledger cannot see (the group's state from before
the job started, an expiry of an address it never saw) can only make it call a change a liveness
signal; that record is then served up to NAMESRV_HEARTBEAT_DEFER_MS later than a change, with the
same outcome. The ledger is rebuilt from the log: it starts empty (a full registration is a change
until seen once; a small repeat of a group not seen yet is taken at the front's word, which
publishes one only for a registration its served cut shows), and is cleared whenever a batch
reads records it did not look at. `tests/expiry/test_liveness_oracle.py` holds it to the route
rules on random logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from liveness import fingerprint as fp
from schemas import events as ev
from schemas import json_codec


@dataclass
class _Address:
    fingerprint: bytes  # of its newest registration
    broker_id: Any
    last_signal_ms: int  # record time of its newest registration or heartbeat
    timeout_ms: int
    offset: int | None = None  # where its newest registration is in the log (a small repeat names it)


@dataclass
class _Group:
    # what every registration writes for the whole group; None: the group changed and the ledger
    # knows nothing of it until its next full registration
    shared: tuple[Any, ...] | None
    addresses: dict[tuple[str, str], _Address] = field(default_factory=dict)


_CHANGED = None


def _shared(raw: Mapping[str, Any]) -> tuple[Any, ...]:
    return raw.get("clusterName"), raw.get("enableActingMaster"), raw.get("zoneName")


@dataclass
class LivenessLedger:
    """Per broker group, its addresses' newest registration and liveness as the log shows them.

    `default_timeout_ms` is the job's NAMESRV_BROKER_TIMEOUT_MS (a registration without
    heartbeatTimeoutMillis)."""

    default_timeout_ms: int
    groups: dict[str, _Group] = field(default_factory=dict)

    def clear(self) -> None:
        self.groups.clear()

    def observe(self, key: str | None, event_type: str | None, value: bytes | None, record_time_ms: int,
                offset: int | None = None, fingerprint: bytes | None = None) -> bool:
        """Record one log record (in log order; `offset`: where it is in its partition;
        `fingerprint`: the one its producer computed on the request, `liveness.fingerprint`) and
        say whether it is only a liveness signal."""
        if key is None or not ev.is_broker_group(key):
            return False  # KV and runtime switches: changes, and no broker group of theirs
        if event_type == ev.BROKER_HEARTBEAT:
            return self._heartbeat(key, _decode(value), record_time_ms)
        if event_type == ev.REGISTER_BROKER:
            return self._registration(key, value, record_time_ms, offset, fingerprint)
        self._changed(key)  # an unregistration or an admin write
        return False

    def _changed(self, group: str) -> None:
        self.groups[group] = _Group(_CHANGED)

    def _heartbeat(self, group: str, raw: Mapping[str, Any] | None, now_ms: int) -> bool:
        if raw is not None:
            known = self.groups.get(group)
            entry = None if known is None else known.addresses.get((str(raw.get("clusterName")),
                                                                   str(raw.get("brokerAddr"))))
            if entry is not None and now_ms - entry.last_signal_ms >= entry.timeout_ms // 2:
                # it may have expired unseen (a heartbeat then refreshes nothing): the group's next
                # registrations may change it, and this heartbeat must not make them look fresh
                self._changed(group)
            elif entry is not None:
                entry.last_signal_ms = max(entry.last_signal_ms, now_ms)
        return True  # a heartbeat never changes the route tables (§4), even one the ledger cannot read

    def _registration(self, group: str, value: bytes | None, now_ms: int, offset: int | None,
                      given: bytes | None) -> bool:
        raw = _decode(value)
        if raw is not None and raw.get("repeats") is not None:
            return self._repeat(group, raw, now_ms)
        if raw is None or raw.get("chunk") is not None:
            self._changed(group)  # unreadable (the step dead-letters it) or a chunk
            return False
        address = (str(raw.get("clusterName")), str(raw.get("brokerAddr")))
        fingerprint = given or fp.of_event(raw)
        known = self.groups.get(group)
        previous = None if known is None else known.addresses.get(address)
        if known is not None and previous is not None and previous.fingerprint == fingerprint and _fresh(known, now_ms):
            previous.last_signal_ms = max(previous.last_signal_ms, now_ms)
            previous.offset = offset  # the same registration again, and the newest: what a repeat names
            return True
        self._learn(group, raw, fingerprint, now_ms, offset)
        return False

    def _learn(self, group: str, raw: Mapping[str, Any], fingerprint: bytes, now_ms: int, offset: int | None) -> None:
        """The address's registration is now `raw` (at `offset`): the group starts over when what it
        shares moved or another address held this broker id (the others may now register
        differently)."""
        address = (str(raw.get("clusterName")), str(raw.get("brokerAddr")))
        broker_id = raw.get("brokerId")
        known = self.groups.get(group)
        if known is None or known.shared != _shared(raw) or any(
                a.broker_id == broker_id for other, a in known.addresses.items() if other != address):
            known = self.groups[group] = _Group(_shared(raw))
        timeout = raw.get("heartbeatTimeoutMillis")
        timeout_ms = timeout if isinstance(timeout, int) and timeout > 0 else self.default_timeout_ms
        known.addresses[address] = _Address(fingerprint, broker_id, now_ms, timeout_ms, offset)

    def _repeat(self, group: str, raw: Mapping[str, Any], now_ms: int) -> bool:
        """A registration the remoting front published small: a liveness signal when it names the
        address's previous registration the ledger saw, with the group's shared fields and every
        address fresh; a change when the ledger saw the group and the repeat contradicts it (it
        names another registration, or one of an address the group no longer has: the step then
        reads its body and it may change the tables). A group not seen since the ledger started
        is taken at the front's word (it repeats what its served cut shows). Either way the ledger
        learns the address from it: once applied, the named registration is the address's, and
        the next repeat naming it is a signal (the front keeps publishing small repeats, so
        without this a group the ledger once doubted would stay a change at every repeat)."""
        known = self.groups.get(group)
        address = (str(raw.get("clusterName")), str(raw.get("brokerAddr")))
        named = raw["repeats"].get("offsets") if isinstance(raw["repeats"], dict) else None
        entry = None if known is None else known.addresses.get(address)
        if (known is not None and entry is not None and known.shared == _shared(raw) and entry.offset is not None
                and named == [entry.offset] and _fresh(known, now_ms)):
            entry.last_signal_ms = max(entry.last_signal_ms, now_ms)
            return True
        # its fingerprint is not known (no body): the next full registration of it is a change
        self._learn(group, raw, b"", now_ms, named[0] if isinstance(named, list) and len(named) == 1 else None)
        return known is None


def _fresh(group: _Group, now_ms: int) -> bool:
    """No address of the group went silent for half its timeout: none may have expired unseen."""
    return all(now_ms - a.last_signal_ms < a.timeout_ms // 2 for a in group.addresses.values())


def _decode(value: bytes | None) -> Mapping[str, Any] | None:
    if value is None:
        return None
    try:
        raw = json_codec.loads(value)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None

