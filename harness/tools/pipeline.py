"""The matrix description (``.ci/matrix.yml``) and what its cells run, here or in a CI job.

The same file gives the GitLab pipeline (``.ci/gitlab-ci.yml``) its ``parallel: matrix`` and
``python -m harness matrix --described NAME`` its cells, so the two cannot drift:

* a **cell** is one QEMU (a key of ``.v9p-qemus``: the arguments of ``python -m harness qemu
  build``) running one family (a key of ``.v9p-families``: pytest arguments), and for a hunt its
  share of the concurrent rounds (``FIRST:COUNT``);
* ``.v9p-NAME`` is a matrix (``parallel: matrix``, as GitLab expands it: each entry the product of
  its lists), ``.v9p-NAME-builds`` the QEMUs its build jobs make.

:func:`build_qemu` is a build job, :func:`run_cell` a test job, :func:`merge` the last job: the
table of every cell's outcomes and the known bugs the pipeline saw, from the cells' directories.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tabulate import tabulate

from harness.errors import HarnessError, ProvisionError
from harness.qemu import build, provision, versions
from harness.tools import children
from harness.tools.matrix import OUTCOMES

PROJECT = Path(__file__).resolve().parents[2]
DESCRIPTION = PROJECT / ".ci" / "matrix.yml"
#: What a test job writes in its directory besides pytest's JUnit XML and --results-json.
CELL_FILE = "cell.json"
#: What a build job hands on: the binary, QEMU's qos-test beside it, the build's stamp.
BUILD_FILES = (build.BINARY_NAME, "qos-test", build.STAMP)


@dataclass(frozen=True)
class Cell:
    qemu: str
    family: str
    rounds: str = ""  # FIRST:COUNT, a hunt's share of the concurrent rounds

    @property
    def name(self) -> str:
        """The cell's directory name: ``trixie-fault``, ``fork-hunt-100-100``."""
        return "-".join(part.replace(":", "-") for part in (self.qemu, self.family, self.rounds) if part)


@dataclass(frozen=True)
class Description:
    qemus: dict[str, str]
    families: dict[str, str]
    matrices: dict[str, list[Cell]]
    builds: dict[str, list[str]]

    def matrix(self, name: str) -> list[Cell]:
        if name not in self.matrices:
            raise HarnessError(f"{DESCRIPTION} describes no matrix {name!r} (it has {', '.join(self.matrices)})")
        return self.matrices[name]

    def pytest_args(self, cell: Cell) -> list[str]:
        """What the cell's pytest run gets after ``cases/ -n 2 -q``."""
        args = shlex.split(self.families[cell.family])
        if cell.rounds:
            first, count = cell.rounds.split(":")
            args += ["--concurrent-first-round", first, "--concurrent-rounds", count]
        return args


def expand(entries: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A ``parallel: matrix`` as GitLab expands it: each entry the product of its variables' values
    (a value that is no list is a list of one), in the entry's order."""
    jobs = []
    for entry in entries:
        names = list(entry)
        values = [value if isinstance(value, list) else [value] for value in entry.values()]
        jobs += [dict(zip(names, map(str, combination), strict=True)) for combination in itertools.product(*values)]
    return jobs


def load(path: Path = DESCRIPTION) -> Description:
    """The description, checked: every cell names a QEMU, a family and (for a hunt) rounds that
    exist, and every QEMU a matrix runs is one its build jobs make."""
    data = yaml.safe_load(path.read_text())
    qemus, families = data[".v9p-qemus"], data[".v9p-families"]
    matrices: dict[str, list[Cell]] = {}
    builds: dict[str, list[str]] = {}
    for key, value in data.items():
        if not key.startswith(".v9p-") or key in (".v9p-qemus", ".v9p-families"):
            continue
        jobs = expand(value["parallel"]["matrix"])
        if key.endswith("-builds"):
            builds[key.removeprefix(".v9p-").removesuffix("-builds")] = [job["V9P_QEMU"] for job in jobs]
            continue
        cells = [Cell(job["V9P_QEMU"], job["V9P_FAMILY"], job.get("V9P_ROUNDS", "")) for job in jobs]
        matrices[key.removeprefix(".v9p-")] = cells
    for name, cells in matrices.items():
        for cell in cells:
            if cell.qemu not in qemus or cell.family not in families:
                raise HarnessError(f"{path}: matrix {name}: {cell} names a QEMU or family it does not describe")
            if cell.rounds and not re.fullmatch(r"\d+:\d+", cell.rounds):
                raise HarnessError(f"{path}: matrix {name}: rounds {cell.rounds!r} are not FIRST:COUNT")
        unbuilt = {cell.qemu for cell in cells} - set(builds.get(name, ()))
        if unbuilt:
            raise HarnessError(f"{path}: matrix {name} runs {', '.join(sorted(unbuilt))}, which .v9p-{name}-builds "
                               "does not build")  # fmt: skip
    return Description(qemus, families, matrices, builds)


def build_qemu(description: Description, qemu: str, into: Path | None = None) -> Path:
    """A build job: ``python -m harness qemu build`` with the QEMU's arguments (cached as ever);
    with ``into``, the binary, qos-test and the stamp copied there (the job's artifact)."""
    argv = shlex.split(os.path.expandvars(description.qemus[qemu]))
    if any("$" in arg for arg in argv):
        raise HarnessError(f"QEMU {qemu!r} ({description.qemus[qemu]}) needs a variable this environment lacks "
                           "(CI_PROJECT_DIR: the QEMU tree a fork's pipeline runs in)")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "harness", "qemu", "build", *argv], cwd=PROJECT,
                          stdout=subprocess.PIPE, text=True, check=False)  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        raise ProvisionError(f"building QEMU {qemu!r} ({' '.join(argv)}) failed (exit {done.returncode})")
    binary = Path(done.stdout.strip().splitlines()[-1])
    if into is None:
        return binary
    into.mkdir(parents=True, exist_ok=True)
    for name in BUILD_FILES:
        if (binary.parent / name).exists():
            shutil.copy2(binary.parent / name, into / name)
    return into / build.BINARY_NAME


def node_total() -> int | None:
    """How many cells the CI job this runs in has (GitLab's ``CI_NODE_TOTAL``: the jobs of its
    ``parallel: matrix``), or None outside CI."""
    total = os.environ.get("CI_NODE_TOTAL", "")
    return int(total) if total.isdigit() else None


def ci_pipeline() -> str | None:
    """The ID of the CI pipeline this job runs in (GitLab's ``CI_PIPELINE_ID``; "" where a CI does
    not say), or None outside CI (:func:`node_total`)."""
    return os.environ.get("CI_PIPELINE_ID", "") if node_total() is not None else None


def run_cell(
    description: Description, cell: Cell, binary: Path, cells: Path, of: int | None = None, artifact: bool = False
) -> int:
    """A test job: the cell's family on ``binary``, with JUnit XML, --results-json and the
    artefacts in ``cells/<cell name>/`` beside ``cell.json`` (what ran, on what, how long, the exit
    status; ``of``: how many cells its pipeline runs, :func:`node_total`, and which pipeline);
    pytest's output on the terminal and in ``pytest.txt``. Returns pytest's exit status.
    ``cell.json`` is written first, with what is known then (the cell, ``of``), so that a job that
    dies later still counts among its pipeline's cells. ``artifact``: ``binary`` is a build job's,
    and this runner may lack what it needs to run."""
    out = cells / cell.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    known: dict[str, Any] = {"qemu": cell.qemu, "family": cell.family, "rounds": cell.rounds}
    if of:
        known |= {"of": of, "pipeline": ci_pipeline() or ""}
    (out / CELL_FILE).write_text(json.dumps(known, indent=1) + "\n")
    if artifact:
        build.ensure_runtime()
    probe = provision.probe_cached(binary)
    argv = [sys.executable, "-m", "pytest", "cases/", "-n", "2", "-q", "-p", "no:cacheprovider",
            "--qemu-binary", str(binary), "--junitxml", str(out / "junit.xml"),
            "--results-json", str(out / "results.json"), "--artefact-dir", str(out / "artefacts"),
            *description.pytest_args(cell)]  # fmt: skip
    print(f"=== {cell.name}: QEMU {probe.version} ({binary}): pytest {' '.join(argv[3:])}", flush=True)
    start = time.monotonic()
    with (
        open(out / "pytest.txt", "w") as log,
        children.stopped_with_us(
            subprocess.Popen(argv, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        status = proc.wait()
    stamp = binary.parent / build.STAMP
    variant = json.loads(stamp.read_text()).get("variant", "") if stamp.exists() else "given"
    record = known | {"version": versions.label(probe.version), "build": variant or "plain",
                      "seconds": round(time.monotonic() - start, 1), "exit": status}  # fmt: skip
    (out / CELL_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return status


def merge(
    cells: Path, expected: list[Cell] | None = None, pipeline: str | None = None
) -> tuple[str, int, list[dict[str, Any]]]:
    """The last job: every cell's row (what ran, its counts, its time, pytest's exit status), then
    the known bugs the pipeline saw, each with the cells that met it (xfailed) and those where it
    did not show (xpassed: fixed there, or a race not met). ``expected``: the matrix's cells, each
    a row even where its job left nothing (it died before pytest: "no results"). ``pipeline``: the
    merge job's pipeline ID (``CI_PIPELINE_ID``; "" where unknown), None outside CI. A pipeline's
    cells (in the merge job, or merged elsewhere: they recorded ``of``) are judged by the count
    they recorded, as a fork may have given its cell job a matrix of its own that the description
    here does not know; the described cells name the missing only where they agree with that
    count, or where no cell recorded one, and a job that left nothing is otherwise a row that
    counts the missing. Cells another pipeline left are not this one's. Exit status 1 when a cell
    failed or left no results, or none left anything. Also returns the records the text is made of
    (``--json`` keeps them)."""
    found = {path.name for path in cells.iterdir() if path.is_dir()} if cells.is_dir() else set()
    written = {name: json.loads((cells / name / CELL_FILE).read_text()) for name in found
               if (cells / name / CELL_FILE).exists()}  # fmt: skip
    # another pipeline's, left in a workspace that was not cleaned
    found -= {name for name, cell in written.items() if pipeline and cell.get("pipeline") not in ("", None, pipeline)}
    total = max((cell.get("of", 0) for name, cell in written.items() if name in found), default=0)
    in_pipeline = pipeline is not None or total > 0  # or a pipeline's cells, merged elsewhere
    described = {cell.name for cell in expected or []}
    if not in_pipeline or (found and not total) or (found <= described and total == len(described)):
        found |= described
    names = sorted(found)
    records: list[dict[str, Any]] = []
    for where in (cells / name for name in names):
        results_file = where / "results.json"
        if "exit" not in written.get(where.name, {}) or not results_file.exists():
            records.append({"cell": where.name})
            continue
        cell, results = written[where.name], json.loads(results_file.read_text())
        counts = collections.Counter(results["cases"].values())
        reasons = results.get("xfail_reasons", {})
        bugs = collections.Counter((bug, results["cases"][case]) for case, reason in reasons.items()
                                   for bug in bugs_of(reason))  # fmt: skip
        records.append({**cell, "cell": where.name, "counts": dict(counts),
                        "bugs": [[bug, outcome, n] for (bug, outcome), n in sorted(bugs.items())]})  # fmt: skip
    if total > len(names):
        records.append({"cell": f"{total - len(names)} of the pipeline's {total} cells"})
    elif not records:
        records.append({"cell": "no cell job left a directory (skipped: did a build fail?)"})
    text = merged_text(records)
    return text, 1 if any("counts" not in r or r["exit"] != 0 for r in records) else 0, records


def merged_text(records: list[dict[str, Any]]) -> str:
    """The merge job's tables from its records (docs/pipeline.md quotes one, kept by a self-test)."""
    rows: list[list[Any]] = []
    seen: dict[str, dict[str, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for record in records:
        if "counts" not in record:
            rows.append([record["cell"], "-", "-", "-", *["-"] * len(OUTCOMES), "-", "no results"])
            continue
        family = f"{record['family']} {record['rounds']}".strip()
        counts = [record["counts"].get(outcome, 0) for outcome in OUTCOMES]
        rows.append([record["qemu"], record["version"], record["build"], family, *counts,
                     f"{record['seconds']:.0f}", record["exit"]])  # fmt: skip
        for bug, outcome, n in record["bugs"]:
            seen[bug][outcome] += [f"{record['qemu']}/{record['family']}"] * n
    text = tabulate(rows, headers=["QEMU", "version", "build", "family", *OUTCOMES, "run (s)", "exit"],
                    tablefmt="github")  # fmt: skip
    bugs = [[bug, _cells(by["xfailed"]), _cells(by["xpassed"])] for bug, by in sorted(seen.items())]
    if bugs:
        headers = ["known bug", "met (xfailed): cases per cell", "not met (xpassed)"]
        text += "\n\n" + tabulate(bugs, headers=headers, tablefmt="github")
    return text


#: A table case's reason names each bug its cells met, after the cell: ``file/host/.../x (wstat-time-sign)``.
TABLE_BUGS = re.compile(r"^\d+ of \d+ cells met known bugs: ")


def bugs_of(reason: str) -> list[str]:
    """The known bugs an xfail's reason names: a marker's own reason, its first clause, without
    the versions the harness puts before it; a table case's, every bug its cells met (by name)."""
    if TABLE_BUGS.match(reason):
        named = sorted(set(re.findall(r"\(([a-z][a-z0-9-]+)\)(?:;|$)", reason)))
        return named or ["(a table's bugs: see the case)"]
    own = re.sub(r"^known QEMU bug \([^)]*\): ", "", reason)
    return [re.split(r": |; ", own, maxsplit=1)[0].strip()[:90]]


def _cells(found: list[str]) -> str:
    return ", ".join(f"{cell} {count}" for cell, count in sorted(collections.Counter(found).items())) or "-"


def run_described(name: str, root: Path) -> int:
    """``matrix --described NAME``: the matrix's builds, then its cells one after another, each in
    ``root/<cell>/`` as a CI job would leave it, then the merged table."""
    description = load()
    cells = description.matrix(name)
    binaries = {qemu: build_qemu(description, qemu) for qemu in description.builds[name]}
    for cell in cells:
        run_cell(description, cell, binaries[cell.qemu], root)
    text, status, _ = merge(root, cells)
    print(f"\n{text}")
    return status
