"""The coverage tool's plumbing, on a small C program built with gcc --coverage (real gcov and
gcovr, no QEMU): per-file lines and branches of hw/9pfs/, and the lines a git diff touched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.qemu.build import Build
from harness.tools import coverage

PROGRAM = """\
int served(int n)
{
    if (n > 0) {
        return n;
    }
    return -n;
}

int unserved(void)
{
    return 7;
}

int main(void)
{
    return served(3) == 3 ? 0 : 1;
}
"""


@pytest.fixture
def built(tmp_path: Path) -> Build:
    if shutil.which("gcc") is None or shutil.which("git") is None:
        pytest.skip("gcc and git are needed (build-essential, git)")
    src = tmp_path / "qemu" / "src"
    (src / "hw" / "9pfs").mkdir(parents=True)
    (src / "VERSION").write_text("11.1.50\n")
    (src / "hw" / "9pfs" / "9p.c").write_text(PROGRAM)
    objdir = tmp_path / "qemu" / "build"
    objdir.mkdir()
    source = src / "hw" / "9pfs" / "9p.c"
    subprocess.run(["gcc", "--coverage", "-O0", "-o", "prog", str(source)], cwd=objdir, check=True)
    subprocess.run(["./prog"], cwd=objdir, check=True)
    return Build(tmp_path / "qemu", "debian:trixie", "11.1.50", 0.0, variant="gcov")


def test_lines_and_branches_of_the_server(built: Build) -> None:
    found = coverage.rows(coverage.summary(built))
    lines_covered, lines, branches_covered, branches = found["hw/9pfs/9p.c"]
    assert (lines_covered, lines) == (5, 8)  # `return -n;` and unserved()'s two lines never ran
    assert branches_covered < branches
    assert found["total"] == found["hw/9pfs/9p.c"]


def test_zeroing_removes_the_counters(built: Build) -> None:
    assert list((built.directory / "build").rglob("*.gcda"))
    coverage.zero_counters(built)
    assert not list((built.directory / "build").rglob("*.gcda"))


def test_a_diff_is_counted_on_its_own_lines(built: Build) -> None:
    tree = built.directory / "src"
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    text = (tree / "hw" / "9pfs" / "9p.c").read_text().replace("return -n;", "return -n ;")
    (tree / "hw" / "9pfs" / "9p.c").write_text(text)  # the patch touches the line the program never ran
    assert coverage.changed_lines(tree, "HEAD") == {"hw/9pfs/9p.c": {6}}
    assert coverage.diff_rows(built, coverage.detail(built), "HEAD") == [("hw/9pfs/9p.c", 0, 1, "0.0%")]


def test_functions_never_entered_are_named(built: Build) -> None:
    assert coverage.never_run(coverage.detail(built)) == {"hw/9pfs/9p.c": ["unserved"]}


def test_the_firmware_wrapper_runs_the_binary_and_leaves_nothing(tmp_path: Path) -> None:
    """qos-test's ``qemu-system-x86_64``: the binary with every firmware directory; its directory,
    and what a qos-test run left in it (a local export it did not remove), go when the block ends."""
    from harness.qemu.qemu_suite import QOS_FIRMWARE_DIRS, firmware_wrapper

    fake = tmp_path / "qemu"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    with firmware_wrapper(fake) as wrapper:
        assert wrapper.name == "qemu-system-x86_64"
        ran = subprocess.run([str(wrapper), "-display", "none"], capture_output=True, text=True, check=True)
        assert ran.stdout.split() == [*(f for d in QOS_FIRMWARE_DIRS for f in ("-L", str(d))), "-display", "none"]
        (wrapper.parent / "qtest-9p-local-abc" / "d").mkdir(parents=True)
    assert not wrapper.parent.exists()
