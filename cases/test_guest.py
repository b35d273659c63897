"""Everyday programs on a real Linux guest's v9fs mount of the export (harness/guest boots
Debian's kernel on the QEMU under test): ls, find, cp -a, mv, rm -rf, tar, git, sqlite (rollback
journal and WAL), fsync, mmap, flock and fcntl locks, xattrs, ACLs, writers in parallel, and
programs the host changes things under (cache=none), on each dialect and cache mode. Each is
judged against the same program on the guest's tmpfs and against the tree it left on the host
(fixtures/guest.py).

Opt-in: ``pytest cases/ -m guest`` (a kernel from apt, a boot per configuration under TCG).
"""

from __future__ import annotations

import pytest

from fixtures.case_path import Shown, case_path
from fixtures.deviations import (
    DOTU_LISTING_BY_PATH,
    LOCK_CONFLICT,
    READDIR_BY_PATH_REASON,
    RECLAIM_O_TRUNC,
    WSTAT_SYNC_EMPTY_REPLY,
)
from fixtures.guest import BY_NAME, CONFIGS, FULL_CONFIGS, PROGRAMS, Boot, problems, programs_for
from harness.qemu import versions

#: the programs that call fsync(2) (git's gc and commit-graph, sqlite's commits): on a 9P2000.u
#: mount Linux sends it as a Twstat of "don't touch" values, which QEMU answers with no reply
FSYNCS = ("git", "sqlite_journal", "sqlite_wal", "fsync")
assert tuple(p.name for p in PROGRAMS if p.syncs) == FSYNCS
DOTU = ("u-none", "u-loose", "u-mmap")
DOTL = ("L-none", "L-loose", "L-mmap")
assert tuple(c.name for c in FULL_CONFIGS if c.dialect == "9p2000.u") == DOTU


def _not_run(program: str, config: str) -> bool:
    """A program its configuration's boot does not run (:func:`fixtures.guest.programs_for`)."""
    return BY_NAME[program] not in programs_for(next(c for c in FULL_CONFIGS if c.name == config))


@pytest.mark.qemu_bug(**LOCK_CONFLICT, raises=AssertionError, when={"program": ("flock", "fcntl_lock"), "config": DOTL})
@pytest.mark.qemu_bug(fixed_in=(), introduced_in=versions.REMAP_DEFAULT, reason=READDIR_BY_PATH_REASON,
                      raises=AssertionError, upstream="listing-remap-cost",
                      when={"program": "host_swap", "config": ("L-none",)})  # fmt: skip
@pytest.mark.qemu_bug(
    **DOTU_LISTING_BY_PATH, raises=AssertionError, when={"program": "host_swap", "config": ("u-none",)}
)
@pytest.mark.qemu_bug(**RECLAIM_O_TRUNC, raises=AssertionError, when={"program": "reclaim", "config": ("u-none",)})
@pytest.mark.qemu_bug(
    **WSTAT_SYNC_EMPTY_REPLY, raises=AssertionError, when={"program": FSYNCS, "config": DOTU},
)  # fmt: skip
@case_path(
    "guest/{program}/{config}", backends=["local"], program=[p.name for p in PROGRAMS],
    config=Shown([c.name for c in CONFIGS], [c.name for c in FULL_CONFIGS]), unless=_not_run,
)  # fmt: skip
def test_program(backend: str, program: str, config: str, guest_boot: Boot) -> None:
    """The program's status, output and tree on the export are the tmpfs's, and the host holds
    the tree the guest lists."""
    found = list(problems(guest_boot, BY_NAME[program]))
    assert not found, "\n\n".join(found)
