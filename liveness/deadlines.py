"""The sink's book of pending group timeouts, whose earliest the source schedules a batch for (pure).

Every call of the step reports its group's next timeout (a DEADLINE row); the book keeps the
newest per group and `next_deadline` is the earliest, published as `nextDeadline` in
`_progress.json`. A restarted job has heard no group yet, while Spark's state still holds their
timeouts, so the book starts from what `broker_live` says (`seed`): a group's seeded timeout is
its earliest `lastUpdateTimestamp + heartbeatTimeoutMillis`, never later than the true one
(broker_live trails the state by at most one NAMESRV_LIVE_FLUSH_MS window). A seeded group that
is still unheard when its seed passed has a later timeout, not yet known: it is looked at again
every `recheck_ms`, until it reports or until even the latest timeout it can have has passed (the
table's newest liveness plus one flush window: then the state holds no timeout for it). Without
seeds, an expiry due soon after a restart would wait for whatever batch ran next, up to
NAMESRV_HEARTBEAT_DEFER_MS later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class _Seed:
    due: int  # when to look next
    give_up: int  # past this, the state cannot hold a timeout the table does not show


@dataclass
class DeadlineBook:
    recheck_ms: int
    reported: dict[str, int] = field(default_factory=dict)
    seeds: dict[str, _Seed] = field(default_factory=dict)

    def seed(self, live: Iterable[tuple[str, int, int]], live_flush_ms: int) -> None:
        """`live`: broker_live's (brokerName, lastUpdateTimestamp, heartbeatTimeoutMillis) rows."""
        for group, last_update, timeout_ms in live:
            deadline = last_update + timeout_ms
            s = self.seeds.get(group)
            give_up = deadline + live_flush_ms + self.recheck_ms
            if s is None:
                self.seeds[group] = _Seed(deadline, give_up)
            else:
                s.due, s.give_up = min(s.due, deadline), max(s.give_up, give_up)

    def update(self, reported: Mapping[str, int | None], now_ms: int) -> None:
        """After a batch: what the step reported (None: no timeout), then the seeds that passed."""
        for group, deadline in reported.items():
            self.seeds.pop(group, None)
            if deadline is None:
                self.reported.pop(group, None)
            else:
                self.reported[group] = deadline
        for group, s in list(self.seeds.items()):  # empty once a restarted job heard every group
            if s.due <= now_ms:
                if now_ms >= s.give_up:
                    del self.seeds[group]
                else:
                    s.due = min(now_ms + self.recheck_ms, s.give_up)

    def next_deadline(self) -> int | None:
        return min([*self.reported.values(), *(s.due for s in self.seeds.values())], default=None)
