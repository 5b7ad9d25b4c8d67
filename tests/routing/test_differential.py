"""RocketMQ's own NameServer as the oracle (tests/differential/bed.py): generated request
sequences sent to RocketMQ's NameServer and to ours, every read compared after every step.

- `test_rocketmq_and_ours_answer_alike`: ours is the remoting front's code over the pipeline's
  pure core (tests/differential/in_memory.py), so thousands of steps fit in the suite;
  NAMESRV_DIFF_SEQUENCES raises the count (`./run.sh soak --differential N`). Run against the
  NameServers of 5.3.3 and of 5.5.0, the newest line (answers are compared as parsed JSON, so
  5.4's fastjson2 escaping is not a difference; docs/semantics.md §13.1).
- `test_rocketmq_and_the_running_system_answer_alike`: fewer steps through the whole system
  (front, Kafka, the streaming job, Delta, the served cut).
"""

from __future__ import annotations

import itertools
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings

from tests.differential.bed import STEPS, Outcome, Side, Universe, clusters_of, run_sequence, steps
from tests.harness import REMOTING_AK, REMOTING_SK, FrontThread

pytestmark = pytest.mark.integration
SEQUENCES = int(os.environ.get("NAMESRV_DIFF_SEQUENCES", "120"))  # per line; the default run's budget
SIGNED = {"access_key": REMOTING_AK, "secret_key": REMOTING_SK}
_names = itertools.count(int(os.environ.get("NAMESRV_DIFF_FIRST", "1")))


@pytest.fixture(scope="module")
def java_namesrvs():
    """`java_namesrvs(line)`: RocketMQ's NameServer of that line, started on first use, one per line."""
    if shutil.which("java") is None:
        pytest.skip("Java 17+ is not on PATH: RocketMQ's NameServer cannot start")
    from ops import rocketmq_software as rmq
    started: dict[str, rmq.JavaProcess] = {}

    def get(line: str) -> rmq.JavaProcess:
        if line not in started:
            started[line] = rmq.start_namesrv(line=line)
        return started[line]

    yield get
    for p in started.values():
        p.cleanup()


@pytest.fixture(scope="module")
def ours_in_memory(tmp_path_factory):
    from conf import load_config
    from tests.differential.in_memory import in_memory_front
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path_factory.mktemp("diff")), "NAMESRV_REMOTING_PORT": "0",
                       "NAMESRV_REMOTING_ACCESS_KEY": REMOTING_AK, "NAMESRV_REMOTING_SECRET_KEY": REMOTING_SK})
    front = FrontThread(in_memory_front(cfg))
    yield front
    front.stop()
    assert not front.store.dead_letters, front.store.dead_letters[:3]


def _run(java_addr: str, ours: Side, examples: int, max_steps: int, outcome: Outcome, *, shared_server: bool = False,
         **kw) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(clusters_of, steps(max_steps, shared_server=shared_server))
    def sequence(clusters, seq):
        run_sequence(Side("RocketMQ", java_addr), Side(ours.name, ours.addr, ours.sign), Universe(next(_names), clusters),
                     seq, outcome, **kw)

    sequence()


@pytest.mark.parametrize("line", ["5.3", "5.5"])
def test_rocketmq_and_ours_answer_alike(line, java_namesrvs, ours_in_memory, figures):
    from ops.rocketmq_software import version
    outcome = Outcome()
    _run(java_namesrvs(line).addr, Side("ours", ours_in_memory.addr, SIGNED), SEQUENCES, 20, outcome)
    figures(f"differential vs RocketMQ {version(line)} (in-memory pipeline): {outcome.sequences} "
            f"sequences, {outcome.steps} steps, {outcome.reads} reads compared on each side; {outcome.guarded} ended "
            "by the single-topic guard")
    assert outcome.sequences >= SEQUENCES and outcome.steps >= 10 * SEQUENCES


def test_rocketmq_and_the_running_system_answer_alike(java_namesrvs, remoting_system, figures):
    outcome = Outcome()
    ours = Side("ours (running system)", remoting_system.remoting_addr, SIGNED)
    _run(java_namesrvs("5.3").addr, ours, 3, 8, outcome, shared_server=True, settle_s=15.0,
         async_kinds=frozenset(k.removesuffix("_own") for k in STEPS))
    figures(f"differential (running system): {outcome.sequences} sequences, {outcome.steps} steps")
    assert outcome.steps >= 10


# every character class fastjson's lines escape differently (docs/semantics.md §13.1)
_ESCAPES = "a\b\f\n\r\t\x01\x1f\x7f\u0080\u009f\u2028\u2029/\\\"ö名😀</"


def test_answers_are_escaped_byte_for_byte_as_the_newest_line_escapes_them(java_namesrvs, ours_in_memory):
    """A KV value holding every such character, read back from RocketMQ 5.5.0's NameServer and
    from ours: the 219 body and the 101 header's value are the same bytes, and both answers carry
    the newest line's MQVersion (513); 5.3.3 escapes them otherwise (upper-case, DEL and
    U+0080–U+009F, U+2028/2029 escaped), which JSON readers of every line read alike."""
    import re

    from remoting import codes
    from remoting.client import RemotingClient
    from remoting.protocol import V5_5_0, encode_request

    def raw_answer(c: RemotingClient, code: int, ext: dict[str, str]) -> tuple[bytes, bytes]:
        c.sock.sendall(encode_request(code, 9, ext=ext))
        length = int.from_bytes(c._exactly(4), "big")
        frame = c._exactly(length)
        header_len = int.from_bytes(frame[:4], "big") & 0xFFFFFF
        return frame[4:4 + header_len], frame[4 + header_len:]

    seen = []
    for addr in (java_namesrvs("5.5").addr, ours_in_memory.addr):
        with RemotingClient(addr, **SIGNED) as c:
            assert c.call(codes.PUT_KV_CONFIG, {"namespace": "escapesNs", "key": "k", "value": _ESCAPES}).code == 0
            _, body = raw_answer(c, codes.GET_KVLIST_BY_NAMESPACE, {"namespace": "escapesNs"})
            header, _ = raw_answer(c, codes.GET_KV_CONFIG, {"namespace": "escapesNs", "key": "k"})
        value = re.search(rb'"value":"((?:[^"\\]|\\.)*)"', header)
        assert value is not None, header
        assert f'"version":{V5_5_0}'.encode() in header, header
        seen.append((body, value.group(1)))
    assert seen[0] == seen[1]
