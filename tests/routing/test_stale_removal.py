"""A closed connection's unregistration never removes a newer registration of the same address
(issue 25, item 4). Two remoting fronts share one event log and one served cut, as replicas of
the front do: a broker registers through one, loses that connection, reconnects to the other and
registers again within the same second; the old connection's close reaches the log after the new
registration. RocketMQ's onChannelDestroy matches by address only and would wipe the fresh entry;
here the unregistration names the registration it undoes (`registrationOffset`) and the job skips
it. The fronts and the job's step are the production code (tests/differential/in_memory.py)."""

from __future__ import annotations

import time

import pytest

from remoting import codes
from remoting.client import RemotingClient
from remoting.front import Front
from tests.differential.in_memory import InMemoryLog
from tests.harness import REMOTING_AK, REMOTING_SK, FrontThread

pytestmark = pytest.mark.integration
ADDR, TOPIC = "10.1.2.3:10911", "StaleRemovalTopic"


@pytest.fixture
def two_fronts(tmp_path):
    from conf import load_config
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0",
                       "NAMESRV_REMOTING_ACCESS_KEY": REMOTING_AK, "NAMESRV_REMOTING_SECRET_KEY": REMOTING_SK})
    log = InMemoryLog(cfg.broker_timeout_ms)
    fronts = [FrontThread(Front(cfg, log, lambda: log)) for _ in range(2)]  # type: ignore[arg-type]
    yield fronts, log
    for f in fronts:
        f.stop()


def _register(client: RemotingClient) -> None:
    answer = client.register_broker(cluster="C", broker_name="stale-b", broker_id=0, addr=ADDR,
                                    ha_addr="10.1.2.3:10912", topics={t: {"topicName": t} for t in (TOPIC, "StaleRemovalOther")})
    assert answer.code == codes.SUCCESS, answer.remark


def _route_addrs(addr: str) -> list[str]:
    with RemotingClient(addr) as c:
        answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    if answer.code != codes.SUCCESS:
        return []
    from remoting import bodies
    return [a for bd in bodies.loads_lenient(answer.body)["brokerDatas"] for a in bd["brokerAddrs"].values()]


def _settle(log: InMemoryLog, published_before: int, timeout_s: float = 5.0) -> None:
    """Until the log holds a record more than `published_before` (the close's unregistration)."""
    deadline = time.monotonic() + timeout_s
    while log._offset <= published_before:
        assert time.monotonic() < deadline, "the closed connection's unregistration was never published"
        time.sleep(0.01)


def test_a_reconnected_brokers_new_registration_survives_its_old_connections_close(two_fronts):
    (a, b), log = two_fronts
    signed = {"access_key": REMOTING_AK, "secret_key": REMOTING_SK}
    old = RemotingClient(a.addr, **signed)
    _register(old)
    started = time.monotonic()
    new = RemotingClient(b.addr, **signed)  # the broker reconnects, to the other front
    _register(new)
    before_close = log._offset
    old.close()  # the old connection's close arrives after the new registration
    _settle(log, before_close)
    assert time.monotonic() - started < 1.0  # all within the same second
    # the close was published as an unregistration of the old registration; the new one stays
    assert [r for r in log.dead_letters] == []
    for front in (a, b):
        assert _route_addrs(front.addr) == [ADDR]
    # the newest registration's own connection closing does unregister the address
    before_close = log._offset
    new.close()
    _settle(log, before_close)
    for front in (a, b):
        assert _route_addrs(front.addr) == []
