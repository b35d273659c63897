"""The README's known-bug table is the one the cases' markers make."""

from __future__ import annotations

from harness.tools import known_bugs


def test_the_readme_table_is_the_generated_one() -> None:
    readme = (known_bugs.PROJECT / "README.md").read_text()
    between = readme[readme.index(known_bugs.BEGIN) + len(known_bugs.BEGIN) : readme.index(known_bugs.END)]
    assert between.strip() == known_bugs.table(known_bugs.known_bugs()), "python -m harness known-bugs --readme"


def test_every_marker_is_read() -> None:
    bugs = {bug.case: bug for bug in known_bugs.known_bugs()}
    assert bugs["synth/lock/unopened_fid/{message}"].fixed_in == ("10.0.12", "11.0.3", "11.1.0")
    assert bugs["local/setattr/mode/mapped-xattr"].fixed_in == ()
    assert bugs["local/unlinked_open_file/truncate"].fixed_in == ("10.1.0",)  # named by versions.FD_SETATTR
