"""Which QEMU versions have a fix: per stable branch, and mainline for every later version."""

from __future__ import annotations

import pytest

from harness.qemu import versions

LOCK_FIX = ("10.0.12", "11.0.3", "11.1.0")


@pytest.mark.parametrize(
    ("version", "fixed"),
    [
        ("7.2.22", False),  # an old branch without a backport
        ("10.0.11", False),  # the branch, before its backport
        ("10.0.12", True),
        ("10.0.13", True),
        ("10.2.2", False),  # a branch the fix never reached
        ("11.0.2", False),
        ("11.0.3", True),
        ("11.1.0", True),  # mainline
        ("11.1.50", True),  # master after it
        ("12.0.0", True),
    ],
)
def test_a_fix_is_had_per_branch_and_by_everything_after_mainline(version: str, fixed: bool) -> None:
    assert versions.has(version, LOCK_FIX) is fixed


def test_no_fix_known_is_had_by_no_version() -> None:
    assert not any(versions.has(v, ()) for v in ("7.2.22", "11.1.50", "99.0.0"))
    assert versions.describe(()) == "no fix known" and versions.describe(LOCK_FIX) == "fixed in 10.0.12, 11.0.3, 11.1.0"


@pytest.mark.parametrize(
    ("version", "nearest"),
    [("7.2.22", "7.2.22"), ("10.2.2", "10.0.13"), ("12.0.0", "11.1.50"), ("6.2.0", "7.2.22"), ("11.1.50", "11.1.50")],
)
def test_an_unknown_version_gets_the_expectations_of_the_nearest_below(version: str, nearest: str) -> None:
    assert versions.nearest_known(version) == nearest


def test_versions_parse_like_qemu_prints_them() -> None:
    assert versions.parse("10.0.13") == (10, 0, 13)
    assert versions.parse("11.1.50") == (11, 1, 50)
    assert versions.parse("9.2") == (9, 2, 0)


def test_a_development_version_is_mainline_not_a_stable_branch() -> None:
    """11.0.50 is master after 11.0.0 (QEMU's X.Y.50 numbering), not the 11.0 stable branch: a
    fix that reached 11.0.3 and 11.1.0 is not in it; one from 11.0.0 and 10.0.0 is."""
    assert not versions.has("11.0.50", ("10.0.12", "11.0.3", "11.1.0"))
    assert versions.has("11.1.50", ("10.0.12", "11.0.3", "11.1.0"))
    assert versions.has("11.0.50", ("11.0.0",)) and versions.has("11.0.50", ("10.0.0",))


def test_a_bug_is_where_it_came_in_and_not_yet_fixed() -> None:
    assert versions.has_bug("7.2.22", ("10.0.12", "11.1.0"))
    assert not versions.has_bug("10.0.13", ("10.0.12", "11.1.0"))
    regression = {"fixed_in": (), "introduced_in": ("10.0.13", "11.0.4", "11.1.0")}
    assert [versions.has_bug(v, **regression) for v in ("7.2.22", "10.0.12", "10.0.13", "11.1.50")] == [
        False, False, True, True,
    ]  # fmt: skip
