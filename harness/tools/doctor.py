"""``python -m harness doctor``: what the harness finds, as a table, whatever it finds.

Exit status, one per meaning: **0** a QEMU the whole suite can run on (qtest accelerator, synth
test tree); **1** a degraded one (no qtest accelerator: the cases that need the synth tree skip);
**2** no usable QEMU (none found, not a QEMU, or one without virtio-9p).
"""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path

from tabulate import tabulate

from harness.errors import HarnessError
from harness.qemu import build as qemu_build
from harness.qemu import cpu_idle, provision
from harness.qemu.config import MachineConfig
from harness.tools.connect import connect


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _synth_tree(binary: Path, accel: str) -> str:
    """Really look: attach to the synth backend and walk to WALK0 and LOPEN."""
    try:
        with connect(MachineConfig(binary=binary, accel=accel)) as conn:  # type: ignore[arg-type]
            fid = conn.session.walk_fid(0, ["LOPEN"])
            conn.session.clunk(fid)
            conn.session.clunk(0)
        return "yes (walked to LOPEN)"
    except HarnessError as err:
        return f"no ({str(err).splitlines()[0]})"


OK, DEGRADED, UNUSABLE = 0, 1, 2
VERDICT = {OK: "yes", DEGRADED: "degraded: no qtest accelerator, so no synth test tree", UNUSABLE: "no"}


def doctor(explicit: str | None) -> int:
    rows: list[tuple[str, str]] = []
    status = UNUSABLE
    try:
        binary, source = provision.find_qemu(explicit)
    except HarnessError as err:
        rows.append(("QEMU binary", f"none: {err}"))
    else:
        rows.append(("QEMU binary", f"{binary} (from {source})"))
        status = _qemu_rows(binary, rows)
    for directory in provision.FIRMWARE_DIRS:
        rows.append((f"firmware {directory}", _yes(directory.is_dir())))
    rows.append(("bios-256k.bin", _yes((provision.FIRMWARE_DIRS[0] / "bios-256k.bin").is_file())))
    for package in ("qemu.qmp", "construct", "tabulate", "pytest", "pytest-xdist"):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        rows.append((package, version))
    rows.append(("python", platform.python_version()))
    idle = f"{cpu_idle.how_cpus_idle()}; {cpu_idle.state() or 'the CPU latency request is unreadable (not root)'}"
    rows.append(("idle CPUs", f"{idle} (benches hold them polling; pytest --keep-cpus-awake)"))
    rows.append(("build cache", str(provision.cache_root())))
    default = provision.cached_build()
    rows += [build_row(build, default) for build in qemu_build.builds(provision.cache_root())]
    rows.append(("usable for the whole suite", VERDICT[status]))
    print(tabulate(rows, headers=("item", "found"), tablefmt="github"))
    return status


def build_row(build: qemu_build.Build, default: Path | None) -> tuple[str, str]:
    """A cached build's row: its origin and its variant, whether it is ``default`` (the build the
    harness takes when no binary is named), then its version and binary."""
    chosen = ", the default" if build.binary == default else ""
    return f"cached build {build.origin} ({build.variant or 'plain'}{chosen})", f"QEMU {build.version}: {build.binary}"


def _qemu_rows(binary: Path, rows: list[tuple[str, str]]) -> int:
    """Add what the probe finds to ``rows``; the exit status it means."""
    try:
        found = provision.probe(binary)
    except HarnessError as err:
        rows.append(("QEMU", f"not usable: {str(err).splitlines()[0]}"))
        return UNUSABLE
    synth = _synth_tree(binary, found.accel) if found.usable else "no (binary unusable)"
    rows += [
        ("QEMU version", found.version),
        ("qtest accelerator", _yes(found.qtest_accel) + ("" if found.qtest_accel else " (degraded: -accel tcg -S)")),
        ("-qtest option", _yes(found.qtest_option)),
        ("virtio-9p-pci", _yes(found.virtio_9p_pci)),
        ("synth test tree", synth),
        ("qos-test beside it", str(provision.qos_test_for(binary) or "no")),
    ]
    if not found.usable:
        return UNUSABLE
    return OK if found.qtest_accel and synth.startswith("yes") else DEGRADED
