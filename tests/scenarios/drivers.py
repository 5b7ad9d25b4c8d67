"""Two ways to run an upstream scenario: against the pure core (fast) and against the running
system (Kafka → Spark → Delta → HTTP). Scenarios speak RocketMQ's logical names; the system
driver prefixes them so that many scenarios share one pipeline without seeing each other."""

from __future__ import annotations

import json
from typing import Any

import requests

from routeinfo import admin_fanout, route_reads
from schemas import events as ev
from tests.model.pure_system import PureSystem


def register_event(cluster: str, name: str, bid: int, addr: str, *, topics: dict[str, Any], counter: int = 1,
                   timestamp: int = 1, acting: bool | None = False, ha: str | None = None, zone: str | None = None,
                   timeout: int | None = None, state_version: int = 0) -> dict[str, Any]:
    e = ev.register_broker_event(cluster=cluster, broker_name=name, broker_id=bid, addr=addr, ha_addr=ha,
                                 topics=topics, timeout_ms=timeout, enable_acting_master=acting, zone=zone,
                                 data_version={"timestamp": timestamp, "counter": counter,
                                               "stateVersion": state_version})
    if acting is None:
        e.pop("enableActingMaster")  # an old-version (4.x) broker does not send the field
    return e


class PureDriver:
    def __init__(self, *, delete_topic_with_broker_registration: bool = False,
                 support_acting_master: bool = True) -> None:
        self.sys = PureSystem(delete_topic_with_broker_registration=delete_topic_with_broker_registration)
        self.now = 1_700_000_000_000
        if support_acting_master:
            self.set_config(supportActingMaster=True)

    def _run(self, events: list[dict[str, Any]]) -> None:
        self.now += 10
        self.sys.run_batch(events, self.now)

    def snap(self):
        return self.sys.snapshot()

    # writes
    def reg(self, cluster, name, bid, addr, **kw) -> None:
        self._run([register_event(cluster, name, bid, addr, **kw)])

    def unreg(self, cluster, name, bid, addr) -> None:
        self._run([ev.unregister_broker_event(cluster=cluster, broker_name=name, broker_id=bid, addr=addr)])

    def wipe(self, name) -> int:
        self._run([ev.wipe_write_perm_event(name)])
        return route_reads.topics_hosted_by(self.snap(), name)

    def add(self, name) -> int:
        self._run([ev.add_write_perm_event(name)])
        return route_reads.topics_hosted_by(self.snap(), name)

    def delete_topic(self, topic, cluster=None) -> None:
        self._run(admin_fanout.delete_topic(self.snap(), topic, cluster))

    def register_topic(self, topic, queue_datas) -> None:
        self._run(admin_fanout.register_topic(self.snap(), topic, queue_datas))

    def kv_put(self, ns, key, value) -> None:
        self._run([ev.put_kv_event(ns, key, value)])

    def kv_delete(self, ns, key) -> None:
        self._run([ev.delete_kv_event(ns, key)])

    def set_config(self, **switches: bool) -> None:
        self._run([ev.update_config_event(k, "true" if v else "false") for k, v in switches.items()])

    # reads
    def route(self, topic) -> dict | None:
        return route_reads.topic_route(self.snap(), topic)

    def cluster(self) -> dict:
        return json.loads(json.dumps(route_reads.cluster_info(self.snap())))

    def topic_list(self, kind: str, cluster: str | None = None) -> list[str] | None:
        snap = self.snap()
        try:
            if kind == "all":
                return route_reads.all_topics(snap)["topicList"]
            if kind == "cluster":
                return route_reads.topics_by_cluster(snap, cluster)["topicList"]
            if kind == "system":
                return route_reads.system_topics(snap)["topicList"]
            return route_reads.unit_topics(snap, kind)["topicList"]
        except route_reads.Disabled:
            return None

    def kv_get(self, ns, key) -> str | None:
        return self.snap().kv.get(ns, {}).get(key)

    def kv_list(self, ns) -> dict | None:
        table = self.snap().kv.get(ns)
        return None if table is None else dict(table)

    def data_version(self, cluster, addr, dv) -> dict:
        return route_reads.data_version(self.snap(), cluster, addr, dv)

    def master(self, name) -> dict:
        return route_reads.master_of(self.snap(), name)


class SystemDriver:
    """Broker events go to Kafka; admin/KV/config writes and every read go through HTTP."""

    def __init__(self, pipe, prefix: str) -> None:
        self.pipe, self.p = pipe, prefix
        self.token = pipe.cfg.admin_token
        self.http = requests.Session()

    # naming
    def n(self, name: str) -> str:
        return self.p + name

    def strip(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return obj[len(self.p):] if obj.startswith(self.p) else obj
        if isinstance(obj, list):
            return [self.strip(x) for x in obj]
        if isinstance(obj, dict):
            return {self.strip(k): self.strip(v) for k, v in obj.items()}
        return obj

    def _publish(self, events) -> None:
        self.pipe.wait_served(self.pipe.publish(events))

    def _write(self, method: str, path: str, body: Any = None) -> Any:
        r = self.http.request(method, self.pipe.url + path, json=body, timeout=60,
                              headers={"Authorization": f"Bearer {self.token}"})
        assert r.status_code == 200, (method, path, r.status_code, r.text)
        return r.json()

    def _read(self, path: str) -> tuple[int, Any]:
        r = self.http.get(self.pipe.url + path, timeout=30)
        return r.status_code, r.json()

    # writes
    def reg(self, cluster, name, bid, addr, **kw) -> None:
        topics = {self.n(t): {**c, "topicName": self.n(t)} for t, c in kw.pop("topics").items()}
        self._publish([register_event(self.n(cluster), self.n(name), bid, addr, topics=topics, **kw)])

    def unreg(self, cluster, name, bid, addr) -> None:
        self._publish([ev.unregister_broker_event(cluster=self.n(cluster), broker_name=self.n(name),
                                                  broker_id=bid, addr=addr)])

    def wipe(self, name) -> int:
        return self._write("POST", f"/brokers/{self.n(name)}/wipe-write-perm")["wipeTopicCount"]

    def add(self, name) -> int:
        return self._write("POST", f"/brokers/{self.n(name)}/add-write-perm")["addTopicCount"]

    def delete_topic(self, topic, cluster=None) -> None:
        self._write("DELETE", f"/topics/{self.n(topic)}" + (f"?cluster={self.n(cluster)}" if cluster else ""))

    def register_topic(self, topic, queue_datas) -> None:
        qds = [{**q, "brokerName": self.n(q["brokerName"])} for q in queue_datas]
        self._write("PUT", f"/topics/{self.n(topic)}/route", {"queueDatas": qds})

    def kv_put(self, ns, key, value) -> None:
        self._write("PUT", f"/kv/{self.n(ns)}/{key}", {"value": value})

    def kv_delete(self, ns, key) -> None:
        self._write("DELETE", f"/kv/{self.n(ns)}/{key}")

    def set_config(self, **switches: bool) -> None:
        self._write("PUT", "/config", switches)

    # reads
    def route(self, topic) -> dict | None:
        status, body = self._read(f"/topics/{self.n(topic)}/route")
        if status == 404:
            assert body["code"] == "TOPIC_NOT_EXIST"
            return None
        assert status == 200, body
        return self.strip(body)

    def cluster(self) -> dict:
        _, body = self._read("/cluster")
        return self.strip({"brokerAddrTable": {k: v for k, v in body["brokerAddrTable"].items() if k.startswith(self.p)},
                           "clusterAddrTable": {k: v for k, v in body["clusterAddrTable"].items()
                                                if k.startswith(self.p)}})

    def topic_list(self, kind: str, cluster: str | None = None) -> list[str] | None:
        path = {"all": "/topics", "system": "/topics/system", "unit": "/topics/unit", "unit-sub": "/topics/unit-sub",
                "unit-sub-ununit": "/topics/unit-sub-ununit"}.get(kind) or f"/clusters/{self.n(cluster)}/topics"
        status, body = self._read(path)
        if status == 403:
            return None
        return [self.strip(t) for t in body["topicList"] if t.startswith(self.p)]

    def kv_get(self, ns, key) -> str | None:
        status, body = self._read(f"/kv/{self.n(ns)}/{key}")
        return body["value"] if status == 200 else None

    def kv_list(self, ns) -> dict | None:
        status, body = self._read(f"/kv/{self.n(ns)}")
        return body["table"] if status == 200 else None

    def data_version(self, cluster, addr, dv) -> dict:
        q = "" if dv is None else "?" + "&".join(f"{k}={v}" for k, v in dv.items())
        return self._read(f"/brokers/{self.n(cluster)}/{addr}/data-version{q}")[1]

    def master(self, name) -> dict:
        return self._read(f"/brokers/{self.n(name)}/master")[1]
