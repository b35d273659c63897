"""``python -m harness matrix --qemu A --qemu B [pytest selection]``: the same cases against several
QEMU binaries, as one table of case x binary, differences first. Exit status 1 when they differ."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

from harness.errors import ProvisionError
from harness.qemu import provision

PROJECT = Path(__file__).resolve().parents[2]


def run_one(binary: Path, selection: list[str], results: Path) -> dict[str, str]:
    argv = [sys.executable, "-m", "pytest", "cases/", "-q", "--qemu-binary", str(binary),
            "--results-json", str(results), *selection]  # fmt: skip
    done = subprocess.run(argv, cwd=PROJECT, capture_output=True, text=True, check=False)
    if not results.exists():
        raise ProvisionError(f"pytest with {binary} produced no results:\n{done.stdout[-2000:]}{done.stderr}")
    outcomes: dict[str, str] = json.loads(results.read_text())
    return outcomes


def matrix(binaries: list[str], selection: list[str]) -> int:
    if len(binaries) < 2:
        raise ProvisionError("matrix compares two or more QEMUs: give --qemu A --qemu B, or --builds")
    paths = [provision.find_qemu(binary)[0] for binary in binaries]
    with tempfile.TemporaryDirectory(prefix="v9p-matrix-") as scratch:
        columns = [run_one(path, selection, Path(scratch, f"{n}.json")) for n, path in enumerate(paths)]
    cases = sorted(set().union(*columns))
    rows = []
    for case in cases:
        outcomes = [column.get(case, "-") for column in columns]
        rows.append((len(set(outcomes)) > 1, case.split("[", 1)[-1].rstrip("]"), *outcomes))
    rows.sort(key=lambda row: (not row[0], row[1]))
    differing = sum(1 for row in rows if row[0])
    headers = [
        "case",
        *(f"{n}: {path.name} ({provision.probe_cached(path).version}, {path.parent})" for n, path in enumerate(paths)),
    ]
    print(tabulate([row[1:] for row in rows], headers=headers, tablefmt="github"))
    print(f"{len(cases)} cases, {differing} differ")
    return 1 if differing else 0
