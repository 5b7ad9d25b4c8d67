"""Query-parameter parsing (serving.params), read-your-writes coverage and the bearer check
(serving.writes), and the retention properties the tables are created with."""

from __future__ import annotations

import pytest

from pipelines.maintenance import MIN_RETENTION_MS, retention_properties
from schemas.fields import InvalidInput
from schemas.progress import covers
from serving.params import parse_instant, parse_int
from serving.writes import TOKEN


@pytest.mark.parametrize("text, expected", [
    ("1700000000000", 1_700_000_000_000),
    ("2023-11-14T22:13:20Z", 1_700_000_000_000),
    ("2023-11-14T22:13:20", 1_700_000_000_000),  # naive = UTC
    ("2023-11-15T00:13:20+02:00", 1_700_000_000_000),
])
def test_instants_are_iso_8601_or_epoch_ms(text, expected):
    assert parse_instant(text, "asOf") == expected


@pytest.mark.parametrize("text", ["yesterday", "2023-13-01", ""])
def test_bad_instants_name_the_parameter(text):
    with pytest.raises(InvalidInput, match="asOf must be ISO-8601 or epoch milliseconds"):
        parse_instant(text, "asOf")


def test_integers_are_bounded():
    assert parse_int("7", "limit", 1, 10) == 7
    with pytest.raises(InvalidInput, match="limit must be between 1 and 10"):
        parse_int("11", "limit", 1, 10)
    with pytest.raises(InvalidInput, match="limit must be an integer"):
        parse_int("x", "limit")


def test_a_write_is_covered_once_every_offset_it_was_written_at_is_consumed():
    coords = [(0, 4), (1, 9)]
    assert covers({"0": 5, "1": 10}, coords)
    assert not covers({"0": 5, "1": 9}, coords)  # offset 9 of partition 1 not consumed yet
    assert not covers({"0": 5}, coords)
    assert covers({}, [])


def test_authorized_writes_need_the_exact_bearer_token(app):
    client = app.test_client()
    app.extensions[TOKEN] = "s3cret"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"},
                    {"Authorization": "s3cret"}):
        answer = client.put("/kv/ns/k", json={"value": "v"}, headers=headers)
        assert answer.status_code == 401 and answer.json["code"] == "NO_PERMISSION"
        assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_without_a_configured_token_writes_are_refused(app):
    app.extensions[TOKEN] = None
    answer = app.test_client().put("/kv/ns/k", json={"value": "v"}, headers={"Authorization": "Bearer x"})
    assert answer.status_code == 401 and "no admin token is configured" in answer.json["remark"]


def test_retention_properties_follow_the_history_window_never_below_the_floor():
    week = 7 * 24 * 3_600_000
    assert retention_properties(week) == {"delta.logRetentionDuration": "interval 604800 seconds",
                                          "delta.deletedFileRetentionDuration": "interval 604800 seconds"}
    floor = f"interval {MIN_RETENTION_MS // 1000} seconds"
    assert retention_properties(1)["delta.logRetentionDuration"] == floor
