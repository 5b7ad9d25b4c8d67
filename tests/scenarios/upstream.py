"""RocketMQ's own namesrv unit tests (semantics §11), ported as scenarios.

Each scenario names the upstream test it mirrors and runs against a driver (pure core or the
running system). Where upstream pokes internals (injecting tables, calling onChannelDestroy),
the port reaches the same state through events: a destroyed channel is an UNREGISTER_BROKER
of that address, an injected QueueData is a registration. Upstream's `127.0.0.1:109119` is not
a valid port and is replaced by `127.0.0.1:10919`; likewise `cluster-broker-i:<id>` gets port
10911 + id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from schemas import events as ev
from schemas import fields


@dataclass(frozen=True)
class Scenario:
    upstream: str
    run: Callable
    delete_topic_with_broker_registration: bool = False
    exclusive: bool = False  # flips a global switch: run alone on a shared system


SCENARIOS: list[Scenario] = []


def scenario(upstream: str, **flags):
    def wrap(fn):
        SCENARIOS.append(Scenario(upstream, fn, **flags))
        return fn
    return wrap


def tc(*names, read=8, write=8, perm=6, sys_flag=0):
    return {n: ev.topic_config(n, read=read, write=write, perm=perm, sys_flag=sys_flag) for n in names}


# RouteInfoManagerNewTest fixture (§11.1)
DC, DB = "Default_Cluster", "Default_Broker"
M, MHA, S, SHA = "127.0.0.1:10911", "127.0.0.1:20911", "127.0.0.1:30911", "127.0.0.1:40911"
BASE = tc("baseTopic")


def master(d, *topics, acting=True, counter=1, name=DB, addr=M, cluster=DC, **extra):
    d.reg(cluster, name, 0, addr, topics={**BASE, **tc(*topics), **extra.pop("tps", {})}, acting=acting,
          counter=counter, ha=MHA, **extra)


def slave(d, *topics, acting=True, counter=1, name=DB, addr=S, cluster=DC, bid=1):
    d.reg(cluster, name, bid, addr, topics={**BASE, **tc(*topics)}, acting=acting, counter=counter, ha=SHA)


def addrs(route, i=0):
    return route["brokerDatas"][i]["brokerAddrs"]


def writeable(route, i=0):
    return bool(route["queueDatas"][i]["perm"] & fields.PERM_WRITE)


@scenario("RouteInfoManagerNewTest.getAllClusterInfo")
def get_all_cluster_info(d):
    master(d, "TestTopic")
    d.reg("AnotherCluster", "AnotherBroker", 0, S, topics={**BASE, **tc("TestTopic1")}, acting=True)
    info = d.cluster()
    assert set(info["clusterAddrTable"]) == {DC, "AnotherCluster"}
    assert set(info["brokerAddrTable"]) == {DB, "AnotherBroker"}
    assert {b["brokerAddrs"]["0"] for b in info["brokerAddrTable"].values()} == {M, S}


@scenario("RouteInfoManagerNewTest.deleteTopic")
def delete_topic(d):
    master(d, "TestTopic")
    d.delete_topic("TestTopic")
    assert d.route("TestTopic") is None
    master(d, "TestTopic", counter=2)
    d.reg("AnotherCluster", "AnotherBroker", 0, M, topics={**BASE, **tc("TestTopic")}, acting=True)
    assert len(d.route("TestTopic")["brokerDatas"]) == 2
    d.delete_topic("TestTopic", DC)
    route = d.route("TestTopic")
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["AnotherBroker"]


@scenario("RouteInfoManagerNewTest.getAllTopicList")
def get_all_topic_list(d):
    assert d.topic_list("all") == []
    master(d, "TestTopic", "TestTopic1", "TestTopic2")
    assert {"TestTopic", "TestTopic1", "TestTopic2"} <= set(d.topic_list("all"))


@scenario("RouteInfoManagerNewTest.registerBroker")
def register_broker(d):
    master(d, "TestTopic")
    slave(d, "TestTopic")
    assert d.master(DB) == {"masterAddr": M, "haServerAddr": MHA}


@scenario("RouteInfoManagerNewTest.unregisterBroker")
def unregister_broker(d):
    master(d, "TestTopic", "TestTopic1", "TestTopic2")
    d.unreg(DC, DB, 0, M)
    assert [d.route(t) for t in ("TestTopic", "TestTopic1", "TestTopic2")] == [None, None, None]
    master(d, "TestTopic", "TestTopic1", "TestTopic2")
    d.unreg(DC, DB, 0, M)
    assert [d.route(t) for t in ("TestTopic", "TestTopic1", "TestTopic2")] == [None, None, None]


@scenario("RouteInfoManagerNewTest.registerSlaveBroker")
def register_slave_broker(d):
    master(d, "TestTopic")
    slave(d, "TestTopic")
    assert addrs(d.route("TestTopic")) == {"0": M, "1": S}


@scenario("RouteInfoManagerNewTest.createNewTopic")
def create_new_topic(d):
    master(d, "TestTopic")
    slave(d, "TestTopic")
    master(d, "TestTopic", "TestTopic1")  # same DataVersion: the new topic is still added
    assert addrs(d.route("TestTopic1")) == {"0": M, "1": S}


def _switch_role(d, take_down):
    master(d, "TestTopic", acting=False)
    slave(d, "TestTopic", acting=False)
    take_down(d, 0, M)
    assert addrs(d.route("TestTopic")) == {"1": S}
    d.reg(DC, DB, 0, S, topics={**BASE, **tc("TestTopic")}, acting=False, counter=2, ha=SHA)
    assert addrs(d.route("TestTopic")) == {"0": S}
    d.reg(DC, DB, 1, M, topics={**BASE, **tc("TestTopic")}, acting=False, counter=2, ha=MHA)
    assert addrs(d.route("TestTopic")) == {"0": S, "1": M}


@scenario("RouteInfoManagerNewTest.switchBrokerRole")
def switch_broker_role(d):
    _switch_role(d, lambda d, bid, a: d.unreg(DC, DB, bid, a))


@scenario("RouteInfoManagerNewTest.switchBrokerRole_ChannelDestroy")
def switch_broker_role_channel_destroy(d):
    # the channel's destruction resolves to an unregister of its (cluster, address)
    _switch_role(d, lambda d, bid, a: d.unreg(DC, DB, 99, a))


@scenario("RouteInfoManagerNewTest.unRegisterSlaveBroker")
def unregister_slave_broker(d):
    master(d, "TestTopic")
    slave(d, "TestTopic")
    d.unreg(DC, DB, 1, S)
    route = d.route("TestTopic")
    assert len(route["brokerDatas"]) == 1 and addrs(route) == {"0": M}


@scenario("RouteInfoManagerNewTest.unRegisterMasterBroker")
def unregister_master_broker(d):
    master(d, "TestTopic")
    slave(d, "TestTopic")
    d.unreg(DC, DB, 0, M)
    route = d.route("TestTopic")
    assert len(route["brokerDatas"]) == 1 and addrs(route) == {"0": S}  # acting-master rewrite
    assert len(route["queueDatas"]) == 1 and route["queueDatas"][0]["perm"] == fields.PERM_READ


@scenario("RouteInfoManagerNewTest.unRegisterMasterBrokerOldVersion")
def unregister_master_broker_old_version(d):
    master(d, "TestTopic", acting=False)
    slave(d, "TestTopic", acting=False)
    d.unreg(DC, DB, 0, M)
    route = d.route("TestTopic")
    assert "0" not in addrs(route) and route["queueDatas"][0]["perm"] == 6


@scenario("RouteInfoManagerNewTest.submitMultiUnRegisterRequests")
def submit_multi_unregister_requests(d):
    master(d, "TestTopic1")
    master(d, "TestTopic2", name="Default_Broker1", addr="127.0.0.1:10919")
    d.unreg(DC, DB, 0, M)
    d.unreg(DC, "Default_Broker1", 0, "127.0.0.1:10919")
    assert d.route("TestTopic1") is None and d.route("TestTopic2") is None


@scenario("RouteInfoManagerNewTest.isBrokerTopicConfigChanged")
def is_broker_topic_config_changed(d):
    master(d, "TestTopic")
    stored = {"counter": 1, "stateVersion": 0, "timestamp": 1}
    assert d.data_version(DC, M, stored)["changed"] is False
    assert d.data_version(DC, M, {**stored, "timestamp": 1001})["changed"] is True
    assert d.data_version(DC, M, {**stored, "counter": 2})["changed"] is True


@scenario("RouteInfoManagerNewTest.queryBrokerTopicConfig")
def query_broker_topic_config(d):
    master(d, "TestTopic")
    assert d.data_version(DC, M, None)["dataVersion"] == {"counter": 1, "stateVersion": 0, "timestamp": 1}


@scenario("RouteInfoManagerNewTest.isTopicConfigChanged")
def is_topic_config_changed(d):
    # before any registration the broker counts as changed; afterwards an unchanged version
    # keeps an existing topic as it is but adds a topic it does not have yet
    assert d.data_version(DC, M, {"counter": 1, "stateVersion": 0, "timestamp": 1})["changed"] is True
    master(d, "TestTopic")
    master(d, tps={**tc("TestTopic", read=2), **tc("TestTopic1")})
    assert d.route("TestTopic")["queueDatas"][0]["readQueueNums"] == 8
    assert d.route("TestTopic1") is not None


@scenario("RouteInfoManagerNewTest.wipeWritePermOfBrokerByLock")
def wipe_write_perm_of_broker_by_lock(d):
    master(d, "TestTopic")
    assert d.route("TestTopic")["queueDatas"][0]["perm"] == 6
    d.wipe(DB)
    assert d.route("TestTopic")["queueDatas"][0]["perm"] == 4


@scenario("RouteInfoManagerNewTest.pickupTopicRouteData")
def pickup_topic_route_data(d):
    master(d, "TestTopic")
    route = d.route("TestTopic")
    assert [b["brokerName"] for b in route["brokerDatas"]] == [DB] and addrs(route) == {"0": M}
    q = route["queueDatas"][0]
    assert (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == (8, 8, 6)
    d.reg(DC, "AnotherBroker", 0, M, topics={**BASE, **tc("TestTopic")}, acting=True)
    route = d.route("TestTopic")
    assert len(route["brokerDatas"]) == 2 and len(route["queueDatas"]) == 2
    assert {b["brokerName"] for b in route["brokerDatas"]} == {DB, "AnotherBroker"}


@scenario("RouteInfoManagerNewTest.pickupTopicRouteDataWithSlave")
def pickup_topic_route_data_with_slave(d):
    master(d, "TestTopic")
    slave(d, "TestTopic")
    route = d.route("TestTopic")
    assert len(addrs(route)) == 2 and writeable(route)
    d.unreg(DC, DB, 0, M)
    route = d.route("TestTopic")
    assert len(addrs(route)) == 1 and not writeable(route)
    master(d, "TestTopic", counter=2)
    route = d.route("TestTopic")
    assert len(addrs(route)) == 2 and writeable(route)


def _order_topic(queues):
    return {"TestTopic": ev.topic_config("TestTopic", read=queues, write=queues, order=True)}


def _acting_slave_only(d, queues):
    d.reg(DC, DB, 1, S, topics={**BASE, **_order_topic(queues)}, acting=True, ha=SHA)
    route = d.route("TestTopic")
    assert addrs(route) == {"0": S} and not writeable(route)
    d.unreg(DC, DB, 1, S)
    d.reg(DC, DB, 1, S, topics={**BASE, **_order_topic(queues)}, acting=True, ha=SHA)
    d.reg(DC, DB, 0, M, topics={**BASE, **_order_topic(queues)}, acting=True, ha=MHA)
    d.unreg(DC, DB, 0, M)
    route = d.route("TestTopic")
    assert addrs(route) == {"0": S} and not writeable(route)
    d.unreg(DC, DB, 1, S)


@scenario("RouteInfoManagerNewTest.pickupPartitionOrderTopicRouteData")
def pickup_partition_order_topic_route_data(d):
    _acting_slave_only(d, 8)
    other = "Default_Broker_ANOTHER"
    for name in (DB, other):
        d.reg(DC, name, 0, M, topics={**BASE, **_order_topic(8)}, acting=True, ha=MHA, counter=3)
        d.reg(DC, name, 1, S, topics={**BASE, **_order_topic(8)}, acting=True, ha=SHA, counter=3)
    route = d.route("TestTopic")
    assert len(route["brokerDatas"]) == 2 and len(route["queueDatas"]) == 2
    d.unreg(DC, DB, 0, M)
    route = d.route("TestTopic")
    assert len(route["brokerDatas"]) == 2 and len(route["queueDatas"]) == 2
    by_name = {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]}
    assert by_name[DB] == {"0": S} and by_name[other] == {"0": M, "1": S}


@scenario("RouteInfoManagerNewTest.pickupGlobalOrderTopicRouteData")
def pickup_global_order_topic_route_data(d):
    _acting_slave_only(d, 1)


@scenario("RouteInfoManagerNewTest.registerOnlySlaveBroker")
def register_only_slave_broker(d):
    slave(d, "TestTopic")
    assert not writeable(d.route("TestTopic"))  # the prime slave's topics lose the write bit
    d.unreg(DC, DB, 1, S)
    master(d, "TestTopic")
    slave(d, "TestTopic")
    assert writeable(d.route("TestTopic"))
    d.unreg(DC, DB, 0, M)
    assert not writeable(d.route("TestTopic"))
    master(d, "TestTopic", counter=2)
    assert writeable(d.route("TestTopic"))


@scenario("RouteInfoManagerNewTest.onChannelDestroy")
def on_channel_destroy(d):
    master(d, "TestTopic", "TestTopic1")
    d.unreg(DC, DB, 0, M)
    assert d.route("TestTopic") is None and d.route("TestTopic1") is None
    master(d, "TestTopic", acting=False)
    slave(d, "TestTopic", acting=False)
    assert addrs(d.route("TestTopic")) == {"0": M, "1": S}
    d.unreg(DC, DB, 0, M)
    assert addrs(d.route("TestTopic")) == {"1": S}
    d.unreg(DC, DB, 1, S)
    assert d.route("TestTopic") is None


@scenario("RouteInfoManagerNewTest.onChannelDestroyByBrokerInfo")
def on_channel_destroy_by_broker_info(d):
    master(d, "TestTopic", "TestTopic1")
    d.unreg(DC, DB, 0, M)
    assert d.route("TestTopic") is None and d.route("TestTopic1") is None


@scenario("RouteInfoManagerNewTest.keepTopicWithBrokerRegistration")
def keep_topic_with_broker_registration(d):
    master(d, "TestTopic", "TestTopic1")
    master(d, "TestTopic1", counter=2)
    assert d.route("TestTopic") is not None and d.route("TestTopic1") is not None


@scenario("RouteInfoManagerNewTest.deleteTopicWithBrokerRegistration", delete_topic_with_broker_registration=True)
def delete_topic_with_broker_registration(d):
    master(d, "TestTopic", "TestTopic1")
    master(d, "TestTopic1", counter=2)
    assert d.route("TestTopic") is None and d.route("TestTopic1") is not None


@scenario("RouteInfoManagerNewTest.deleteTopicWithBrokerRegistration2", delete_topic_with_broker_registration=True)
def delete_topic_with_broker_registration2(d):
    other, other_addr = "Default_Broker1", "127.0.0.1:10919"
    master(d, "TestTopic", "TestTopic1")
    master(d, "TestTopic", "TestTopic1", name=other, addr=other_addr)
    assert len(d.route("TestTopic")["brokerDatas"]) == 2 and len(d.route("TestTopic1")["brokerDatas"]) == 2
    master(d, "TestTopic1", counter=2)
    assert [b["brokerName"] for b in d.route("TestTopic")["brokerDatas"]] == [other]
    assert len(d.route("TestTopic1")["brokerDatas"]) == 2
    master(d, "TestTopic1", counter=2, name=other, addr=other_addr)
    assert d.route("TestTopic") is None and len(d.route("TestTopic1")["brokerDatas"]) == 2


@scenario("RouteInfoManagerNewTest.registerSingleTopicWithBrokerRegistration",
          delete_topic_with_broker_registration=True)
def register_single_topic_with_broker_registration(d):
    qd = {"brokerName": DB, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, "topicSysFlag": 0}
    d.register_topic("TestTopic", [qd])
    assert d.route("TestTopic") is None
    master(d, "TestTopic")
    assert d.route("TestTopic") is not None
    d.register_topic("TestTopic1", [qd])
    assert d.route("TestTopic1") is not None
    master(d, "TestTopic", "TestTopic1", counter=2)
    assert d.route("TestTopic") is not None and d.route("TestTopic1") is not None
    master(d, "TestTopic", counter=3)
    assert d.route("TestTopic1") is None
    d.register_topic("TestTopic1", [qd])
    assert d.route("TestTopic1") is not None
    d.unreg(DC, DB, 0, M)
    assert d.route("TestTopic") is None and d.route("TestTopic1") is None


# RouteInfoManagerTest (§11.2): broker 1234 registers as a new-version prime slave
RC, RB, RA = "default-cluster", "default-broker", "127.0.0.1:10911"


def _rit_setup(d):
    d.reg(RC, RB, 1234, RA, topics=tc("unit-test0", "unit-test1", read=16, write=16), counter=10, timestamp=100,
          ha="127.0.0.1:1001", acting=False)


@scenario("RouteInfoManagerTest.testQueryBrokerTopicConfig")
def rit_query_broker_topic_config(d):
    _rit_setup(d)
    v10 = {"counter": 10, "stateVersion": 0, "timestamp": 100}
    v20 = {"counter": 20, "stateVersion": 0, "timestamp": 200}
    assert d.data_version(RC, RA, None)["dataVersion"] == v10
    d.reg("default-cluster-1", "default-broker-1", 1234, RA, topics=tc("unit-test0", "unit-test1"),
          counter=20, timestamp=200, acting=False)
    assert d.data_version(RC, RA, None)["dataVersion"] != v20
    assert d.data_version("default-cluster-1", RA, None)["dataVersion"] == v20
    d.unreg("default-cluster-1", "default-broker-1", 1234, RA)
    assert d.data_version(RC, RA, None)["dataVersion"] == v10
    assert "dataVersion" not in d.data_version("default-cluster-1", RA, None)


@scenario("RouteInfoManagerTest.testRegisterBroker")
def rit_register_broker(d):
    _rit_setup(d)
    _rit_setup(d)
    assert d.route("unit-test0")["queueDatas"][0]["readQueueNums"] == 16


@scenario("RouteInfoManagerTest.testWipeWritePermOfBrokerByLock")
def rit_wipe(d):
    d.reg(RC, "broker-a", 0, RA, topics={**tc("topic-a"), **tc("other")}, acting=False)
    assert d.wipe("broker-a") == 2
    assert d.route("topic-a")["queueDatas"][0]["perm"] == 4


@scenario("RouteInfoManagerTest.testAddWritePermOfBrokerByLock")
def rit_add(d):
    d.reg(RC, "broker-a", 0, RA, topics={**tc("topic-a", perm=4), **tc("other", perm=4)}, acting=False)
    assert d.add("broker-a") == 2
    assert d.route("topic-a")["queueDatas"][0]["perm"] == 6


@scenario("RouteInfoManagerTest.testPickupTopicRouteData")
def rit_pickup(d):
    _rit_setup(d)
    assert d.route("unit_test") is None


@scenario("RouteInfoManagerTest.testGetAllClusterInfo")
def rit_cluster_info(d):
    _rit_setup(d)
    info = d.cluster()
    assert info["clusterAddrTable"] == {RC: [RB]}
    assert info["brokerAddrTable"][RB]["brokerAddrs"] == {"1234": RA}


# RouteInfoManagerTestBase fixture (§11.3): 3 groups × ids 0..2, 10 topics
SC = "cluster"
SNAMES = ["broker-0", "broker-1", "broker-2"]
STOPICS = [f"topic-{i}" for i in range(10)]


def saddr(name: str, bid: int) -> str:
    """Upstream's `cluster-broker-i:<id>` uses the id as the port; port 0 is not a valid address here."""
    return f"cluster-{name}:{10911 + bid}"


def _static(d):
    for name in SNAMES:
        for bid in range(3):
            d.reg(SC, name, bid, saddr(name, bid), topics=tc(*STOPICS), acting=False)


@scenario("RouteInfoManagerStaticRegisterTest.testGetAllClusterInfo")
def static_cluster_info(d):
    _static(d)
    assert d.cluster()["clusterAddrTable"] == {SC: SNAMES}


@scenario("RouteInfoManagerStaticRegisterTest.testGetAllTopicList")
def static_all_topics(d):
    _static(d)
    assert set(d.topic_list("all")) == set(STOPICS)


@scenario("RouteInfoManagerStaticRegisterTest.testGetTopicsByCluster")
def static_topics_by_cluster(d):
    _static(d)
    assert set(d.topic_list("cluster", SC)) == set(STOPICS)


@scenario("RouteInfoManagerStaticRegisterTest.testPickupTopicRouteData")
def static_pickup(d):
    _static(d)
    route = d.route("topic-0")
    assert [(b["brokerName"], b["brokerAddrs"]) for b in sorted(route["brokerDatas"], key=lambda b: b["brokerName"])] \
        == [(n, {str(i): saddr(n, i) for i in range(3)}) for n in SNAMES]
    assert all((q["writeQueueNums"], q["readQueueNums"], q["perm"], q["topicSysFlag"]) == (8, 8, 6, 0)
               for q in route["queueDatas"])
    assert sorted(q["brokerName"] for q in route["queueDatas"]) == SNAMES


@scenario("RouteInfoManagerStaticRegisterTest.testDeleteTopic")
def static_delete_topic(d):
    _static(d)
    d.delete_topic("topic-0")
    assert d.route("topic-0") is None


@scenario("RouteInfoManagerStaticRegisterTest.testGetSystemTopicList")
def static_system_topics(d):
    _static(d)
    assert set(d.topic_list("system")) == {SC, *SNAMES}


@scenario("RouteInfoManagerBrokerRegisterTest.testMasterChangeFromSlave")
def master_change_from_slave(d):
    _static(d)
    assert addrs(d.route("topic-0"))["0"] == saddr("broker-0", 0)
    d.reg(SC, "broker-0", 0, saddr("broker-0", 1), topics=tc(*STOPICS), acting=False, counter=2)
    route = {b["brokerName"]: b["brokerAddrs"] for b in d.route("topic-0")["brokerDatas"]}
    assert route["broker-0"]["0"] == saddr("broker-0", 1) and "1" not in route["broker-0"]


@scenario("RouteInfoManagerBrokerRegisterTest.testUnregisterBroker")
def static_unregister(d):
    _static(d)
    d.unreg(SC, "broker-0", 2, saddr("broker-0", 2))
    route = {b["brokerName"]: b["brokerAddrs"] for b in d.route("topic-0")["brokerDatas"]}
    assert "2" not in route["broker-0"]


@scenario("RouteInfoManagerBrokerPermTest.testAddWritePermOfBrokerByLock")
def perm_add(d):
    d.reg(SC, "broker-0", 0, saddr("broker-0", 0), topics=tc("topic-0", "base", perm=4), acting=False)
    assert d.add("broker-0") == 2
    assert d.route("topic-0")["queueDatas"][0]["perm"] == 6


@scenario("RouteInfoManagerBrokerPermTest.testWipeWritePermOfBrokerByLock")
def perm_wipe_read_only(d):
    d.reg(SC, "broker-0", 0, saddr("broker-0", 0), topics=tc("topic-0", "base", perm=4), acting=False)
    assert d.wipe("broker-0") == 2  # counted although already read-only
    assert d.route("topic-0")["queueDatas"][0]["perm"] == 4


# RequestProcessorTest (§11.4) and KVConfigManagerTest (§11.7)
@scenario("RequestProcessorTest.testProcessRequest_PutKVConfig / GetKVConfig / DeleteKVConfig")
def kv_put_get_delete(d):
    d.kv_put("namespace", "key", "value")
    assert d.kv_get("namespace", "key") == "value"
    d.kv_delete("namespace", "key")
    assert d.kv_get("namespace", "key") is None


@scenario("RequestProcessorTest.testGetKVListByNamespace")
def kv_list(d):
    assert d.kv_list("default-namespace-1") is None  # QUERY_NOT_FOUND
    d.kv_put("default-namespace-1", "k", "v")
    assert d.kv_list("default-namespace-1") == {"k": "v"}


@scenario("KVConfigManagerTest.testPutKVConfig")
def kv_manager_put(d):
    d.kv_put("ORDER_TOPIC_CONFIG", "UnitTest", "test")
    assert d.kv_list("ORDER_TOPIC_CONFIG") is not None and d.kv_get("ORDER_TOPIC_CONFIG", "UnitTest") == "test"


@scenario("KVConfigManagerTest.testDeleteKVConfig (+ §8: an emptied namespace stays)")
def kv_manager_delete(d):
    d.kv_delete("ORDER_TOPIC_CONFIG2", "UnitTest")
    assert d.kv_list("ORDER_TOPIC_CONFIG2") is None and d.kv_get("ORDER_TOPIC_CONFIG2", "UnitTest") is None
    d.kv_put("ORDER_TOPIC_CONFIG2", "UnitTest", "x")
    d.kv_delete("ORDER_TOPIC_CONFIG2", "UnitTest")
    assert d.kv_list("ORDER_TOPIC_CONFIG2") == {}


@scenario("RequestProcessorTest.testProcessRequest_GetRouteInfoByTopic (ClientRequestProcessor)")
def route_info_by_topic(d):
    d.reg("cluster", "broker", 0, "10.10.1.1:10911", topics=tc("unit-test0", "unit-test1"), acting=False)
    assert d.route("unit-test0") is not None and d.route("test") is None


@scenario("RequestProcessorTest.testProcessRequest_RegisterBroker")
def processor_register_broker(d):
    d.reg("cluster", "broker", 2333, "10.10.1.1:10911", topics=tc("t1", "t2"), ha="10.10.2.1:10912", acting=None)
    assert d.cluster()["brokerAddrTable"]["broker"]["brokerAddrs"] == {"2333": "10.10.1.1:10911"}


@scenario("RequestProcessorTest.testGetAllTopicList (enableAllTopicList)", exclusive=True)
def switch_all_topic_list(d):
    d.reg("cluster", "broker", 0, "10.10.1.1:10911", topics=tc("t1", "t2"), acting=False)
    assert d.topic_list("all") is not None
    d.set_config(enableAllTopicList=False)
    try:
        assert d.topic_list("all") is None  # RocketMQ answers SYSTEM_ERROR "disable"
    finally:
        d.set_config(enableAllTopicList=True)


@scenario("§7.4 unit lists (the QueueData RocketMQ's per-topic HashMap yields first decides)")
def unit_lists(d):
    from routeinfo.route_reads import java_hash_order
    d.reg("cluster", "a", 0, "10.0.0.1:1", topics={**tc("unit", sys_flag=1), **tc("sub", sys_flag=2),
                                                   **tc("both", sys_flag=3)}, acting=False)
    d.reg("cluster", "b", 0, "10.0.0.2:1", topics={**tc("unit", sys_flag=0), **tc("sub", sys_flag=0),
                                                   **tc("both", sys_flag=0)}, acting=False)
    named = getattr(d, "n", lambda x: x)  # the system driver prefixes names
    if java_hash_order([named("a"), named("b")])[0] == named("a"):
        assert d.topic_list("unit") == ["both", "unit"]
        assert d.topic_list("unit-sub") == ["both", "sub"]
        assert d.topic_list("unit-sub-ununit") == ["sub"]
    else:  # b's flags (none) decide
        assert d.topic_list("unit") == d.topic_list("unit-sub") == d.topic_list("unit-sub-ununit") == []
