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

# Fields of a REGISTER_BROKER event that are not what it registers: the producer's claimed time.
_NOT_REGISTERED = frozenset({"timestamp"})


def of_request(fields: Mapping[str, str], version: int, body: bytes) -> bytes:
    """A remoting request's content: its header fields, version and body (not its opaque)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(sorted(fields.items()), separators=(",", ":")).encode())
    h.update(str(version).encode())
    h.update(body)
    return h.digest()


def of_event(raw: Mapping[str, Any]) -> bytes:
    """A decoded REGISTER_BROKER event's content, for a record that carries no fingerprint."""
    body = {k: v for k, v in raw.items() if k not in _NOT_REGISTERED}
    return b"e" + hashlib.blake2b(json.dumps(body, sort_keys=True, separators=(",", ":")).encode(),
                                  digest_size=16).digest()
