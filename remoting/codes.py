"""RocketMQ's request and response codes a NameServer serves, and its remarks, word for word."""

from __future__ import annotations

# RequestCode
PUT_KV_CONFIG = 100
GET_KV_CONFIG = 101
DELETE_KV_CONFIG = 102
REGISTER_BROKER = 103
UNREGISTER_BROKER = 104
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
WIPE_WRITE_PERM_OF_BROKER = 205
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
DELETE_TOPIC_IN_NAMESRV = 216
REGISTER_TOPIC_IN_NAMESRV = 217
GET_KVLIST_BY_NAMESPACE = 219
GET_TOPICS_BY_CLUSTER = 224
GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
GET_UNIT_TOPIC_LIST = 311
GET_HAS_UNIT_SUB_TOPIC_LIST = 312
GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
UPDATE_NAMESRV_CONFIG = 318
GET_NAMESRV_CONFIG = 319
QUERY_DATA_VERSION = 322
ADD_WRITE_PERM_OF_BROKER = 327
GET_BROKER_MEMBER_GROUP = 901
BROKER_HEARTBEAT = 904

REQUEST_CODES = frozenset({
    PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG, REGISTER_BROKER, UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC,
    GET_BROKER_CLUSTER_INFO, WIPE_WRITE_PERM_OF_BROKER, GET_ALL_TOPIC_LIST_FROM_NAMESERVER, DELETE_TOPIC_IN_NAMESRV,
    REGISTER_TOPIC_IN_NAMESRV, GET_KVLIST_BY_NAMESPACE, GET_TOPICS_BY_CLUSTER, GET_SYSTEM_TOPIC_LIST_FROM_NS,
    GET_UNIT_TOPIC_LIST, GET_HAS_UNIT_SUB_TOPIC_LIST, GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, UPDATE_NAMESRV_CONFIG,
    GET_NAMESRV_CONFIG, QUERY_DATA_VERSION, ADD_WRITE_PERM_OF_BROKER, GET_BROKER_MEMBER_GROUP, BROKER_HEARTBEAT})

# ResponseCode
SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
QUERY_NOT_FOUND = 22

# Who may send what (ACL classes, as rocketmq-rust names them): admin writes need a signature;
# broker codes need a broker network and, with a key pair configured, a signature too.
ADMIN_WRITES = frozenset({PUT_KV_CONFIG, DELETE_KV_CONFIG, WIPE_WRITE_PERM_OF_BROKER, DELETE_TOPIC_IN_NAMESRV,
                          REGISTER_TOPIC_IN_NAMESRV, UPDATE_NAMESRV_CONFIG, ADD_WRITE_PERM_OF_BROKER})
BROKER_CODES = frozenset({REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT})

# RemotingCommand.createResponseCommand's remark, left in place by processors that only set the code
NOT_SET_REMARK = "not set any response code"
FAQ = "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."


def not_supported(code: int) -> str:
    return f" request type {code} not supported"


def topic_not_exist(topic: str) -> str:
    return f"No topic route info in name server for the topic: {topic}{FAQ}"


def kv_not_found(namespace: str | None, key: str | None = None, *, with_key: bool = True) -> str:
    text = f"No config item, Namespace: {namespace}"
    return f"{text} Key: {key}" if with_key else text
