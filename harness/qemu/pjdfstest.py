"""pjdfstest, the POSIX syscall conformance suite, built from its source tarball into the cache and
run one ``.t`` file at a time on a mount.

The tarball is not ours to ship: it is ``$PJDFSTEST_TARBALL``, or looked for in the third-party
search path (:func:`harness.qemu.provision.third_party_dirs`: ``$V9P_THIRD_PARTY``, then the
cache's ``third_party/``).
Each ``.t`` is a shell script printing TAP (``1..N``, ``ok n``, ``not ok n - why``); we read it
as prove does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ProvisionError
from harness.qemu.provision import THIRD_PARTY_ENV, cache_root, third_party_dirs
from harness.qemu.shell import locked, missing_packages, sh

ENV_TARBALL = "PJDFSTEST_TARBALL"
TARBALL_GLOB = "pjdfstest-*.tar.gz"
BUILD_DEPS = ["autoconf", "automake", "gcc", "make", "libc6-dev"]
#: The ``.t`` files of the source this project's expectations were classified on.
KNOWN_SOURCE = "pjdfstest-85a8aea"


def where_to_put() -> str:
    return (f"pjdfstest's source tarball ({KNOWN_SOURCE}.tar.gz, github.com/pjd/pjdfstest) is not here: "
            f"put it in {cache_root() / 'third_party'}/, name its directory in {THIRD_PARTY_ENV}, or the file "
            f"in {ENV_TARBALL}=PATH")  # fmt: skip


def find_tarball() -> Path | None:
    if os.environ.get(ENV_TARBALL):
        return Path(os.environ[ENV_TARBALL])
    for directory in third_party_dirs():
        found = sorted(directory.glob(TARBALL_GLOB)) if directory.is_dir() else []
        if found:
            return found[-1]
    return None


def built(tarball: Path, root: Path | None = None) -> Path:
    """The source tree with its ``pjdfstest`` binary built (once; then taken from the cache)."""
    tree = (root or cache_root()) / tarball.name.removesuffix(".tar.gz")
    if (tree / "pjdfstest").is_file():
        return tree
    # every xdist worker asks on a fresh machine: one builds, the others wait for it and take its
    # tree (two extracting into one work directory failed both: FileExistsError)
    with locked(tree.parent, f"{tree.name}.lock"):
        if not (tree / "pjdfstest").is_file():
            _build(tarball, tree)
    return tree


def _build(tarball: Path, tree: Path) -> None:
    missing = missing_packages(BUILD_DEPS)
    log = tree.with_suffix(".log")
    if missing:
        if os.geteuid() != 0:
            raise ProvisionError(f"building pjdfstest needs {' '.join(missing)}: apt-get install them (as root)")
        sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], log)
    work = tree.with_name(tree.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    with tarfile.open(tarball) as archive:
        top = archive.getnames()[0].split("/")[0]
        archive.extractall(work, filter="data")
    source = work / top
    for step in (["autoreconf", "-ifs"], ["./configure"], ["make", "pjdfstest"]):
        sh(step, log, cwd=source)
    shutil.rmtree(tree, ignore_errors=True)
    source.rename(tree)
    shutil.rmtree(work, ignore_errors=True)


def test_files(tree: Path) -> list[str]:
    """``chmod/00.t`` and the rest, in order."""
    return sorted(str(p.relative_to(tree / "tests")) for p in (tree / "tests").glob("*/*.t"))


@dataclass
class Tap:
    """What a ``.t`` printed, read as TAP."""

    planned: int = 0
    passed: int = 0
    #: failing checks: number -> what the script said of it
    failed: dict[int, str] = field(default_factory=dict)
    output: str = ""
    status: int = 0

    @property
    def ran(self) -> int:
        return self.passed + len(self.failed)

    @property
    def ok(self) -> bool:
        return not self.failed and self.planned == self.ran and self.planned > 0


PLAN = re.compile(r"^1\.\.(\d+)")
RESULT = re.compile(r"^(not ok|ok)\s+(\d+)\s*(.*)$")


def read_tap(output: str, status: int = 0) -> Tap:
    tap = Tap(output=output, status=status)
    for line in output.splitlines():
        if plan := PLAN.match(line):
            tap.planned = int(plan.group(1))
        elif result := RESULT.match(line):
            if result.group(1) == "ok" or "# TODO" in result.group(3) or "# SKIP" in result.group(3):
                tap.passed += 1
            else:
                tap.failed[int(result.group(2))] = result.group(3).removeprefix("- ")
    return tap


def run_file(tree: Path, name: str, cwd: Path, timeout: float) -> Tap:
    """Run ``tests/NAME`` in ``cwd`` (a directory on the mount), as root, the way prove runs it."""
    done = subprocess.run(
        ["/bin/sh", str(tree / "tests" / name)], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}, check=False,
    )  # fmt: skip
    tap = read_tap(done.stdout, done.returncode)
    tap.output = done.stdout + done.stderr
    return tap
