"""Issue 24: a change is served without waiting for the next trigger (its timing is a benchmark,
`./run.sh bench --only system`, not a timed test).

Spark starts the triggers of a processing-time query at multiples of the interval, in epoch
milliseconds, and after a batch it waits for the next multiple. A batch admitted at a trigger's
start would carry a change published mid-trigger no earlier than the next multiple. Our source
waits inside the trigger and admits a change at once; and a change that arrives while a batch
runs is admitted when that batch ends (the query runs its triggers back to back and the source
paces them, `pipelines/job.py`), not at the next multiple: the CI run of 2026-11-25 caught
exactly that case, a registration published while an earlier batch ran, admitted 5 s later.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from schemas.progress import covers, read_progress
from tests.harness import Pipeline
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration

INTERVAL_MS = 8000


def _into_trigger(ms: int) -> float:
    """Sleep until `ms` into a trigger interval; the time then, epoch ms."""
    time.sleep((ms - time.time() * 1000 % INTERVAL_MS) % INTERVAL_MS / 1000)
    return time.time() * 1000


def _committed(p: Pipeline, coords: list[tuple[int, int]], what: str) -> dict[str, Any]:
    progress: dict[str, Any] = p.wait_for(lambda: (lambda r: r if r and covers(r["sourceOffsets"], coords) else None)(
        read_progress(p.cfg.warehouse)), 60, f"{what} to be committed")
    return progress


def read_offset_log(path: Any) -> dict[str, int]:
    """The Kafka offsets of one batch in Spark's offset log (line 0: version, 1: batch metadata,
    2: our source's offsets). Tests may look at Spark's files; the system never does."""
    try:
        raw = json.loads(path.read_text().splitlines()[2])
    except (FileNotFoundError, IndexError):
        return {}
    raw = json.loads(raw) if isinstance(raw, str) else raw
    return {k: int(v) for k, v in raw.items() if k.isdigit()}


def _planned(p: Pipeline, coords: list[tuple[int, int]], timeout: float = 30) -> None:
    """Return as soon as Spark has written the offset log of the batch that reads `coords` (the
    batch is planned and about to run)."""
    offsets = p.cfg.checkpoint_dir / "offsets"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = sorted((f for f in offsets.iterdir() if f.name.isdigit()), key=lambda f: int(f.name)) \
            if offsets.exists() else []
        if logs and covers(read_offset_log(logs[-1]), coords):
            return
        time.sleep(0.005)
    raise AssertionError(f"no batch planned for {coords} within {timeout:.0f} s")


def _assert_admitted_in_its_trigger(progress: dict[str, Any], published: float, what: str) -> None:
    next_trigger = (published // INTERVAL_MS + 1) * INTERVAL_MS
    admitted = progress["phases"]["admitted"]
    assert published <= admitted < next_trigger, (
        f"{what} published at {published:.0f} was admitted at {admitted}, {admitted - published:.0f} ms later: "
        f"not before the next trigger at {next_trigger:.0f}")


def test_a_change_arriving_mid_trigger_is_served_without_waiting_for_the_next_trigger(spark, kafka_bootstrap,
                                                                                    tmp_path):
    p = Pipeline(spark, kafka_bootstrap, tmp_path, trigger_ms=INTERVAL_MS).start_job()
    try:
        p.wait_for(lambda: read_progress(p.cfg.warehouse), 120, "the first batch")
        for i in range(2):
            # while the source waits: 3 s into a trigger, 5 s before the next one starts
            published = _into_trigger(3000)
            coords = p.publish([reg(f"fresh-{i}", 0, f"127.0.0.1:{11911 + i}", tps=topics(f"Fresh{i}", "FreshBase"))])
            _assert_admitted_in_its_trigger(_committed(p, coords, f"registration {i}"), published, f"registration {i}")
        # while a batch runs: the second registration arrives once the first one's batch is planned
        _into_trigger(2000)
        first = p.publish([reg("busy-0", 0, "127.0.0.1:11921", tps=topics("Busy0", "FreshBase"))])
        _planned(p, first)
        published = time.time() * 1000
        second = p.publish([reg("busy-1", 0, "127.0.0.1:11922", tps=topics("Busy1", "FreshBase"))])
        progress = _committed(p, second, "the registration published while a batch ran")
        _assert_admitted_in_its_trigger(progress, published, "a registration published while a batch ran")
    finally:
        p.close()
