"""The malformed-request catalogue is generated from the message table, and says what it claims."""

from __future__ import annotations

import pytest

from harness.p9 import malformed, wire
from harness.qemu import versions


def test_every_request_gets_size_and_cut_entries() -> None:
    names = {entry.name for entry in malformed.catalogue()}
    assert len(names) == len(malformed.catalogue())
    for defn in wire.requests():
        assert {f"{defn.NAME}/size_smaller", f"{defn.NAME}/size_larger"} <= names
        assert {f"{defn.NAME}/cut_before_{field}" for field in defn.field_names()} <= names


def test_entries_are_broken_in_the_way_they_say() -> None:
    for entry in malformed.catalogue():
        size, kind, _ = wire.peek_header(entry.frame)
        if entry.name.endswith("/size_smaller"):
            assert size == len(entry.frame) - 1
        elif entry.name.endswith("/size_larger"):
            assert size == len(entry.frame) + 1
        elif "/cut_before_" in entry.name:
            assert size == len(entry.frame)
            defn = wire.lookup(entry.name.split("/")[0])
            full = wire.encode_fields(defn, 1, malformed.example_fields(defn))
            assert len(entry.frame) < len(full) and entry.frame[4:] == full[4 : len(entry.frame)]
        elif entry.name.startswith("type/"):
            assert kind not in wire.BY_TYPE


@pytest.mark.parametrize("version", versions.KNOWN)
def test_outcomes_are_recorded_for_every_known_version(version: str) -> None:
    outcomes = malformed.recorded(version)
    assert outcomes is not None, f"python -m harness malformed-report --record on QEMU {version}"
    entries = {entry.name: entry for entry in malformed.catalogue()}
    assert set(outcomes) == set(entries)
    assert not any(malformed.died(outcome) for outcome in outcomes.values())
    assert all(malformed.plausible(entries[name], outcome) for name, outcome in outcomes.items())


def test_plausible_answers() -> None:
    walk = next(e for e in malformed.catalogue() if e.name == "Twalk/size_larger")
    assert malformed.plausible(walk, "Rlerror EINVAL") and malformed.plausible(walk, "Rwalk")
    assert malformed.plausible(walk, malformed.Fate.NEEDS_RESET)
    assert not malformed.plausible(walk, "Rgetattr") and not malformed.plausible(walk, "died: killed by SIGSEGV (-11)")
