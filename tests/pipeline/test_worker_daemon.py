"""The Python workers' daemon (pipelines/worker_daemon.py): each task a forked worker runs is
followed by a release of the memory it freed, whatever the task did, and the workers of the
tests' own Spark session run it."""

from __future__ import annotations

import sys

import pytest

from pipelines.worker_daemon import releasing


def test_a_task_is_followed_by_a_release_whatever_it_did():
    calls: list[str] = []

    def task(sock: object, authenticated: bool) -> int:
        calls.append(f"task {authenticated}")
        if sock == "bad":
            raise SystemError("the task failed")
        return 7

    run = releasing(task, lambda: calls.append("release"))
    assert run("ok", True) == 7
    with pytest.raises(SystemError, match="the task failed"):
        run("bad", False)
    assert calls == ["task True", "release", "task False", "release"]
    assert run.__qualname__.startswith("releasing(")


def _hook(_: object) -> str:
    daemon = sys.modules.get("pyspark.daemon")
    return getattr(getattr(daemon, "worker", None), "__qualname__", "no pyspark.daemon in this worker")


def test_the_sessions_workers_release_after_each_task(spark):
    hooks = spark.sparkContext.parallelize(range(4), 2).map(_hook).collect()
    assert all(h.startswith("releasing(") for h in hooks), hooks
