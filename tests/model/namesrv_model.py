"""An independent, sequential model of RocketMQ's RouteInfoManager and KVConfigManager.

Written from docs/semantics.md in RocketMQ's own shape (global tables as dicts,
one method per request code, one lock-free thread), NOT from pipelines/: it is the oracle the
property-based tests compare the pipeline against. It includes this project's deliberate
differences (the table at the top of the semantics): registration is atomic, a live entry
that cannot be resolved is still dropped, unit lists use the smallest brokerName.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

PERM_READ, PERM_WRITE = 4, 2
MASTER_ID = 0
DEFAULT_TIMEOUT = 120_000


@dataclass
class QueueData:
    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int


@dataclass
class BrokerData:
    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)
    zoneName: str | None = None
    enableActingMaster: bool = False


@dataclass
class BrokerLiveInfo:
    lastUpdateTimestamp: int
    heartbeatTimeoutMillis: int
    dataVersion: dict[str, int]
    haServerAddr: str | None


class NamesrvModel:
    def __init__(self, *, default_timeout_ms: int = DEFAULT_TIMEOUT,
                 delete_topic_with_broker_registration: bool = False) -> None:
        self.topicQueueTable: dict[str, dict[str, QueueData]] = {}
        self.brokerAddrTable: dict[str, BrokerData] = {}
        self.clusterAddrTable: dict[str, set[str]] = {}
        self.brokerLiveTable: dict[tuple[str, str], BrokerLiveInfo] = {}
        self.filterServerTable: dict[tuple[str, str], list[str]] = {}
        self.kv: dict[str, dict[str, str]] = {}
        self.config = {"enableAllTopicList": True, "enableTopicList": True, "orderMessageEnable": False,
                       "supportActingMaster": False}
        self.default_timeout_ms = default_timeout_ms
        self.deleteTopicWithBrokerRegistration = delete_topic_with_broker_registration

    # ------------------------------------------------------------ 103 REGISTER_BROKER
    def register_broker(self, cluster: str, addr: str, name: str, broker_id: int, ha: str | None,
                        zone: str | None, timeout: int | None, acting: bool | None,
                        topic_config_table: dict[str, dict[str, Any]], data_version: dict[str, int],
                        filter_server_list: list[str] | None, now: int) -> dict[str, Any] | None:
        """Returns the result (masterAddr/haServerAddr) or None when the registration is refused."""
        bd_existing = self.brokerAddrTable.get(name)
        addrs_before = dict(bd_existing.brokerAddrs) if bd_existing else {}
        guarded = broker_id not in addrs_before and len(topic_config_table) == 1
        # Deliberate difference: where RocketMQ's guard would leave an empty BrokerData (a new
        # group, or its only address moving to the refused id), nothing changes.
        if guarded and (bd_existing is None or all(a == addr for a in addrs_before.values())):
            return None

        self.clusterAddrTable.setdefault(cluster, set()).add(name)
        register_first = False
        bd = self.brokerAddrTable.get(name)
        if bd is None:
            bd = BrokerData(cluster, name)
            self.brokerAddrTable[name] = bd
            register_first = True
        is_old = acting is None
        bd.enableActingMaster = (not is_old) and acting
        bd.zoneName = zone
        for bid in [i for i, a in bd.brokerAddrs.items() if a == addr and i != broker_id]:
            del bd.brokerAddrs[bid]
        # Stale epoch, after the steps above (RouteInfoManager L276-292): the refused address
        # leaves the live table.
        old = bd.brokerAddrs.get(broker_id)
        if old is not None and old != addr:
            old_live = self.brokerLiveTable.get((cluster, old))
            if old_live is not None and old_live.dataVersion["stateVersion"] > data_version["stateVersion"]:
                self.brokerLiveTable.pop((cluster, addr), None)
                return None
        if guarded:  # RouteInfoManager L294-298, after the steps above
            return None
        previous = bd.brokerAddrs.get(broker_id)
        bd.brokerAddrs[broker_id] = addr
        register_first = register_first or not previous

        is_master = broker_id == MASTER_ID
        is_prime_slave = not is_old and not is_master and broker_id == min(bd.brokerAddrs)
        if is_master or is_prime_slave:
            if self.deleteTopicWithBrokerRegistration:
                for topic in list(self.topicQueueTable):
                    qmap = self.topicQueueTable[topic]
                    if name in qmap and topic not in topic_config_table:
                        del qmap[name]
                        if not qmap:
                            del self.topicQueueTable[topic]
            for topic, tc in topic_config_table.items():
                if register_first or self._is_topic_config_changed(cluster, addr, data_version, topic, name):
                    perm = tc["perm"]
                    if is_prime_slave and bd.enableActingMaster:
                        perm &= ~PERM_WRITE
                    self.topicQueueTable.setdefault(topic, {})[name] = QueueData(
                        name, tc["readQueueNums"], tc["writeQueueNums"], perm, tc["topicSysFlag"])

        self.brokerLiveTable[(cluster, addr)] = BrokerLiveInfo(
            now, timeout if timeout is not None else self.default_timeout_ms, dict(data_version), ha)
        if filter_server_list is not None:
            if not filter_server_list:
                self.filterServerTable.pop((cluster, addr), None)
            else:
                self.filterServerTable[(cluster, addr)] = list(filter_server_list)

        result = {"masterAddr": None, "haServerAddr": None}
        if broker_id != MASTER_ID:
            master = bd.brokerAddrs.get(MASTER_ID)
            if master is not None and (cluster, master) in self.brokerLiveTable:
                result = {"masterAddr": master, "haServerAddr": self.brokerLiveTable[(cluster, master)].haServerAddr}
        return result

    def _is_broker_topic_config_changed(self, cluster: str, addr: str, dv: dict[str, int]) -> bool:
        live = self.brokerLiveTable.get((cluster, addr))
        return live is None or live.dataVersion != dv

    def _is_topic_config_changed(self, cluster, addr, dv, topic, name) -> bool:
        if self._is_broker_topic_config_changed(cluster, addr, dv):
            return True
        qmap = self.topicQueueTable.get(topic)
        return not qmap or name not in qmap

    # ------------------------------------------------------------ 904 / 322
    def broker_heartbeat(self, cluster: str, addr: str, now: int) -> None:
        live = self.brokerLiveTable.get((cluster, addr))
        if live is not None:
            live.lastUpdateTimestamp = max(live.lastUpdateTimestamp, now)

    def query_data_version(self, cluster: str, addr: str, dv: dict[str, int] | None) -> tuple[bool, dict | None]:
        live = self.brokerLiveTable.get((cluster, addr))
        changed = live is None or dv is None or live.dataVersion != dv
        return changed, (dict(live.dataVersion) if live else None)

    # ------------------------------------------------------------ 104 UNREGISTER_BROKER (synchronous)
    def unregister_broker(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        self.brokerLiveTable.pop((cluster, addr), None)
        self.filterServerTable.pop((cluster, addr), None)
        removed, reduced = False, False
        bd = self.brokerAddrTable.get(name)
        if bd is not None:
            for bid in [i for i, a in bd.brokerAddrs.items() if a == addr]:
                del bd.brokerAddrs[bid]
            if not bd.brokerAddrs:
                del self.brokerAddrTable[name]
                removed = True
        if removed:
            names = self.clusterAddrTable.get(cluster)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.clusterAddrTable[cluster]
            for topic in list(self.topicQueueTable):
                qmap = self.topicQueueTable[topic]
                qmap.pop(name, None)
                if not qmap:
                    del self.topicQueueTable[topic]
        else:
            reduced = True
        if reduced and name in self.brokerAddrTable:  # no BrokerData: RocketMQ's NPE, skipped here
            bd = self.brokerAddrTable[name]
            no_master = not bd.brokerAddrs or min(bd.brokerAddrs) > MASTER_ID
            if bd.enableActingMaster and no_master:
                for qmap in self.topicQueueTable.values():
                    if name in qmap:
                        qmap[name].perm &= ~PERM_WRITE

    # ------------------------------------------------------------ scanNotActiveBroker
    def scan_not_active_broker(self, now: int) -> list[tuple[str, str]]:
        expired = []
        for (cluster, addr), live in sorted(self.brokerLiveTable.items()):
            if live.lastUpdateTimestamp + live.heartbeatTimeoutMillis < now:
                expired.append((cluster, addr))
        for cluster, addr in expired:
            owner = next(((n, bid) for n, bd in sorted(self.brokerAddrTable.items()) if bd.cluster == cluster
                          for bid, a in bd.brokerAddrs.items() if a == addr), None)
            if owner is None:  # deliberate difference: RocketMQ keeps this entry forever
                self.brokerLiveTable.pop((cluster, addr), None)
                self.filterServerTable.pop((cluster, addr), None)
            else:
                self.unregister_broker(cluster, addr, owner[0], owner[1])
        return expired

    # ------------------------------------------------------------ 205 / 327 / 216 / 217
    def wipe_write_perm_of_broker(self, name: str) -> int:
        n = 0
        for qmap in self.topicQueueTable.values():
            if name in qmap:
                qmap[name].perm &= ~PERM_WRITE
                n += 1
        return n

    def add_write_perm_of_broker(self, name: str) -> int:
        n = 0
        for qmap in self.topicQueueTable.values():
            if name in qmap:
                qmap[name].perm = PERM_READ | PERM_WRITE
                n += 1
        return n

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if cluster:
            names = self.clusterAddrTable.get(cluster, set())
            qmap = self.topicQueueTable.get(topic)
            if qmap is not None:
                for n in names:
                    qmap.pop(n, None)
                if not qmap:
                    del self.topicQueueTable[topic]
        else:
            self.topicQueueTable.pop(topic, None)

    def register_topic(self, topic: str, queue_datas: list[dict[str, Any]]) -> None:
        if not queue_datas:
            return
        if topic in self.topicQueueTable:
            for q in queue_datas:
                if q["brokerName"] not in self.brokerAddrTable:
                    return
                self.topicQueueTable[topic][q["brokerName"]] = QueueData(**q)
        else:
            if any(q["brokerName"] not in self.brokerAddrTable for q in queue_datas):
                return
            self.topicQueueTable[topic] = {q["brokerName"]: QueueData(**q) for q in queue_datas}

    # ------------------------------------------------------------ 100 / 101 / 102 / 219 KV
    def put_kv_config(self, ns: str, key: str, value: str) -> None:
        self.kv.setdefault(ns, {})[key] = value

    def delete_kv_config(self, ns: str, key: str) -> None:
        if ns in self.kv:
            self.kv[ns].pop(key, None)

    def get_kv_config(self, ns: str, key: str) -> str | None:
        return self.kv.get(ns, {}).get(key)

    def get_kv_list_by_namespace(self, ns: str) -> dict[str, str] | None:
        return None if ns not in self.kv else dict(self.kv[ns])

    # ------------------------------------------------------------ 105 / 106 / topic lists
    def pickup_topic_route_data(self, topic: str) -> dict[str, Any] | None:
        qmap = self.topicQueueTable.get(topic)
        if not qmap:
            return None
        broker_datas = []
        for name in qmap:
            bd = self.brokerAddrTable.get(name)
            if bd is not None:
                broker_datas.append(copy.deepcopy(bd))
        if not broker_datas:
            return None
        filters: dict[str, list[str]] = {}
        if self.filterServerTable:
            for bd in broker_datas:
                for addr in bd.brokerAddrs.values():
                    lst = self.filterServerTable.get((bd.cluster, addr))
                    if lst is not None:
                        filters[addr] = lst
        if self.config["supportActingMaster"] and not topic.startswith("rmq_sys_SYNC_BROKER_MEMBER_") \
                and any(MASTER_ID not in bd.brokerAddrs for bd in broker_datas):
            for bd in broker_datas:
                if bd.brokerAddrs and MASTER_ID not in bd.brokerAddrs and bd.enableActingMaster:
                    qd = qmap.get(bd.brokerName)
                    if qd is not None and not qd.perm & PERM_WRITE:
                        smallest = min(bd.brokerAddrs)
                        bd.brokerAddrs[MASTER_ID] = bd.brokerAddrs.pop(smallest)
        route = {
            "brokerDatas": sorted((self._broker_json(bd) for bd in broker_datas), key=lambda b: b["brokerName"]),
            "filterServerTable": filters,
            "queueDatas": sorted((vars(q).copy() for q in qmap.values()), key=lambda q: q["brokerName"]),
        }
        if self.config["orderMessageEnable"]:
            conf = self.get_kv_config("ORDER_TOPIC_CONFIG", topic)
            if conf is not None:
                route["orderTopicConf"] = conf
        return route

    @staticmethod
    def _broker_json(bd: BrokerData) -> dict[str, Any]:
        out = {"brokerAddrs": {str(k): v for k, v in sorted(bd.brokerAddrs.items())}, "brokerName": bd.brokerName,
               "cluster": bd.cluster, "enableActingMaster": bd.enableActingMaster}
        if bd.zoneName is not None:
            out["zoneName"] = bd.zoneName
        return out

    def get_all_cluster_info(self) -> dict[str, Any]:
        return {"brokerAddrTable": {n: self._broker_json(bd) for n, bd in sorted(self.brokerAddrTable.items())},
                "clusterAddrTable": {c: sorted(ns) for c, ns in sorted(self.clusterAddrTable.items())}}

    def get_all_topic_list(self) -> list[str] | None:
        return sorted(self.topicQueueTable) if self.config["enableAllTopicList"] else None

    def get_topics_by_cluster(self, cluster: str) -> list[str] | None:
        if not self.config["enableTopicList"]:
            return None
        names = self.clusterAddrTable.get(cluster, set())
        return sorted(t for t, qmap in self.topicQueueTable.items() if any(n in qmap for n in names))

    def get_system_topic_list(self) -> list[str]:
        out = set(self.clusterAddrTable)
        for names in self.clusterAddrTable.values():
            out |= names
        return sorted(out)

    def _unit_list(self, test) -> list[str] | None:
        if not self.config["enableTopicList"]:
            return None
        return sorted(t for t, qmap in self.topicQueueTable.items()
                      if qmap and test(qmap[min(qmap)].topicSysFlag))

    def get_unit_topics(self):
        return self._unit_list(lambda f: f & 1)

    def get_has_unit_sub_topic_list(self):
        return self._unit_list(lambda f: f & 2)

    def get_has_unit_sub_un_unit_topic_list(self):
        return self._unit_list(lambda f: f & 2 and not f & 1)

    # ------------------------------------------------------------ events (the project's transport)
    def apply_event(self, e: dict[str, Any]) -> None:
        """An event of the `namesrv-events` contract, at its event time (scan first)."""
        now = e["time"]
        self.scan_not_active_broker(now)
        kind = e["type"]
        if kind == "REGISTER_BROKER":
            self.register_broker(e["clusterName"], e["brokerAddr"], e["brokerName"], e["brokerId"],
                                 e["haServerAddr"], e["zoneName"], e["heartbeatTimeoutMillis"],
                                 e["enableActingMaster"], e["topicConfigTable"], e["dataVersion"],
                                 e["filterServerList"], now)
        elif kind == "BROKER_HEARTBEAT":
            self.broker_heartbeat(e["clusterName"], e["brokerAddr"], now)
        elif kind == "UNREGISTER_BROKER":
            self.unregister_broker(e["clusterName"], e["brokerAddr"], e["brokerName"], e["brokerId"])
        elif kind == "WIPE_WRITE_PERM_OF_BROKER":
            self.wipe_write_perm_of_broker(e["brokerName"])
        elif kind == "ADD_WRITE_PERM_OF_BROKER":
            self.add_write_perm_of_broker(e["brokerName"])
        elif kind == "PUT_KV_CONFIG":
            self.put_kv_config(e["namespace"], e["key"], e["value"])
        elif kind == "DELETE_KV_CONFIG":
            self.delete_kv_config(e["namespace"], e["key"])
        elif kind == "UPDATE_NAMESRV_CONFIG":
            self.config[e["key"]] = e["value"] == "true"
        else:
            raise ValueError(f"the model takes {kind} through its request method, not as an event")

    # ------------------------------------------------------------ tables as rows (for comparisons)
    def table_rows(self) -> dict[str, set[tuple]]:
        return {
            "topic_queue": {(t, n, q.readQueueNums, q.writeQueueNums, q.perm, q.topicSysFlag)
                            for t, qmap in self.topicQueueTable.items() for n, q in qmap.items()},
            "broker_addr": {(n, bd.cluster, bid, a, bd.zoneName, bd.enableActingMaster)
                            for n, bd in self.brokerAddrTable.items() for bid, a in bd.brokerAddrs.items()},
            "cluster_addr": {(c, n) for c, ns in self.clusterAddrTable.items() for n in ns},
            "broker_live": {(c, a, li.lastUpdateTimestamp, li.heartbeatTimeoutMillis,
                             tuple(sorted(li.dataVersion.items())), li.haServerAddr)
                            for (c, a), li in self.brokerLiveTable.items()},
            "filter_server": {(c, a, tuple(lst)) for (c, a), lst in self.filterServerTable.items()},
            "kv_config": {(ns, k, v) for ns, tbl in self.kv.items() for k, v in tbl.items()}
                         | {(ns, None, None) for ns, tbl in self.kv.items() if not tbl},
        }
