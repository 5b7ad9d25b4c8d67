"""The front's coalescing window: an address's liveness signals merged into one event (pure, no I/O).

A broker sends a heartbeat every few seconds and re-sends its unchanged registration every 30 s;
each of them only moves its `lastUpdateTimestamp`. Published one by one, a fleet's signals
would cost a Kafka record each and wake the job as often. Within one window only the newest
signal of an address matters, so the window keeps one event per (clusterName, brokerAddr) and
the front publishes what waits once per NAMESRV_REMOTING_HEARTBEAT_COALESCE_MS (the loop that
does so is the front's: this module has no clock and no I/O).

A small repeat (a REGISTER_BROKER with `repeats`, naming the full registration it repeats) says
more than a heartbeat: the job learns from it that the registration still stands. A heartbeat
arriving after it in the same window therefore only lends it its newer timestamp instead of
replacing it.
"""

from __future__ import annotations

from typing import Any

# (clusterName, brokerAddr): the address a broker's liveness is kept under
Address = tuple[str, str]


class Coalescer:
    """The signals waiting for the next flush, the newest per address."""

    def __init__(self) -> None:
        self._waiting: dict[Address, dict[str, Any]] = {}

    def signal(self, event: dict[str, Any]) -> None:
        """A heartbeat (BROKER_HEARTBEAT event, timestamped): the newest of its address waits,
        unless a small repeat of the address waits already; that one takes its timestamp."""
        key = (event["clusterName"], event["brokerAddr"])
        waiting = self._waiting.get(key)
        if waiting is not None and waiting.get("repeats") is not None:
            waiting["timestamp"] = event["timestamp"]  # a repeat waiting in the window carries the newer time
        else:
            self._waiting[key] = event

    def repeat(self, small: dict[str, Any], timestamp: int) -> None:
        """A registration repeated unchanged, as its small event (`repeats`, no timestamp): it waits
        instead of whatever its address had waiting, stamped `timestamp`."""
        self._waiting[(small["clusterName"], small["brokerAddr"])] = {**small, "timestamp": timestamp}

    def take(self, broker_names: set[str]) -> list[dict[str, Any]]:
        """What waits for these groups, in arrival order, no longer waiting: a write of a group is
        published after them, so that the log keeps the order its requests arrived in (a repeat
        published after a later registration of its group would be applied after it, and write
        its shared flags over the later ones)."""
        taken = [k for k, e in self._waiting.items() if e["brokerName"] in broker_names]
        return [self._waiting.pop(k) for k in taken]

    def forget(self, key: Address) -> None:
        """Whatever waits for `key` is not published (the address was unregistered meanwhile)."""
        self._waiting.pop(key, None)

    def flush(self) -> list[dict[str, Any]]:
        """What waits, in the order the addresses first arrived in the window; the window starts empty."""
        if not self._waiting:
            return []
        batch, self._waiting = list(self._waiting.values()), {}
        return batch

    def __len__(self) -> int:
        return len(self._waiting)
