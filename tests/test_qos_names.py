"""Every case of QEMU's C suite exists here under its own name, and `-k NAME` selects only it."""

from __future__ import annotations

import subprocess
import sys

from harness.qemu.qemu_suite import QEMU_72_CASES
from tests.subrun import PROJECT


def collected_ids(*options: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/", "--collect-only", "-q", "--backend", "all", *options],
        cwd=PROJECT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if "::" in line]


def test_each_qemu_name_selects_exactly_one_case() -> None:
    ids = collected_ids()
    assert len(QEMU_72_CASES) == 27
    for name in QEMU_72_CASES:
        matches = [node for node in ids if name in node]
        assert len(matches) == 1, f"-k {name} selects {matches}"
        assert matches[0].endswith(f"[{name}]")


def test_every_case_id_is_a_path() -> None:
    for node in collected_ids():
        path = node.rsplit("[", 1)[1].rstrip("]")
        assert path.split("/")[0] in ("synth", "local"), node


def test_qemu_suite_option_selects_exactly_qemus_cases_in_qemus_order() -> None:
    chosen = collected_ids("--qemu-suite")
    assert [node.rsplit("[", 1)[1].rstrip("]") for node in chosen] == list(QEMU_72_CASES)  # qos-test's order
    walks = collected_ids("--qemu-suite", "-k", "walk")
    assert sorted(node.rsplit("[", 1)[1].rstrip("]") for node in walks) == sorted(
        name for name in QEMU_72_CASES if "walk" in name
    )


def test_a_case_on_no_chosen_backend_is_deselected_also_under_xdist() -> None:
    """attach/basic is synth-only: with --backend local it is deselected, not collected as an empty
    parameter set (a [NOTSET] item, whose report used to crash an xdist worker)."""
    assert not [node for node in collected_ids("--backend", "local") if "NOTSET" in node]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/test_attach.py", "-q", "--backend", "local", "-n", "2"],
        cwd=PROJECT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "NOTSET" not in run.stdout and "passed" in run.stdout.splitlines()[-1]
