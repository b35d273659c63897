"""The README and docs/ say what the code does: short enough to read, commands that parse, lists
and numbers that come from the code."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.qemu import qemu_suite
from harness.tools import cli
from harness.tools.bench import report, suite
from tests.subrun import PROJECT

README = PROJECT / "README.md"
DOCS = sorted((PROJECT / "docs").glob("*.md"))


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 200


def _harness_commands(text: str) -> list[list[str]]:
    """``python -m harness ...`` lines of the code blocks, as argument lists (shell substitutions
    and comments dropped)."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r'"\$\(.*?\)"', "B", line.split("  #")[0])
            if "[" in line or "|" in line.split("#")[0]:
                continue  # a synopsis ([OPTION], a|b), not a command
            if "-m harness " in line:  # quotes dropped: a bisect line closes its sh -c quote later
                found.append(shlex.split(line.split("-m harness ", 1)[1].replace('"', "").replace("'", "")))
    return found


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_harness_command_shown_parses(page: Path) -> None:
    """Each `python -m harness …` a page shows is one the command line takes as written."""
    for words in _harness_commands(page.read_text()):
        if "--" in words:
            words = words[: words.index("--")]
        try:
            cli.build_parser().parse_args(words)
        except SystemExit as err:
            raise AssertionError(f"{page}: python -m harness {' '.join(words)} does not parse") from err


def test_the_cases_page_lists_qemus_own_cases_in_order() -> None:
    text = (PROJECT / "docs" / "cases.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("QEMU 7.2's cases, in qos-test's order: "))
    assert re.findall(r"`([^`]+)`", line) == list(qemu_suite.QEMU_72_CASES)


def test_the_readme_sample_counts_every_case(qemu_under_test: QemuUnderTest) -> None:
    """The sample summary table is of a whole run on the default QEMU: its total is the number of
    cases collected there (python -m harness ... --collect-only)."""
    sample = README.read_text().split("<!-- sample:", 1)[1].split("```")[1]
    title = next(line for line in sample.splitlines() if "virtio-9p summary" in line)
    version = re.search(r"QEMU (\S+) \(", title)
    assert version is not None, title
    if version.group(1) != qemu_under_test.probe.version:
        pytest.skip(f"the sample is of QEMU {version.group(1)}; this run's is {qemu_under_test.probe.version}")
    total = next(line for line in sample.splitlines() if line.startswith("| total"))
    counted = sum(int(cell) for cell in total.strip("|").split("|")[1:-1])  # less "QEMU died"
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/", "--collect-only", "-q", f"--qemu-binary={qemu_under_test.binary}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False,
    ).stdout  # fmt: skip
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", collected)  # "806/1314": opt-in families deselected
    assert found is not None, collected[-2000:]
    assert counted == int(found.group(1)), "README's sample: make conformance PYTEST_ARGS='-n 2 -q'"


def test_the_reproducers_in_docs_are_whole() -> None:
    """Each kept reproducer reads as complete (its end line matches): replay will judge it."""
    from harness.p9.trace import read_reproducer

    found = sorted((PROJECT / "docs" / "reproducers").glob("*/reproducer.9p"))
    assert found
    for path in found:
        header, steps = read_reproducer(path)
        assert header["case"] and steps, path


def test_the_pjdfstest_count_is_the_cases() -> None:
    """The number of pjdfstest files README and docs/posix.md give is the family's, which is the
    tarball's where this machine has it built."""
    from cases.posix_expectations import PJDFSTEST_FILES
    from harness.qemu import pjdfstest
    from harness.qemu.provision import cache_root

    for page in (README, PROJECT / "docs" / "posix.md"):
        assert f"{len(PJDFSTEST_FILES)} `.t`" in page.read_text() or f"({len(PJDFSTEST_FILES)})" in page.read_text()
    tarball = pjdfstest.find_tarball()
    tree = cache_root() / tarball.name.removesuffix(".tar.gz") if tarball else None
    if tree is not None and (tree / "pjdfstest").is_file():
        assert [f"{name.removesuffix('.t')}" for name in pjdfstest.test_files(tree)] == PJDFSTEST_FILES


def _bench_records() -> list[Path]:
    """The bench outputs docs/speed.md quotes: ``--json`` files that keep what the bench printed
    (older hand-quoted JSONs, of the runs before the benches kept it, are not among them)."""
    found = sorted((PROJECT / "docs").glob("bench-*.json"))
    return [path for path in found if {"labels", "times"} & set(json.loads(path.read_text()))]


@pytest.mark.parametrize("record", _bench_records(), ids=lambda path: path.name)
def test_the_bench_figures_in_the_docs_are_the_benches_output(record: Path) -> None:
    """Each table of figures is the bench's own output, printed again from its ``--json``."""
    data = json.loads(record.read_text())
    text = report.text_of_json(record) if "labels" in data else suite.suite_text(data)
    assert text in (PROJECT / "docs" / "speed.md").read_text(), f"docs/speed.md: paste {record.name}'s table"


@pytest.mark.parametrize("record", sorted((PROJECT / "docs").glob("profile-*.json")), ids=lambda path: path.name)
def test_the_profiles_in_the_docs_are_the_commands_output(record: Path) -> None:
    """docs/speed.md's breakdowns of a whole run are ``python -m harness profile --json``'s, printed again."""
    from harness.tools.profile import profile_text

    text = profile_text(json.loads(record.read_text()))
    assert text in (PROJECT / "docs" / "speed.md").read_text(), f"docs/speed.md: paste {record.name}'s tables"


@pytest.mark.parametrize("record", sorted((PROJECT / "docs").glob("pipeline-*.json")), ids=lambda path: path.name)
def test_the_pipeline_tables_in_the_docs_are_the_merge_jobs_output(record: Path) -> None:
    """docs/pipeline.md's tables of pipeline runs are ``matrix --merge --json``'s, printed again."""
    from harness.tools.pipeline import merged_text

    text = merged_text(json.loads(record.read_text()))
    assert text in (PROJECT / "docs" / "pipeline.md").read_text(), f"docs/pipeline.md: paste {record.name}'s tables"


@pytest.mark.parametrize("record", sorted((PROJECT / "docs").glob("bench-releases*.json")), ids=lambda path: path.name)
def test_the_release_figures_in_the_docs_are_the_commands_output(record: Path) -> None:
    """docs/speed.md's tables across releases are ``bench releases --json``'s, printed again."""
    from harness.tools.bench.releases import releases_text

    text = releases_text(json.loads(record.read_text()))
    assert text in (PROJECT / "docs" / "speed.md").read_text(), f"docs/speed.md: paste {record.name}'s tables"


def test_the_matrices_page_is_made_from_the_tables() -> None:
    from fixtures import matrices

    assert matrices.PAGE.read_text() == matrices.page(), "python -m fixtures.matrices --write"


def test_every_reply_field_has_a_source_or_a_reason() -> None:
    """The reply-field matrix has no empty cell: each field of each reply in the wire table is
    checked against a source that is not the server, or says why not."""
    from fixtures.replies import reply_fields, unreached

    assert unreached() == []
    assert all(how for _, how in reply_fields().values())


@pytest.mark.parametrize("record", sorted((PROJECT / "docs").glob("matrix-*.json")), ids=lambda path: path.name)
def test_the_matrix_tables_in_the_docs_are_the_matrix_output(record: Path) -> None:
    """A runs' table docs/tools.md quotes is ``python -m harness matrix --json``'s, printed again."""
    from harness.tools.matrix import runs_text

    text = runs_text(json.loads(record.read_text()))
    assert text in (PROJECT / "docs" / "tools.md").read_text(), f"docs/tools.md: paste {record.name}'s table"


def test_the_upstream_evidence_tables_are_the_commands_output() -> None:
    """docs/upstream/README.md quotes the matrices of the patches (a page quotes its own,
    matrix-<page>.json) and the bench of their locks, and listing-remap-cost.md and dotu-listing-by-path.md their
    benches: each as ``python -m harness matrix|bench --json`` printed it, printed again here."""
    from harness.tools.matrix import runs_text

    folder = PROJECT / "docs" / "upstream"
    page = (folder / "README.md").read_text()
    for matrix in sorted(folder.glob("matrix-*.json")):
        own = folder / (matrix.stem.removeprefix("matrix-") + ".md")
        quoted = page + (own.read_text() if own.exists() else "")
        assert runs_text(json.loads(matrix.read_text())) in quoted, matrix.name
    assert report.text_of_json(folder / "bench-locks.json") in page
    dotu = (folder / "dotu-listing-by-path.md").read_text()
    for record in ("bench-dotu-listing-passthrough.json", "bench-dotu-listing-mapped-xattr.json"):
        assert report.text_of_json(folder / record) in dotu, f"dotu-listing-by-path.md: paste {record}"
    remap = (folder / "listing-remap-cost.md").read_text()
    for record in ("bench-guest-listing.json", "bench-readdir-remap-patch-ab.json"):
        assert report.text_of_json(PROJECT / "docs" / record) in remap, f"listing-remap-cost.md: paste {record}"


@pytest.mark.parametrize("record", sorted((PROJECT / "docs").glob("guest-pjdfstest-*.json")), ids=lambda p: p.name)
def test_the_guest_pjdfstest_tables_are_the_commands_output(record: Path) -> None:
    """docs/guest.md's pjdfstest-through-v9fs tables are ``guest --pjdfstest --json``'s, printed again."""
    from harness.tools.guest_pjdfstest import text_of_json

    text = text_of_json(json.loads(record.read_text()))
    assert text in (PROJECT / "docs" / "guest.md").read_text(), f"docs/guest.md: paste {record.name}'s table"
