"""Output of the admin CLI: aligned text tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; an empty table still shows its header."""
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # as RocketMQ and JSON write them
        return "true" if value else "false"
    return str(value)


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def instant(ms: int | None) -> str:
    """Epoch milliseconds as UTC ISO-8601 (seconds), the form every --as-of/--since accepts back."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    s = max(0, (now_ms - ms) // 1000)
    return f"{s}s" if s < 120 else f"{s // 60}m{s % 60:02d}s" if s < 7200 else f"{s // 3600}h{s % 3600 // 60:02d}m"
