"""RocketMQ's namesrv unit tests (semantics §11), ported, against the pure core + route_reads."""

from __future__ import annotations

import pytest

from tests.scenarios.drivers import PureDriver
from tests.scenarios.upstream import SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.upstream for s in SCENARIOS])
def test_upstream_scenario(scenario):
    scenario.run(PureDriver(delete_topic_with_broker_registration=scenario.delete_topic_with_broker_registration))
