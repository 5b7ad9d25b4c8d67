"""The OpenAPI 3.1 document of the HTTP API, served at /openapi.json.

Kept by hand next to the blueprints; tests/serving/test_openapi.py fails when a Flask route and
this document disagree.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from conf.version import __version__
from routeinfo.risks import KINDS

bp = Blueprint("openapi", __name__)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _param(name: str, where: str = "path", description: str = "", schema: dict | None = None,
           required: bool | None = None) -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path" if required is None else required,
            "description": description, "schema": schema or {"type": "string"}}


ERR = _ref("Error")
E400 = _json(ERR, "invalid parameter (code INVALID_PARAMETER)")
E401 = _json(ERR, "missing or wrong bearer token (code NO_PERMISSION)")
E504 = _json(ERR, "published but not materialized in time; offsets tell where")
E503 = _json(ERR, "the event log (Kafka) is unavailable: nothing was written")
WAIT = _param("wait", "query", "false: answer 202 once published, without waiting", {"type": "boolean"})
A202 = _json(_ref("Accepted"), "published, not yet materialized (wait=false)")
SECURED: list[dict[str, list[str]]] = [{"bearer": []}]

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["code", "remark"], "properties": {
        "code": {"type": "string"}, "remark": {"type": "string"},
        "offsets": {"type": "array", "items": _ref("Offset")}}},
    "Offset": {"type": "object", "properties": {"partition": {"type": "integer"}, "offset": {"type": "integer"}}},
    "Accepted": {"type": "object", "required": ["code", "offsets"], "properties": {
        "code": {"type": "string"}, "offsets": {"type": "array", "items": _ref("Offset")}}},
    "QueueData": {"type": "object", "required": ["brokerName", "perm", "readQueueNums", "writeQueueNums",
                                                 "topicSysFlag"], "properties": {
        "brokerName": {"type": "string"}, "perm": {"type": "integer", "minimum": 0, "maximum": 7},
        "readQueueNums": {"type": "integer", "minimum": 0}, "writeQueueNums": {"type": "integer", "minimum": 0},
        "topicSysFlag": {"type": "integer", "minimum": 0}}},
    "BrokerData": {"type": "object", "required": ["brokerAddrs", "brokerName", "cluster", "enableActingMaster"],
                   "properties": {
        "brokerAddrs": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "broker id (as a string) -> address; id 0 is the master"},
        "brokerName": {"type": "string"}, "cluster": {"type": "string"},
        "enableActingMaster": {"type": "boolean"}, "zoneName": {"type": "string"}}},
    "TopicRouteData": {"type": "object", "required": ["brokerDatas", "filterServerTable", "queueDatas"],
                       "properties": {
        "brokerDatas": {"type": "array", "items": _ref("BrokerData")},
        "queueDatas": {"type": "array", "items": _ref("QueueData")},
        "filterServerTable": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
        "orderTopicConf": {"type": "string"}}},
    "ClusterInfo": {"type": "object", "required": ["brokerAddrTable", "clusterAddrTable"], "properties": {
        "brokerAddrTable": {"type": "object", "additionalProperties": _ref("BrokerData")},
        "clusterAddrTable": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}}},
    "TopicList": {"type": "object", "required": ["topicList"], "properties": {
        "topicList": {"type": "array", "items": {"type": "string"}}, "brokerAddr": {"type": "string"}}},
    "LiveBroker": {"type": "object", "properties": {
        "clusterName": {"type": "string"}, "brokerAddr": {"type": "string"}, "brokerName": {"type": "string"},
        "brokerId": {"type": ["integer", "null"]}, "lastUpdateTimestamp": {"type": "integer"},
        "heartbeatTimeoutMillis": {"type": "integer"}, "dataVersion": {"type": "string"},
        "haServerAddr": {"type": ["string", "null"]}}},
    "DataVersion": {"type": "object", "properties": {
        "counter": {"type": "integer"}, "stateVersion": {"type": "integer"}, "timestamp": {"type": "integer"}}},
    "DataVersionAnswer": {"type": "object", "required": ["changed"], "properties": {
        "changed": {"type": "boolean"}, "dataVersion": _ref("DataVersion")}},
    "Master": {"type": "object", "required": ["masterAddr", "haServerAddr"], "properties": {
        "masterAddr": {"type": ["string", "null"]}, "haServerAddr": {"type": ["string", "null"]}}},
    "MemberGroup": {"type": "object", "required": ["brokerMemberGroup"], "properties": {
        "brokerMemberGroup": {"type": "object", "properties": {
            "cluster": {"type": "string"}, "brokerName": {"type": "string"},
            "brokerAddrs": {"type": "object", "additionalProperties": {"type": "string"}}}}}},
    "KVTable": {"type": "object", "required": ["table"], "properties": {
        "table": {"type": "object", "additionalProperties": {"type": "string"}}}},
    "Value": {"type": "object", "required": ["value"], "properties": {"value": {"type": ["string", "null"]}}},
    "Switches": {"type": "object", "additionalProperties": {"type": "boolean"}, "properties": {
        "enableAllTopicList": {"type": "boolean"}, "enableTopicList": {"type": "boolean"},
        "orderMessageEnable": {"type": "boolean"}, "supportActingMaster": {"type": "boolean"}}},
    "Config": {"type": "object", "required": ["config"], "properties": {
        "config": _ref("Switches"), "readOnly": {"type": "object"}}},
    "Health": {"type": "object", "required": ["status"], "properties": {
        "status": {"type": "string", "enum": ["ok", "starting", "degraded"]},
        "snapshotId": {"type": ["integer", "null"]}, "snapshotCommitTime": {"type": ["integer", "null"]},
        "snapshotAgeMs": {"type": ["integer", "null"]}, "sourceOffsets": {"type": "object"},
        "lastCheckAgeMs": {"type": ["integer", "null"]}, "lastError": {"type": ["string", "null"]},
        "jobProgress": {"type": ["object", "null"]}, "ready": {"type": "boolean"},
        "jobStartedAt": {"type": ["integer", "null"]}}},
    "Readiness": {"type": "object", "required": ["status", "snapshotId"], "properties": {
        "status": {"type": "string", "enum": ["ready", "not ready"]}, "reason": {"type": "string"},
        "snapshotId": {"type": ["integer", "null"]}}},
    "SnapshotList": {"type": "object", "required": ["snapshots", "total"], "properties": {
        "snapshots": {"type": "array", "items": {"type": "object", "properties": {
            "snapshotId": {"type": "integer"}, "batchId": {"type": "integer"}, "commitTime": {"type": "integer"},
            "eventCount": {"type": "integer"}, "sourceOffsets": {"type": "object"}, "versions": {"type": "object"}}}},
        "total": {"type": "integer"}, "next": {"type": "string"}}},
    "Change": {"type": "object", "properties": {
        "snapshotId": {"type": "integer"}, "seq": {"type": "integer"}, "time": {"type": "integer"},
        "kind": {"type": "string"}, "clusterName": {"type": ["string", "null"]},
        "brokerName": {"type": ["string", "null"]}, "brokerAddr": {"type": ["string", "null"]},
        "brokerId": {"type": ["integer", "null"]}, "topic": {"type": ["string", "null"]},
        "namespace": {"type": ["string", "null"]}, "key": {"type": ["string", "null"]},
        "before": {}, "after": {}, "partition": {"type": ["integer", "null"]}, "offset": {"type": ["integer", "null"]}}},
    "ChangeList": {"type": "object", "required": ["changes", "total"], "properties": {
        "changes": {"type": "array", "items": _ref("Change")}, "total": {"type": "integer"},
        "next": {"type": "string"}}},
    "Diff": {"type": "object", "required": ["from", "to", "topics", "brokers", "clusters", "kv", "config"],
             "properties": {k: {"type": "object"} for k in ("from", "to", "topics", "brokers", "clusters", "kv",
                                                            "config")}},
    "GroupPage": {"type": "object", "required": ["total", "offset", "groups", "clusters", "snapshotId", "commitTime"],
                  "properties": {
        "total": {"type": "integer"}, "offset": {"type": "integer"}, "clusters": {"type": "integer"},
        "snapshotId": {"type": ["integer", "null"]}, "commitTime": {"type": ["integer", "null"]},
        "groups": {"type": "array", "items": {"type": "object", "required": ["cluster", "brokerName", "members"],
                                              "properties": {
            "cluster": {"type": "string"}, "brokerName": {"type": "string"}, "zoneName": {"type": ["string", "null"]},
            "members": {"type": "array", "items": {"type": "object", "properties": {
                "brokerId": {"type": "integer"}, "addr": {"type": "string"},
                "lastUpdateTimestamp": {"type": ["integer", "null"]},
                "heartbeatTimeoutMillis": {"type": ["integer", "null"]}}}}}}}}},
    "TopicPage": {"type": "object", "required": ["total", "offset", "topics", "snapshotId", "commitTime"], "properties": {
        "total": {"type": "integer"}, "offset": {"type": "integer"},
        "snapshotId": {"type": ["integer", "null"]}, "commitTime": {"type": ["integer", "null"]},
        "topics": {"type": "array", "items": {"type": "string"}}}},
    "Risk": {"type": "object", "required": ["id", "kind", "severity", "message", "since", "sinceAtOrBefore"],
             "properties": {
        "id": {"type": "string", "description": "<kind>:<subject>, the same in every cut the risk holds in"},
        "kind": {"type": "string", "enum": [k.name for k in KINDS]},
        "severity": {"type": "string", "enum": list(dict.fromkeys(k.severity for k in KINDS))},
        "message": {"type": "string"},
        "since": {"type": ["integer", "null"], "description": "epoch ms of the first cut of the risk's uninterrupted run"},
        "sinceAtOrBefore": {"type": "boolean", "description": "it already held at the oldest cut read (historyFrom): "
                                                              "it may have begun earlier"},
        "topic": {"type": "string"}, "cluster": {"type": "string"}, "brokerName": {"type": "string"},
        "address": {"type": "string"}}},
    "RiskPage": {"type": "object", "required": ["snapshotId", "commitTime", "historyFrom", "historyComplete", "counts",
                                                "severities", "total", "offset", "limit", "risks"], "properties": {
        "snapshotId": {"type": ["integer", "null"]}, "commitTime": {"type": ["integer", "null"]},
        "historyFrom": {"type": ["integer", "null"], "description": "epoch ms of the oldest cut since was read from"},
        "historyComplete": {"type": "boolean", "description": "false while the server still reads the history at its "
                                                              "start: since is then the served cut's"},
        "historyProblem": {"type": "string", "description": "present while a cut of the history could not be read "
                                                            "for now (its files are all there): it is read again, and "
                                                            "since is exact once it is"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"},
                   "description": "risks per kind, every kind, unfiltered"},
        "severities": {"type": "object", "additionalProperties": {"type": "integer"},
                       "description": "risks per severity (critical, warning, info), unfiltered"},
        "total": {"type": "integer", "description": "risks matching kind and severity"},
        "offset": {"type": "integer"}, "limit": {"type": "integer"},
        "risks": {"type": "array", "items": _ref("Risk")}, "next": {"type": "string"}}},
    "Success": {"type": "object", "required": ["code"], "properties": {
        "code": {"type": "string"}, "remark": {"type": "string"},
        "brokerNames": {"type": "array", "items": {"type": "string"}}}},
}

AS_OF = [_param("asOf", "query", "time travel: the cut committed at or before this instant (ISO-8601 or epoch ms)"),
         _param("snapshot", "query", "time travel: the cut with this snapshot id", {"type": "integer"})]
E404_SNAPSHOT = _json(ERR, "TOPIC_NOT_EXIST / QUERY_NOT_FOUND, or SNAPSHOT_NOT_FOUND for asOf/snapshot")
TOPIC = _param("topic", description="topic name (RocketMQ TopicValidator rules)")
CLUSTER = _param("cluster")
NS = _param("namespace")
KEY = _param("key")
BROKER = _param("broker_name", description="brokerName")


PAGE_PARAMS = [_param("q", "query", "case-insensitive substring"),
               _param("offset", "query", "paging (default 0)", {"type": "integer"}),
               _param("limit", "query", "1..500 (default 100)", {"type": "integer"})]


WATCH_RESUME = [_param("Last-Event-ID", "header", "resume after this cut (an event's id): the changes since it first, "
                       "from the history", {"type": "integer", "minimum": 0}, required=False),
                _param("lastEventId", "query", "the same, for clients that cannot set headers (EventSource polyfills); "
                       "the header wins", {"type": "integer", "minimum": 0})]
WATCH_STREAM = {"description": "Server-Sent Events: the answer now, then each served cut that changes it "
                               "(Operating it, 'Watching routes')",
                "content": {"text/event-stream": {"schema": {"type": "string"}}}}
WATCH_ERRORS = {"400": E400,
                "404": _json(ERR, "SNAPSHOT_NOT_FOUND: no cut with the resume id (or, under a WSGI server, no such path)"),
                "405": _json(ERR, "a watch is read with GET"),
                "410": _json(ERR, "SNAPSHOT_GONE: the resume id is beyond the retained history"),
                "501": _json(ERR, "served under a WSGI server (serving.wsgi), which holds no stream"),
                "503": _json(ERR, "SYSTEM_BUSY: NAMESRV_HTTP_MAX_WATCHERS streams open, the server stopping, or no cut "
                                  "served yet to resume from (Retry-After)")}

def _list(summary: str, gated: bool = True) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": _json(_ref("TopicList"), "topics"), "400": E400, "404": E404_SNAPSHOT}
    if gated:
        responses["403"] = _json(ERR, "switched off by enableTopicList/enableAllTopicList (remark 'disable')")
    return {"get": {"summary": summary, "parameters": list(AS_OF), "responses": responses}}


PATHS: dict[str, Any] = {
    "/topics/{topic}/route": {
        "get": {"summary": "GET_ROUTEINFO_BY_TOPIC (105)",
                "parameters": [TOPIC, _param("zone", "query", "client zone: the ZoneRouteRPCHook filter"), *AS_OF],
                "responses": {"200": _json(_ref("TopicRouteData"), "the route"), "400": E400,
                              "404": E404_SNAPSHOT}},
        "put": {"summary": "REGISTER_TOPIC_IN_NAMESRV (217), fanned out per broker group", "security": SECURED,
                "parameters": [TOPIC, WAIT],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["queueDatas"],
                    "properties": {"queueDatas": {"type": "array", "items": _ref("QueueData")}}}}}},
                "responses": {"200": _json(_ref("Success"), "materialized"), "202": A202, "400": E400,
                              "401": E401, "503": E503, "504": E504}}},
    "/topics/{topic}": {
        "delete": {"summary": "DELETE_TOPIC_IN_NAMESRV (216), fanned out per hosting broker group",
                   "security": SECURED, "parameters": [TOPIC, _param("cluster", "query", "only this cluster"), WAIT],
                   "responses": {"200": _json(_ref("Success"), "materialized"), "202": A202, "400": E400,
                                 "401": E401, "503": E503, "504": E504}}},
    "/topics": _list("GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206)"),
    "/clusters/{cluster}/topics": {"get": {**_list("GET_TOPICS_BY_CLUSTER (224)")["get"],
                                           "parameters": [CLUSTER, *AS_OF]}},
    "/topics/system": _list("GET_SYSTEM_TOPIC_LIST_FROM_NS (304): cluster and broker names", gated=False),
    "/topics/unit": _list("GET_UNIT_TOPIC_LIST (311)"),
    "/topics/unit-sub": _list("GET_HAS_UNIT_SUB_TOPIC_LIST (312)"),
    "/topics/unit-sub-ununit": _list("GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313)"),
    "/cluster": {"get": {"summary": "GET_BROKER_CLUSTER_INFO (106)", "parameters": list(AS_OF),
                         "responses": {"200": _json(_ref("ClusterInfo"), "cluster info"), "400": E400,
                                       "404": E404_SNAPSHOT}}},
    "/brokers/live": {"get": {"summary": "brokerLiveTable rows", "parameters": list(AS_OF), "responses": {
        "200": _json({"type": "array", "items": _ref("LiveBroker")}, "live brokers"), "400": E400,
        "404": E404_SNAPSHOT}}},
    "/brokers/{cluster}/{broker_addr}/data-version": {"get": {
        "summary": "QUERY_DATA_VERSION (322), without its heartbeat side effect",
        "parameters": [CLUSTER, _param("broker_addr", description="host:port"),
                       _param("counter", "query", schema={"type": "integer"}),
                       _param("timestamp", "query", schema={"type": "integer"}),
                       _param("stateVersion", "query", schema={"type": "integer"}), *AS_OF],
        "responses": {"200": _json(_ref("DataVersionAnswer"), "changed?"), "400": E400, "404": E404_SNAPSHOT}}},
    "/brokers/{broker_name}/master": {"get": {
        "summary": "a slave's master lookup (REGISTER_BROKER result): set only while the master is live "
                   "in the registrant's cluster",
        "parameters": [BROKER, _param("cluster", "query", description="the registrant's cluster (default: the "
                                      "BrokerData's)"), *AS_OF],
        "responses": {"200": _json(_ref("Master"), "master"), "400": E400, "404": E404_SNAPSHOT}}},
    "/brokers/{cluster}/{broker_name}/members": {"get": {
        "summary": "GET_BROKER_MEMBER_GROUP (901)", "parameters": [CLUSTER, BROKER, *AS_OF],
        "responses": {"200": _json(_ref("MemberGroup"), "member group"), "400": E400, "404": E404_SNAPSHOT}}},
    "/brokers/{broker_name}/wipe-write-perm": {"post": {
        "summary": "WIPE_WRITE_PERM_OF_BROKER (205)", "security": SECURED, "parameters": [BROKER, WAIT],
        "responses": {"200": _json({"type": "object", "required": ["wipeTopicCount"],
                                    "properties": {"wipeTopicCount": {"type": "integer"}}}, "count"),
                      "202": A202, "400": E400, "401": E401, "503": E503, "504": E504}}},
    "/brokers/{broker_name}/add-write-perm": {"post": {
        "summary": "ADD_WRITE_PERM_OF_BROKER (327)", "security": SECURED, "parameters": [BROKER, WAIT],
        "responses": {"200": _json({"type": "object", "required": ["addTopicCount"],
                                    "properties": {"addTopicCount": {"type": "integer"}}}, "count"),
                      "202": A202, "400": E400, "401": E401, "503": E503, "504": E504}}},
    "/kv/{namespace}": {"get": {"summary": "GET_KVLIST_BY_NAMESPACE (219)", "parameters": [NS, *AS_OF],
                                "responses": {"200": _json(_ref("KVTable"), "the namespace"), "400": E400,
                                              "404": E404_SNAPSHOT}}},
    "/kv/{namespace}/{key}": {
        "get": {"summary": "GET_KV_CONFIG (101)", "parameters": [NS, KEY, *AS_OF],
                "responses": {"200": _json(_ref("Value"), "the value"), "400": E400, "404": E404_SNAPSHOT}},
        "put": {"summary": "PUT_KV_CONFIG (100)", "security": SECURED, "parameters": [NS, KEY, WAIT],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Value")}}},
                "responses": {"200": _json(_ref("Value"), "materialized"), "202": A202, "400": E400,
                              "401": E401, "503": E503, "504": E504}},
        "delete": {"summary": "DELETE_KV_CONFIG (102)", "security": SECURED, "parameters": [NS, KEY, WAIT],
                   "responses": {"200": _json(_ref("Success"), "materialized"), "202": A202, "400": E400,
                                 "401": E401, "503": E503, "504": E504}}},
    "/config": {
        "get": {"summary": "GET_NAMESRV_CONFIG (319): runtime switches",
                "responses": {"200": _json(_ref("Config"), "switches")}},
        "put": {"summary": "UPDATE_NAMESRV_CONFIG (318) for allow-listed switches only", "security": SECURED,
                "parameters": [WAIT],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Switches")}}},
                "responses": {"200": _json(_ref("Config"), "materialized"), "202": A202, "400": E400,
                              "401": E401, "503": E503, "504": E504}}},
    "/history/snapshots": {"get": {
        "summary": "committed snapshots, newest first", "parameters": [
            _param("limit", "query", "1..1000 (default 100)", {"type": "integer"}),
            _param("before", "query", "only snapshots with a smaller id (paging)", {"type": "integer"})],
        "responses": {"200": _json(_ref("SnapshotList"), "snapshots"), "400": E400}}},
    "/history/changes": {"get": {
        "summary": "the route_changes audit log, oldest first", "parameters": [
            _param("since", "query", "ISO-8601 or epoch ms"), _param("until", "query", "ISO-8601 or epoch ms"),
            _param("topic", "query"), _param("brokerName", "query"), _param("cluster", "query"),
            _param("kind", "query", "e.g. QUEUE_ADDED, BROKER_EXPIRED, MASTER_CHANGED"), _param("namespace", "query"),
            _param("limit", "query", "1..1000 (default 100)", {"type": "integer"}),
            _param("offset", "query", "paging", {"type": "integer"})],
        "responses": {"200": _json(_ref("ChangeList"), "changes"), "400": E400}}},
    "/history/diff": {"get": {
        "summary": "the topology difference between the cuts at two instants", "parameters": [
            _param("from", "query", "ISO-8601 or epoch ms", required=True),
            _param("to", "query", "ISO-8601 or epoch ms", required=True)],
        "responses": {"200": _json(_ref("Diff"), "the difference"), "400": E400,
                      "404": _json(ERR, "SNAPSHOT_NOT_FOUND")}}},
    "/topics/{topic}/route/watch": {"get": {
        "summary": "GET_ROUTEINFO_BY_TOPIC (105) as a stream: each change as it is served",
        "parameters": [TOPIC, *WATCH_RESUME], "responses": {"200": WATCH_STREAM, **WATCH_ERRORS}}},
    "/cluster/watch": {"get": {
        "summary": "GET_BROKER_CLUSTER_INFO (106) as a stream: each change as it is served",
        "parameters": list(WATCH_RESUME), "responses": {"200": WATCH_STREAM, **WATCH_ERRORS}}},
    "/risks": {"get": {
        "summary": "the risks in the served topology (or as of a past cut), by severity, each with since when it holds",
        "parameters": [
            _param("kind", "query", "only this kind", {"type": "string", "enum": [k.name for k in KINDS]}),
            _param("severity", "query", "only this severity",
                   {"type": "string", "enum": list(dict.fromkeys(k.severity for k in KINDS))}),
            _param("offset", "query", "paging (default 0)", {"type": "integer"}),
            _param("limit", "query", "1..1000 (default 100)", {"type": "integer"}), *AS_OF],
        "responses": {"200": _json(_ref("RiskPage"), "one page of the cut's risks"), "400": E400,
                      "404": _json(ERR, "SNAPSHOT_NOT_FOUND for asOf/snapshot"),
                      "503": _json(ERR, "the served cut's report is still being computed (SYSTEM_BUSY)")}}},
    "/healthz": {"get": {"summary": "snapshot age and source offsets",
                         "responses": {"200": _json(_ref("Health"), "healthy or starting"),
                                       "503": _json(_ref("Health"), "degraded")}}},
    "/livez": {"get": {"summary": "the process answers",
                       "responses": {"200": _json({"type": "object", "required": ["status"],
                                                   "properties": {"status": {"const": "alive"}}}, "alive")}}},
    "/readyz": {"get": {"summary": "a cut is served and the job has committed a batch since it started",
                        "responses": {"200": _json(_ref("Readiness"), "ready"),
                                      "503": _json(_ref("Readiness"), "not ready, with the reason")}}},
    "/openapi.json": {"get": {"summary": "this document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
    "/dashboard": {"get": {"summary": "the read-only web dashboard (HTML)",
                           "responses": {"200": {"description": "the page",
                                                 "content": {"text/html": {"schema": {"type": "string"}}}}}}},
    "/dashboard/static/{name}": {"get": {
        "summary": "the dashboard's script and style sheet", "parameters": [_param("name")],
        "responses": {"200": {"description": "a file", "content": {"*/*": {"schema": {"type": "string"}}}},
                      "404": _json(ERR, "no such file")}}},
    "/dashboard/api/groups": {"get": {
        "summary": "broker groups with members and last heartbeat, filtered and paged (for the dashboard)",
        "parameters": [*PAGE_PARAMS, *AS_OF],
        "responses": {"200": _json(_ref("GroupPage"), "one page"), "400": E400, "404": E404_SNAPSHOT}}},
    "/dashboard/api/topics": {"get": {
        "summary": "topic names containing a substring, sorted and paged; or one exact name",
        "parameters": [*PAGE_PARAMS, _param("exact", "query", "this name only, if the cut has it"), *AS_OF],
        "responses": {"200": _json(_ref("TopicPage"), "one page"), "400": E400, "404": E404_SNAPSHOT}}},
    "/metrics": {"get": {"summary": "Prometheus metrics: this server's, the streaming job's and the remoting front's",
                         "responses": {"200": {"description": "Prometheus text format 0.0.4",
                                               "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "namesrv-stream", "version": __version__,
                 "description": "A RocketMQ-compatible NameServer over Delta tables: route, cluster, "
                                "topic-list and KV lookups; admin writes as events (read-your-writes)."},
        "servers": [{"url": "http://127.0.0.1:9877"}],
        "paths": PATHS,
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


@bp.get("/openapi.json")
def openapi() -> ResponseReturnValue:
    return jsonify(document())
