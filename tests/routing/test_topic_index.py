"""routeinfo.topic_index.TopicIndex against the obvious dict-of-lists it replaces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from routeinfo.topic_index import TopicIndex

row = st.fixed_dictionaries({
    "topic": st.sampled_from(["A", "B", "C", "a", "TopicTest", "%RETRY%g", "Z-9"]),
    "brokerName": st.sampled_from(["b0", "b1", "b2", "broker-10"]),
    "perm": st.integers(0, 7), "readQueueNums": st.integers(0, 16), "topicSysFlag": st.integers(0, 3),
    "writeQueueNums": st.integers(0, 16)})


def naive(rows):
    out = {}
    for r in rows:
        out.setdefault(r["topic"], []).append({k: v for k, v in r.items() if k != "topic"})
    return {k: sorted(v, key=lambda q: q["brokerName"]) for k, v in out.items()}


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=40).map(lambda rs: list({(r["topic"], r["brokerName"]): r for r in rs}.values())),
       st.sampled_from(["A", "B", "missing", "", "Z-9", "TopicTestX"]))
def test_behaves_like_a_dict_of_sorted_queue_lists(rows, probe):
    idx, expected = TopicIndex.from_rows(rows), naive(rows)
    assert list(idx) == sorted(expected) and len(idx) == len(expected)
    assert (probe in idx) == (probe in expected)
    assert idx.get(probe) == expected.get(probe)
    assert dict(idx.items()) == expected
    assert idx.row_count() == len(rows)


def test_empty_and_non_string_keys():
    idx = TopicIndex.from_rows([])
    assert len(idx) == 0 and "A" not in idx and idx.get("A") is None and 3 not in idx


def test_a_topics_queue_list_is_built_once_per_snapshot():
    idx = TopicIndex.from_rows([{"topic": "T", "brokerName": "b", "perm": 6, "readQueueNums": 1,
                                 "topicSysFlag": 0, "writeQueueNums": 1}])
    assert idx["T"] is idx["T"]


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=40).map(lambda rs: list({(r["topic"], r["brokerName"]): r for r in rs}.values())),
       st.sampled_from(["b0", "b1", "broker-10", "absent"]))
def test_a_groups_topic_keys_are_the_digest_of_its_topic_names(rows, group):
    from routeinfo.state import topic_keys_digest
    idx = TopicIndex.from_rows(rows)
    expected = topic_keys_digest(sorted(r["topic"] for r in rows if r["brokerName"] == group))
    assert idx.topic_keys_of(group) == expected
    assert idx.topic_keys_of(group) == expected  # kept
