"""The GitLab pipeline (.ci/gitlab-ci.yml) and ``python -m harness matrix --described`` read one
matrix description (.ci/matrix.yml); the merge job's table; a hunt split by seed range."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from fixtures.batches import round_seeds
from harness.errors import HarnessError
from harness.tools import pipeline
from tests.subrun import PROJECT
from tests.test_tools import harness

PIPELINE = PROJECT / ".ci" / "gitlab-ci.yml"


def _jobs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pipeline's jobs (not templates, not the global keys)."""
    globals_ = {"include", "variables", "stages", "default", "workflow"}
    return {name: job for name, job in data.items() if not name.startswith(".") and name not in globals_}


def test_the_pipeline_and_the_matrix_command_read_one_description() -> None:
    """The pipeline includes the description the harness loads, and its jobs take their matrices
    from it and from nowhere else: every matrix the description has is run by a test job, its
    builds by a build job, and no job has a matrix of its own."""
    data = yaml.safe_load(PIPELINE.read_text())
    assert {"local": str(pipeline.DESCRIPTION.relative_to(PROJECT))} in data["include"]
    description = pipeline.load()
    extended: dict[str, set[str]] = {"build": set(), "test": set()}
    for name, job in _jobs(data).items():
        assert "parallel" not in job, f"{name} has a matrix of its own"
        templates = job["extends"] if isinstance(job["extends"], list) else [job["extends"]]
        stage = yaml.safe_load(PIPELINE.read_text())[templates[0]]["stage"]
        for template in templates[1:]:
            key = template.removeprefix(".v9p-")
            extended.setdefault(stage, set()).add(key)
    assert extended["test"] == set(description.matrices)
    assert extended["build"] == {f"{name}-builds" for name in description.builds}
    described = yaml.safe_load(pipeline.DESCRIPTION.read_text())
    for name in description.matrices:  # the cells the harness runs are the jobs GitLab expands
        jobs = pipeline.expand(described[f".v9p-{name}"]["parallel"]["matrix"])
        cells = [pipeline.Cell(job["V9P_QEMU"], job["V9P_FAMILY"], job.get("V9P_ROUNDS", "")) for job in jobs]
        assert cells == description.matrix(name)
    # the command reads that same file: the matrices it offers are the description's
    done = harness("matrix", "--described", "no-such-matrix")
    assert done.returncode != 0 and ", ".join(description.matrices) in done.stdout + done.stderr


def test_a_matrix_that_runs_a_qemu_no_build_job_makes_is_refused(tmp_path: Path) -> None:
    text = pipeline.DESCRIPTION.read_text().replace("      - V9P_QEMU: [bookworm, trixie]\n.v9p-small:",
                                                    "      - V9P_QEMU: [trixie]\n.v9p-small:")  # fmt: skip
    assert text != pipeline.DESCRIPTION.read_text()
    (tmp_path / "matrix.yml").write_text(text)
    with pytest.raises(HarnessError, match=r"runs bookworm, which \.v9p-small-builds does not build"):
        pipeline.load(tmp_path / "matrix.yml")


def _cell(root: Path, name: str, cell: dict[str, Any], cases: dict[str, str], reasons: dict[str, str]) -> Path:
    where = root / name
    where.mkdir()
    (where / pipeline.CELL_FILE).write_text(json.dumps(cell))
    (where / "results.json").write_text(json.dumps({"cases": cases, "xfail_reasons": reasons}))
    return where


def test_the_merge_job_tables_every_cell_and_the_known_bugs_it_met(tmp_path: Path) -> None:
    base = {"rounds": "", "build": "plain", "seconds": 61.2, "exit": 0, "family": "fault"}
    reasons = {
        "b": "known QEMU bug (no fix known; this is 7.2.22): v9fs_co_mkdir() makes the node, then stats it: x",
        "c": "2 of 5 cells met known bugs: file/host/x/wstat (wstat-time-sign); dir/9p/y/wstat (root-stat-name)",
    }
    _cell(tmp_path, "bookworm-fault", {**base, "qemu": "bookworm", "version": "7.2.22"},
                {"a": "passed", "b": "xfailed", "c": "xfailed"}, reasons)  # fmt: skip
    _cell(tmp_path, "trixie-fault", {**base, "qemu": "trixie", "version": "10.0.13", "exit": 1},
                {"a": "failed", "b": "xfailed", "c": "xpassed"}, reasons)  # fmt: skip
    (tmp_path / "empty").mkdir()
    text, status, records = pipeline.merge(tmp_path, [pipeline.Cell("bookworm", "fault"), pipeline.Cell("x", "gone")])
    assert pipeline.merged_text(records) == text
    assert status == 1  # a failed cell, and one that left no results
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| ")]
    assert rows[1] == ["bookworm", "7.2.22", "plain", "fault", "1", "0", "0", "2", "0", "0", "61", "0"]
    assert rows[2] == ["empty", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "no results"]
    assert rows[3] == ["trixie", "10.0.13", "plain", "fault", "0", "1", "0", "1", "1", "0", "61", "1"]
    assert rows[4] == ["x-gone", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "no results"]  # its job left nothing
    assert ["v9fs_co_mkdir() makes the node, then stats it", "bookworm/fault 1, trixie/fault 1", "-"] in rows
    assert ["wstat-time-sign", "bookworm/fault 1", "trixie/fault 1"] in rows  # a table's: each bug by its name
    assert ["root-stat-name", "bookworm/fault 1", "trixie/fault 1"] in rows


def test_in_a_pipeline_the_merge_counts_the_cells_its_jobs_ran_not_the_described_ones(tmp_path: Path) -> None:
    """A fork that gives its cell job a matrix of its own (docs/pipeline.md) is judged by the cells
    its pipeline ran: each job recorded their number (``of``, from CI_NODE_TOTAL), and the described
    matrix, which the fork's file replaced, adds no rows of cells that never ran. A job that left
    nothing is still counted, as the missing; where the recorded count is the described matrix's,
    the missing are named. A pipeline whose cells all left nothing (a build failed) fails too."""
    base = {"rounds": "", "build": "plain", "seconds": 61.2, "exit": 0, "family": "conformance", "version": "11.1.0"}
    described = [pipeline.Cell("fork", "conformance"), pipeline.Cell("fork", "posix"), pipeline.Cell("trixie", "fault")]
    text, status, _ = pipeline.merge(tmp_path, described, pipeline="7")
    assert status == 1 and "no cell job left a directory" in text, text
    _cell(tmp_path, "fork-conformance", {**base, "qemu": "fork"}, {"a": "passed"}, {})
    # cells that recorded no count (a run on one host, or an older harness's): the described matrix
    assert pipeline.merge(tmp_path, described)[1] == pipeline.merge(tmp_path, described, pipeline="7")[1] == 1
    (tmp_path / "fork-conformance" / pipeline.CELL_FILE).write_text(json.dumps({**base, "qemu": "fork", "of": 1}))
    text, status, _ = pipeline.merge(tmp_path, described, pipeline="7")
    assert status == 0 and "no results" not in text, text

    # three cells: one passed, one died in pytest (its first cell.json only), one left nothing
    (tmp_path / "fork-conformance" / pipeline.CELL_FILE).write_text(json.dumps({**base, "qemu": "fork", "of": 3}))
    (tmp_path / "fork-guest").mkdir()
    (tmp_path / "fork-guest" / pipeline.CELL_FILE).write_text(json.dumps({"qemu": "fork", "family": "guest", "of": 3}))
    text, status, _ = pipeline.merge(tmp_path, described, pipeline="7")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| ")]
    assert status == 1 and [row[0] for row in rows[1:]] == ["fork", "fork-guest", "1 of the pipeline's 3 cells"]
    assert rows[2][-1] == rows[3][-1] == "no results" and "posix" not in text

    # a cell whose job died after pytest wrote its results, before its record: no results
    (tmp_path / "fork-guest" / "results.json").write_text(json.dumps({"cases": {"a": "passed"}}))
    assert "no results" in pipeline.merge(tmp_path, described, pipeline="7")[0]
    # another pipeline's cell, left in a workspace that was not cleaned, is not this one's
    (tmp_path / "fork-conformance" / pipeline.CELL_FILE).write_text(json.dumps({**base, "qemu": "fork", "of": 2}))
    (tmp_path / "fork-guest" / pipeline.CELL_FILE).write_text(
        json.dumps({**base, "qemu": "fork", "family": "guest", "of": 2, "pipeline": "6"})
    )
    text, status, _ = pipeline.merge(tmp_path, described, pipeline="7")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| ")]
    assert status == 1 and [row[0] for row in rows[1:]] == ["fork", "1 of the pipeline's 2 cells"]
    # the same cells merged outside CI (their artifacts, downloaded): still by their count
    assert "posix" not in pipeline.merge(tmp_path, described)[0]
    (tmp_path / "fork-guest" / "results.json").unlink()
    (tmp_path / "fork-guest" / pipeline.CELL_FILE).write_text(json.dumps({"qemu": "fork", "family": "guest", "of": 3}))
    (tmp_path / "fork-conformance" / pipeline.CELL_FILE).write_text(json.dumps({**base, "qemu": "fork", "of": 3}))

    # the described matrix ran: its missing cell is named
    (tmp_path / "fork-guest" / pipeline.CELL_FILE).unlink()
    (tmp_path / "fork-guest").rmdir()
    _cell(tmp_path, "trixie-fault", {**base, "qemu": "trixie", "family": "fault", "of": 3}, {"a": "passed"}, {})
    text, status, _ = pipeline.merge(tmp_path, described, pipeline="7")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| ")]
    assert status == 1 and [row[0] for row in rows[1:]] == ["fork", "fork-posix", "trixie"]


def test_a_cell_job_counts_its_pipelines_cells_before_anything_can_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``matrix --cell`` in a CI job writes its cell.json with CI_NODE_TOTAL first: a job whose
    QEMU cannot even be probed still counts among its pipeline's cells, as one with no results."""
    monkeypatch.setenv("CI_NODE_TOTAL", "4")
    monkeypatch.setenv("CI_PIPELINE_ID", "7")
    done = harness("matrix", "--cell", "fork", "conformance", "--binary", str(tmp_path / "nothing"),
                   "--out", str(tmp_path / "cells"))  # fmt: skip
    assert done.returncode != 0, done.stdout
    written = json.loads((tmp_path / "cells" / "fork-conformance" / pipeline.CELL_FILE).read_text())
    assert written == {"qemu": "fork", "family": "conformance", "rounds": "", "of": 4, "pipeline": "7"}
    text, status, _ = pipeline.merge(tmp_path / "cells", None, pipeline="7")
    assert status == 1 and "fork-conformance" in text and "3 of the pipeline's 4 cells" in text, text
    monkeypatch.delenv("CI_NODE_TOTAL")
    assert pipeline.node_total() is None


def _seeds(first: int, rounds: int, share: float = 1.0) -> list[int]:
    options = {"--concurrent-seed": None, "--concurrent-rounds": rounds, "--concurrent-first-round": first}
    request = SimpleNamespace(config=SimpleNamespace(getoption=options.__getitem__),
                              node=SimpleNamespace(nodeid="cases/test_concurrent.py::test_x[local/x]"))  # fmt: skip
    return round_seeds(request, share)  # type: ignore[arg-type]


@pytest.mark.parametrize("share", [1.0, 1 / 3, 0.25])
@pytest.mark.parametrize("chunk", [30, 100])
def test_a_hunt_split_by_seed_range_runs_the_rounds_of_one_long_run(share: float, chunk: int) -> None:
    """Three jobs of N rounds from rounds 0, N and 2N run the rounds of one run of 3N, whatever
    share of them a case takes (a range's ends are rounded, not its length)."""
    split = [seed for first in (0, chunk, 2 * chunk) for seed in _seeds(first, chunk, share)]
    assert split == _seeds(0, 3 * chunk, share) and len(set(split)) == len(split)


def test_a_known_bug_is_named_alike_whatever_its_reason_says_of_the_versions() -> None:
    """The merge job names a bug by its marker's reason, without what the harness put before it:
    the versions, and a note that the build's source holds what brought the bug."""
    from fixtures.known import known_bug
    from harness.qemu import versions

    mark = pytest.mark.qemu_bug(introduced_in=versions.UNPLUG_DRAIN, fixed_in=(), reason="unrealize wedges: x").mark
    staging = versions.Version("11.0.3", versions.UNPLUG_DRAIN.subjects)
    for version in (staging, "11.1.50"):
        found = known_bug([mark], {}, version)
        assert found is not None and pipeline.bugs_of(found.reason) == ["unrealize wedges"]
