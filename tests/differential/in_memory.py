"""Our NameServer without Kafka, Spark and Delta: the remoting front's own code over the
pipeline's pure core.

`InMemoryLog` stands in for the event log, the streaming job and the served cut at once:
each publish is one micro-batch of the job's step (`pipelines.step.run_group`) at the wall
clock, and the resulting cut is served at once.
Everything the front does — decoding frames, turning requests into events, the
single-topic and stale-epoch answers, channel-close unregistration, admin fan-out, replies
— is the production code. The differential test uses it for the thousands of steps the real
pipeline (about a second per write) could not afford; a smaller run goes through the real one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from conf import Config
from pipelines.sink import plan_batch
from pipelines.step import run_group
from remoting.front import Front
from routeinfo.snapshot import Snapshot, build_snapshot
from schemas import events as ev
from schemas import tables as t
from snapshots.freshness import LogMark
from tests.model.pure_system import step_config


class InMemoryLog:
    """Publisher (publish/close) and snapshot store (current/serves/poke/stop) in one. Groups
    are stepped when they have records or their timeout is due, as Spark calls them."""

    def __init__(self, timeout_ms: int) -> None:
        self._cfg = step_config(timeout_ms=timeout_ms)
        self._states: dict[str, Any] = {}
        self._deadlines: dict[str, int] = {}
        self._tables: dict[str, dict[str, list[dict[str, Any]]]] = {x.name: {} for x in t.STATE_TABLES}
        self._lock = threading.Lock()
        self._offset = 0
        self._batch = 0
        self._values: dict[int, bytes] = {}  # every record's value: what a repeat's body is read from
        self.dead_letters: list[dict[str, Any]] = []
        self.current: Snapshot = self._cut()

    # ---------------------------------------------------------------- the publisher's side
    def publish(self, events: list[dict[str, Any]]) -> list[tuple[int, int]]:
        with self._lock:
            now = int(time.time() * 1000)
            records: dict[str, list[dict[str, Any]]] = {}
            coords = []
            for e in events:
                key, value = ev.record_of(e)  # as the publisher sends it
                records.setdefault(key.decode(), []).append(
                    {"partition": 0, "offset": self._offset, "timestamp": now, "key": key.decode(), "value": value})
                coords.append((0, self._offset))
                self._values[self._offset] = value
                self._offset += 1
            due = {g for g, d in self._deadlines.items() if d <= now}
            out: list[dict[str, Any]] = []
            for group in sorted(set(records) | due):
                state, deadline, rows = run_group(group, records.get(group, []), self._states.get(group), now, self._cfg,
                                                  fetch=lambda p, offsets: [self._values.get(o) for o in offsets])
                self._states.pop(group, None) if state is None else self._states.__setitem__(group, state)
                self._deadlines.pop(group, None) if deadline is None else self._deadlines.__setitem__(group, deadline)
                out.extend(rows)
            plan = plan_batch(out, self._batch, now)
            self._batch += 1
            self.dead_letters.extend(plan.dead_letters)
            for table, owners in plan.replace.items():
                self._tables[table].update(owners)
            self.current = self._cut()
            return coords

    def publish_groups(self, groups: list[list[dict[str, Any]]]) -> list[list[tuple[int, int]]]:
        coords = self.publish([e for group in groups for e in group])
        out, i = [], 0
        for group in groups:
            out.append(coords[i:i + len(group)])
            i += len(group)
        return out

    def warm(self) -> None:
        pass

    def close(self) -> None:
        pass

    # ---------------------------------------------------------------- the store's side
    def mark(self) -> LogMark:
        return LogMark({}, {})  # one log, never reset

    def served_mark(self) -> LogMark:
        return LogMark({"0": self._offset}, {})  # every publish is served before it returns; one log, never reset

    def serves(self, coords: list[tuple[int, int]], mark: LogMark | None = None) -> bool:
        return True  # every publish is served before it returns

    def poke(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def _cut(self) -> Snapshot:
        row = {"snapshotId": self._batch, "commitTime": int(time.time() * 1000), "sourceOffsets": "{}",
               **{t.version_column(x): 0 for x in t.CUT_TABLES}}
        return build_snapshot(row, {name: [r for rs in owners.values() for r in rs]
                                    for name, owners in self._tables.items()})


def in_memory_front(cfg: Config) -> Front:
    log = InMemoryLog(cfg.broker_timeout_ms)
    return Front(cfg, log, lambda: log)  # type: ignore[arg-type, return-value]
