"""docs/known-bugs.md is the one the cases' markers make; every fix is named once, in versions.py."""

from __future__ import annotations

import ast
import re

from harness.tools import known_bugs


def test_the_known_bugs_page_is_the_generated_one() -> None:
    assert known_bugs.PAGE.read_text() == known_bugs.page(), "python -m harness known-bugs --write"


def test_every_marker_is_read() -> None:
    bugs = {bug.case: bug for bug in known_bugs.known_bugs()}
    assert bugs["synth/lock/unopened_fid/*"].fixed_in  # every message the case takes == ("10.0.12", "11.0.3", "11.1.0")
    assert bugs["local/setattr/mode/mapped-xattr"].fixed_in == ()
    assert bugs["local/unlinked_open_file/truncate"].fixed_in == ("10.1.0",)  # named by versions.FD_TRUNCATE


def test_a_regression_is_a_bug_only_where_it_came_in() -> None:
    bugs = {bug.case: bug for bug in known_bugs.known_bugs()}
    wedge = bugs["synth/hotplug/unplug_with_request_in_flight"]
    assert wedge.introduced_in == ("10.0.13", "11.0.4", "11.1.0") and wedge.fixed_in == ()
    assert [wedge.present_in(v) for v in ("7.2.22", "10.0.13", "11.1.50")] == [False, True, True]


def test_every_fix_is_named_once_in_versions() -> None:
    """A marker names a fix by its constant in harness/qemu/versions.py (or () for none known), so
    the markers and the malformed catalogue cannot disagree on which version has it."""
    for path in sorted((known_bugs.PROJECT / "cases").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.qemu_bug":
                for keyword in node.keywords:
                    if keyword.arg in ("fixed_in", "introduced_in"):
                        written = ast.unparse(keyword.value)
                        # a constant, not a call (versions.either(...) too: known-bugs reads markers unrun)
                        assert written == "()" or re.fullmatch(r"versions\.[A-Z0-9_]+", written), (
                            f"{path.name}:{node.lineno}: {keyword.arg}={written}: name it in harness/qemu/versions.py"
                        )


def test_every_upstream_report_is_a_page_with_its_patch_and_reproducer() -> None:
    """``upstream=NAME`` on a marker: docs/upstream/NAME.md, NAME.patch beside it (a git patch) or
    the page's reason for none, and the page names its reproducer in docs/reproducers/, which
    exists; every page is named."""
    upstream = known_bugs.PROJECT / "docs" / "upstream"
    named = {name for bug in known_bugs.known_bugs() for name in bug.upstream}
    assert named == {page.stem for page in upstream.glob("*.md") if page.name != "README.md"}
    for name in named:
        page = (upstream / f"{name}.md").read_text()
        if not known_bugs.has_patch(name):  # a limitation: the page says so, and why
            assert "**Proposed patch:** none" in page and "## Why it is not patched here" in page, name
        else:
            patch = (upstream / f"{name}.patch").read_text()
            assert patch.startswith("From ") and "\n--- a/hw/9pfs/" in patch, f"{name}.patch: a git patch of hw/9pfs"
        reproducers = re.findall(r"docs/reproducers/([\w.+-]+)", page)
        assert reproducers and all((known_bugs.PROJECT / "docs" / "reproducers" / r).exists() for r in reproducers)
