"""KV keys are arbitrary strings: the routes must hand any of them to the KV handlers."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("key", ["a%0Ab", "ab%0A", "a/b"])
def test_kv_keys_may_hold_any_character(app, key):
    body = app.test_client().get(f"/kv/ns/{key}").json
    assert body["code"] == "QUERY_NOT_FOUND"  # the KV handler answered, not the router's 404
