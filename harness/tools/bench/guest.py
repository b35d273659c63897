"""``bench guest``: what a real Linux client sees of the QEMU under test (harness/guest).

Per kernel, cache mode and msize: the msize the session got (QEMU's Rversion, from its trace:
Linux caps what its virtio transport can carry), how long the boot took to a mounted export, a build-like workload's
duration on the mount (many small files written, archived, unpacked, read, copied and removed,
as a build's tree is), and QEMU's CPU during it, split between its vCPU threads (under TCG, the
guest's own work) and the rest (the main loop and the worker threads, where the 9P server runs).
Whatever QEMU printed meanwhile is kept: past its transport's limit it refuses a request's
descriptors, and says so.

``--workload listing`` measures what a user sees of a Treaddir's cost instead: a directory of
many entries, made on the host before the boot, listed by ``ls``, ``ls -l`` and ``find`` in the
guest (each timed alone), per kernel and cache mode."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from harness.errors import HarnessError
from harness.guest import kernel as kernels
from harness.guest import vm
from harness.qemu.provision import cache_root
from harness.tools.bench.report import Table
from harness.tools.bench.variant import Variant

#: the workload: a tree of small C-like files made, archived, unpacked, read, copied and removed
WORKLOAD = r"""
cd /mnt/export
progress workload-start
python3 - <<'EOF'
import os
for d in range(FILES // 50):
    os.makedirs(f"tree/d{d}", exist_ok=True)
    for f in range(50):
        with open(f"tree/d{d}/f{f}.c", "w") as out:
            out.write(f"/* {d}/{f} */\n" + "int x;\n" * (64 + f))
EOF
tar -cf tree.tar tree && rm -rf tree && tar -xf tree.tar
find tree -name '*.c' -print0 | xargs -0 cat | wc -c
cp -a tree copy && rm -rf tree copy tree.tar
progress workload-end
"""
#: the listing workload's programs: a label, the command run on ``big`` (made on the host), and how
#: many times in a row (a listing under TCG takes seconds, and the server's share of it
#: milliseconds: the repeats make QEMU's CPU for it measurable). ``ls`` reads names only (its
#: output a pipe: no colours, no stat of an entry), ``ls -l`` and ``find`` ask for each entry too
LISTING_PROGRAMS = (("ls", "ls big", 10), ("ls -l", "ls -l big", 3), ("find", "find big", 3))


def listing_script() -> str:
    """The guest's script: each program's runs between two progress marks, each run's line count printed."""
    lines = ["cd /mnt/export", "progress listing-0"]
    for index, (_, command, runs) in enumerate(LISTING_PROGRAMS, 1):
        lines += [f"for i in $(seq {runs}); do {command} | wc -l; done", f"progress listing-{index}"]
    return "\n".join(lines) + "\n"


#: what QEMU says when a request's descriptors are more than its transport takes
QEMU_SAYS = re.compile(r"virtio[^\n]*|[^\n]*descriptor[^\n]*")


def guest_table(variant: Variant, kernels_wanted: list[str], caches: list[str], msizes: list[int], files: int) -> Table:
    table = Table(
        "guest: one boot per row, the workload on the mount",
        ["kernel", "cache", "msize asked"],
        ["msize got", "mounted s", "workload s", "vCPU CPU s", "server CPU s", "QEMU said"],
        compare="workload s",
    )  # fmt: skip
    for name in kernels_wanted:
        found = kernels.find_kernel(name, cache_root())
        for cache in caches:
            for msize in msizes:
                with tempfile.TemporaryDirectory(prefix="v9p-bench-guest-") as export:
                    run = vm.run(
                        variant.binary, found, variant.local(Path(export)),
                        WORKLOAD.replace("FILES", str(files)), cache=cache_root(),
                        mounts=(vm.Mount(cache=cache, msize=msize),), timeout=600, trace=True,
                    )  # fmt: skip
                # the msize the session runs at: QEMU's answer to the kernel's Tversion
                got = re.search(r"v9fs_version_return .*msize (\d+)", run.trace)
                try:
                    seconds, vcpu, other = run.between("workload-start", "workload-end")
                except StopIteration:  # the workload did not finish: the row says what QEMU said
                    seconds = vcpu = other = float("nan")
                said = "; ".join(sorted(set(QEMU_SAYS.findall(run.qemu_log))))[:120]
                if run.status != 0 and not said:
                    said = f"status {run.status}" + (f": {run.failures[0]}" if run.failures else "")
                table.add({
                    "kernel": found.release, "cache": cache, "msize asked": msize,
                    "msize got": int(got.group(1)) if got else "-",
                    "mounted s": round(run.mounted_after, 1) if run.mounted_after is not None else "-",
                    "workload s": round(seconds, 2), "vCPU CPU s": round(vcpu, 2), "server CPU s": round(other, 2),
                    "QEMU said": said or "-",
                })  # fmt: skip
    return table


def listing_table(variant: Variant, kernels_wanted: list[str], caches: list[str], files: int) -> Table:
    table = Table(
        f"guest listing: one boot per kernel and cache mode, a host directory of {files} empty files listed by each "
        "command several times in a row; seconds and CPU per listing",
        ["kernel", "cache", "command"], ["seconds", "vCPU CPU s", "server CPU s"], compare="seconds",
        also=["server CPU s"],
    )  # fmt: skip
    # what each run prints: ls its names, ls -l a total line more, find the directory itself more
    expected = [str(lines).encode() for (label, _, runs) in LISTING_PROGRAMS
                for lines in [files if label == "ls" else files + 1] * runs]  # fmt: skip
    for name in kernels_wanted:
        found = kernels.find_kernel(name, cache_root())
        for cache in caches:
            with tempfile.TemporaryDirectory(prefix="v9p-bench-guest-") as export:
                big = Path(export, "big")
                big.mkdir()
                for index in range(files):
                    (big / f"f{index:06d}").touch()
                run = vm.run(
                    variant.binary, found, variant.local(Path(export)), listing_script(),
                    cache=cache_root(), mounts=(vm.Mount(cache=cache),), timeout=600, trace=False,
                )  # fmt: skip
            if run.status != 0 or run.stdout.split() != expected:
                raise HarnessError(  # the variant fails, the others go on (Run.measure_once)
                    f"the listing workload failed (status {run.status}, printed {run.stdout[:200]!r}): "
                    f"{run.failures[:1]} {run.stderr[-300:]!r}"
                )  # fmt: skip
            for index, (label, _, runs) in enumerate(LISTING_PROGRAMS):
                seconds, vcpu, other = run.between(f"listing-{index}", f"listing-{index + 1}")
                table.add({
                    "kernel": found.release, "cache": cache, "command": label, "seconds": round(seconds / runs, 3),
                    "vCPU CPU s": round(vcpu / runs, 3), "server CPU s": round(other / runs, 3),
                })  # fmt: skip
    return table
