"""The one fingerprint of a registration, computed once on the request's raw bytes.

Whether a REGISTER_BROKER repeats the previous one of its address is asked twice: by the
remoting front when the request arrives (answer at once, publish small) and by the job's ledger
when the record waits in the log (let it wait for company). Both must mean the same thing by
"the same registration", so the front computes the fingerprint once, on what the broker sent
(its header fields, version and body, not the time it is stamped with), and the record carries
it in a header (`schemas.events.FINGERPRINT_HEADER`). The ledger takes it from there; only for
a record without one (published by another producer: the HTTP API, tests) does it fingerprint
the decoded event (`of_event`), which can only make it call a repeat a change (served sooner,
with the same outcome).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from schemas import json_codec

# Fields of a REGISTER_BROKER event that are not what it registers: the producer's claimed time.
_NOT_REGISTERED = frozenset({"timestamp"})
# The most bytes one hash update is given. CPython's hash objects let go of the interpreter lock
# for an update of 2 KiB or more (HASHLIB_GIL_MINSIZE; blake2's then do for every later update of
# that object), and taking it back waits behind the front's busy threads (the Kafka client's): a
# 3 KB registration's fingerprint took about 950 µs instead of 7 µs, half a second of the front's
# loop for a 1,000-broker wave (py-spy, 2026-11-28). The digest does not depend on the slicing.
HELD_BYTES = 2047


def of_request(fields: Mapping[str, str], version: int, body: bytes) -> bytes:
    """A remoting request's content: its header fields, version and body (not its opaque)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(sorted(fields.items()), separators=(",", ":")).encode())
    h.update(str(version).encode())
    view = memoryview(body)
    for at in range(0, len(view), HELD_BYTES):
        h.update(view[at:at + HELD_BYTES])
    return h.digest()


def of_event(raw: Mapping[str, Any]) -> bytes:
    """A decoded REGISTER_BROKER event's content, for a record that carries no fingerprint."""
    body = {k: v for k, v in raw.items() if k not in _NOT_REGISTERED}
    return b"e" + hashlib.blake2b(json_codec.dumps_sorted(body).encode(),
                                  digest_size=16).digest()
