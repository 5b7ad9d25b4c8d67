"""RocketMQ's RouteInfoManager and KVConfigManager as pure functions (no I/O, no Spark, no Flask).

Write side: `route_manager.apply` (one broker group's events in, its new state and changes
out), with the per-request rules in `route_writes`, expiry in `housekeeping` and the group's
state in `state`; `kv_manager` for KV and the runtime switches. Read side: `route_reads`
(pickupTopicRouteData, cluster info, topic lists, ...) and `admin_fanout` over a `snapshot`
(one consistent cut of the tables). The streaming job, the HTTP server, the notebooks and the
remoting front all call these same functions. `§` marks cite docs/semantics.md.
"""
