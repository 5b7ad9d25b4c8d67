"""The dashboard lists broker groups (and clusters) in natural order (issue 37): runs of digits
compare as numbers, so dash-102 comes before dash-1002, as a person reading the list expects."""

from __future__ import annotations

import itertools
import random

import pytest

from serving.dashboard import SORTED_GROUPS, natural_key


def test_numbers_in_names_sort_as_numbers():
    names = ["dash-1002", "dash-102", "dash-0", "dash-2", "dash-10", "dash-1000", "dash-99"]
    assert sorted(names, key=natural_key) == ["dash-0", "dash-2", "dash-10", "dash-99", "dash-102", "dash-1000",
                                              "dash-1002"]


def test_text_still_sorts_as_text():
    names = ["broker-b", "broker-a", "broker-a", "Broker-z", "broker-", "DefaultCluster"]
    assert sorted(names, key=natural_key) == sorted(names)  # without digits: the order of the text


@pytest.mark.parametrize("names, expected", [
    (["a1x2", "a1x"], ["a1x", "a1x2"]),  # the text after a number equals the other's: shorter first, no int-vs-str
    (["a1", "a01", "a001"], ["a001", "a01", "a1"]),  # equal numbers: by the text, so the order is total
    (["10", "9", "x", ""], ["", "9", "10", "x"]),  # a name that is a number, an empty name
    (["cluster2-b10", "cluster10-b1", "cluster2-b9"], ["cluster2-b9", "cluster2-b10", "cluster10-b1"]),
])
def test_edge_cases(names, expected):
    assert sorted(names, key=natural_key) == expected


def test_any_mix_of_names_sorts_without_error_and_the_same_whatever_the_input_order():
    rng = random.Random(37)
    alphabet = "ab-_.1029"
    names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(2000)]
    once = sorted(names, key=natural_key)
    rng.shuffle(names)
    assert sorted(names, key=natural_key) == once
    assert all(natural_key(a) <= natural_key(b) for a, b in itertools.pairwise(once))


def test_the_groups_page_lists_clusters_and_groups_in_natural_order(app):
    from serving.context import EXTENSION
    from tests.helpers import cut, reg
    names = {"dash-1002": "Cluster10", "dash-102": "Cluster10", "dash-2": "Cluster10", "dash-0": "Cluster9"}
    app.extensions[EXTENSION].current = cut(*(reg(name, 0, f"10.0.0.{i}:10911", cluster=cluster)
                                              for i, (name, cluster) in enumerate(names.items())))
    body = app.test_client().get("/dashboard/api/groups?limit=10").get_json()
    assert [(g["cluster"], g["brokerName"]) for g in body["groups"]] == [
        ("Cluster9", "dash-0"), ("Cluster10", "dash-2"), ("Cluster10", "dash-102"), ("Cluster10", "dash-1002")]
    page = app.test_client().get("/dashboard/api/groups?limit=2&offset=1&q=cluster10").get_json()
    assert [g["brokerName"] for g in page["groups"]] == ["dash-102", "dash-1002"] and page["total"] == 3


def test_the_order_is_sorted_once_per_cut(app):
    import dataclasses

    from serving.context import EXTENSION
    from tests.helpers import cut, reg
    store = app.extensions[EXTENSION]
    store.current = dataclasses.replace(cut(reg("b-10", 0, "10.0.0.1:1"), reg("b-9", 0, "10.0.0.2:1")), snapshot_id=7)

    def names() -> list[str]:
        return [g["brokerName"] for g in app.test_client().get("/dashboard/api/groups").get_json()["groups"]]

    assert names() == ["b-9", "b-10"]
    pairs = app.extensions[SORTED_GROUPS]
    assert names() == ["b-9", "b-10"] and app.extensions[SORTED_GROUPS] is pairs  # kept
    store.current = dataclasses.replace(cut(reg("b-100", 0, "10.0.0.3:1"), reg("b-9", 0, "10.0.0.2:1")), snapshot_id=8)
    assert names() == ["b-9", "b-100"]  # a newer cut: sorted again
