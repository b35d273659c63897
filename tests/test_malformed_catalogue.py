"""The malformed-request catalogue is generated from the message table, and says what it claims."""

from __future__ import annotations

from harness.p9 import malformed, wire


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


def test_outcomes_are_recorded_for_the_provisioned_qemu() -> None:
    outcomes = malformed.recorded("7.2.22")
    assert outcomes is not None
    assert set(outcomes) == {entry.name for entry in malformed.catalogue()}
    assert not any(malformed.died(outcome) for outcome in outcomes.values())
