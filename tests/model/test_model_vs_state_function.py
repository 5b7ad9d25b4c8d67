"""Property: the pure state step (parse → routing/kv → emitted table rows → sink plan) yields
exactly the reference model's tables after every step of any generated workload."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from routeinfo import admin_fanout
from routeinfo.state import topic_keys_digest
from schemas import events as ev
from tests.model import ops
from tests.model.namesrv_model import NamesrvModel
from tests.model.pure_system import PureSystem

T0 = 1_700_000_000_000
TIMEOUT = 3000
EXAMPLES = 500


def run_workload(workload) -> int:
    model = NamesrvModel(default_timeout_ms=TIMEOUT)
    pure = PureSystem(timeout_ms=TIMEOUT)
    now = T0
    registrations: list[tuple[dict[str, Any], list[int]]] = []  # full registrations published: event, offsets
    for step, ((kind, args), dt) in enumerate(workload):
        now += dt
        if kind == "repeat":
            if not registrations:
                continue
            event, offsets = registrations[args["pick"] % len(registrations)]
            REPEATS.append(1)
            model.apply_event(ops_normalised({**event, "timestamp": now}, now))
            pure.run_batch([ev.repeated_registration_event(event, offsets, topic_keys_digest(event["topicConfigTable"]),
                                                           timestamp=now)], now)
        elif kind == "advance":
            now += args["ms"]
            model.scan_not_active_broker(now)
            pure.run_batch([], now)
        elif kind == "delete_topic":
            model.scan_not_active_broker(now)
            pure.run_batch([], now)
            pure.run_batch(admin_fanout.delete_topic(pure.snapshot(), args["topic"], args["cluster"]), now)
            model.delete_topic(args["topic"], args["cluster"])
        elif kind == "register_topic":
            model.scan_not_active_broker(now)
            pure.run_batch([], now)
            pure.run_batch(admin_fanout.register_topic(pure.snapshot(), args["topic"], args["queueDatas"]), now)
            model.register_topic(args["topic"], args["queueDatas"])
        else:
            event = ops.broker_event(kind, args, timestamp=now)
            model.apply_event({**ops_normalised(event, now)})
            parts = ops.published(kind, args, event)
            first = pure.batches.offset
            if len(parts) > 1:
                CHUNKED.append(len(parts))
                pure.run_batch(parts[:1], now)  # the assembly spans a batch boundary
            pure.run_batch(parts[1:] if len(parts) > 1 else parts, now)
            if kind == "register":
                registrations.append((event, list(range(first, pure.batches.offset))))
        expected, actual = model.table_rows(), pure.table_rows()
        for table in expected:
            assert actual[table] == expected[table], (
                f"step {step} ({kind} {args}): {table} differs\n  pipeline-only: {actual[table] - expected[table]}"
                f"\n  model-only: {expected[table] - actual[table]}")
    return len(workload)


def ops_normalised(event: dict[str, Any], now: int) -> dict[str, Any]:
    key, value = ev.encode(event)
    return ev.parse_event(value, key=key.decode(), record_time_ms=now, max_message_bytes=1 << 20,
                          max_clock_skew_ms=10**12)


_STEPS: list[int] = []
CHUNKED: list[int] = []
REPEATS: list[int] = []


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops.workload)
def test_state_function_matches_the_model_after_every_step(workload):
    _STEPS.append(run_workload(workload))


def test_report_examples(figures):
    """Runs after the property (same module): reports how much it explored."""
    figures(f"model vs state function: {len(_STEPS)} hypothesis examples, {sum(_STEPS)} steps compared, "
            f"{len(CHUNKED)} chunked registrations ({sum(CHUNKED)} chunks), {len(REPEATS)} repeats published small")
    # a floor on random counts: 99 repeats were seen once in 500 examples
    assert len(_STEPS) >= EXAMPLES * 0.9 and len(CHUNKED) >= EXAMPLES // 20 and len(REPEATS) >= EXAMPLES // 10
