"""Issue 24: a change is served without waiting for the next trigger (its timing is a benchmark,
`./run.sh bench --only system`, not a timed test).

Spark starts the triggers of a processing-time query at multiples of the interval, in epoch
milliseconds. A batch admitted at the trigger's start would carry a change published mid-trigger
no earlier than the next multiple; our source waits inside the trigger and admits it at once.
"""

from __future__ import annotations

import time

import pytest

from schemas.progress import covers, read_progress
from tests.harness import Pipeline
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration

INTERVAL_MS = 8000


def test_a_change_arriving_mid_trigger_is_served_without_waiting_for_the_next_trigger(spark, kafka_bootstrap,
                                                                                    tmp_path):
    p = Pipeline(spark, kafka_bootstrap, tmp_path, trigger_ms=INTERVAL_MS).start_job()
    try:
        p.wait_for(lambda: read_progress(p.cfg.warehouse), 120, "the first batch")
        for i in range(2):
            # 3 s into a trigger: 5 s before the next one starts
            time.sleep((3000 - time.time() * 1000 % INTERVAL_MS) % INTERVAL_MS / 1000)
            published = time.time() * 1000
            coords = p.publish([reg(f"fresh-{i}", 0, f"127.0.0.1:{11911 + i}", tps=topics(f"Fresh{i}", "FreshBase"))])
            progress = p.wait_for(lambda c=coords: (lambda r: r if r and covers(r["sourceOffsets"], c) else None)(
                read_progress(p.cfg.warehouse)), 60, f"registration {i} to be committed")
            next_trigger = (published // INTERVAL_MS + 1) * INTERVAL_MS
            admitted = progress["phases"]["admitted"]
            assert published <= admitted < next_trigger, (
                f"registration {i} published at {published:.0f} was admitted at {admitted}, "
                f"{admitted - published:.0f} ms later: not before the next trigger at {next_trigger:.0f}")
    finally:
        p.close()
