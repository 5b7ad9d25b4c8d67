"""Chunked registrations (events.chunk_registration + routeinfo) and the lazily decoded topic table."""

from __future__ import annotations

import json

import pytest

from routeinfo import housekeeping, route_manager
from routeinfo.state import GroupState, dump_data_version, table_rows, topic_keys_digest, unpack_topics
from schemas import events as ev
from schemas import fields
from schemas import tables as t
from tests.helpers import hb, norm, reg, routing_config, topics

CFG = routing_config(default_timeout_ms=10_000)
A0, A1 = "10.0.0.1:10911", "10.0.0.2:10911"
LIMIT = 2_000  # bytes per message: small, so a few hundred topics need several chunks


def many(n: int) -> dict:
    return topics(*[f"Topic-{i:05d}" for i in range(n)])


def chunks(event, limit=LIMIT):
    return [norm(c, 0) for c in ev.chunk_registration(event, limit)]


def apply_at(state, events_and_times, now=None):
    evs = [{**e, "time": ts} for e, ts in events_and_times]
    return route_manager.apply(state, evs, now if now is not None else evs[-1]["time"], CFG)


def queue_names(state):
    return {r["topic"] for r in table_rows(state, t.TOPIC_QUEUE.name)}


# ---------------------------------------------------------------- the producer side

def test_a_registration_that_fits_is_not_chunked():
    e = reg("b", 0, A0, tps=many(3))
    assert ev.chunk_registration(e, LIMIT) == [e]


@pytest.mark.parametrize("n_topics,limit", [(300, 2_000), (100_000, 1 << 20)])
def test_chunks_fit_the_limit_and_carry_every_topic_once(n_topics, limit):
    e = reg("b", 0, A0, tps=many(n_topics))
    parts = ev.chunk_registration(e, limit)
    assert len(parts) > 1
    sizes = [len(ev.encode(p)[1]) for p in parts]
    assert max(sizes) <= limit
    assert sum(sizes) < 1.01 * len(ev.encode(e)[1]) + len(parts) * 400  # header repeated, little else
    assert [p["chunk"] for p in parts] == [{"index": i, "count": len(parts)} for i in range(len(parts))]
    merged = {}
    for p in parts:
        assert {k: v for k, v in p.items() if k not in ("topicConfigTable", "chunk")} == \
               {k: v for k, v in e.items() if k != "topicConfigTable"}
        assert not set(merged) & set(p["topicConfigTable"])
        merged.update(p["topicConfigTable"])
    assert merged == e["topicConfigTable"]


def test_only_registrations_are_chunked():
    with pytest.raises(ValueError):
        ev.chunk_registration(hb("b", 0, A0), 100)


@pytest.mark.parametrize("chunk,reason", [
    ({"index": 0}, "exactly the fields index and count"),
    ({"index": 0, "count": 2, "x": 1}, "exactly the fields index and count"),
    ([0, 2], "exactly the fields index and count"),
    ({"index": 2, "count": 2}, "chunk.index"),
    ({"index": -1, "count": 2}, "chunk.index"),
    ({"index": 0, "count": 0}, "chunk.count"),
    ({"index": 0, "count": fields.MAX_CHUNKS + 1}, "chunk.count"),
    ({"index": "0", "count": 2}, "chunk.index"),
])
def test_bad_chunk_fields_are_refused(chunk, reason):
    with pytest.raises(fields.InvalidInput, match=reason):
        norm({**reg("b", 0, A0), "chunk": chunk}, 0)


# ---------------------------------------------------------------- the pipeline side

def test_nothing_is_visible_until_the_last_chunk_then_everything_is():
    parts = chunks(reg("b", 0, A0, tps=many(300)))
    n = len(parts)
    assert n >= 3
    s, res = apply_at(None, [(p, 100 + i) for i, p in enumerate(parts[:-1])])
    assert not res.dirty_tables and not res.changes
    assert s.broker is None and not s.live and not s.has_topics() and not s.clusters
    s, res = apply_at(s, [(parts[-1], 200)])
    assert queue_names(s) == set(many(300))
    assert s.pending == {} and s.broker.addrs == {0: A0}
    assert res.dirty_tables == {x.name for x in t.ROUTE_TABLES} - {t.FILTER_SERVER.name}
    live = table_rows(s, t.BROKER_LIVE.name)
    assert [r["lastUpdateTimestamp"] for r in live] == [200]  # the registration happens at its last chunk


def test_chunks_in_any_order_and_repeated_give_the_same_state_as_one_registration():
    e = reg("b", 0, A0, tps=many(300))
    parts = chunks(e)
    shuffled = parts[2:-1] + [parts[0], parts[2], parts[0], parts[1], parts[-1]]  # out of order, two retries
    s, res = apply_at(None, [(p, 100) for p in shuffled])
    whole, _ = apply_at(None, [(norm(e, 0), 100)])
    assert s == whole and not res.rejected


def test_a_repeated_chunk_with_other_content_is_rejected_and_the_assembly_goes_on():
    parts = chunks(reg("b", 0, A0, tps=many(300)))
    forged = {**parts[0], "topicConfigTable": topics("Other")}
    s, res = apply_at(None, [(parts[0], 1), (forged, 2)])
    assert res.rejected and "differs from the copy already received" in res.rejected[0]
    s, res = apply_at(s, [(p, 3) for p in parts[1:]])
    assert queue_names(s) == set(many(300))


def test_a_newer_registration_supersedes_an_incomplete_one():
    old = chunks(reg("b", 0, A0, tps=many(300), counter=1))
    new = chunks(reg("b", 0, A0, tps=many(250), counter=2))
    s, res = apply_at(None, [(old[0], 1), (old[1], 2)] + [(p, 3) for p in new])
    kinds = [c["kind"] for c in res.changes]
    assert kinds[0] == "REGISTRATION_ABANDONED" and "2 of" in res.changes[0]["after"]
    assert queue_names(s) == set(many(250))
    assert table_rows(s, t.BROKER_LIVE.name)[0]["dataVersion"] == dump_data_version(
        {"timestamp": 1, "counter": 2, "stateVersion": 0})


def test_a_topic_in_two_chunks_rejects_the_whole_registration():
    parts = chunks(reg("b", 0, A0, tps=many(300)))
    dup = next(iter(parts[0]["topicConfigTable"]))
    parts[-1] = {**parts[-1], "topicConfigTable": {**parts[-1]["topicConfigTable"], dup: parts[0]["topicConfigTable"][dup]}}
    s, res = apply_at(None, [(p, 5) for p in parts])
    assert res.rejected and f"lists topic {dup} in more than one chunk" in res.rejected[0]
    assert s is None  # nothing was applied, and the pending chunks are gone


def test_an_incomplete_registration_is_abandoned_after_the_timeout():
    parts = chunks(reg("b", 0, A0, tps=many(300), timeout_ms=5_000))
    s, _ = apply_at(None, [(parts[0], 1_000)])
    assert housekeeping.next_deadline(s, CFG) == 6_001
    s2, res = route_manager.apply(s, [], 6_000, CFG)
    assert s2.pending  # not yet: deadline is strictly after last chunk + timeout
    s3, res = route_manager.apply(s, [], 6_001, CFG)
    assert s3 is None and [c["kind"] for c in res.changes] == ["REGISTRATION_ABANDONED"]


def test_unregister_drops_an_incomplete_registration():
    parts = chunks(reg("b", 0, A0, tps=many(300)))
    s, _ = apply_at(None, [(parts[0], 1), (norm(ev.unregister_broker_event(
        cluster="DefaultCluster", broker_name="b", broker_id=0, addr=A0), 0), 2)])
    assert s is None


def test_chunks_survive_the_state_round_trip():
    parts = chunks(reg("b", 0, A0, tps=many(300)))
    s, _ = apply_at(None, [(parts[0], 1)])
    s = GroupState.from_parts(*s.to_parts())
    s, _ = apply_at(s, [(p, 2) for p in parts[1:]])
    assert queue_names(s) == set(many(300))


# ---------------------------------------------------------------- the lazily decoded topic table

def _stored(state: GroupState) -> GroupState:
    return GroupState.from_parts(*state.to_parts())


def test_heartbeats_and_unchanged_reregistrations_leave_the_topic_table_encoded():
    e = reg("b", 0, A0, tps=many(50))
    s, _ = apply_at(None, [(norm(e, 0), 1)])
    core, tps = s.to_parts()
    s = GroupState.from_parts(core, tps)
    s, res = apply_at(s, [(norm(hb("b", 0, A0), 0), 2), (norm(e, 0), 3), (norm(hb("b", 0, A0), 0), 4)])
    assert s._topics_json is tps  # never decoded: the same string object goes back to the store
    assert s.to_parts()[1] is tps and res.dirty_tables <= {t.BROKER_LIVE.name}  # liveness only
    # A new topic name under the same data version decodes it and adds just that topic.
    s, res = apply_at(_stored(s), [(norm(reg("b", 0, A0, tps=many(51)), 0), 5)])
    assert res.dirty_tables - {t.BROKER_LIVE.name} == {t.TOPIC_QUEUE.name} and len(queue_names(s)) == 51


def test_the_encoded_topic_table_answers_emptiness_and_digest_without_decoding():
    s, _ = apply_at(None, [(norm(reg("b", 0, A0, tps=many(5)), 0), 1)])
    s = _stored(s)
    assert s.has_topics() and s.topic_keys_digest() == topic_keys_digest(many(5))
    assert s._topics_json is not None
    empty = GroupState("x", topics_json="{}")
    assert empty.is_empty() and not empty.has_topics()


def test_parts_round_trip_is_stable():
    s, _ = apply_at(None, [(norm(reg("b", 0, A0, tps=many(5)), 0), 1), (norm(reg("b", 1, A1), 0), 2)])
    again = _stored(s)
    assert again == s and again.to_parts() == s.to_parts()
    assert json.loads(unpack_topics(again.to_parts()[1])) == {k: v for k, v in s.topics.items()}


def test_a_long_topic_table_is_stored_packed_and_read_back():
    """The state store keeps a long table compressed (what every batch rewrites is the core and
    a twelfth of the table), a short one as JSON, and reads a table stored as plain JSON by an
    earlier version."""
    s, _ = apply_at(None, [(norm(reg("b", 0, A0, tps=many(100)), 0), 1)])
    core, stored = s.to_parts()
    plain = json.dumps(s.topics, separators=(",", ":"), sort_keys=True)
    assert stored != plain and len(stored) * 5 < len(plain) and unpack_topics(stored) == plain
    assert _stored(s).topics == s.topics and _stored(s).has_topics()
    earlier = GroupState.from_parts(core, plain)
    assert earlier.topics == s.topics and earlier == s
    small, _ = apply_at(None, [(norm(reg("b", 0, A0, tps=many(2)), 0), 1)])
    assert small.to_parts()[1] == json.dumps(small.topics, separators=(",", ":"), sort_keys=True)
