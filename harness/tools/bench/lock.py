"""``bench lock``: what a rename waits for while a Treaddir collects entries. Since the
CVE-2026-48004 fix (``versions.READDIR_RENAME_LOCK``) the collection holds the read side of QEMU's
rename lock, so a Trenameat sent beside a listing waits for the listing's whole collection: a
latency a release before the fix does not have. Per local directory size: a Trenameat alone, and
one sent in the same kick as a whole-directory Treaddir (the rename of a file elsewhere in the
export, there and back, so every round starts from the same tree)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from harness.p9 import wire
from harness.p9.messages import Treaddir, Trenameat
from harness.tools.bench.readdir import local_dir
from harness.tools.bench.report import Table, stats
from harness.tools.bench.variant import CPU_COLUMNS, CpuSplit, Variant, machine_config
from harness.tools.connect import connect


def lock_table(variant: Variant, sizes: Sequence[int], msize: int, runs: int, export: Path) -> Table:
    table = Table(
        "Trenameat beside a listing",
        ["files", "rename"],
        ["rename server min ms", "rename server median ms", "rename server max ms", "listing server median ms",
         *CPU_COLUMNS],
        compare="rename server median ms",
        also=["listing server median ms"],
    )  # fmt: skip
    (export / "elsewhere").mkdir(exist_ok=True)
    (export / "elsewhere" / "x").touch()
    for files in sizes:
        directory = local_dir(export, files).name
        with connect(machine_config(variant, variant.local(export)), msize=msize) as conn:
            session = conn.session
            other = session.walk_fid(0, ["elsewhere"])
            for beside in (False, True):
                renames, listings = [], []
                cpu = CpuSplit(conn.machine)
                with cpu.measuring():
                    for run in range(runs + 2):  # two warm-ups
                        fid = session.walk_fid(0, [directory])
                        session.lopen(fid, os.O_DIRECTORY)
                        there, back = ("x", "y") if run % 2 == 0 else ("y", "x")
                        rename = Trenameat(olddirfid=other, oldname=there, newdirfid=other, newname=back)
                        with session.batch():  # one kick: the listing first, the rename behind it
                            listing = (
                                session.send(Treaddir(fid=fid, offset=0, count=msize - wire.RREADDIR_HEADER))
                                if beside
                                else None
                            )
                            moved = session.send(rename)
                        done = moved.wait()
                        if listing is not None:
                            listings.append(listing.wait().server_seconds)
                        if run >= 2:
                            renames.append(done.server_seconds)
                        session.clunk(fid)
                low, middle, _, _ = stats(renames)
                table.add({
                    "files": files, "rename": "beside a listing" if beside else "alone",
                    "rename server min ms": round(low * 1000, 3), "rename server median ms": round(middle * 1000, 3),
                    "rename server max ms": round(max(renames) * 1000, 3),
                    "listing server median ms": round(statistics.median(listings) * 1000, 3) if listings else 0.0,
                    **cpu.columns(),
                })  # fmt: skip
            session.clunk(other)
    return table
