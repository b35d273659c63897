"""Every case of QEMU's C suite exists here under its own name, and `-k NAME` selects only it."""

from __future__ import annotations

import subprocess
import sys

from fixtures.case_path import declares_any
from fixtures.devices import QemuUnderTest
from harness.qemu.qemu_suite import QEMU_72_CASES, qemu_cases
from tests.subrun import PROJECT


def collected_ids(*options: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/", "--collect-only", "-q", "--backend", "all", *options],
        cwd=PROJECT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if "::" in line]


def test_each_qemu_name_selects_exactly_one_case() -> None:
    ids = collected_ids()
    assert len(QEMU_72_CASES) == 27 and len(qemu_cases("11.1.50")) == len(qemu_cases("10.0.13")) == 34
    for name in qemu_cases("11.1.50"):
        matches = [node for node in ids if name in node]
        assert len(matches) == 1, f"-k {name} selects {matches}"
        assert matches[0].endswith(f"[{name}]")


def test_every_case_id_is_a_path() -> None:
    for node in collected_ids():
        path = node.rsplit("[", 1)[1].rstrip("]")
        assert path.split("/")[0] in ("synth", "local"), node


def test_qemu_suite_option_selects_exactly_qemus_cases_in_qemus_order(qemu_under_test: QemuUnderTest) -> None:
    suite = qemu_cases(qemu_under_test.probe.version)
    chosen = collected_ids("--qemu-binary", str(qemu_under_test.binary), "--qemu-suite")
    assert [node.rsplit("[", 1)[1].rstrip("]") for node in chosen] == list(suite)  # qos-test's order
    walks = collected_ids("--qemu-binary", str(qemu_under_test.binary), "--qemu-suite", "-k", "walk")
    assert sorted(node.rsplit("[", 1)[1].rstrip("]") for node in walks) == sorted(
        name for name in suite if "walk" in name
    )


def test_qemu_suite_skips_exactly_the_modules_without_one_of_its_cases() -> None:
    """Under --qemu-suite a case module is imported only if its @case_path templates match one of
    QEMU's names (fixtures/devices.py, pytest_ignore_collect): a whole collection finds those cases
    in exactly the modules the templates point to, on every version's list."""
    for version in ("7.2.22", "11.1.50"):
        names = qemu_cases(version)
        holding = {node.split("::")[0] for node in collected_ids() if node.rsplit("[", 1)[1].rstrip("]") in names}
        pointed = {
            f"cases/{path.name}"
            for path in (PROJECT / "cases").glob("test_*.py")
            if declares_any(path.read_text(), names)
        }
        assert pointed == holding, f"templates point to {sorted(pointed - holding)}, miss {sorted(holding - pointed)}"
        assert len(holding) >= 13


def test_a_template_names_a_case_with_any_value_in_its_placeholders() -> None:
    split = '@case_path(\n    "readdir/split_{count}", count=[512])'
    assert declares_any(split, ["synth/readdir/split_512"]) and declares_any(split, ["local/readdir/split_x"])
    assert not declares_any(split, ["synth/readdir/basic", "synth/readdir_split_512"])
    assert declares_any('@case_path("walk/basic")', ["synth/walk/none", "local/walk/basic"])
    assert not declares_any('@case_path("walk/basic_more")', ["synth/walk/basic"])


def test_the_suite_of_each_version() -> None:
    assert qemu_cases("7.2.22") == QEMU_72_CASES
    assert qemu_cases("11.1.50")[17:20] == tuple(f"synth/xattr_limit/{k}" for k in ("default", "custom", "unlimited"))
    assert qemu_cases("11.1.50")[-4] == "local/deep_absolute_path"


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
