"""Malformed requests, one case per catalogue entry (harness/p9/malformed.py, generated from the
message table). Whatever QEMU answers, it must stay alive and the device must be usable again
(after a reset where it asked for one); the answer must be the one recorded for this QEMU
version (`python -m harness malformed-report --record`), so a change of behaviour shows."""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.pool import Device
from harness.p9 import malformed, wire
from harness.p9.session import Session

ENTRIES = {entry.name: entry for entry in malformed.catalogue()}


@pytest.mark.needs_synth_tree
@case_path("malformed/{entry}", backends=["synth"], entry=list(ENTRIES))
def test_malformed(p9: Session, device: Device, qemu_under_test: QemuUnderTest, entry: str) -> None:
    item = ENTRIES[entry]
    blocker = malformed.prepare(p9, item)
    outcome = malformed.run(p9, item)
    assert not malformed.died(outcome), f"{item.what}: QEMU {outcome}"
    assert device.alive()
    if malformed.device_lost(outcome):
        device.reset()  # the device asked for one
    else:
        malformed.cleanup(p9, blocker, outcome)
    p9.close(check=False)  # the frame may have made or dropped fids the session cannot know of
    fresh = Session(device.channel)  # a new Tversion: the device serves requests again
    fresh.version()
    fresh.attach(0)
    assert fresh.getattr(0, wire.GETATTR_BASIC).qid.type == wire.QTDIR
    fresh.clunk(0)
    version = qemu_under_test.probe.version
    expected = malformed.recorded(version)
    if expected is None or entry not in expected:
        pytest.skip(f"no outcome recorded for QEMU {version}: python -m harness malformed-report --record")
    wanted = malformed.as_seen_on(device.machine.config.transport, expected[entry])
    assert outcome == wanted, f"{item.what}: recorded {wanted!r}, now {outcome!r}"
