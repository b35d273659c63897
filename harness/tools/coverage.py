"""``python -m harness coverage``: how much of QEMU's 9pfs server a pytest selection runs.

On a gcov build of the QEMU under test (``qemu build ORIGIN --gcov``, made here when missing) the
counters are zeroed, the selection runs (also under ``-n``: each QEMU writes its counters when it
exits, and the harness always stops QEMU with QMP ``quit`` or SIGTERM, both a clean exit), and
gcovr, reading QEMU's ``.gcda`` files, reports lines and branches of ``hw/9pfs/`` per file. Left
out: ``9p-proxy.c`` (the proxy backend is gone upstream), the Xen transport (``xen-9p*``: no
virtio, nothing a qtest guest can reach) and ``trace-events`` (generated tracing glue).
``--html DIR`` writes gcovr's HTML report; ``--diff BASE`` limits the count to the lines
``git diff BASE`` touched in the QEMU source (a patch's own lines, for its reviewer);
``--compare-qos-test`` also runs QEMU's C suite on the same build and shows both side by side.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import HarnessError
from harness.qemu import build as qemu_build
from harness.qemu import provision
from harness.qemu.qemu_suite import QOS_PREFIX, firmware_wrapper
from harness.tools import children

PROJECT = Path(__file__).resolve().parents[2]
SERVER = "hw/9pfs/"
LEFT_OUT = (r".*9p-proxy.*", r".*xen-9p.*", r".*trace-events$")


def source_tree(build: qemu_build.Build) -> Path:
    """Where the sources of ``build`` are: the user's own tree, or the one unpacked in the build."""
    path = Path(build.origin.removeprefix("source:"))
    if build.origin.startswith("source:") and path.is_dir():
        return path
    unpacked = build.directory / "src"
    trees = [p for p in unpacked.iterdir() if (p / "VERSION").is_file()] if unpacked.is_dir() else []
    return unpacked if (unpacked / "VERSION").is_file() else trees[0]


def zero_counters(build: qemu_build.Build) -> None:
    for counters in (build.directory / "build").rglob("*.gcda"):
        counters.unlink()


def gcovr(build: qemu_build.Build, *extra: str) -> subprocess.CompletedProcess[str]:
    tree = source_tree(build)
    argv = [sys.executable, "-m", "gcovr", "--root", str(tree), "--object-directory", str(build.directory / "build"),
            "--filter", str(tree / SERVER), *(arg for x in LEFT_OUT for arg in ("--exclude", x)), *extra]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessError(f"gcovr failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def summary(build: qemu_build.Build) -> dict[str, Any]:
    """gcovr's per-file line and branch counts (its JSON summary)."""
    report: dict[str, Any] = json.loads(gcovr(build, "--json-summary").stdout)
    return report


def rows(report: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    """file -> (lines covered, lines, branches covered, branches); "total" for all of them."""
    found = {
        f["filename"]: (f["line_covered"], f["line_total"], f["branch_covered"], f["branch_total"])
        for f in report["files"]
    }
    found["total"] = (report["line_covered"], report["line_total"], report["branch_covered"], report["branch_total"])
    return found


def percent(covered: int, total: int) -> str:
    return f"{100 * covered / total:.1f}%" if total else "-"


def run_selection(binary: Path, selection: list[str]) -> int:
    argv = [sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", "--qemu-binary", str(binary),
            *selection]  # fmt: skip
    return children.run(argv, cwd=PROJECT, capture=False).returncode


def run_qos_test(build: qemu_build.Build) -> None:
    if build.qos_test is None:
        raise HarnessError(f"no qos-test in {build.directory}")
    with firmware_wrapper(build.binary) as wrapper:  # its local exports go beside it
        env = {"QTEST_QEMU_BINARY": str(wrapper), "PATH": "/usr/bin:/bin"}
        subprocess.run([str(build.qos_test), "-m", "slow", "-r", QOS_PREFIX], cwd=wrapper.parent, env=env,
                       check=False, capture_output=True)  # fmt: skip


def changed_lines(tree: Path, base: str) -> dict[str, set[int]]:
    """The lines of ``hw/9pfs/`` that ``git diff BASE`` adds or changes, per file."""
    diff = subprocess.run(["git", "-C", str(tree), "diff", "-U0", base, "--", SERVER], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if diff.returncode != 0:
        raise HarnessError(f"git diff {base} in {tree} failed: {diff.stderr.strip()}")
    changed: dict[str, set[int]] = {}
    current = ""
    for line in diff.stdout.splitlines():
        if line.startswith("+++ b/"):
            current = line[6:]
        elif (hunk := re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)) and current:
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            changed.setdefault(current, set()).update(range(start, start + count))
    return changed


def detail(build: qemu_build.Build) -> dict[str, Any]:
    """gcovr's per-line and per-function counts (its JSON report): read once, used by
    :func:`never_run` and :func:`diff_rows`."""
    report: dict[str, Any] = json.loads(gcovr(build, "--json").stdout)
    return report


def never_run(counts: dict[str, Any]) -> dict[str, list[str]]:
    """Per file, the functions the selection never entered (gcovr's function counts), in source order."""
    found = {}
    for file in counts["files"]:
        functions = sorted(file["functions"], key=lambda f: f["lineno"])
        names = [f["name"] for f in functions if f.get("execution_count") == 0]
        if names:
            found[file["file"]] = names
    return found


#: why a branch of hw/9pfs no case takes is not taken, by the source line it is on (the first rule
#: that matches); a branch no rule explains is "not reached yet"
BRANCH_REASONS: tuple[tuple[str, str], ...] = (
    (r"\bassert\(|g_assert|g_assert_not_reached|abort\(\)", "an assertion that held (failing it is the bug)"),
    (r"\btrace_|_trace\(|TRACE_", "a trace event off in these runs"),
    (r"\bg_(malloc|new|try_malloc|realloc|strdup)|\bg_new0?\(", "QEMU's allocator, which never returns NULL"),
    (
        r"\bfgets\(|fprintf\(|fclose\(|fdopen\(|fileno\(",
        "stdio inside the C library, which the injector does not reach",
    ),
    (r"\bfcntl\(|\bdirfd\(|\blseek|telldir|seekdir|rewinddir", "a C library call the injector does not wrap"),
    (r"xen|XEN", "the Xen transport (no virtio)"),
    (r"proxy|PROXY", "the proxy backend (gone upstream)"),
    (r"O_PATH|CONFIG_DARWIN|CONFIG_FREEBSD|__APPLE__", "another host"),
    (r"synth", "the synth backend's own test tree"),
)


def untaken(counts: dict[str, Any], tree: Path) -> dict[str, list[str]]:
    """Each branch no case took, as ``file:line``, grouped by :data:`BRANCH_REASONS` (the rest:
    "not reached yet")."""
    grouped: dict[str, list[str]] = {}
    for file in counts["files"]:
        source = (tree / file["file"]).read_text(errors="replace").splitlines()
        for entry in file["lines"]:
            missed = sum(1 for branch in entry.get("branches", []) if branch.get("count", 0) == 0)
            if not missed:
                continue
            text = source[entry["line_number"] - 1] if entry["line_number"] <= len(source) else ""
            reason = next((why for pattern, why in BRANCH_REASONS if re.search(pattern, text)), "not reached yet")
            grouped.setdefault(reason, []).extend([f"{file['file']}:{entry['line_number']}"] * missed)
    return grouped


def diff_rows(build: qemu_build.Build, counts: dict[str, Any], base: str) -> list[tuple[str, int, int, str]]:
    """Per file of the patch: changed executable lines covered, of how many."""
    changed = changed_lines(source_tree(build), base)
    out = []
    for file in counts["files"]:
        wanted = changed.get(file["file"], set())
        lines = [entry for entry in file["lines"] if entry["line_number"] in wanted and not entry.get("gcovr/noncode")]
        if lines:
            covered = sum(1 for entry in lines if entry["count"] > 0)
            out.append((file["file"], covered, len(lines), percent(covered, len(lines))))
    return out


def coverage(origin: str, selection: list[str], html: str | None, diff: str | None, compare_qos_test: bool) -> int:
    build = qemu_build.build(qemu_build.origin_of(origin), provision.cache_root(), variant="gcov")
    zero_counters(build)
    status = run_selection(build.binary, selection)
    ours = rows(summary(build))
    counts = detail(build)
    unentered = never_run(counts)
    if html:
        Path(html).mkdir(parents=True, exist_ok=True)
        gcovr(build, "--html-details", str(Path(html) / "index.html"))
    if diff:
        patch = diff_rows(build, counts, diff)
        print(f"lines changed since {diff} that the selection ran:")
        print(tabulate(patch, headers=("file", "covered", "changed lines", "%"), tablefmt="github"))
    theirs: dict[str, tuple[int, int, int, int]] = {}
    if compare_qos_test:
        zero_counters(build)
        run_qos_test(build)
        theirs = rows(summary(build))
    table = []
    for name, (lc, lt, bc, bt) in ours.items():
        row = [name, f"{lc}/{lt}", percent(lc, lt), f"{bc}/{bt}", percent(bc, bt)]
        if compare_qos_test:
            qlc, qlt, qbc, qbt = theirs.get(name, (0, lt, 0, bt))
            row += [percent(qlc, qlt), percent(qbc, qbt)]
        table.append(row)
    headers = ["file", "lines", "lines %", "branches", "branches %"]
    if compare_qos_test:
        headers += ["qos-test lines %", "qos-test branches %"]
    print(f"coverage of {SERVER} (proxy, Xen and trace glue left out) on QEMU {build.version} ({build.binary})")
    print(tabulate(table, headers=headers, tablefmt="github"))
    print("functions never entered:")
    for name, functions in unentered.items():
        print(f"  {name}: {', '.join(functions)}")
    grouped = untaken(counts, source_tree(build))
    print(f"branches never taken, by why ({sum(len(v) for v in grouped.values())}):")
    print(tabulate([[why, len(where), ", ".join(sorted(set(where), key=_line_order)[:6])]
                    for why, where in sorted(grouped.items(), key=lambda item: -len(item[1]))],
                   headers=("why", "branches", "for example"), tablefmt="github"))  # fmt: skip
    return status


def _line_order(where: str) -> tuple[str, int]:
    name, _, line = where.rpartition(":")
    return name, int(line)
