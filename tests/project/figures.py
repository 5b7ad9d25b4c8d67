"""What the bench-figure tests share: the last run's figures and a generated block's text."""

from __future__ import annotations

import json
import re
from typing import Any

from bench.report import LAST_RUN


def last_raw() -> dict[str, Any]:
    """bench/last-run.json's figures, as the render step reads them."""
    raw: dict[str, Any] = json.loads(LAST_RUN.read_text())["raw"]
    return raw


def between(text: str, begin: str, end: str) -> str:
    """The text between a block's markers; the block must be there."""
    found = re.search(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.S)
    assert found, f"the {begin} ... {end} block is missing"
    return found.group(1)
