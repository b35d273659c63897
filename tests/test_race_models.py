"""The models the concurrent cases judge replies with, on the replies QEMU gave (no QEMU here):
a known race's answers are read as the race, anything else still fails."""

from __future__ import annotations

from cases.test_concurrent import explained_by_race


def test_a_raced_creation_reads_as_made_or_as_leaving_nothing() -> None:
    # 10.0.13, none: a Tsymlink took the name between Tmkdir's mkdirat and its fchmodat
    assert explained_by_race(["symlink_a", "rmdir_a", "mkdir_a"], ("ok", "ok", "ELOOP"), "dir") == 2
    # master, none: the first Tmkdir's clean-up removed the second's directory, by name
    ops = ["symlink_a", "mkdir_a", "rmdir_a2", "mkdir_a2"]
    assert explained_by_race(ops, ("ok", "ENOENT", "ok", "ENOENT"), None) == 1


def test_answers_no_reading_of_the_race_gives_are_not_excused() -> None:
    ops = ["symlink_a", "rmdir_a", "mkdir_a"]
    assert explained_by_race(ops, ("ok", "ok", "EEXIST"), "dir") is None  # no race errno
    assert explained_by_race(["mkdir_a", "rmdir_a"], ("ENOTDIR", "ok"), None) is None  # a remover's wrong errno
    assert explained_by_race(["mkdir_a", "unlink_a"], ("ENOENT", "EISDIR"), "dir") is None  # the name was taken
