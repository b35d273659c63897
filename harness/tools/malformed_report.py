"""``python -m harness malformed-report``: the malformed-request catalogue run on one synth QEMU,
each entry's outcome beside the one expected of that version (recorded on a version with the same fixes
for it, :func:`harness.p9.malformed.expected`); ``--record`` stores them."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from harness.errors import HarnessError
from harness.p9 import malformed
from harness.p9.channel import Channel
from harness.p9.session import Session
from harness.qemu.machine import Machine
from harness.qemu.provision import usable_config


def report(binary: Path, transport: str, write: bool) -> int:
    """``python -m harness malformed-report``: run the catalogue on one synth QEMU, print it."""
    if write and transport != "modern":
        raise HarnessError("outcomes are recorded on the modern interface (legacy has no NEEDS_RESET bit)")
    config, found = usable_config(binary, transport=transport)
    if not found.synth_tree:  # the catalogue's blockers and walks are the synth test tree's files
        raise HarnessError(
            f"{binary} has no qtest accelerator, so QEMU builds no synth test tree, which the malformed "
            "catalogue runs on: use a qtest-capable build (python -m harness qemu build)"
        )
    version = found.version
    recordings = malformed.recordings()
    outcomes: dict[str, str] = {}
    rows = []
    machine = Machine(config)
    machine.launch()
    try:
        for entry in malformed.catalogue():
            if not machine.is_running() or machine.unresponsive:
                machine.shutdown()
                machine = Machine(config)
                machine.launch()
            session = Session(Channel.of(machine))
            blocker = malformed.prepare(session, entry)
            outcome = malformed.run(session, entry)
            if outcome == malformed.Fate.NO_REPLY or malformed.died(outcome):
                machine.shutdown()
            else:
                malformed.cleanup(session, blocker, outcome)
            outcomes[entry.name] = outcome
            wanted = malformed.expected(entry.name, version, recordings)
            known = f"{malformed.as_seen_on(transport, wanted[0])} ({wanted[1]})" if wanted else ""
            same = "" if not wanted else "yes" if malformed.as_seen_on(transport, wanted[0]) == outcome else "NO"
            rows.append((entry.name, entry.what, outcome, known, same))
    finally:
        machine.shutdown()
    print(f"malformed requests on QEMU {version} ({binary}), {transport} transport, synth backend")
    headers = ("entry", "what is wrong", "outcome", "expected (recorded on)", "same")
    print(tabulate(rows, headers=headers, tablefmt="github"))
    if write:
        malformed.record(version, outcomes)
        print(f"recorded {len(outcomes)} outcomes for QEMU {version} in {malformed.RECORDED}")
    return 1 if any(row[4] == "NO" for row in rows) else 0
