"""Which QEMU versions have a fix: per stable branch, and mainline for every later version."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from harness.qemu import build, versions

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


# -- what a build's source says -------------------------------------------------------------------


def test_a_source_that_holds_a_fix_has_it_whatever_its_number_says() -> None:
    """11.0.3 lacks the drain of 11.0.4 by its number; a stable-11.0 tree past 11.0.3 holds its
    commit. A history without it, or without every commit of a change, gives nothing."""
    drain = versions.UNPLUG_DRAIN
    assert not versions.has("11.0.3", drain)
    assert versions.has(versions.Version("11.0.3", [*drain.subjects, "an unrelated commit"]), drain)
    assert not versions.has(versions.Version("11.0.3", ["an unrelated commit"]), drain)
    xattr = versions.MAX_XATTR
    assert len(xattr.subjects) == 3
    assert not versions.has(versions.Version("10.2.4", xattr.subjects[:2]), xattr)
    assert versions.has(versions.Version("10.2.4", xattr.subjects), xattr)


def test_a_behaviour_either_of_two_fixes_brings_is_had_with_either() -> None:
    """On local a lock on an unopened fid is EBADF with the check before fstat, or with local's
    descriptor -1 alone (a build between 10.0.11 and 10.0.12 with only 75893c058b showed it); on
    synth only the check does it."""
    check, hardening = versions.LOCK_HANDLE_CHECK, versions.LOCAL_FID_FD_CHECK
    either = versions.LOCK_HANDLE_CHECK_LOCAL
    assert [a is b for a, b in zip(either.alternatives, (check, hardening), strict=True)] == [True, True]
    assert tuple(either) == ("10.0.12", "11.0.3", "11.1.0")
    only_hardening = versions.Version("10.0.11", hardening.subjects)
    assert versions.has(only_hardening, either) and not versions.has(only_hardening, check)
    assert versions.has(versions.Version("10.0.11", check.subjects), either)
    assert not versions.has(versions.Version("10.0.11", versions.FSYNC_HANDLE_CHECK.subjects), either)
    assert versions.has("10.0.12", either) and not versions.has("10.0.11", either) and versions.has("11.1.50", either)
    assert versions.by_history(only_hardening, either) and not versions.by_history(versions.Version("11.1.0"), either)
    # the ones either() makes name no commit of their own: a run's label names the changes it holds
    assert "LOCK_HANDLE_CHECK_LOCAL" not in versions.CHANGES and "LOCAL_FID_FD_CHECK" in versions.CHANGES
    assert versions.label(only_hardening) == "10.0.11 (+LOCAL_FID_FD_CHECK)"
    # alternatives of other releases: the first release of each branch, none past a mainline one
    drain_or_paths = versions.either(versions.UNPLUG_DRAIN, versions.LONG_PATHS)
    assert tuple(drain_or_paths) == ("10.0.11", "10.2.4", "11.0.2", "11.1.0")
    assert tuple(versions.either(versions.FD_TRUNCATE, versions.LONG_PATHS)) == ("10.0.11", "10.1.0")
    with pytest.raises(ValueError, match="fewer than two"):
        versions.either(check)


def test_a_history_only_adds() -> None:
    """A source whose history lacks a fix (a shallow clone, a squashed import) still has what its
    number gives it; a change that names no commit is never read from a history."""
    assert versions.has(versions.Version("11.1.0", ["anything"]), versions.UNPLUG_DRAIN)
    assert not versions.has(versions.Version("11.1.0", [""]), versions.Change(()))


def test_the_changes_a_source_holds_beyond_its_number_are_named() -> None:
    staging = versions.Version("11.0.3", [*versions.UNPLUG_DRAIN.subjects, *versions.MAX_XATTR.subjects])
    assert list(versions.beyond_number(staging)) == ["UNPLUG_DRAIN"]  # MAX_XATTR: 11.0.3 has it by number
    assert versions.beyond_number("11.0.3") == {}


def test_a_known_bug_follows_the_source() -> None:
    """The drain's wedge (introduced_in=UNPLUG_DRAIN) applies to a stable-11.0 tree that holds the
    drain; the O_TRUNC bypass (fixed_in=READONLY_DOTU_OPEN) does not."""
    from fixtures.known import known_bug

    def marker(**kwargs: object) -> pytest.Mark:
        return pytest.mark.qemu_bug(reason="r", **kwargs).mark

    wedge = marker(introduced_in=versions.UNPLUG_DRAIN, fixed_in=())
    bypass = marker(fixed_in=versions.READONLY_DOTU_OPEN)
    staging = versions.Version("11.0.3", [*versions.UNPLUG_DRAIN.subjects, *versions.READONLY_DOTU_OPEN.subjects])
    assert known_bug([wedge], {}, "11.0.3") is None
    held = known_bug([wedge], {}, staging)
    assert (
        held is not None
        and "since 10.0.13, 11.0.4, 11.1.0, whose commits its source holds; no fix known" in held.reason
    )
    assert known_bug([bypass], {}, "11.0.3") is not None and known_bug([bypass], {}, staging) is None


def test_every_change_names_its_commits() -> None:
    assert versions.CHANGES and all(change.subjects for change in versions.CHANGES.values())
    assert "TRACE_WALK_NAMES" in versions.CHANGES and "UNPLUG_DRAIN" in versions.CHANGES


def test_the_releases_and_the_commits_of_every_change_agree_on_every_release_since_7_2() -> None:
    """Each change's releases (its number rule) and its commits (its history rule) give the same
    answer on every release tag of a QEMU clone from 7.2 on: a wrong release, a missing backport or
    a wrong subject shows here. Needs a QEMU git history ($V9P_QEMU_GIT, as ``qemu build --git``)."""
    repo = os.environ.get("V9P_QEMU_GIT")
    if not repo or not (Path(repo, "HEAD").exists() or Path(repo, ".git").exists()):
        pytest.skip(
            "needs a QEMU git clone with its release tags: set V9P_QEMU_GIT to one (as `qemu build --git` reads)"
        )

    def git(*args: str) -> list[str]:
        return subprocess.run(
            ["git", "-C", repo, *args], capture_output=True, text=True, check=True
        ).stdout.splitlines()

    releases = [t for t in git("tag", "-l", "v[0-9]*") if "rc" not in t and versions.parse(t) >= (7, 2, 0)]
    by_subject: dict[str, list[str]] = {}
    for line in git("log", "--all", "--format=%H %s", "--", *build.HISTORY_PATHS):
        commit, subject = line.split(" ", 1)
        by_subject.setdefault(subject, []).append(commit)
    wrong = []
    for name, change in versions.CHANGES.items():
        assert all(by_subject.get(s) for s in change.subjects), f"{name}: a subject no commit of {repo} has"
        # one walk per subject: the tags that hold any of its commits (the mainline one, its backports)
        tagged = [set(git("tag", *(f"--contains={c}" for c in by_subject[s]))) for s in change.subjects]
        for tag in releases:
            by_number, by_history = versions.has(tag[1:], change), all(tag in t for t in tagged)
            if by_number != by_history:
                wrong.append(f"{name} on {tag}: by its releases {by_number}, by its commits {by_history}")
    assert not wrong, "\n".join(wrong)


def test_the_run_s_header_says_how_it_knows_what_qemu_has() -> None:
    from fixtures.plugin import _what_it_has

    assert "by its version number alone (no history of its source" in _what_it_has(versions.Version("10.0.13"))
    staging = _what_it_has(versions.Version("11.0.3", [*versions.UNPLUG_DRAIN.subjects, "hw/9pfs: another"]))
    assert "by its version number and its source's history (2 subjects: 9pfs commits, applied patches)" in staging
    assert staging.endswith(f"beyond its number it holds UNPLUG_DRAIN ({versions.UNPLUG_DRAIN.subjects[0]})")
    assert "beyond" not in _what_it_has(versions.Version("11.1.0", versions.UNPLUG_DRAIN.subjects))


def test_a_source_that_holds_part_of_a_change_is_named_in_the_header() -> None:
    """A backport of one commit of a change of several (FD_SETATTR's ftruncate without its futimens)
    is judged as lacking it, and the run says so; a whole change, or one its number gives, is not."""
    from fixtures.plugin import _what_it_has

    ftruncate, futimens = versions.FD_SETATTR.subjects
    backport = versions.Version("10.0.13", [ftruncate, "hw/9pfs: another"])
    assert versions.in_part(backport) == {"FD_SETATTR": ((ftruncate,), (futimens,))}
    assert not versions.has(backport, versions.FD_SETATTR) and versions.has(backport, versions.FD_TRUNCATE)
    said = _what_it_has(backport)
    assert said.endswith(
        f"beyond its number it holds FD_TRUNCATE ({ftruncate}). It holds only some commits of FD_SETATTR (has: "
        f"{ftruncate}; lacks: {futimens}): the run treats it as lacking each such change, so a case that sees what "
        "the held commits do may fail"
    ), said
    assert versions.label(backport) == "10.0.13 (+FD_TRUNCATE; part of FD_SETATTR)"
    assert versions.in_part(versions.Version("10.0.13", versions.FD_SETATTR.subjects)) == {}
    assert versions.in_part(versions.Version("10.1.0", [ftruncate])) == {}  # its number gives it whole
    assert "some commits" not in _what_it_has(versions.Version("10.0.13", [ftruncate, futimens]))


def test_a_regression_is_had_only_after_what_brought_it() -> None:
    """MKNOD_SPECIAL fixes a regression of the CVE-2023-2861 fix: 7.2.3 has neither (no bug), 7.2.22
    and 8.2.8 have the regression, 8.2.9 the fix; a marker's own introduced_in wins."""
    from fixtures import subjects
    from fixtures.answers import OK, Err
    from fixtures.known import known_bug
    from fixtures.model import Server
    from harness.p9.messages import Tmknod

    fix = versions.MKNOD_SPECIAL
    assert fix.regression_of is versions.SPECIAL_FILES_REFUSED
    assert [versions.has_bug(v, fix) for v in ("7.2.3", "7.2.22", "8.0.2", "8.2.8", "8.2.9", "10.0.13")] == [
        False, True, False, True, False, False,
    ]  # fmt: skip
    assert versions.has_bug("7.2.3", fix, introduced_in=("7.2.0",))
    assert versions.brought_by(versions.LONG_PATHS) == ()
    # a marker of it: no bug on 7.2.3 (the next marker may apply), "since" the CVE fix on 7.2.22
    mark = pytest.mark.qemu_bug(fixed_in=fix, reason="r").mark
    assert known_bug([mark], {}, "7.2.3") is None
    held = known_bug([mark], {}, "7.2.22")
    assert held is not None and "since 7.2.4, 8.0.3, 8.1.0; fixed in 8.2.9" in held.reason
    # a 9P-made FIFO under passthrough: ruled out for the regression only where it has it
    fifo = subjects.State("fifo", made="9p")
    why = {v: subjects.cannot(fifo, Server("passthrough", version=v)) for v in ("7.2.3", "7.2.22", "10.0.13")}
    assert [w.bug if w is not None else None for w in why.values()] == [None, (Tmknod, Err(errno.ENXIO), OK), None], why
    with pytest.raises(ValueError, match="different changes"):
        versions.either(fix, versions.LONG_PATHS)
    shared = versions.either(fix, versions.Change(("9.0.0",), "x", regression_of=versions.SPECIAL_FILES_REFUSED))
    assert shared.regression_of is versions.SPECIAL_FILES_REFUSED


def test_a_table_of_runs_tells_a_release_from_a_tree_past_it() -> None:
    assert versions.label("11.0.3") == "11.0.3" and versions.label(versions.Version("11.1.0", ["x"])) == "11.1.0"
    staging = versions.Version("11.0.3", [*versions.UNPLUG_DRAIN.subjects, *versions.READONLY_DOTU_OPEN.subjects])
    assert versions.label(staging) == "11.0.3 (+READONLY_DOTU_OPEN, UNPLUG_DRAIN)"
