"""The Python workers' daemon, with what every worker imports imported before it forks them.

Spark starts Python workers by forking them from one daemon process (`pyspark.daemon`). A
freshly forked worker imported pandas, pyarrow, kafka-python and the step's modules on its first
task: about half a second of the first batch with records (a starting fleet's first
registrations wait for it) and again whenever Spark forks a new worker. Imported here once, in
the daemon, a fork starts with them, and their pages are shared between the workers instead of
each holding its own copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# At most one release a worker every this long (`releasing`): a batch or two of a quiet fleet.
RELEASE_EVERY_S = 10.0


def preload() -> None:
    """Import what the step and the source's reads use (`pipelines.job` names this module as
    `spark.python.daemon.module` for local masters, where this tree is importable)."""
    import kafka  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    from pyspark.sql.pandas import serializers  # noqa: F401

    # pyspark's GroupState.update imports it (for `have_numpy`) on a worker's first update: with
    # unittest behind it, about 0.1 s of the first batch that writes state (py-spy).
    from pyspark.testing import utils  # noqa: F401

    import pipelines.kafka_source
    import pipelines.step  # noqa: F401


def freeze() -> None:
    """Move everything imported so far out of the garbage collector's sight. A reused worker runs
    `gc.collect()` after every task (pyspark.daemon), and a full collection walked all of these
    objects: 120 ms per task (py-spy, 1,000 brokers heartbeating), paid before the worker takes the
    batch's next task, so every stage of a batch waited for it (docs/latency.md). Frozen in the
    daemon, the forked workers collect only what they allocate themselves; the pages of the
    imported objects are not written by collections either, so they stay shared."""
    import gc
    gc.collect()
    gc.freeze()


def releasing(run_task: Callable[..., int], release: Callable[[], object]) -> Callable[..., int]:
    """`run_task` (pyspark.daemon's `worker`: one task, in a forked worker) followed by `release`,
    whatever the task did. A reused worker kept what a large batch freed: after a 10,000 × 100
    wave and a minute of re-registrations each of the two held 186-204 MiB, of which glibc gave
    back about 90 MiB when asked (`malloc_trim`, by hand, 2026-11-29); the step's own release
    (every 64 MiB of records it reads) misses what the wave's last batches freed. The daemon's
    `release` is at most one every RELEASE_EVERY_S (`conf.memory.ReleaseEvery`, no collection:
    the daemon collects after each task): released after every task, a wave's worker gave its
    pages back only to fault them in again for the next task (the bench's 10,000 × 100 wave
    48-50 -> 61 s)."""
    def task(*args: Any) -> int:
        try:
            return run_task(*args)
        finally:
            release()
    task.__qualname__ = f"releasing({getattr(run_task, '__qualname__', run_task)})"
    return task


if __name__ == "__main__":
    preload()
    freeze()
    from pyspark import daemon

    from conf.memory import ReleaseEvery
    # the manager looks `worker` up at each fork's task, so the module's name is the hook
    daemon.worker = releasing(daemon.worker, ReleaseEvery(RELEASE_EVERY_S).release)
    daemon.manager()
