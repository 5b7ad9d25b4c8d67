"""Query parameters as the HTTP API takes them (Flask-free: the notebooks and CLIs use them too)."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.fields import InvalidInput


def parse_int(text: str, name: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, not {text[:40]!r}") from None
    if not lo <= value <= hi:
        raise InvalidInput(f"{name} must be between {lo} and {hi}")
    return value


def parse_instant(text: str, name: str) -> int:
    """ISO-8601 (naive = UTC) or epoch milliseconds -> epoch milliseconds."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return parse_int(text, name)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        raise InvalidInput(f"{name} must be ISO-8601 or epoch milliseconds, not {text[:40]!r}") from None
