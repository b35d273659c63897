"""``python -m harness matrix --qemu A --qemu B [-- pytest selection]``: the same cases against two or
more QEMU binaries, as one table of case x binary, differences first, each differing case's
failure text per binary below it. Exit status 1 when they differ.

Each binary's run keeps its own directory, ``v9p-matrix/<n>-<version>/``: pytest's output
(``pytest.txt``), its ``results.json`` and its artefacts (reproducers, QEMU output), so that one
binary's evidence never overwrites another's. The directory of an earlier matrix is replaced, and
the tool says so. Last comes a table of the runs: each QEMU and build (plain, or its sanitizers),
what its cases did and how long the run took; ``--json FILE`` keeps it and every case's outcome,
and :func:`runs_text` prints that table again from the file (docs quote it so).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import ProvisionError
from harness.qemu import build, provision, versions
from harness.tools import children

PROJECT = Path(__file__).resolve().parents[2]
#: How much of each differing case's failure the summary shows per binary (all of it in pytest.txt).
SHOWN_LINES = 8


def run_one(binary: Path, selection: list[str], where: Path) -> dict[str, Any]:
    where.mkdir(parents=True)
    results = where / "results.json"
    argv = [sys.executable, "-m", "pytest", "cases/", "-q", "--qemu-binary", str(binary), "--results-json",
            str(results), "--artefact-dir", str(where / "artefacts"), *selection]  # fmt: skip
    done = children.run(argv, cwd=PROJECT)
    (where / "pytest.txt").write_text(done.stdout + done.stderr)
    if not results.exists():
        raise ProvisionError(f"pytest with {binary} produced no results (its output: {where / 'pytest.txt'}):\n"
                             f"{(done.stdout + done.stderr)[-2000:]}")  # fmt: skip
    found: dict[str, Any] = json.loads(results.read_text())
    return found


#: the outcomes a run's row counts, in this order
OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")


def build_of(path: Path) -> tuple[str, float | None]:
    """What kind of build ``path`` is: its cache entry's variant ("plain", "asan+ubsan", "tsan"…)
    and the seconds its build took; "given" and None for a binary the cache did not make."""
    for made in build.builds(provision.cache_root()):
        if made.binary.resolve() == path.resolve():
            return made.variant or "plain", made.seconds
    return "given", None


def runs_text(data: dict[str, Any]) -> str:
    """The table of runs a matrix printed last (``data``: what ``--json`` wrote)."""
    headers = ["QEMU", "build", *OUTCOMES, "run (s)", "build (min)"]
    rows = [(run["version"], run["build"], *(run["counts"].get(o, 0) for o in OUTCOMES), f"{run['seconds']:.0f}",
             "-" if run["built_in"] is None else f"{run['built_in'] / 60:.1f}") for run in data["runs"]]  # fmt: skip
    return tabulate(rows, headers=headers, tablefmt="github")


def matrix(binaries: list[str], selection: list[str], root: Path | None = None, json_path: str | None = None) -> int:
    if len(binaries) < 2:
        raise ProvisionError("matrix compares two or more QEMUs: give --qemu A --qemu B, or --builds")
    paths = [provision.find_qemu(binary)[0] for binary in binaries]
    numbers = [provision.probe_cached(path).version for path in paths]
    # a release and a tree past it share a number: the label names what the tree holds beyond it
    labels = [versions.label(number) for number in numbers]
    root = root or Path.cwd() / "v9p-matrix"
    if root.exists():
        print(f"replacing the earlier matrix in {root}")
        shutil.rmtree(root)
    runs = []
    for n, (path, number, version) in enumerate(zip(paths, numbers, labels, strict=True)):
        print(f"[{n + 1}/{len(paths)}] QEMU {version} ({path}) ...", end=" ", flush=True)
        start = time.monotonic()
        run = run_one(path, selection, root / f"{n}-{number}")
        counts: dict[str, int] = {}
        for outcome in run["cases"].values():
            counts[outcome] = counts.get(outcome, 0) + 1
        said = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())) or "no case"
        seconds = time.monotonic() - start
        print(f"{said} in {seconds:.1f} s")
        kind, built_in = build_of(path)
        run.update(version=version, build=kind, built_in=built_in, binary=str(path), counts=counts, seconds=seconds)
        runs.append(run)
    cases = sorted(set().union(*(run["cases"] for run in runs)))
    if not cases:
        raise ProvisionError(f"the selection {' '.join(selection) or '(all of cases/)'} matched no case")
    rows = []
    for case in cases:
        outcomes = [run["cases"].get(case, "-") for run in runs]
        rows.append((len(set(outcomes)) > 1, case, *outcomes))
    rows.sort(key=lambda row: (not row[0], row[1]))
    headers = [
        "case",
        *(f"{n}: {version} ({path})" for n, (path, version) in enumerate(zip(paths, labels, strict=True))),
    ]
    print(tabulate([(_short(row[1]), *row[2:]) for row in rows], headers=headers, tablefmt="github"))
    differing = [row[1] for row in rows if row[0]]
    for case in differing:
        for n, run in enumerate(runs):
            text = run.get("failures", {}).get(case)
            if text:
                shown = "\n".join(f"    {line}" for line in text.splitlines()[-SHOWN_LINES:])
                print(f"\n{_short(case)} on {n}: {labels[n]} failed:\n{shown}")
    print(f"\n{len(cases)} cases, {len(differing)} differ; each run's output and artefacts: {root}/<n>-<version>/")
    data = {"selection": selection, "runs": [{k: run[k] for k in ("version", "build", "built_in", "binary", "counts",
                                                                   "seconds", "cases")} for run in runs]}  # fmt: skip
    print(f"\n{runs_text(data)}")
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {json_path}")
    return 1 if differing else 0


def _short(case: str) -> str:
    """``synth/walk/basic`` for a case path id, else the node id."""
    return case.split("[", 1)[-1].rstrip("]") if "[" in case else case
