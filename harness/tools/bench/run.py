"""A bench command's run: its variants measured round by round, interleaved (:class:`Run`), and
what the machine did meanwhile (:class:`Steal`, the load line). The run owns its start state: the
host's CPU steal is counted from when it began, not from an import."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.qemu import cpu_idle, provision
from harness.tools.bench.plot import plot
from harness.tools.bench.report import Table, merged, record, text
from harness.tools.bench.variant import Variant

Ticks = tuple[int, int]


def cpu_ticks() -> Ticks | None:
    """All CPUs' time so far and the part of it the hypervisor gave to other guests (steal), in
    ticks, from /proc/stat; None where there is no such file."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[7]


#: Steal from this share of CPU time on makes a bench say that its figures are no verdict.
STEAL_WARNING = 0.05


@dataclass(frozen=True)
class Steal:
    """The CPU time the host took away (steal) since ``start``, read with ``read`` (/proc/stat)."""

    start: Ticks | None
    read: Callable[[], Ticks | None] = cpu_ticks

    @classmethod
    def since_now(cls) -> Steal:
        return cls(cpu_ticks())

    def share(self) -> float | None:
        """The share of all CPU time stolen since the start; None where /proc/stat cannot say."""
        now = self.read()
        if now is None or self.start is None or now[0] <= self.start[0]:
            return None
        return (now[1] - self.start[1]) / (now[0] - self.start[0])

    def warning(self) -> str | None:
        """What to tell the reader when the host took enough CPU time to make the figures its own."""
        stolen = self.share()
        if stolen is None or stolen < STEAL_WARNING:
            return None
        return (
            f"warning: the host took {100 * stolen:.0f}% of this machine's CPU time during the bench (steal, "
            "/proc/stat). It falls on some rounds and variants more than on others, so these figures are no "
            "verdict: run again when the host is quieter."
        )

    def warn(self) -> None:
        warning = self.warning()
        if warning:
            print(warning, file=sys.stderr)


def load(steal: Steal) -> str:
    """The machine's load when the bench ended: what else was running, roughly, and how much CPU
    time the host took away meanwhile. On a virtual machine that is the number to look at first: time
    stolen from QEMU or the harness lowers every rate by far more than a change of the server does."""
    one, five, _ = os.getloadavg()
    line = f"load average {one:.2f} (1 min), {five:.2f} (5 min)"
    stolen = steal.share()
    if stolen is not None:
        line += f", {100 * stolen:.0f}% of CPU time stolen by the host"
    idle = cpu_idle.state()
    return f"{line}, {idle}" if idle else line


class Run:
    """One ``bench NAME`` (harness/tools/bench/registry.py): ``variants`` measured ``rounds`` times,
    interleaved (round 1 of every variant, then round 2, ...) so that a machine's drift hits them
    alike. A variant that fails
    loses no other variant's results; the host's steal is counted from the run's start."""

    def __init__(self, variants: Sequence[Variant], rounds: int, steal: Steal | None = None) -> None:
        self.variants = list(variants)
        self.rounds = max(1, rounds)
        self.steal = steal or Steal.since_now()
        self.results: dict[Variant, list[Table]] = {variant: [] for variant in self.variants}
        self.failed: dict[Variant, str] = {}

    def interleave(self, measure: Callable[[Variant], Table], what: str) -> None:
        for _ in range(self.rounds):
            for variant in self.variants:
                self.measure_once(variant, measure, what)

    def measure_once(self, variant: Variant, measure: Callable[[Variant], Table], what: str) -> None:
        """One round of ``variant``, unless it failed before: a failure is kept, with why."""
        if variant in self.failed:
            return
        try:
            self.results[variant].append(measure(variant))
        except HarnessError as err:
            self.failed[variant] = str(err)
            try:
                name = variant.label()
            except HarnessError:  # a binary that cannot even say its version
                name = str(variant.binary)
            print(f"bench {what} on {name} failed: {err}", file=sys.stderr)

    def report(self, json_path: str | None, plot_path: str | None) -> int:
        """Print the table (and write ``--json``/``--plot``); 1 if a variant has no results."""
        measured = {variant: tables for variant, tables in self.results.items() if variant not in self.failed}
        if measured:
            present(measured, json_path, plot_path, self.steal)
        if self.failed:
            print(f"no results for {', '.join(v.label() for v in self.failed)} (above: why)", file=sys.stderr)
            return 1
        return 0


def present(results: dict[Variant, list[Table]], json_path: str | None, plot_path: str | None, steal: Steal) -> None:
    variants = list(results)
    labels = [v.label() for v in variants]
    machine = f"{os.cpu_count()} CPUs, {load(steal)}"
    print(text(results, labels, machine))
    if json_path:
        data = record(
            results, labels, machine,
            qemu_versions={str(v.binary): provision.probe_cached(v.binary).version for v in variants},
            host=platform.node(), cpus=os.cpu_count(), load=load(steal),
            date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )  # fmt: skip
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {json_path}")
    if plot_path:
        plot([merged(results[v]) for v in variants], variants, Path(plot_path))
        print(f"wrote {plot_path}")
    steal.warn()
