"""serving.fastpath: a repeated route lookup is answered from the cut's stored body, byte for
byte what Flask answered the first time, and only for plain lookups of the served cut."""

from __future__ import annotations

import pytest

from serving.context import EXTENSION
from tests.helpers import cut, reg


def refuse(environ, start_response):
    raise AssertionError(f"Flask was entered for {environ['PATH_INFO']}?{environ.get('QUERY_STRING')}")


def test_second_lookup_skips_flask_with_identical_bytes(app):
    client = app.test_client()
    first = client.get("/topics/TopicTest/route")
    assert first.status_code == 200 and "TopicTest" in app.extensions[EXTENSION].current.route_bodies
    app.wsgi_app.app.app = refuse  # metrics wrapper -> fast path -> Flask
    second = client.get("/topics/TopicTest/route")
    assert (second.status_code, second.data, second.mimetype) == (200, first.data, "application/json")
    assert second.json["queueDatas"][0]["brokerName"] == "broker-a"


@pytest.mark.parametrize("path", ["/topics/Nope/route", "/topics/TopicTest/route?zone=z1",
                                  "/topics/TopicTest/route?snapshot=0", "/cluster"])
def test_everything_else_goes_through_flask(app, path):
    client = app.test_client()
    client.get("/topics/TopicTest/route")  # the plain lookup is stored
    app.wsgi_app.app.app = refuse  # metrics wrapper -> fast path -> Flask
    with pytest.raises(AssertionError, match="Flask was entered"):
        client.get(path)


def test_a_new_cut_starts_without_stored_bodies(app):
    client = app.test_client()
    client.get("/topics/TopicTest/route")
    app.extensions[EXTENSION].current = cut(reg("broker-c", 0, "10.0.0.3:1"))
    body = client.get("/topics/TopicTest/route").json
    assert [q["brokerName"] for q in body["queueDatas"]] == ["broker-c"]
    assert client.get("/topics/Missing/route").status_code == 404
    assert "Missing" not in app.extensions[EXTENSION].current.route_bodies  # misses are not stored

