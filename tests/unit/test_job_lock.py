"""The job lock: a second job waits while the first lives, and takes over the instant it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from pipelines import job_lock

HOLD = "import sys, time; from pathlib import Path; from pipelines import job_lock; " \
       "held = job_lock.acquire(Path(sys.argv[1]), lambda pid: None); print('held', flush=True); time.sleep(60)"


def test_a_second_job_waits_for_the_first_and_takes_over_when_it_is_killed(tmp_path):
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        assert job_lock.holder(tmp_path) == first.pid
        waited: list[int | None] = []
        warmed: list[float] = []
        killed_at = 0.0

        def warm() -> None:
            nonlocal killed_at
            warmed.append(time.monotonic())
            if len(warmed) == 2:  # the standby waited through a warm-up round: now the active job dies
                first.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()

        lock = job_lock.acquire(tmp_path, waited.append, keep_warm=warm, warm_every_s=0.2)
        took_over = time.monotonic() - killed_at
        try:
            assert waited == [first.pid]
            assert len(warmed) == 2
            assert job_lock.holder(tmp_path) == os.getpid()
            assert took_over < 1.0, f"took over {took_over:.2f} s after the kill"
        finally:
            lock.close()
    finally:
        first.kill()
        first.wait(10)


def test_no_wait_when_the_lock_is_free(tmp_path):
    calls: list[int | None] = []
    lock = job_lock.acquire(tmp_path, calls.append)
    try:
        assert calls == [] and job_lock.holder(tmp_path) == os.getpid()
    finally:
        lock.close()
