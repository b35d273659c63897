"""``python -m harness known-bugs``: the known QEMU bugs the cases pin, and which versions have each.

Read from the cases' ``@pytest.mark.qemu_bug(fixed_in=..., reason=...)`` markers (parsed, not
imported: the harness never imports the cases), so the table a packager reads in
docs/known-bugs.md is the one the suite enforces; ``--write`` makes that page anew. Two decorators
put markers from fixtures/ on a case, which are read there: ``@table_bugs`` (the tables' known bugs,
fixtures/deviations.py ``TABLE_BUGS``) and ``@pair_races(...)`` (a marker per known race of
fixtures/races.py ``RACES``, on the pairs its predicate says can meet it: docs/matrices.md lists them).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.qemu import versions

PROJECT = Path(__file__).resolve().parents[2]
PAGE = PROJECT / "docs" / "known-bugs.md"
INTRO = """\
# Known QEMU bugs

<!-- made by `python -m harness known-bugs --write`; a self-test keeps it equal to the markers -->

A known bug is `@pytest.mark.qemu_bug(fixed_in=versions.NAME, reason=..., raises=...)` on a case: a
strict xfail on every version without the fix, a normal case on the versions with it. A fix is named
once, in `harness/qemu/versions.py`, by the first release of each stable branch that has it and the
mainline release it went into, so 10.2.2 lacks a fix of "10.0.12, 11.1.0" while 10.0.13 and master
have it; the malformed catalogue's expected outcomes read the same names. A regression also names
the releases that brought it (`introduced_in=`, or the fix's own `regression_of`). `()` is "no fix
known": a strict xfail on every version until a fix turns it into an XPASS. A case whose known bug
kills QEMU gets a QEMU of its own. "bug" below means the case is a strict xfail on that version. A
bug no release fixes that the harness found has a page in `docs/upstream/` (`upstream=` on its
marker): what a user sees, the releases, the cause, a minimal reproducer and a proposed patch with
its evidence.

"""


@dataclass(frozen=True)
class KnownBug:
    case: str
    fixed_in: tuple[str, ...]
    reason: str
    #: the releases that brought the bug (a regression); () for "always there"
    introduced_in: tuple[str, ...] = ()
    #: a race, seen in some runs only (a non-strict xfail)
    race: bool = False
    #: the pages in docs/upstream/ that report it to QEMU, each with a proposed patch (several for a
    #: case that meets several known races)
    upstream: tuple[str, ...] = ()

    def present_in(self, version: str) -> bool:
        return versions.has_bug(version, self.fixed_in, self.introduced_in)


def known_bugs(cases: Path = PROJECT / "cases") -> list[KnownBug]:
    found = []
    deviations = ast.parse((cases.parent / "fixtures" / "deviations.py").read_text())
    races = ast.parse((cases.parent / "fixtures" / "races.py").read_text())
    shared = _constants(deviations) | _constants(races)
    for path in sorted(cases.glob("test_*.py")):
        module = ast.parse(path.read_text())
        constants = _constants(module)  # module-level NAME = literal, which a marker may name
        for statement in module.body:  # and those it imports from fixtures or cases (fixtures/races.py)
            if isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith(("fixtures.", "cases.")):
                imported = cases.parent / f"{str(statement.module).replace('.', '/')}.py"
                source = _constants(ast.parse(imported.read_text()))
                constants |= {alias.name: source[alias.name] for alias in statement.names if alias.name in source}
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef):
                found += _bugs_of(_with_fixture_marks(node, shared), constants | shared)
    return _merged(found)


def _merged(bugs: list[KnownBug]) -> list[KnownBug]:
    """One row per bug and place: the same marker on the cases of several tables (states/, flags/,
    boundaries/: ``local/{boundaries,flags,states}/...``) or of one module's two dialects, once."""
    groups: dict[tuple[str, str, tuple[str, ...], str, tuple[str, ...], bool, tuple[str, ...]], list[str]] = {}
    for bug in bugs:
        backend, table, rest = [*bug.case.split("/", 2), "", ""][:3]
        if " where " in rest:  # a table's cells: which table's path, its last part (the security model) aside
            path, where = rest.split(" where ", 1)
            rest = f"…/{path.rsplit('/', 1)[-1]} where {where}"
        key = (backend, rest, bug.fixed_in, bug.reason, bug.introduced_in, bug.race, bug.upstream)
        if table not in groups.setdefault(key, []):
            groups[key].append(table)
    merged = []
    for (backend, rest, fixed, reason, since, race, upstream), tables in groups.items():
        table = tables[0] if len(tables) == 1 else "{" + ",".join(sorted(tables)) + "}"
        merged.append(KnownBug("/".join(part for part in (backend, table, rest) if part), fixed, reason, since, race,
                               upstream))  # fmt: skip
    return sorted(merged, key=lambda bug: bug.case)


def _with_fixture_marks(function: ast.FunctionDef, shared: dict[str, ast.expr]) -> ast.FunctionDef:
    """``function`` with the markers its fixtures/ decorators put on it written out: each of
    ``TABLE_BUGS`` for ``@table_bugs``, and for ``@pair_races(...)`` one per row of ``RACES``
    (on the pairs that can meet it)."""
    decorators: list[ast.expr] = []
    for decorator in function.decorator_list:
        name = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
        if name == "table_bugs":
            table = shared["TABLE_BUGS"]
            assert isinstance(table, ast.List)
            decorators += table.elts
        elif name == "pair_races":
            races = shared["RACES"]
            assert isinstance(races, ast.Tuple)
            decorators += [_race_marker(race) for race in races.elts if isinstance(race, ast.Call)]
        else:
            decorators.append(decorator)
    return ast.FunctionDef(function.name, function.args, function.body, decorators, function.returns,
                           function.type_comment, lineno=function.lineno)  # fmt: skip


def _race_marker(race: ast.Call) -> ast.Call:
    """A ``Race(seen, shows, answers, readings, reason, upstream, fixed_in=...)`` row as its marker."""
    fields = ("seen", "shows", "answers", "readings", "reason", "upstream", "fixed_in")
    given = dict(zip(fields, race.args, strict=False)) | {k.arg: k.value for k in race.keywords if k.arg}
    keywords = [
        ast.keyword("fixed_in", given.get("fixed_in", ast.Tuple([], ast.Load()))),
        ast.keyword("race", ast.Constant(True)),
        ast.keyword("reason", given["reason"]),
        ast.keyword("when", ast.Dict([ast.Constant("pair")], [ast.Constant("{pairs meeting it}")])),
    ]
    if "upstream" in given:
        keywords.append(ast.keyword("upstream", given["upstream"]))
    return ast.Call(ast.Attribute(ast.Attribute(ast.Name("pytest"), "mark"), "qemu_bug"), [], keywords)  # fmt: skip


def _constants(module: ast.Module) -> dict[str, ast.expr]:
    """Module-level ``NAME = value`` and ``NAME: type = value``."""
    found: dict[str, ast.expr] = {}
    for node in module.body:
        if isinstance(node, ast.Assign):
            found |= {target.id: node.value for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
    return found


def _bugs_of(function: ast.FunctionDef, constants: dict[str, ast.expr]) -> list[KnownBug]:
    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "versions":
            return getattr(versions, node.attr)  # a release tuple of harness.qemu.versions
        if isinstance(node, ast.Dict):  # when={"t": A_TUPLE_CONSTANT, ...}
            return {value(k): value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
        return ast.literal_eval(constants[node.id] if isinstance(node, ast.Name) else node)

    path, backends, bugs = "", ["synth", "local"], []
    for decorator in function.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        name = ast.unparse(decorator.func)
        kwargs = {k.arg: k.value for k in decorator.keywords if k.arg}
        for splat in (k.value for k in decorator.keywords if k.arg is None):  # **A_DICT_CONSTANT
            named = constants[splat.id] if isinstance(splat, ast.Name) else splat
            assert isinstance(named, ast.Dict)
            kwargs |= {str(key.value): item for key, item in zip(named.keys, named.values, strict=True)
                       if isinstance(key, ast.Constant)}  # fmt: skip
        if name == "case_path":
            path = value(decorator.args[0])
            backends = value(kwargs["backends"]) if "backends" in kwargs else backends
        elif name == "pytest.mark.qemu_bug":
            when = value(kwargs["when"]) if "when" in kwargs else {}
            fixed = value(kwargs["fixed_in"])  # a Change: the fix of a regression names what brought it
            written = value(kwargs["introduced_in"]) if "introduced_in" in kwargs else ()
            since = tuple(versions.brought_by(fixed, written))
            race = bool(value(kwargs["race"])) if "race" in kwargs else False
            pages = value(kwargs["upstream"]) if "upstream" in kwargs else ()
            upstream = (pages,) if isinstance(pages, str) else tuple(pages)
            bugs.append((tuple(fixed), value(kwargs["reason"]), when, since, race, upstream))
    found = []
    for fixed, reason, when, since, race, upstream in bugs:
        case = f"{when.get('backend', '|'.join(backends))}/{_filled(path, when)}"
        found.append(KnownBug(case, fixed, " ".join(reason.split()), since, race, upstream))
    return found


def _filled(path: str, when: dict[str, Any]) -> str:
    """``setattr/mode/{security_model}`` with the values the bug is limited to filled in (a tuple of
    them: ``{a,b}``, or how many); a limit the path has no part for (a table's cell's message or
    history) follows it: ``states/*/*/* where message=setattr``."""
    beyond = []
    for key, value in when.items():
        shown = (
            (f"{{{len(value)} of them}}" if len(value) > 3 else "{" + ",".join(value) + "}")
            if isinstance(value, tuple)
            else value
        )
        if "{" + key + "}" in path:
            path = path.replace("{" + key + "}", str(shown))
        elif key != "backend":
            beyond.append(f"{key}={shown}")
    return re.sub(r"\{\w+\}", "*", path) + (f" where {', '.join(beyond)}" if beyond else "")  # the others: any


def table(bugs: list[KnownBug]) -> str:
    """A narrow table (case, a column per known version, the fix), then what each bug does, by number."""
    headers = ["#", "case", *versions.KNOWN, "fixed in"]
    rows = [
        [
            number,
            f"`{bug.case}`",
            *("bug" if bug.present_in(v) else "fixed" if versions.has(v, bug.fixed_in) else "-"
              for v in versions.KNOWN),
            (f"since {', '.join(bug.introduced_in)}; " if bug.introduced_in else "")
            + (", ".join(bug.fixed_in) or "no fix known")
            + (" (seen in some runs only)" if bug.race else "")
            + _report(bug),
        ]
        for number, bug in enumerate(bugs, start=1)
    ]  # fmt: skip
    reasons = "\n".join(f"{number}. `{bug.case}`: {bug.reason}" for number, bug in enumerate(bugs, start=1))
    return str(tabulate(rows, headers=headers, tablefmt="github")) + "\n\nWhat happens:\n\n" + reasons


def _report(bug: KnownBug) -> str:
    """What the fixed-in column says of a bug's page for QEMU's maintainers: its pages ("ready to
    send": none has been sent; the page says so when one is), or that a bug no release fixes has
    none yet."""
    if len(bug.upstream) == 1:
        name = bug.upstream[0]
        if not has_patch(name):
            return f"; [page ready to send, no patch: the page says why](upstream/{name}.md)"
        return f"; [page ready to send, with a patch](upstream/{name}.md)"
    if bug.upstream:
        return "; pages ready to send, with patches: " + ", ".join(
            f"[{name}](upstream/{name}.md)" for name in bug.upstream
        )
    return "; no page yet" if not bug.fixed_in else ""


def has_patch(name: str) -> bool:
    """Whether docs/upstream/NAME.md comes with a proposed patch; a page without one says why
    (a limitation QEMU chose, whose fix is a feature to design)."""
    return (PROJECT / "docs" / "upstream" / f"{name}.patch").exists()


def summary(bugs: list[KnownBug]) -> str:
    """How many of the bugs no release fixes have a page for QEMU's maintainers (none is sent yet)."""
    unfixed = [bug for bug in bugs if not bug.fixed_in]
    reported = [bug for bug in unfixed if bug.upstream]
    patched = sum(1 for bug in reported if all(has_patch(name) for name in bug.upstream))
    pageless = len(unfixed) - len(reported)
    pages = (
        f"ready to send to QEMU's maintainers ({patched} with a patch, {len(reported) - patched} without one, "
        "the page saying why; no page has been sent yet)"
    )
    said = f"every one has a page {pages}" if not pageless else (
        f"{len(reported)} have a page {pages}, {pageless} {'has' if pageless == 1 else 'have'} no page yet "
        "(each says so)"
    )  # fmt: skip
    return f"Of the {len(bugs)} rows below, {len(unfixed)} are bugs no release fixes: {said}.\n\n"


def page() -> str:
    bugs = known_bugs()
    return INTRO + summary(bugs) + table(bugs) + "\n"


def main(write: bool) -> int:
    if not write:
        print(table(known_bugs()))
        return 0
    PAGE.write_text(page())
    print(f"wrote {PAGE}")
    return 0
