"""pjdfstest's build into the cache (harness/qemu/pjdfstest.py): once, whoever asks first."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

from harness.qemu import pjdfstest


def _ask(root: Path, tarball: Path, calls: Path) -> None:
    """One xdist worker's pjdfstest_tree fixture, with a build that only says it ran."""

    def build(_tarball: Path, tree: Path) -> None:
        with calls.open("a") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # the others ask meanwhile
        tree.mkdir()
        (tree / "pjdfstest").write_text("built\n")

    pjdfstest._build = build  # type: ignore[assignment]  # this child's own module
    assert pjdfstest.built(tarball, root) == root / "pjdfstest-test"
    assert (root / "pjdfstest-test" / "pjdfstest").read_text() == "built\n"


def test_workers_that_ask_together_build_it_once(tmp_path: Path) -> None:
    """Three processes ask for the tree of a cache that has none: one builds, the others wait for
    it and take its tree (two workers once extracted into one work directory, and both failed)."""
    tarball = tmp_path / "pjdfstest-test.tar.gz"
    tarball.write_bytes(b"")
    calls = tmp_path / "calls"
    fork = multiprocessing.get_context("fork")
    askers = [fork.Process(target=_ask, args=(tmp_path / "cache", tarball, calls)) for _ in range(3)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(timeout=30)
    assert [asker.exitcode for asker in askers] == [0, 0, 0]
    assert len(calls.read_text().splitlines()) == 1
