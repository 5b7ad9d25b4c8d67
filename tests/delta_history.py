"""Builds a real Delta warehouse without Spark: the pure step + the real sink, batch by batch.

For tests that need history on disk fast (notebooks, maintenance); the Spark path is covered
by the integration tests of the job itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipelines.sink import DeltaSink
from tests.helpers import DEFAULTS
from tests.model.pure_system import Batches, step_config


class SinkDriver:
    def __init__(self, warehouse: Path, *, live_flush_ms: int = 0, timeout_ms: int = 120_000) -> None:
        self.batches = Batches(step_config(timeout_ms=timeout_ms, live_flush_ms=live_flush_ms))
        self.sink = DeltaSink(Path(warehouse), retention_ms=DEFAULTS.history_retention_ms)
        self.sink.ensure_tables()

    def run_batch(self, events: list[dict[str, Any]], now: int) -> None:
        batch = self.batches.batch
        out = self.batches.step(events, now)
        self.sink.commit(batch, out, {"0": self.batches.offset}, len(events))
