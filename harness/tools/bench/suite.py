"""``bench suite``: QEMU's 27 cases, our pytest run against QEMU's qos-test, same binary; with
``--whole``, the whole suite on both guest-memory paths. Whole processes, timed from outside."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import HarnessError, ProvisionError
from harness.qemu import provision
from harness.qemu.qemu_suite import QEMU_72_CASES, QOS_PREFIX, firmware_wrapper
from harness.tools import children
from harness.tools.bench.report import decide
from harness.tools.bench.run import Steal, load
from harness.tools.bench.variant import home

PROJECT = Path(__file__).resolve().parents[3]


def _timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path = PROJECT) -> tuple[float, str, int]:
    start = time.perf_counter()
    run = children.run(argv, cwd=cwd, env=env, timeout=600)
    return time.perf_counter() - start, run.stdout + run.stderr, run.returncode


def _passed(runner: str, output: str) -> int:
    if runner == "qos-test":
        return len(re.findall(r"^ok ", output, flags=re.MULTILINE))
    found = re.search(r"(\d+) passed", output)
    return int(found.group(1)) if found else 0


def pytest_env() -> dict[str, str]:
    """The environment of a pytest run a bench or the profile times, as `make conformance` runs
    it: bytecode cached outside the tree (see the Makefile), not compiled again each run."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(provision.cache_root() / "pycache")
    return env


#: ``bench suite``'s row of ``python -c "import pytest"``, in the same environment as our runs.
PYTEST_FLOOR = "pytest's import alone"


def bench_suite(explicit: str | None, rounds: int, json_path: str | None = None) -> int:
    """QEMU 7.2's 27 cases (the ones every supported version has): our whole pytest process against
    QEMU's qos-test running just those, same binary, same run."""
    steal = Steal.since_now()
    binary, _ = provision.find_qemu(explicit)
    qos_test = provision.qos_test_for(binary)
    if qos_test is None:
        raise ProvisionError(f"no qos-test beside {binary}: `python -m harness qemu build` builds it beside every QEMU")
    with firmware_wrapper(binary) as wrapper:
        only = [arg for name in QEMU_72_CASES for arg in ("-p", f"{QOS_PREFIX}/{name}")]
        names = " or ".join(f"{name}]" for name in QEMU_72_CASES)  # the ids end in the path
        pytest = [sys.executable, "-m", "pytest", "cases/", "-q", "--qemu-binary", str(binary), "--qemu-suite",
                  "-k", names]  # fmt: skip
        ours = pytest_env()
        qtest_path = ["--guest-memory", "qtest"]
        runners = {
            "qos-test (QEMU's C suite)": ([str(qos_test), "-m", "slow", *only],
                                          {**os.environ, "QTEST_QEMU_BINARY": str(wrapper)}),
            "ours, pytest": (pytest, ours),
            "ours, pytest -n 2": ([*pytest, "-n", "2"], ours),
            "ours, pytest, qtest path": ([*pytest, *qtest_path], ours),
            "ours, pytest -n 2, qtest path": ([*pytest, "-n", "2", *qtest_path], ours),
            # No pytest run is quicker than pytest's own import: the floor under every row above.
            PYTEST_FLOOR: ([sys.executable, "-c", "import pytest"], ours),
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in runners}
        _timed([*pytest, "--co"], ours)  # fills the bytecode cache, as any earlier run would have
        for _ in range(rounds):
            for name, (argv, env) in runners.items():
                # qos-test makes its local export (qtest-9p-local-XXXXXX) in its working directory
                # and may leave it there: never in the checkout.
                seconds, output, status = _timed(argv, env, wrapper.parent if name.startswith("qos") else PROJECT)
                passed = _passed("qos-test" if name.startswith("qos") else "pytest", output)
                wanted = 0 if name == PYTEST_FLOOR else len(QEMU_72_CASES)
                if status != 0 or passed != wanted:
                    raise HarnessError(f"{name}: exit {status}, {passed} of {wanted} passed:\n{output[-3000:]}")
                times[name].append(seconds)
    title = f"QEMU's 27 virtio-9p cases on {home(binary)}, {rounds} rounds each, interleaved; whole-process wall time"
    data = {"title": f"{title}; {load(steal)}", "baseline": "qos-test (QEMU's C suite)", "times": times,
            "outcomes": {name: "no case" if name == PYTEST_FLOOR else f"{len(QEMU_72_CASES)} passed"
                         for name in times}}  # fmt: skip
    return suite_report(data, json_path, steal)


def suite_report(data: dict[str, Any], json_path: str | None, steal: Steal) -> int:
    """The table printed (and kept with ``json_path``); the guard's exit status, where there is one."""
    print(suite_text(data))
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {json_path}")
    steal.warn()
    return int(data.get("guard", {}).get("status", 0))


def suite_text(data: dict[str, Any]) -> str:
    """``bench suite``'s table from its measurements (``--json`` keeps them: the docs quote this).
    The whole suite's also says where the CPU time went: the harness's pytest processes against
    QEMU (and any other program the cases ran), medians over the rounds."""
    times: dict[str, list[float]] = data["times"]
    # (harness, QEMU) CPU seconds per runner, medians over the rounds
    cpu = {
        name: tuple(statistics.median(column) for column in zip(*rounds, strict=True))
        for name, rounds in data.get("cpu", {}).items()
    }
    theirs = statistics.median(times[data["baseline"]])
    rows = [
        [name, data["outcomes"][name], f"{min(t):.3f}", f"{statistics.median(t):.3f}", f"{max(t):.3f}",
         f"{statistics.median(t) / theirs:.2f}", *(f"{seconds:.1f}" for seconds in cpu.get(name, ()))]
        for name, t in times.items()
    ]  # fmt: skip
    headers = ["runner", "outcome", "min s", "median s", "max s", f"median / {data['baseline']}"]
    headers += ["harness CPU s", "QEMU CPU s"] if cpu else []
    if "cases" in data:  # per case, and the ratio the harness's speed is judged by
        for row, name in zip(rows, times, strict=True):
            harness, qemu = cpu[name]
            row += [f"{harness / data['cases'][name] * 1e3:.1f}", f"{qemu / data['cases'][name] * 1e3:.1f}",
                    f"{statistics.median(ratios(data, name)):.2f}"]  # fmt: skip
        headers += ["harness CPU ms/case", "QEMU CPU ms/case", "harness / QEMU"]
    if any(None not in rounds for rounds in data.get("waits", {}).values()):
        # what harness / QEMU would be if no wait cost anything (profile's header has it too):
        # "-" for a revision whose summary did not measure its waits
        for row, name in zip(rows, times, strict=True):
            unmeasured = None in data["waits"][name]
            row.append("-" if unmeasured else f"{statistics.median(ratios(data, name, less_waits=True)):.2f}")
        headers.append("harness less its waits / QEMU")
    text = f"{data['title']}\n{tabulate(rows, headers=headers, tablefmt='github')}"
    if "guard" in data:
        text += f"\nspeed guard: exit {data['guard']['status']}: harness / QEMU, {data['guard']['why']}"
    return text + _cpu_bound(cpu) if set(cpu) == {"shared", "qtest"} else text


def ratios(data: dict[str, Any], name: str, less_waits: bool = False) -> list[float]:
    """Runner ``name``'s harness / QEMU in each round, both CPU times from that round's run, so that
    most of the machine's swing from minute to minute cancels (``less_waits``: the harness's CPU
    time less its waits for a reply). The table shows their median, and the guard judges them."""
    waits = data["waits"][name] if less_waits else [0.0] * len(data["cpu"][name])
    return [(harness - waited) / qemu for (harness, qemu), waited in zip(data["cpu"][name], waits, strict=True)]


#: the guard's exit status when the host took enough CPU time that its figures are no verdict
NO_VERDICT = 2


def guard(data: dict[str, Any], threshold: float, stolen: str | None = None) -> dict[str, Any]:
    """``bench suite --whole --baseline REV --threshold T``'s verdict on this tree's harness
    against REV's: each round's harness / QEMU (:func:`ratios`), judged by :func:`decide` (exit 1
    where the rounds lie apart and this tree's median is ``threshold`` times REV's or more: a change
    that made the harness slower; else 0); :data:`NO_VERDICT` where ``stolen`` (the bench's steal
    warning) says the host took the figures over."""
    judged = {name: ratios(data, name) for name in (data["baseline"], "this tree")}
    status, why = decide(judged[data["baseline"]], judged["this tree"], False, threshold, reference=data["baseline"])
    if stolen is not None:
        status, why = NO_VERDICT, f"no verdict, the host took CPU time away ({why})"
    rounds = "; ".join(f"{name} {' '.join(f'{r:.2f}' for r in each)}" for name, each in judged.items())
    return {"threshold": threshold, "status": status, "why": f"{why}; each round: {rounds}"}


def _cpu_bound(cpu: dict[str, tuple[float, ...]]) -> str:
    """What the whole suite's CPU times say of the two paths' ratio. A run of two workers on two
    cores is CPU-bound, so the ratio of CPU times is near that of wall times; and if the harness's
    work the two paths share cost nothing, what would be left is QEMU's CPU time on each, plus on
    the qtest path the harness's cost of its qtest exchanges (the difference of the harness's
    times): while QEMU's work stays what it is, no change to the harness gets below that ratio."""
    harness, qemu = ({mode: spent[at] for mode, spent in cpu.items()} for at in (0, 1))
    total = {mode: harness[mode] + qemu[mode] for mode in cpu}
    floor = qemu["shared"] / (qemu["qtest"] + max(0.0, harness["qtest"] - harness["shared"]))
    return (
        f"\nCPU time, shared / qtest: {total['shared'] / total['qtest']:.2f}; with the harness's work common to both "
        f"paths taken out (QEMU's time on each, and what the qtest path costs the harness on top): {floor:.2f}"
    )


#: The summary's line of where the CPU time went (fixtures/summary.py, ``cpu_line``).
SUITE_CPU = r"CPU time over (?P<wall>[\d.]+) s: (?P<harness>[\d.]+) s in the harness .*?, (?P<qemu>[\d.]+) s in QEMU"
#: The summary's harness line (fixtures/summary.py, ``_harness_spent``): its CPU time in the waits
#: for a reply and in the notifies, each measured.
HARNESS_SPENT = (
    r"the harness's CPU time: (?P<wait_s>[\d.]+) s in (?P<waits>\d+) waits for a reply .*?, "
    r"(?P<notify_s>[\d.]+) s in (?P<notifies>\d+) notifies"
)
#: The counts of a whole-suite run that must agree between its runners: xfailed and xpassed may
#: differ, as races show when they will.
AGREED = ("passed", "failed", "skipped", "error")


def bench_whole_suite(
    explicit: str | None, rounds: int, json_path: str | None = None, workers: int = 2, baseline: str | None = None,
    threshold: float | None = None,
) -> int:  # fmt: skip
    """The whole conformance suite (``pytest cases/ -n 2``), interleaved, same binary: on both
    guest-memory paths; or, with ``baseline`` (a git revision), this tree's harness against that
    revision's, checked out beside (the A/B of a change to the harness). Wall time, where the CPU
    time went and the outcome counts, which must agree. With ``threshold`` (and ``baseline``), the
    exit status is :func:`guard`'s."""
    steal = Steal.since_now()
    binary, _ = provision.find_qemu(explicit)
    pytest = [sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", "-n", str(workers)]
    pytest += ["--qemu-binary", str(binary)]
    ours = pytest_env()
    with contextlib.ExitStack() as stack:
        if baseline is None:
            runners = {mode: ([*pytest, "--guest-memory", mode], PROJECT) for mode in ("shared", "qtest")}
            compared = "qtest"
        else:
            tree = stack.enter_context(checked_out(baseline))
            compared = f"{baseline} ({short_revision(baseline)})"
            runners = {compared: (pytest, tree), "this tree": (pytest, PROJECT)}
        times: dict[str, list[float]] = {name: [] for name in runners}
        cpu: dict[str, list[list[float]]] = {name: [] for name in runners}
        waits: dict[str, list[float | None]] = {name: [] for name in runners}
        cases: dict[str, int] = {}
        outcomes: dict[str, str] = {}
        ran: set[tuple[str, str]] = set()  # (runner, outcome) of every run: its passed/failed/skipped/error must agree
        order = list(runners.items())
        for round_ in range(rounds):
            # the two runners swap places each round: whatever favours a round's first (or second)
            # run, caches or the machine's drift, falls on both
            for name, (argv, cwd) in order if round_ % 2 == 0 else order[::-1]:
                seconds, output, status = _timed(argv, ours, cwd)
                summary = re.findall(r"^=* ?(\d+ passed.*?)(?: in [\d.]+s.*)?=*$", output, flags=re.MULTILINE)
                spent = re.search(SUITE_CPU, output)  # the summary's CPU line (fixtures/summary.py, cpu_line)
                if status != 0 or not summary or not spent:
                    raise HarnessError(f"whole suite, {name}: exit {status}:\n{output[-3000:]}")
                outcomes[name] = summary[-1].strip()
                ran.add((name, outcomes[name]))
                cases[name] = sum(int(n) for n in re.findall(r"(\d+) (?:passed|failed|skipped|xfailed|xpassed|error)",
                                                             outcomes[name]))  # fmt: skip
                times[name].append(seconds)
                cpu[name].append([float(spent["harness"]), float(spent["qemu"])])
                # None: a revision whose summary has no harness line (before the waits were measured)
                waited = re.search(HARNESS_SPENT, output)
                waits[name].append(float(waited["wait_s"]) if waited else None)
    if len({_counts(outcome) for _, outcome in ran}) > 1:  # a correct server gives the same counts each run
        raise HarnessError(f"the runs disagree on {'/'.join(AGREED)}: "
                           + "; ".join(f"{name}: {outcome}" for name, outcome in sorted(ran)))  # fmt: skip
    what = "both guest-memory paths" if baseline is None else f"this tree ({described()}) against {baseline}"
    title = (f"the whole suite, -n {workers}, {what}, on {home(binary)}, {rounds} round(s) each, interleaved; "
             f"{load(steal)}")  # fmt: skip
    data = {"title": title, "baseline": compared, "times": times, "outcomes": outcomes, "cpu": cpu, "cases": cases,
            "waits": waits}  # fmt: skip
    if threshold is not None and baseline is not None:
        data["guard"] = guard(data, threshold, steal.warning())
    return suite_report(data, json_path, steal)


def _counts(outcome: str) -> tuple[int, ...]:
    found = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", outcome)}
    return tuple(found.get(word, 0) for word in AGREED)


def short_revision(revision: str) -> str:
    """A revision as git abbreviates its commit."""
    return subprocess.run(["git", "rev-parse", "--short", revision], cwd=PROJECT, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def described() -> str:
    """This tree as ``git describe`` names it: its commit, "-dirty" with changes not committed."""
    return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=PROJECT, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


@contextlib.contextmanager
def checked_out(revision: str) -> Iterator[Path]:
    """The project at ``revision`` in a directory of its own (git archive: no worktree to prune),
    removed after. Its runs import its own harness and fixtures: ``python -m pytest`` puts the
    working directory first on the path."""
    where = Path(tempfile.mkdtemp(prefix="v9p-baseline-"))
    try:
        archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=PROJECT, capture_output=True,
                                 check=False)  # fmt: skip
        if archive.returncode != 0:
            raise HarnessError(f"git archive {revision}: {archive.stderr.decode(errors='replace').strip()}")
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)
