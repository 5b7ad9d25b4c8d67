"""Strict or lenient by what a request stores (docs/semantics.md §15.5), on the pure request decoding:
BROKER_HEARTBEAT (904) and QUERY_DATA_VERSION (322) store nothing, so names that fail the contract
find nothing instead of failing; RocketMQ 5.5.0 answers them SUCCESS (tests/differential/malformed.py's
`lookup` family holds the front to it)."""

from __future__ import annotations

import pytest

from remoting import codes, requests
from remoting.protocol import Command
from routeinfo.snapshot import Snapshot
from schemas.fields import InvalidInput

ADDR = "10.0.0.1:10911"


def _snap() -> Snapshot:
    snap = Snapshot.empty()
    snap.brokers["grp"] = {"brokerAddrs": {"0": ADDR}, "brokerName": "grp", "cluster": "C", "enableActingMaster": False}
    return snap


def _cmd(code: int, **ext: str) -> Command:
    return Command(code=code, opaque=1, ext=ext)


def test_a_well_formed_signal_is_forwarded_as_sent():
    event = requests.heartbeat(_cmd(codes.QUERY_DATA_VERSION, clusterName="C", brokerAddr=ADDR, brokerName="grp",
                                    brokerId="0"), 5, _snap())
    assert event is not None and (event["brokerName"], event["brokerId"], event["timestamp"]) == ("grp", 0, 5)


@pytest.mark.parametrize("code", sorted(requests.LENIENT_SIGNALS))
@pytest.mark.parametrize("odd", [{}, {"brokerName": ""}, {"brokerName": '{"a":1}'}, {"brokerName": "a\ufffd"},
                                 {"brokerId": "abc"}])
def test_odd_names_refresh_the_group_holding_the_address(code, odd):
    """RocketMQ refreshes (clusterName, brokerAddr)'s live entry and reads no other name."""
    ext = {"clusterName": "C", "brokerAddr": ADDR, "brokerName": "grp", **odd}
    if not odd:
        del ext["brokerName"]
    event = requests.heartbeat(_cmd(code, **ext), 5, _snap())
    assert event is not None and (event["brokerName"], event["clusterName"], event["brokerAddr"]) == ("grp", "C", ADDR)


@pytest.mark.parametrize("code", sorted(requests.LENIENT_SIGNALS))
@pytest.mark.parametrize("ext", [{"clusterName": "", "brokerAddr": ADDR}, {"clusterName": "C", "brokerAddr": "a\ufffd"},
                                 {"clusterName": '{"a":1}', "brokerAddr": ADDR}, {"clusterName": "C", "brokerAddr": " "}])
def test_names_that_find_nothing_refresh_nothing_and_do_not_fail(code, ext):
    assert requests.heartbeat(_cmd(code, brokerName="grp", **ext), 5, _snap()) is None


@pytest.mark.parametrize("missing", ["clusterName", "brokerAddr"])
def test_without_cluster_or_address_rocketmqs_lookup_fails(missing):
    ext = {"clusterName": "C", "brokerAddr": ADDR, "brokerName": "grp"}
    del ext[missing]
    with pytest.raises(InvalidInput, match=f'NullPointerException.*"this.{missing}" is null'):
        requests.heartbeat(_cmd(codes.BROKER_HEARTBEAT, **ext), 5, _snap())
