"""``bench guest``: what a real Linux client sees of the QEMU under test (harness/guest).

Per kernel, cache mode and msize: the msize the session got (QEMU's Rversion, from its trace:
Linux caps what its virtio transport can carry), how long the boot took to a mounted export, a build-like workload's
duration on the mount (many small files written, archived, unpacked, read, copied and removed,
as a build's tree is), and QEMU's CPU during it, split between its vCPU threads (under TCG, the
guest's own work) and the rest (the main loop and the worker threads, where the 9P server runs).
Whatever QEMU printed meanwhile is kept: past its transport's limit it refuses a request's
descriptors, and says so."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from harness.guest import kernel as kernels
from harness.guest import vm
from harness.qemu.config import LocalFs
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
                        variant.binary, found, LocalFs(Path(export), multidevs=variant.multidevs),
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
