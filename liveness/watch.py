"""What the ledger said of each record that waits to be read (pure bookkeeping, no I/O).

The source looks at waiting records before a batch reads them, so that admission can tell a
trigger whose waiting records are all liveness signals (they may wait for company) from one
that holds a change (run at once). This keeps, per partition, how far the ledger has looked
and its verdict on every record looked at and not read yet; the source fetches the records
(its I/O) and hands each one to `look`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from liveness.admission import Backlog
from liveness.ledger import LivenessLedger


@dataclass
class WaitingRecords:
    ledger: LivenessLedger
    # partition -> the offset the ledger has looked at up to
    observed: dict[int, int] = field(default_factory=dict)
    # partition -> (offset, liveness signal, record time) of each record looked at and not read yet
    marks: dict[int, list[tuple[int, bool, int]]] = field(default_factory=dict)

    def look_from(self, partition: int, start: int, *, reset: bool = False) -> int:
        """Where the ledger goes on in a partition whose unread records begin at `start`: where it
        stopped, unless that is before `start` (records skipped), the partition is new to it, or the
        log went back (`reset`); then it starts over at `start`."""
        upto = self.observed.get(partition)
        if reset or upto is None or upto < start:
            if upto is not None:
                self.ledger.clear()
            self.marks.pop(partition, None)
            upto = self.observed[partition] = start
        return upto

    def look(self, partition: int, offset: int, key: str | None, kind: str | None, value: bytes | None,
             timestamp: int, fingerprint: bytes | None = None) -> bool | None:
        """Run the next record of a partition through the ledger and keep its verdict (True: a
        liveness signal); None when it is not the next one (already looked at)."""
        if offset < self.observed[partition]:
            return None
        liveness = self.ledger.observe(key, kind, value, timestamp, offset, fingerprint)
        self.marks.setdefault(partition, []).append((offset, liveness, timestamp))
        self.observed[partition] = offset + 1
        return liveness

    def unobserved(self, pending: dict[int, tuple[int, int]]) -> int:
        """How many records of the `pending` ranges the ledger has not looked at yet."""
        return sum(e - min(e, max(s, self.observed.get(p, s))) for p, (s, e) in pending.items() if e >= s)

    def waiting(self, start: dict[str, int]) -> int:
        """How many records the ledger has looked at beyond `start` (the batch's start offsets)."""
        return sum(upto - int(start.get(str(p), 0)) for p, upto in self.observed.items())

    def backlog(self, pending: dict[int, tuple[int, int]]) -> Backlog:
        """Whether any record of the `pending` ranges is not a liveness signal (or was not looked at:
        then it counts as one), and the oldest waiting signal's record time."""
        urgent_any, oldest_all = False, None
        for p, (s, e) in pending.items():
            waiting = [(liveness, ts) for off, liveness, ts in self.marks.get(p, ()) if s <= off < e]
            urgent_any = urgent_any or self.observed.get(p, s) < e or not all(liveness for liveness, _ in waiting)
            oldest = min((ts for _, ts in waiting), default=None)
            if oldest is not None:
                oldest_all = oldest if oldest_all is None else min(oldest_all, oldest)
        return Backlog(urgent=urgent_any, oldest_heartbeat_ms=oldest_all)

    def consumed(self, out: dict[int, int]) -> None:
        """A batch reads each partition up to `out[p]`: forget what the ledger said of those records;
        a record it did not see means it no longer knows the log, so it starts over."""
        for p, end in out.items():
            if self.observed.get(p, -1) < end:
                self.ledger.clear()
                self.observed[p] = end
            self.marks[p] = [m for m in self.marks.get(p, []) if m[0] >= end]
