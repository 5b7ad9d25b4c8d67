"""RocketMQ's KV config file, read for `namesrv-admin importKvConfig`.

A RocketMQ NameServer persists its KV config (KVConfigManager, docs/semantics.md §8) as the JSON of
KVConfigSerializeWrapper, by default in `~/namesrv/kvConfig.json` (NamesrvConfig.kvConfigPath):

    {"configTable": {"<namespace>": {"<key>": "<value>", ...}, ...}}

`read_kv_config` checks a whole file before anything is written, against the rules a KV write
meets here (a namespace is a name, schemas.fields.validate_name; a value a string of at most
schemas.fields.KV_TEXT_MAX characters; a key what the HTTP API takes), and says what is wrong
with the first entry that breaks one, by namespace and key. Pure: text in, table out.
"""

from __future__ import annotations

import json
from typing import Any

from schemas.fields import KV_TEXT_MAX, InvalidInput, validate_name

# The HTTP API's bound on a KV key (serving/kv.py: a key is a path segment of PUT /kv/<ns>/<key>)
KEY_MAX = 1024


class KvFileError(ValueError):
    """The file is not a KV config this system can import; the message says where and why."""


def read_kv_config(text: str) -> dict[str, dict[str, str]]:
    """namespace -> key -> value from a kvConfig.json's text, or KvFileError naming the first problem."""
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KvFileError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(raw, dict) or "configTable" not in raw:
        raise KvFileError('not a RocketMQ KV config: expected {"configTable": {"<namespace>": {"<key>": "<value>"}}}')
    extra = sorted(k for k in raw if k != "configTable")
    if extra:
        raise KvFileError(f"unexpected top-level key(s) {', '.join(map(repr, extra))}: a KV config holds only "
                          "configTable")
    table = raw["configTable"]
    if not isinstance(table, dict):
        raise KvFileError(f"configTable must be an object of namespaces, not {_kind(table)}")
    out: dict[str, dict[str, str]] = {}
    for namespace, entries in table.items():
        try:
            validate_name(namespace, "namespace")
        except InvalidInput as exc:
            raise KvFileError(f"configTable: {exc}") from None
        if not isinstance(entries, dict):
            raise KvFileError(f"namespace {namespace!r} must be an object of keys and values, not {_kind(entries)}")
        for key, value in entries.items():
            if not key or len(key) > KEY_MAX:
                raise KvFileError(f"namespace {namespace!r}: a key must be 1 to {KEY_MAX} characters "
                                  f"(this one has {len(key)})")
            if not isinstance(value, str):
                raise KvFileError(f"namespace {namespace!r} key {key!r}: the value must be a string, not {_kind(value)}")
            if len(value) > KV_TEXT_MAX:
                raise KvFileError(f"namespace {namespace!r} key {key!r}: the value has {len(value)} characters, "
                                  f"at most {KV_TEXT_MAX} are accepted")
        out[namespace] = dict(entries)
    return out


def _kind(value: Any) -> str:
    """A JSON value's kind, as a reader of the file calls it."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)
