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


def test_every_difference_between_recordings_is_a_named_fix() -> None:
    """Recordings of versions that agree on an entry's fixes (malformed.CHANGED_BY) agree on its
    outcome: whatever differs between versions is explained by a fix that says who has it."""
    recorded = malformed.recordings()
    for entry in malformed.catalogue():
        for version in recorded:
            found = malformed.expected(entry.name, version, recorded)
            assert found is not None and found == (recorded[version][entry.name], version)
            for other in recorded:
                changes = malformed.changes_of(entry.name)
                if all(versions.has(version, c) == versions.has(other, c) for c in changes):
                    assert recorded[other][entry.name] == recorded[version][entry.name], (
                        f"{entry.name}: {version} and {other} have the same fixes for it "
                        f"({changes}) and answer differently: name the fix in malformed.CHANGED_BY"
                    )


@pytest.mark.parametrize(
    ("version", "lock", "renameat"),
    [
        # 11.0.2 is past 11.0.0 (synth refuses Trenameat) but before 11.0.3 (the handle check):
        # the 10.0.13 recording, "the nearest below", would have been wrong for the lock entries
        ("11.0.2", "Rlock", "Rlerror ENOTSUP"),
        ("11.0.3", "Rlerror EBADF", "Rlerror ENOTSUP"),
        ("10.0.8", "Rlock", "Rlerror EPERM"),
        ("10.0.9", "Rlock", "Rlerror ENOTSUP"),
        ("10.2.2", "Rlock", "Rlerror ENOTSUP"),
        ("9.2.4", "Rlock", "Rlerror EPERM"),
        ("11.2.50", "Rlerror EBADF", "Rlerror ENOTSUP"),
    ],
)
def test_a_release_never_recorded_is_expected_what_its_fixes_say(version: str, lock: str, renameat: str) -> None:
    recorded = malformed.recordings()
    for entry, outcome in (("Tlock/size_larger", lock), ("Trenameat/size_smaller", renameat)):
        found = malformed.expected(entry, version, recorded)
        assert found is not None and found[0] == outcome, (entry, found)
    # an entry no fix touches: the nearest recording, whatever it is
    assert malformed.expected("Tgetattr/size_larger", version, recorded) is not None


def test_no_recording_with_the_fixes_of_a_version_is_said() -> None:
    recorded = {"7.2.22": {"Tlock/size_larger": "Rlock"}}
    assert malformed.expected("Tlock/size_larger", "11.0.3", recorded) is None
    assert malformed.expected("Tlock/size_larger", "11.0.2", recorded) == ("Rlock", "7.2.22")


def test_every_fid_field_of_a_request_is_declared_as_one() -> None:
    """The catalogue reads a field's role from its declaration: a request whose fid is a bare U32
    would be sent 0 where a fid belongs, so a new message must say what its numbers are."""
    for defn in wire.requests():
        for name in defn.field_names():
            if name.endswith(("fid", "dirfd")):
                assert wire.role(defn, name) is not None, f"{defn.NAME}.{name}: declare it Fid, OpenFid or NewFid"
    assert wire.role(wire.lookup("Tread"), "fid") is wire.Role.OPEN_FID
    assert wire.role(wire.lookup("Twalk"), "newfid") is wire.Role.NEWFID
    assert malformed.example_fields(wire.lookup("Tread")) == {"fid": malformed.OPEN_FID, "offset": 0, "count": 64}
