"""Fault injection for crash-safety tests: SIGKILL this process at a sink commit point.

Enabled only by NAMESRV_TEST_KILL_PROBABILITY (a setting, read at the job's entry point); never in
normal runs. The points cover every gap of a batch's cut: before each table commit (so
between table commits), before the snapshots row, and before the progress record.
"""

from __future__ import annotations

import logging
import os
import random
import signal

log = logging.getLogger(__name__)


class KillAtRandom:
    def __init__(self, probability: float, seed: int | None = None) -> None:
        if not 0 < probability <= 1:
            raise ValueError("kill probability must be in (0, 1]")
        self.probability = probability
        self.random = random.Random(seed)

    def __call__(self, point: str) -> None:
        if self.random.random() < self.probability:
            log.warning("fault injection: SIGKILL at %s", point)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def no_fault(point: str) -> None:
    """The default: commit points are just points."""
