"""liveness.ledger: which log records only keep a broker alive (pure)."""

from __future__ import annotations

from typing import Any

from liveness.ledger import LivenessLedger
from liveness.watch import WaitingRecords
from routeinfo.state import topic_keys_digest
from schemas import events as ev

TIMEOUT = 120_000
T0 = 1_000_000


def registration(addr: str = "10.0.0.1:10911", *, name: str = "b", broker_id: int = 0,
                 topics: dict[str, Any] | None = None, counter: int = 1, timestamp: int | None = T0,
                 **extra: Any) -> dict[str, Any]:
    e = ev.register_broker_event(cluster="C", broker_name=name, broker_id=broker_id, addr=addr,
                                 topics=topics or {"T": {}}, data_version={"timestamp": 1, "counter": counter,
                                                                          "stateVersion": 0},
                                 timestamp=timestamp)
    e.update(extra)
    return e


def observe(ledger: LivenessLedger, event: dict[str, Any], at: int, offset: int | None = None) -> bool:
    key, value = ev.encode(event)
    return ledger.observe(key.decode(), event["type"], value, at, offset)


def small(full: dict[str, Any], offset: int) -> dict[str, Any]:
    """The repeat of `full` (at `offset`) as the remoting front publishes it."""
    return ev.repeated_registration_event(full, [offset], topic_keys_digest(full["topicConfigTable"]))


def ledger() -> LivenessLedger:
    return LivenessLedger(default_timeout_ms=TIMEOUT)


def test_a_heartbeat_is_a_liveness_signal_even_of_an_unknown_broker():
    assert observe(ledger(), ev.heartbeat_event(cluster="C", broker_name="b", broker_id=0, addr="a:1"), T0)


def test_the_first_registration_is_a_change_and_its_unchanged_repeat_a_liveness_signal():
    led = ledger()
    assert not observe(led, registration(), T0)
    # the producer's timestamp differs at every re-send; what it registers does not
    assert observe(led, registration(timestamp=T0 + 30_000), T0 + 30_000)
    assert observe(led, registration(timestamp=None), T0 + 60_000)


def test_a_registration_that_differs_in_anything_it_registers_is_a_change():
    for changed in (registration(counter=2), registration(topics={"T": {}, "U": {}}),
                    registration(broker_id=1), registration(haServerAddr="h:1"),
                    registration(heartbeatTimeoutMillis=5_000), registration(filterServerList=["f:1"])):
        led = ledger()
        assert not observe(led, registration(), T0)
        assert not observe(led, changed, T0 + 1), changed
        assert observe(led, changed, T0 + 2), changed  # and is the one compared with from then on


def test_a_write_to_the_group_between_makes_the_repeat_a_change():
    # RocketMQ re-adds a deleted topic at the next registration with the same data version
    for between in (ev.delete_topic_event("T", "b"), ev.wipe_write_perm_event("b"),
                    ev.unregister_broker_event(cluster="C", broker_name="b", broker_id=0, addr="10.0.0.1:10911")):
        led = ledger()
        assert not observe(led, registration(), T0)
        assert not observe(led, between, T0 + 1)
        assert not observe(led, registration(), T0 + 2), between
        assert observe(led, registration(), T0 + 3)


def test_another_groups_writes_do_not_matter():
    led = ledger()
    assert not observe(led, registration(), T0)
    assert not observe(led, ev.delete_topic_event("T", "other"), T0 + 1)
    assert not observe(led, ev.put_kv_event("ns", "k", "v"), T0 + 1)
    assert observe(led, registration(), T0 + 2)


def test_a_slave_joining_leaves_the_masters_repeat_a_liveness_signal_and_both_settle():
    led = ledger()
    assert not observe(led, registration(), T0)
    assert not observe(led, registration("10.0.0.2:10911", broker_id=1), T0 + 1)
    for i in range(1, 4):  # a steady group: every re-registration of either address is liveness
        assert observe(led, registration(), T0 + i * 30_000)
        assert observe(led, registration("10.0.0.2:10911", broker_id=1), T0 + i * 30_000 + 1)


def test_taking_a_known_addresss_id_or_moving_the_groups_shared_fields_makes_the_others_changes():
    for intruder in (registration("10.0.0.9:10911", broker_id=0),  # a new master for id 0
                     registration("10.0.0.2:10911", broker_id=1, zoneName="z2"),
                     registration("10.0.0.2:10911", broker_id=1, enableActingMaster=True)):
        led = ledger()
        assert not observe(led, registration(), T0)
        assert not observe(led, intruder, T0 + 1)
        assert not observe(led, registration(), T0 + 2), intruder


def test_an_address_silent_for_half_its_timeout_may_have_expired_so_its_repeat_is_a_change():
    led = ledger()
    assert not observe(led, registration(), T0)
    assert observe(led, registration(), T0 + TIMEOUT // 2 - 1)
    assert not observe(led, registration(), T0 + TIMEOUT - 1)  # silent for TIMEOUT // 2
    assert observe(led, registration(), T0 + TIMEOUT)


def test_heartbeats_keep_the_address_known_alive():
    led = ledger()
    assert not observe(led, registration(), T0)
    for i in range(1, 6):
        assert observe(led, ev.heartbeat_event(cluster="C", broker_name="b", broker_id=0, addr="10.0.0.1:10911"),
                       T0 + i * 30_000)
    assert observe(led, registration(), T0 + 6 * 30_000)


def test_another_address_of_the_group_gone_silent_makes_the_repeat_a_change():
    # the silent slave may have expired: a group changed without a record in the log
    led = ledger()
    assert not observe(led, registration(), T0)
    assert not observe(led, registration("10.0.0.2:10911", broker_id=1), T0)
    assert observe(led, registration(), T0 + 30_000)
    assert not observe(led, registration(), T0 + TIMEOUT // 2 + 30_000)


def test_the_registrations_own_timeout_counts():
    led = ledger()
    assert not observe(led, registration(heartbeatTimeoutMillis=10_000), T0)
    assert observe(led, registration(heartbeatTimeoutMillis=10_000), T0 + 4_999)
    assert not observe(led, registration(heartbeatTimeoutMillis=10_000), T0 + 10_000)


def test_chunks_and_unreadable_records_are_changes_and_forget_the_group():
    led = ledger()
    assert not observe(led, registration(), T0)
    chunk = {**registration(), "chunk": {"index": 0, "count": 2}}
    assert not observe(led, chunk, T0 + 1)
    assert not observe(led, registration(), T0 + 2)
    assert not led.observe("b", ev.REGISTER_BROKER, b"{not json", T0 + 3)
    assert not observe(led, registration(), T0 + 4)
    assert not led.observe(None, ev.REGISTER_BROKER, None, T0 + 5)


def test_clear_forgets_everything():
    led = ledger()
    assert not observe(led, registration(), T0)
    led.clear()
    assert not observe(led, registration(), T0 + 1)


def test_a_heartbeat_after_half_a_timeout_of_silence_refreshes_nothing_the_next_repeat_relies_on():
    # the address may have expired unseen: RocketMQ ignores a heartbeat of an unknown broker, and
    # the registration after it adds the broker again
    led = ledger()
    assert not observe(led, registration(), T0)
    hb = ev.heartbeat_event(cluster="C", broker_name="b", broker_id=None, addr="10.0.0.1:10911")
    assert observe(led, hb, T0 + TIMEOUT + 1)
    assert not observe(led, registration(), T0 + TIMEOUT + 2)
    assert observe(led, registration(), T0 + TIMEOUT + 3)


def test_a_small_repeat_is_a_signal_when_it_names_the_registration_the_ledger_saw():
    led = ledger()
    full = registration()
    assert not observe(led, full, T0, offset=7)
    assert observe(led, small(full, 7), T0 + 30_000, offset=9)
    assert observe(led, registration(), T0 + 60_000, offset=11)  # and it kept the address fresh


def test_a_small_repeat_that_contradicts_what_the_ledger_saw_is_a_change():
    for between, named in ((None, 6), (ev.unregister_broker_event(cluster="C", broker_name="b", broker_id=0,
                                                                  addr="10.0.0.1:10911"), 7)):
        led = ledger()
        full = registration()
        assert not observe(led, full, T0, offset=7)
        if between is not None:
            assert not observe(led, between, T0 + 1, offset=8)
        assert not observe(led, small(full, named), T0 + 30_000, offset=9), (between, named)


def test_a_small_repeat_of_a_group_not_seen_since_the_start_is_taken_at_the_fronts_word():
    # the front publishes one only for a registration its served cut shows
    assert observe(ledger(), small(registration(), 3), T0, offset=9)


def test_repeats_stay_signals_when_they_name_an_identical_newer_registration_or_follow_a_doubted_one():
    """The front names its connection's newest full registration; the fleet re-sends small ones from
    then on. A repeat that once contradicted the ledger is applied as the registration it names,
    and the next one naming it is a signal again (else a group doubted once would cost a batch at
    every repeat: 10,000 brokers then took 92 % of a core instead of 40)."""
    led = ledger()
    full = registration()
    assert not observe(led, full, T0, offset=7)
    assert observe(led, registration(), T0 + 30_000, offset=9)  # identical, published whole again
    assert observe(led, small(full, 9), T0 + 60_000, offset=11)
    assert not observe(led, small(full, 4), T0 + 90_000, offset=12)  # names another: a change
    assert observe(led, small(full, 4), T0 + 120_000, offset=13)  # ... and then known
    assert observe(led, small(full, 4), T0 + 150_000, offset=14)


def test_a_fingerprint_from_the_producer_decides_sameness():
    """A record carrying its request's fingerprint (liveness/fingerprint.py, the remoting front's)
    is judged by it: the same fingerprint is a repeat, another one a change, whatever the body."""
    led = ledger()
    key, value = ev.encode(registration())
    assert not led.observe(key.decode(), ev.REGISTER_BROKER, value, T0, 1, b"request-1")
    _, again = ev.encode(registration(timestamp=T0 + 30_000))
    assert led.observe(key.decode(), ev.REGISTER_BROKER, again, T0 + 30_000, 2, b"request-1")
    # a new request (another fingerprint) is a change even where the event reads the same
    assert not led.observe(key.decode(), ev.REGISTER_BROKER, again, T0 + 60_000, 3, b"request-2")
    # a record without one (another producer) is fingerprinted from the event: never equal to a
    # request's, so it is a change once, then its own repeats are signals
    assert not led.observe(key.decode(), ev.REGISTER_BROKER, again, T0 + 61_000, 4)
    assert led.observe(key.decode(), ev.REGISTER_BROKER, again, T0 + 62_000, 5)


def look(waiting: WaitingRecords, partition: int, offset: int, event: dict[str, Any], at: int) -> bool | None:
    key, value = ev.encode(event)
    return waiting.look(partition, offset, key.decode(), event["type"], value, at)


def test_unobserved_counts_the_waiting_records_the_ledger_has_not_looked_at():
    waiting = WaitingRecords(ledger())
    waiting.look_from(0, 10)
    assert waiting.unobserved({0: (10, 15), 1: (0, 4)}) == 5 + 4  # partition 1: never looked at
    for offset in range(10, 13):
        look(waiting, 0, offset, registration(addr=f"10.0.0.{offset}:10911", name=f"b{offset}"), T0)
    assert waiting.unobserved({0: (10, 15), 1: (0, 4)}) == 2 + 4
    assert waiting.unobserved({0: (12, 13)}) == 0  # looked at all of it
    assert waiting.unobserved({0: (20, 25)}) == 5  # begins past what was looked at
    assert waiting.unobserved({0: (15, 12)}) == 0  # a reset range: the batch reads it anew, nothing to look at


def test_a_batch_read_past_what_the_ledger_looked_at_makes_it_start_over():
    """The source skips looking at a long range a batch reads anyway: the ledger then forgets the
    log, and the registration it saw before is a change again, until seen once more."""
    waiting = WaitingRecords(ledger())
    waiting.look_from(0, 0)
    assert look(waiting, 0, 0, registration(), T0) is False
    waiting.consumed({0: 1})
    assert look(waiting, 0, 1, registration(timestamp=T0 + 1), T0 + 1) is True  # it goes on knowing the log
    waiting.consumed({0: 1_500})  # read unlooked-at records
    assert waiting.unobserved({0: (1_500, 1_501)}) == 1
    assert look(waiting, 0, 1_500, registration(timestamp=T0 + 2), T0 + 2) is False
    assert look(waiting, 0, 1_501, registration(timestamp=T0 + 3), T0 + 3) is True
