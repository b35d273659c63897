"""Cases use the harness's public surface only: no private name imported, no private attribute
read (``device.channel._in_flight``), no session state edited by hand. The layering itself is
import-linter's job (``make lint``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
CASES = sorted((PROJECT / "cases").glob("test_*.py"))


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_a_case_module_touches_nothing_private(path: Path) -> None:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("harness", "fixtures")):
            found += [f"import {alias.name}" for alias in node.names if private(alias.name)]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr == "fids" and isinstance(node.ctx, ast.Store):
            found.append(f"line {node.lineno}: fids assigned")
    assert not found, f"{path.name} reaches past the public surface: {found}"


def test_the_check_sees_a_private_attribute(tmp_path: Path) -> None:
    tree = ast.parse("device.channel._in_flight.clear()")
    assert any(isinstance(n, ast.Attribute) and private(n.attr) for n in ast.walk(tree))


def test_a_family_marker_selects_its_family_and_nothing_else() -> None:
    """``-m lock`` is every lock/ case and no malformed/Tlock/ one (``-k lock/`` takes both)."""

    def collected(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "cases/", "-q", "--co", "--strict-markers", *args],
                              cwd=PROJECT, capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
        return [line.split("[", 1)[1].rstrip("]") for line in done.stdout.splitlines() if "::" in line]

    by_marker = collected("-m", "lock")
    assert by_marker and all(case.split("/", 1)[1].startswith("lock/") for case in by_marker)
    by_keyword = collected("-k", "lock/")
    assert set(by_marker) < set(by_keyword) and any("malformed/" in case for case in by_keyword)
    assert set(by_marker) == {case for case in by_keyword if case.split("/", 1)[1].startswith("lock/")}
