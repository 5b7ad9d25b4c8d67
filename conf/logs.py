"""Process logging set-up, shared by every entry point (job, server, launcher)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

# Libraries that log every connection at INFO; their warnings still show.
_NOISY = ("kafka", "py4j", "waitress.queue", "granian")


def setup_logging(log_file: Path | None = None, level: int = logging.INFO) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=handlers)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)
