"""Where liveness lives: which records only keep a broker alive, and when they are read.

A broker's liveness signals (BROKER_HEARTBEAT, QUERY_DATA_VERSION, and the REGISTER_BROKER a
default broker re-sends every 30 s unchanged) change nothing but its `lastUpdateTimestamp`.
This package decides everything about them, and nothing else does:

- `fingerprint`: the one fingerprint of a registration, computed once on the request's raw bytes
  by the remoting front and carried in its record's header (`schemas.events.FINGERPRINT_HEADER`);
- `coalescing`: the front's window that merges an address's signals into one event;
- `ledger`: whether a record in the log is a pure signal (the log's order decides);
- `watch`: the ledger's verdict on each record that waits to be read;
- `admission`: deferral, whether a trigger runs a batch now or lets signals wait for company;
- `deadlines`: the earliest group timeout a batch must run for;
- `hot`: the hot liveness state, each bucket's live entries as columns apart from its groups'
  route state, whose times a batch's pure signals move in one pass (the step's bucket container,
  `pipelines/buckets.py`, keeps it in the operator's state).

The path of a signal is in docs/architecture.md ("Where liveness lives").
"""
