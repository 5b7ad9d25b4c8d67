"""A bucket's hot liveness: its live entries' times as columns, moved by pure signals in one pass.

RocketMQ keeps `brokerLiveTable` apart from the route tables, and a liveness signal there costs a
lookup and a data-version compare. Here a bucket of broker groups (`pipelines/buckets.py`) keeps
each live entry (group, clusterName, brokerAddr) as one row of this table, apart from the groups'
route state: its times (`lastUpdateTimestamp`, what broker_live holds of it, since when that is
stale), its timeout, the log offset and header digest of its newest registration, and whether
repeating that registration is known to change nothing else. A batch's pure signals move the
times of their rows with numpy, for all groups of the bucket at once; a group's route state is
not decoded for them. Only the rows of a group flushed to broker_live are turned into Python
objects.

What is a pure signal here is decided on the data, never assumed (`absorb`): a heartbeat of a
group where nothing falls due, or a small repeat that names the registration its row holds, with
the same header, of a row whose registration is a fixed point of the group's rules (the bucket
verifies that with the rules, `Row.fixed`). Anything else runs the group's route rules, which
hand their live entries back as rows (`LiveTable.with_groups`). The times move exactly as
`routeinfo.route_writes.heartbeat` and `routeinfo.housekeeping` move them;
`tests/expiry/test_liveness_oracle.py` holds the two to the same tables on random logs.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas import json_codec

# the int64 columns, in this order
LAST, MAT, STALE, TIMEOUT, REG, FIXED = range(6)
_INTS = 6
_VERSION = "1"
# event fields that are not a registration's header: its time and place, and its body and how it
# is cut (a repeat's `repeats` names the body; the digest takes the body's topic names instead)
_NOT_HEADER = frozenset({"time", "logOffset", "topicConfigTable", "repeats", "chunk", "timestamp"})


def header_digest(event: Mapping[str, Any], topic_keys: str) -> str:
    """Of a normalised REGISTER_BROKER (whole, chunk or small repeat) whose topic names digest to
    `topic_keys` (`routeinfo.state.topic_keys_digest`; a repeat's `repeats.topicKeys`): everything
    it writes but its topic table's contents and its time. A small repeat with its registration's
    digest repeats it field for field, its topic names included (with other names the rules would
    read the body, and refuse it)."""
    header = {k: v for k, v in event.items() if k not in _NOT_HEADER}
    header["topicKeys"] = topic_keys
    return hashlib.blake2b(json_codec.dumps_sorted(header).encode(),
                           digest_size=12).hexdigest()


@dataclass(frozen=True)
class Signal:
    """A record that may only keep a broker alive, parsed, at its receive time."""

    cluster: str
    addr: str
    time: int
    registration: int | None = None  # a small repeat: the offset of the registration it names; None: a heartbeat
    digest: str = ""                 # a small repeat: its `header_digest`


@dataclass
class Row:
    """One live entry, as the route rules hand it over and take it back."""

    cluster: str
    addr: str
    statics: str  # JSON [brokerId, dataVersion, haServerAddr]: what a signal never changes
    digest: str   # `header_digest` of the registration at `registered`, "" if unknown
    last: int
    materialized: int
    stale_since: int
    timeout: int
    registered: int
    # repeating the registration at `registered` changes nothing but times: a verdict of the rules
    # under the settings and the rules of the job that made it (`LiveTable.verdicts`)
    fixed: bool


@dataclass(frozen=True)
class Call:
    """A group's signals of this batch, in log order, and the time it is expired at."""

    signals: list[Signal]
    expiry_ms: int


@dataclass(frozen=True)
class Outcome:
    """A group the table absorbed: its rows if broker_live gets them now, and its next deadline."""

    flushed: list[Row] | None
    deadline: int | None


def statics(broker_id: Any, data_version: Mapping[str, int], ha_server_addr: str | None) -> str:
    return json_codec.dumps_sorted([broker_id, data_version, ha_server_addr])


class LiveTable:
    """The rows of a bucket, sorted by group, then (clusterName, brokerAddr)."""

    def __init__(self, groups: list[str], clusters: list[str], addrs: list[str], fixed_fields: list[str],
                 digests: list[str], ints: np.ndarray, strings: str | None = None, verdicts: str = "") -> None:
        self.groups, self.clusters, self.addrs = groups, clusters, addrs
        self.statics, self.digests = fixed_fields, digests
        self.ints = ints  # shape (_INTS, rows), int64
        self._strings = strings  # the string columns as stored, while unchanged (a pass moves only ints)
        # what the FIXED column's verdicts were made under (the routing settings and the rules'
        # version): a job that runs under others forgets them (`under`)
        self.verdicts = verdicts

    def under(self, verdicts: str) -> LiveTable:
        """This table for a job whose verdicts key is `verdicts`: its FIXED column cleared if they
        were made under another (the settings changed, or the rules did), so that every entry's
        next repeat runs the rules once again."""
        if verdicts != self.verdicts:
            self.ints[FIXED] = 0
            self.verdicts = verdicts
        return self

    def _slice(self, group: str) -> tuple[int, int]:
        """The rows of `group` (sorted by group: two bisections, no index to build per call)."""
        return bisect.bisect_left(self.groups, group), bisect.bisect_right(self.groups, group)

    @staticmethod
    def empty(verdicts: str = "") -> LiveTable:
        return LiveTable([], [], [], [], [], np.zeros((_INTS, 0), dtype=np.int64), verdicts=verdicts)

    def __len__(self) -> int:
        return len(self.groups)

    # -- storage: one line, no newline in it (the bucket's state is lines)
    def encode(self) -> str:
        ints = base64.b64encode(np.ascontiguousarray(self.ints, dtype="<i8").tobytes()).decode("ascii")
        strings = self._strings if self._strings is not None else json.dumps(
            [self.groups, self.clusters, self.addrs, self.statics, self.digests], separators=(",", ":"))
        return f"{_VERSION}\t{self.verdicts}\t{ints}\t{strings}"

    @staticmethod
    def decode(text: str) -> LiveTable:
        version, verdicts, ints, strings = text.split("\t", 3)
        if version != _VERSION:
            raise ValueError(f"hot liveness of version {version!r}, this job reads {_VERSION!r}")
        groups, clusters, addrs, stat, digests = json.loads(strings)
        array = np.frombuffer(base64.b64decode(ints), dtype="<i8").astype(np.int64).reshape(_INTS, len(groups))
        return LiveTable(groups, clusters, addrs, stat, digests, array.copy(), strings, verdicts)

    # -- a group's rows for its route rules, and back
    def rows(self, group: str) -> list[Row]:
        start, stop = self._slice(group)
        ints = self.ints
        return [Row(self.clusters[i], self.addrs[i], self.statics[i], self.digests[i], int(ints[LAST, i]),
                    int(ints[MAT, i]), int(ints[STALE, i]), int(ints[TIMEOUT, i]), int(ints[REG, i]),
                    bool(ints[FIXED, i])) for i in range(start, stop)]

    def with_groups(self, replaced: Mapping[str, list[Row]]) -> LiveTable:
        """This table with each named group's rows replaced (an empty list removes them)."""
        if not replaced:
            return self
        keep = np.ones(len(self.groups), dtype=bool)
        for group in replaced:
            start, stop = self._slice(group)
            keep[start:stop] = False
        kept = np.flatnonzero(keep)
        groups = [self.groups[i] for i in kept]
        clusters = [self.clusters[i] for i in kept]
        addrs = [self.addrs[i] for i in kept]
        stat = [self.statics[i] for i in kept]
        digests = [self.digests[i] for i in kept]
        added = [(g, r) for g, rows in replaced.items() for r in rows]
        new = np.array([[r.last, r.materialized, r.stale_since, r.timeout, r.registered, int(r.fixed)]
                        for _, r in added], dtype=np.int64).reshape(len(added), _INTS).T
        groups += [g for g, _ in added]
        clusters += [r.cluster for _, r in added]
        addrs += [r.addr for _, r in added]
        stat += [r.statics for _, r in added]
        digests += [r.digest for _, r in added]
        ints = np.concatenate([self.ints[:, kept], new], axis=1)
        order = sorted(range(len(groups)), key=lambda i: (groups[i], clusters[i], addrs[i]))
        return LiveTable([groups[i] for i in order], [clusters[i] for i in order], [addrs[i] for i in order],
                         [stat[i] for i in order], [digests[i] for i in order], ints[:, order], verdicts=self.verdicts)

    # -- the pass
    def absorb(self, calls: Mapping[str, Call], now_ms: int, flush_ms: int,
               heard_since: int | None) -> dict[str, Outcome]:
        """Move the times of every group of `calls` whose signals are all pure, in one pass; the
        groups left out must run their route rules (their rows are untouched). A group absorbed
        is one where nothing falls due (no row silent past its timeout by the latest of its
        signals and its expiry time, judged from `heard_since` as `housekeeping.expire` judges)
        and every signal is a heartbeat (of a row or of no row: a heartbeat of an unknown
        address changes nothing) or a small repeat of its row's registration that is a fixed
        point. Then, as the rules do: a signal later than the row's `lastUpdateTimestamp` moves
        it, and the first such one since broker_live was written marks when it went stale; a
        group whose stale rows' flush window ended (or every call, without a window) is written
        to broker_live whole; its next deadline is its earliest expiry or flush."""
        ints = self.ints
        since = ints[LAST] if heard_since is None else np.maximum(ints[LAST], heard_since)
        expires = since + ints[TIMEOUT]
        taken: list[str] = []
        idx: list[int] = []
        times: list[int] = []
        for group, call in calls.items():
            start, stop = self._slice(group)
            latest = max([call.expiry_ms, *(s.time for s in call.signals)])
            if stop > start and int(expires[start:stop].min()) < latest:
                continue  # a row falls due: the rules expire it
            where = {(self.clusters[i], self.addrs[i]): i for i in range(start, stop)}
            mine: list[tuple[int, int]] = []
            for s in call.signals:
                i = where.get((s.cluster, s.addr))
                if s.registration is not None and (
                        i is None or not ints[FIXED, i] or int(ints[REG, i]) != s.registration
                        or self.digests[i] != s.digest):
                    break
                if i is not None:
                    mine.append((i, s.time))
            else:
                taken.append(group)
                idx += [i for i, _ in mine]
                times += [t for _, t in mine]
        if idx:
            at = np.asarray(idx, dtype=np.int64)
            when = np.asarray(times, dtype=np.int64)
            moved = when > ints[LAST, at]
            rows_moved, first = np.unique(at[moved], return_index=True)
            fresh = ints[MAT, rows_moved] == ints[LAST, rows_moved]
            ints[STALE, rows_moved[fresh]] = when[moved][first][fresh]
            np.maximum.at(ints[LAST], at, when)
        out: dict[str, Outcome] = {}
        window = (now_ms // flush_ms) if flush_ms else None
        for group in taken:
            start, stop = self._slice(group)
            if stop == start:
                out[group] = Outcome(None, None)
                continue
            part = ints[:, start:stop]
            stale = part[MAT] != part[LAST]
            flushed = None
            if stale.any() and (window is None or bool((window > part[STALE][stale] // flush_ms).any())):
                part[MAT] = part[LAST]
                part[STALE] = -1
                stale[:] = False
                flushed = self.rows(group)
            last = part[LAST] if heard_since is None else np.maximum(part[LAST], heard_since)
            deadline = int((last + part[TIMEOUT]).min()) + 1
            if flush_ms and stale.any():
                deadline = min(deadline, (int((part[STALE][stale] // flush_ms).min()) + 1) * flush_ms)
            out[group] = Outcome(flushed, deadline)
        return out
