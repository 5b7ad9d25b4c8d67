"""Builds a real Delta warehouse without Spark: the pure step + the real sink, batch by batch.

For tests that need history on disk fast (notebooks, maintenance); the Spark path is covered
by the integration tests of the job itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipelines import routing
from pipelines.sink import DeltaSink
from pipelines.stateful import StepConfig, run_group
from schemas import events as ev


class SinkDriver:
    def __init__(self, warehouse: Path, *, live_flush_ms: int = 0, timeout_ms: int = 120_000) -> None:
        self.cfg = StepConfig(routing.RoutingConfig(default_timeout_ms=timeout_ms, live_flush_ms=live_flush_ms),
                              1 << 20, 10**12)
        self.sink = DeltaSink(Path(warehouse), Path(warehouse).parent / "checkpoint")
        self.sink.ensure_tables()
        self.states: dict[str, str] = {}
        self.batch = 0
        self.offset = 0

    def run_batch(self, events: list[dict[str, Any]], now: int) -> None:
        records: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            key, value = ev.encode(e)
            records.setdefault(key.decode(), []).append(
                {"partition": 0, "offset": self.offset, "timestamp": now, "key": key.decode(), "value": value})
            self.offset += 1
        out = []
        for group in sorted(set(self.states) | set(records)):
            state, _, rows = run_group(group, records.get(group, []), self.states.get(group), now, self.cfg)
            if state is None:
                self.states.pop(group, None)
            else:
                self.states[group] = state
            out.extend(rows)
        self.sink.commit(self.batch, out, {"0": self.offset}, len(events))
        self.batch += 1
