"""docs/architecture.md's module map names every module of the harness and of the fixtures, each
under its package, and names none that is gone: a newcomer finds the room of any line from it."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def module_map() -> str:
    text = (PROJECT / "docs" / "architecture.md").read_text()
    return text.split("```", 2)[1]


def mapped() -> set[str]:
    """The modules the map names, as paths from the project root. A line's first column (up to
    two spaces) names its modules: a package line (``harness/p9/``) opens a block whose indented
    lines name modules of that package; an unindented line names a path (``fixtures/pool.py``),
    and any bare name after it on that line (``fixtures/expect.py, place.py``) is its neighbour."""
    names: set[str] = set()
    package = ""
    for line in module_map().splitlines():
        head = line.strip().split("  ")[0]
        if line.startswith(" "):
            names.update(package + name for name in re.findall(r"[a-z0-9_]+\.py", head))
            continue
        package = head if head.endswith("/") else ""
        paths = re.findall(r"[a-z0-9_/]+\.py", head)
        if paths:
            folder = str(Path(paths[0]).parent)
            names.update(path if "/" in path else f"{folder}/{path}" for path in paths)
    return names


def present() -> set[str]:
    found = {str(p.relative_to(PROJECT)) for root in ("harness", "fixtures") for p in (PROJECT / root).rglob("*.py")}
    return {name for name in found if not name.endswith(("__init__.py", "__main__.py"))}


def test_the_module_map_names_every_module() -> None:
    missing = sorted(present() - mapped())
    assert not missing, f"docs/architecture.md's module map does not name: {missing}"


def test_the_module_map_names_no_module_that_is_gone() -> None:
    gone = sorted(mapped() - present())
    assert not gone, f"docs/architecture.md's module map names modules that do not exist: {gone}"
