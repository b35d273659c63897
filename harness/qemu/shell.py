"""Provisioning's shell: commands run with their output appended to a log (a failure raises with
the log's tail), the Debian packages a step lacks, and a lock file so that one process of many
builds what the others then take from the cache. The QEMU build and pjdfstest's use them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from harness.errors import ProvisionError


@contextlib.contextmanager
def locked(root: Path, name: str = ".lock") -> Iterator[None]:
    """Inside, no other process holds the lock file ``root/name``: one builds what the others
    then take from the cache."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def missing_packages(packages: list[str]) -> list[str]:
    query = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *packages],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    installed = {line.split()[0] for line in query.stdout.splitlines() if line.split()[1:2] == ["ii"]}
    return [p for p in packages if p not in installed]


def sh(argv: list[str], log: Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        result = subprocess.run(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", **(env or {})},
        )  # fmt: skip
    if result.returncode != 0:
        raise ProvisionError(f"`{' '.join(argv)}` failed with status {result.returncode}; log {log}:\n{tail(log)}")


def tail(log: Path) -> str:
    return "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
