"""Modules a process refuses to import, so that what it does not use costs it no memory.

pyarrow asks for pandas the first time it converts a Python sequence (`pa.array([...])`: its
check for pandas' array-likes imports pandas when it is installed), so every serving process
loaded pandas without using it: about 44 MiB resident each, 27 of them its own (the HTTP
server's worker, the remoting front and the host's cut builder; by hand, 2026-11-29). Refused, the
import raises ModuleNotFoundError, which pyarrow takes as "pandas is not installed".

Only an entry point calls `refuse`, before its process converts anything: the job, its Python
workers and the tests share modules with the serving processes and need pandas.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Sequence
from types import ModuleType


class _Refused(importlib.abc.MetaPathFinder):
    def __init__(self, names: frozenset[str], why: str) -> None:
        self.names, self.why = names, why

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{fullname} is not imported in this process ({self.why})", name=fullname)
        return None


def refuse(*names: str, why: str) -> list[str]:
    """From now on, importing any of the top-level packages `names` (or their submodules) in this
    process raises ModuleNotFoundError naming `why`. Returns those imported already: the refusal
    saves nothing for them (the caller says so; it is not worth stopping a server for)."""
    if not any(isinstance(f, _Refused) and f.names >= set(names) for f in sys.meta_path):
        sys.meta_path.insert(0, _Refused(frozenset(names), why))
    return sorted(n for n in names if n in sys.modules)


def refuse_pandas(log: logging.Logger) -> None:
    """A serving process's refusal (the module's docstring says why), at its entry point; a
    pandas imported already is logged as a warning."""
    late = refuse("pandas", why="a serving process: pyarrow imports it unasked, and nothing here uses it")
    if late:
        log.warning("%s imported before the serving process refused it: about 44 MiB that nothing uses",
                    ", ".join(late))
