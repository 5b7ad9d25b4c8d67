"""The snapshot reader's answers on edge cases (snapshots/reader.py)."""

from __future__ import annotations


def test_a_history_page_that_matches_nothing_is_empty(tmp_path):
    """`GET /history/snapshots?before=0` once answered 500: an empty selection taken from the
    snapshots table was a null-typed array (found by tests/serving/test_openapi_fuzz.py)."""
    from pipelines.sink import DeltaSink
    from snapshots.reader import SnapshotReader
    DeltaSink(tmp_path / "delta", retention_ms=3_600_000).ensure_tables()
    assert SnapshotReader(tmp_path / "delta").list_rows(limit=1000, before=0) == ([], 0)
