"""serving.fastpath over a cut served from the shared file: every topic's route is answered
without Flask, its first lookup included, byte for byte the body route_reads encodes, and nothing
is stored per topic in the process; a name the fast path cannot read as the WSGI server gave it
(not plain ASCII, a slash) and a missing topic go through Flask."""

from __future__ import annotations

import pytest

from routeinfo import route_reads
from serving.context import EXTENSION
from snapshots.cutfile import CutFile, write_cut
from snapshots.mapped import mapped_snapshot
from tests.helpers import cut, reg, topics


def refuse(environ, start_response):
    raise AssertionError(f"Flask was entered for {environ['PATH_INFO']}?{environ.get('QUERY_STRING')}")


@pytest.fixture
def delta_cut():
    return cut(reg("broker-a", 0, "10.0.0.1:1", tps=topics("TopicTest", "Base", "Ünï")),
               reg("broker-b", 0, "10.0.0.2:1", tps=topics("TopicTest", "OnlyB")))


@pytest.fixture
def served(app, delta_cut, tmp_path):
    write_cut(delta_cut, tmp_path / "current.cut")
    app.extensions[EXTENSION].current = mapped_snapshot(CutFile.open(tmp_path / "current.cut"))
    return app


def test_every_topic_is_answered_from_the_file_on_its_first_lookup(served, delta_cut):
    client = served.test_client()
    served.wsgi_app.app.app = refuse  # metrics wrapper -> fast path -> Flask
    for topic in ("TopicTest", "Base", "OnlyB"):
        answer = client.get(f"/topics/{topic}/route")
        assert (answer.status_code, answer.data, answer.mimetype) == \
            (200, route_reads.route_body(delta_cut, topic), "application/json"), topic
    assert served.extensions[EXTENSION].current.route_bodies == {}  # nothing kept per topic


@pytest.mark.parametrize("path", ["/topics/Nope/route", "/topics/TopicTest/route?zone=z1", "/topics/%C3%9Cn%C3%AF/route",
                                  "/topics/Topic/Test/route"])
def test_what_the_fast_path_cannot_answer_goes_through_flask(served, path):
    served.wsgi_app.app.app = refuse
    with pytest.raises(AssertionError, match="Flask was entered"):
        served.test_client().get(path)


def test_flask_answers_the_rest_alike(served, delta_cut):
    client = served.test_client()
    assert client.get("/topics/Ünï/route").data == route_reads.route_body(delta_cut, "Ünï")
    assert client.get("/topics/Nope/route").status_code == 404
    zoned = client.get("/topics/TopicTest/route?zone=z1")
    assert zoned.status_code == 200 and zoned.json == route_reads.topic_route(delta_cut, "TopicTest", zone="z1")
