"""The job's local file system for Spark's checkpoint (jvm/spark/src/namesrv/hadoop), against
Hadoop's own: the same files and modes, with no process forked per file. Both run a Java program
that writes as the checkpoint does, ours with no PATH (Hadoop's own local file system, with no
native library in pyspark, runs `chmod` and `readlink` for each file, and fails so), Hadoop's
with it: the two leave the same files, modes and answers."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conf import jvm

HERE = Path(__file__).parent / "local_fs"

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None,
                                reason="needs a JDK (javac, java) on PATH")


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The java command line of LocalFsCheck (compiled here) with our classes and pyspark's jars."""
    out = tmp_path_factory.mktemp("local-fs-classes")
    cp = ":".join(map(str, [*jvm.pyspark_jars(), jvm.classes_jar()]))
    subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(out), str(HERE / "LocalFsCheck.java")], check=True,
                   capture_output=True)
    return [str(Path(shutil.which("java") or "java").resolve()), "-Xshare:auto", "-cp", f"{cp}:{out}", "LocalFsCheck"]


def _run(check: list[str], where: Path, impl: str, *, path: bool) -> subprocess.CompletedProcess[str]:
    where.mkdir()
    # no PATH at all would be glibc's default one (/bin:/usr/bin): a directory that does not exist
    env = {**os.environ, "PATH": os.environ.get("PATH", "") if path else str(where / "none")}
    return subprocess.run([*check, str(where), impl], capture_output=True, text=True, timeout=120, env=env)


def _found(done: subprocess.CompletedProcess[str], where: Path) -> tuple[dict[str, str], dict[str, int]]:
    """What the program printed (without the file system's class) and the modes of the files it left."""
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    lines.pop("filesystem")
    return lines, {p.name: stat.S_IMODE(p.stat().st_mode) for p in where.iterdir() if not p.is_symlink()}


def test_checkpoint_writes_fork_no_process_and_leave_what_hadoops_own_leaves(check: list[str], tmp_path: Path) -> None:
    ours = _run(check, tmp_path / "ours", "ours", path=False)
    assert "filesystem namesrv.hadoop.NioLocalFileSystem" in ours.stdout.splitlines(), ours.stdout + ours.stderr[-3000:]
    lines, modes = _found(ours, tmp_path / "ours")
    assert lines == {"content": "second", "link": "false 6 true", "plain": "false 6"}
    # Hadoop's default umask (022) over a new file's 0666; a chmod as asked, of the file and its checksum
    assert modes == {"1": 0o644, ".1.crc": 0o644, "2": 0o640, ".2.crc": 0o640}
    assert _found(_run(check, tmp_path / "hadoop", "hadoop", path=True), tmp_path / "hadoop") == (lines, modes)


def test_hadoops_own_local_file_system_forks_a_process_per_file(check: list[str], tmp_path: Path) -> None:
    """What the test above would meet without our classes: the check is not vacuous."""
    done = _run(check, tmp_path / "hadoop", "hadoop", path=False)
    assert done.returncode != 0
    assert 'Cannot run program "chmod"' in done.stderr, done.stderr[-3000:]
