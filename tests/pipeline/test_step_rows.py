"""The step's JSON encoder made once (`pipelines.step_rows.dumps_sorted`, the stored before/after texts) writes what
json.dumps writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipelines import step_rows as out_rows

VALUES: list[Any] = [
    None, True, 0, -7, 2**70, 1.5, float("inf"), "", "é\n\"\\\u2028", [], {},
    {"perm": 6, "readQueueNums": 4, "writeQueueNums": 4, "topicSysFlag": 0, "order": False},
    {"z": [1, {"b": None, "a": [True, "x"]}], "a": {"y": -3.25, "x": {}}},
    [{"time": 1, "kind": "TOPIC_ADDED", "before": None, "after": "{\"perm\": 6}"}],
    "top-level string",
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_encoders_write_what_json_dumps_writes(value: Any) -> None:
    assert out_rows.dumps_sorted(value) == json.dumps(value, sort_keys=True)


def test_encoder_sorts_keys() -> None:
    value = {"b": 1, "a": 2}
    assert out_rows.dumps_sorted(value) == '{"a": 2, "b": 1}'


def test_encoder_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError):
        out_rows.dumps_sorted({"a": object()})
    with pytest.raises(TypeError):
        out_rows.dumps_sorted({1: 2, "a": 3})  # keys of mixed types cannot be sorted
