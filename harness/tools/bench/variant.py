"""What one column of a bench measures (:class:`Variant`), the machine it runs on, and where a
row's time went (:class:`CpuSplit`): the pieces every benchmark shares."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ProvisionError
from harness.qemu import provision
from harness.qemu.config import FsConfig, GuestMemoryMode, LocalFs, MachineConfig, Multidevs, SecurityModel
from harness.qemu.machine import Machine
from harness.qemu.process import cpu_seconds
from harness.virtio.virtio_pci import Transport


@dataclass(frozen=True)
class Variant:
    """What one column of a bench measures: a QEMU binary, on one guest-memory path, with one
    ``multidevs`` and one security model for its local exports."""

    binary: Path
    guest_memory: GuestMemoryMode = "shared"
    #: its column: the same binary and path twice (an A/A run, to see the noise) are two variants
    slot: int = 0
    #: the local backend's multidevs option; None leaves it to the binary's default (remap since
    #: 10.0.0, warn before), an A/B of one binary against itself names both
    multidevs: Multidevs | None = None
    #: the local backend's security model; None: the harness's default (LocalFs's)
    security_model: SecurityModel | None = None

    def label(self) -> str:
        option = f", multidevs={self.multidevs}" if self.multidevs else ""
        option += f", security_model={self.security_model}" if self.security_model else ""
        return f"{provision.probe_cached(self.binary).version} {self.guest_memory}{option} ({home(self.binary)})"

    def local(self, export: Path) -> LocalFs:
        """The local backend this variant exports ``export`` with."""
        if self.security_model:
            return LocalFs(export, self.security_model, multidevs=self.multidevs)
        return LocalFs(export, multidevs=self.multidevs)


def machine_config(variant: Variant, fs: FsConfig, transport: Transport = "modern") -> MachineConfig:
    """The benches' machines: 512 MiB of RAM for msize up to 4 MiB in flight. A synth bench on a
    binary without the synth test tree is refused here, by name, not by an Rlerror later."""
    binary = variant.binary
    config, found = provision.usable_config(binary, fs, transport, ram_mib=512, guest_memory=variant.guest_memory)
    if config.guest_memory != variant.guest_memory:
        raise ProvisionError(f"cannot measure guest memory {variant.guest_memory} on this host")
    if fs.kind == "synth" and not found.synth_tree:
        raise ProvisionError(f"{binary} has no qtest accelerator, so no synth test tree, which this bench reads")
    return config


class CpuSplit:
    """QEMU's and the harness's CPU time over the stretches of wall time measured with
    :meth:`measuring` (several add up), in percent of one core."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.qemu = self.harness = self.wall = 0.0

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        qemu, harness, start = self.machine.cpu_seconds(), cpu_seconds(), time.perf_counter()
        try:
            yield
        finally:
            self.wall += time.perf_counter() - start
            self.qemu += self.machine.cpu_seconds() - qemu
            self.harness += cpu_seconds() - harness

    def columns(self) -> dict[str, int]:
        """The :data:`CPU_COLUMNS` cells of a row: QEMU's and the harness's CPU % of the wall time."""
        if not self.wall:
            return dict.fromkeys(CPU_COLUMNS, 0)
        shares = round(100 * self.qemu / self.wall), round(100 * self.harness / self.wall)
        return dict(zip(CPU_COLUMNS, shares, strict=True))

    def qemu_per_op(self, ops: int) -> float:
        """QEMU's CPU microseconds per operation: the server's cost of a request, whatever the
        client's speed (a client too slow to keep QEMU busy lowers QEMU's CPU %, not this)."""
        return round(1e6 * self.qemu / ops, 1) if ops else 0.0


CPU_COLUMNS = ["QEMU CPU %", "harness CPU %"]
#: ``bench rtt``'s column of :meth:`CpuSplit.qemu_per_op`, shown per variant when compared
from harness.tools.bench.registry import QEMU_PER_OP as QEMU_PER_OP  # noqa: E402


def rate(seconds: float, step: Callable[[], int], cpu: CpuSplit) -> tuple[int, float]:
    """Run ``step`` (which returns how many operations it did) for ``seconds``; ops and ops/s.
    ``cpu`` measures the timed steps, not the warm-up: its figures are per op of these."""
    step()  # warm-up
    done = 0
    with cpu.measuring():
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            done += step()
    return done, done / elapsed


def progress(iterable: Any = None, what: str = "", total: int | None = None) -> Any:
    """A tqdm progress bar on stderr (the bench's tables stay on stdout), or none when stderr is
    not a terminal; ``with progress(total=n) as bar: bar.update()`` or ``for x in progress(xs)``."""
    from tqdm import tqdm

    return tqdm(iterable, desc=what, total=total, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)


def home(path: Path) -> str:
    """``path`` with the home directory as ``~``: the same on every machine's docs."""
    return str(path).replace(str(Path.home()), "~", 1)
