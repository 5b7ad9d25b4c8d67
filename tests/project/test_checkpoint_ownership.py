"""Spark's checkpoint belongs to Spark: no code of ours reads or writes its files.

Spark keeps a query's offsets, commits, state, sources and metadata under the checkpoint
directory, in formats it may change between versions. What a batch needs of itself travels in the
batch (`pipelines/batch_context.py`); the state is read, when a layout must be moved, through
Spark's own state reader. Files of our own may sit beside Spark's (the layout record, a state
import), under names of their own.

The check reads every module of the product and the bench: a path built from one of Spark's
directory names (`x / "offsets"`, `joinpath("commits")`, `os.path.join(…, "state")`, a helper
called with a checkpoint and one of the names) or a string
naming one inside a path (`".../offsets/..."`) fails it. Tests may look at Spark's files (they
simulate crashes by removing a commit) and are not read.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
SPARK_DIRS = frozenset({"offsets", "commits", "state", "sources", "metadata"})
IN_A_PATH = re.compile(r"(^|/)(offsets|commits|state|sources|metadata)/")


def _is_spark_dir(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SPARK_DIRS


def spark_file_uses(source: str, name: str = "<source>") -> list[str]:
    """Where `source` builds a path into one of Spark's checkpoint directories."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _is_spark_dir(node.right):
            found.append(f"{name}:{line}: / {node.right.value!r}")  # type: ignore[attr-defined]
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            named = any(_is_spark_dir(a) for a in node.args)
            beside = any(isinstance(a, (ast.Name, ast.Attribute)) and "checkpoint" in ast.unparse(a) for a in node.args)
            if named and (callee in ("joinpath", "join") or beside):
                found.append(f"{name}:{line}: {callee}(... Spark's directory ...)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and IN_A_PATH.search(node.value) \
                and "\n" not in node.value and " " not in node.value:
            found.append(f"{name}:{line}: {node.value!r}")
    return found


def test_the_check_finds_what_it_is_for():
    """The check itself can fail: each way of reaching into Spark's files is found, and reading
    the state through Spark's own reader is not."""
    reaching = ('offsets = checkpoint_dir / "offsets" / str(batch_id)\n'
                'commits = cp.joinpath("commits")\n'
                'import os; os.path.join(cp, "state")\n'
                'path = f"{cp}/sources/0"\n'
                'meta = "checkpoint/metadata/x"\n'
                'done = _batches(self.checkpoint_dir, "commits")\n')
    assert len(spark_file_uses(reaching)) == 6, spark_file_uses(reaching)
    allowed = ('spark.read.format("statestore").load(str(checkpoint_dir))\n'
               'layout = checkpoint_dir / "namesrv-layout.json"\n'
               'repeat = {"offsets": [1], "topicKeys": k}\n'
               'event["repeats"]["offsets"]\n')
    assert spark_file_uses(allowed) == []


def test_no_code_of_ours_reads_or_writes_sparks_checkpoint_files():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += spark_file_uses(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "code that reaches into Spark's checkpoint:\n" + "\n".join(found)
