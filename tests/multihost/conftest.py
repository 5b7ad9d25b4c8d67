"""The multi-host bed (ops/netbed.py): each test module's hosts as network namespaces."""

from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.multihost


@pytest.fixture(scope="module")
def bed_factory():
    """`bed_factory(names, tag)`: a bed of those hosts, removed after the module."""
    from ops import netbed
    reason = netbed.missing()
    if reason is not None:
        pytest.skip(reason)
    if shutil.which("java") is None:
        pytest.skip("Java 17+ is not on PATH: the hosts' servers cannot start")
    made: list[netbed.Bed] = []

    def make(names: list[str], tag: str) -> netbed.Bed:
        bed = netbed.Bed(names, tag).up()
        made.append(bed)
        return bed

    yield make
    for bed in made:
        bed.down()
    assert not [ns for ns in netbed.namespaces() if ns.startswith(netbed.NETNS_PREFIX)], "a bed was left behind"
