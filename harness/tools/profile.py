"""``python -m harness profile``: where a whole ``pytest cases/ -n 2`` run's time goes.

The run is sampled by py-spy (``record --subprocesses --nonblocking``: every pytest process, the
xdist controller and its workers, without stopping them), and each sample is put in the first
bucket of :data:`BUCKETS` that one of its frames matches. A sample is a thread that was running,
or ready to run and waiting for a CPU: on two busy cores a worker that has just woken its QEMU
often waits for the CPU QEMU took, and that wait is sampled where it happened (the notify). So
the waits for a reply and the notifies are measured, not sampled: the summary's harness line has
the CPU time the threads spent in them (harness/p9/channel.py, ``Spent``), which are their rows;
the table spreads the rest of the harness's measured CPU time (the summary's CPU line) over the
other buckets in proportion to their samples, and divides by the cases and the requests of the
run. Each measured row's share of samples stays beside its seconds, and the header counts the
samples py-spy could not read: what the shares of the other rows are worth.

QEMU's side comes from the summary's CPU line of QEMU (fixtures/summary.py): its CPU time in
starts, per-test resets and the cases' Tversion/Tattach, measured on its CPU-time clock around
each, and the rest, the cases' own requests.

The third table is measured as well: each case's harness CPU time, its QEMU's and its requests,
which its teardown report carries (fixtures/summary.py ``COSTS``; the run's ``--results-json``),
added up per case function.

Last, the floor (:func:`floor`): what a harness built as this one costs at the least for the run's
cases and requests, measured after the run: an empty case of pytest under xdist, and a bare
request (encode, notify, ring, decode; no check, its wait left out).

``--quick`` profiles QEMU's own cases only (``--qemu-suite``): seconds, for the self-test.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import HarnessError, ProvisionError
from harness.p9 import wire
from harness.p9.channel import Channel
from harness.p9.messages import Tclunk, Tgetattr, Tstatfs
from harness.p9.wire import Request
from harness.qemu import provision
from harness.qemu.config import MachineConfig
from harness.tools import children
from harness.tools.bench.run import Steal, load
from harness.tools.bench.suite import HARNESS_SPENT, SUITE_CPU, checked_out, pytest_env, short_revision
from harness.tools.connect import connect

PROJECT = Path(__file__).resolve().parents[2]

#: The buckets whose CPU time is measured (:data:`HARNESS_SPENT`'s seconds); the others share the rest by samples.
WAITING, NOTIFYING = "per request: waiting for the reply", "per request: notify"
MEASURED = {WAITING: "wait_s", NOTIFYING: "notify_s"}
#: (bucket, frame pattern), in order: a sample goes to the first bucket one of its frames matches.
#: A frame reads ``function (path:line)``, the path relative to its entry of sys.path. The measured
#: buckets come first: every wait and notify is in their measured time, wherever it was made.
BUCKETS: tuple[tuple[str, str], ...] = (
    (WAITING, r"^Channel\.wait \(harness/p9/channel\.py"),
    (NOTIFYING, r"^Channel\._publish \(harness/p9/channel\.py"),
    ("start-up: imports", r"^_find_and_load \(<frozen"),
    ("start-up: collection", r"^pytest_collection \(_pytest/main\.py"),
    ("per case: QEMU starts", r"^(Device\.start|MachinePool\.prestart) \(fixtures/pool\.py"),
    ("per case: per-test reset", r"^MachinePool\.get \(fixtures/pool\.py"),
    ("per case: descriptor invariant", r" \(fixtures/held\.py"),
    ("per case: place (case directory)", r"^Place\.(open|close) \(fixtures/place\.py"),
    ("per case: trace, reproducer, evidence", r" \((fixtures/evidence\.py|harness/p9/(trace|pcap)\.py)"),
    ("per case: summary bookkeeping", r" \(fixtures/summary\.py"),
    ("per case: fixtures (other)", r"^pytest_fixture_setup \(_pytest/fixtures\.py|^SetupState\.teardown_exact "),
    ("per request: encode", r"^(encode|encode_fields) \(harness/p9/wire\.py"),
    ("per request: decode", r"^(decode|peek_header) \(harness/p9/wire\.py"),
    ("per request: ring (the rest)", r" \(harness/(virtio|qemu)/|^Channel\.\w+ \(harness/p9/channel\.py"),
    ("per request: session bookkeeping", r" \(harness/p9/"),
    ("per case: checks (model, judge, tables)", r" \(fixtures/"),
    ("per case: the cases' own code", r" \(cases/"),
    ("per case: pytest and pluggy", r"^pytest_runtest_protocol \(_pytest/runner\.py"),
    ("xdist: controller and channels", r" \((xdist|execnet)/"),
)
OTHER = "other (start-up, session end)"

#: py-spy's own count of its samples and of its errors reading them (``record`` prints it as it ends)
SPY_COUNTS = r"Samples: (?P<samples>\d+) Errors: (?P<errors>\d+)"
#: The summary's CPU line of QEMU (fixtures/summary.py, ``cpu_line``; the first is bench suite's SUITE_CPU).
QEMU_PHASES = (
    r"QEMU's CPU time: (?P<start_s>[\d.]+) s in (?P<starts>\d+) starts .*?, (?P<reset_s>[\d.]+) s in (?P<resets>\d+) "
    r"resets .*?, (?P<attach_s>[\d.]+) s in (?P<attaches>\d+) attaches .*?; (?P<rest_s>-?[\d.]+) s in "
    r"(?P<requests>\d+) requests"
)
OUTCOMES = r"(\d+) (passed|failed|skipped|xfailed|xpassed|error)"


@dataclass(frozen=True)
class Sampled:
    """What py-spy saw: samples per bucket, and in all."""

    buckets: dict[str, int]
    total: int


def bucket_of(frames: list[str], patterns: list[tuple[str, re.Pattern[str]]]) -> str:
    for name, pattern in patterns:
        if any(pattern.search(frame) for frame in frames):
            return name
    return OTHER


def read_samples(raw: str) -> Sampled:
    """py-spy's raw output (``frame;frame;... count`` per line, the process first) in buckets."""
    patterns = [(name, re.compile(pattern)) for name, pattern in BUCKETS]
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame for frame in stack.split(";") if not frame.startswith("process ")]
        counts[bucket_of(frames, patterns)] += int(count)
    return Sampled(dict(counts), sum(counts.values()))


def profile(
    explicit: str | None, quick: bool, rate: int, json_path: str | None, selection: list[str],
    baseline: str | None = None,
) -> int:  # fmt: skip
    """Profile a run of this tree, or with ``baseline`` (a git revision) of that revision's
    harness, checked out beside: the breakdown before a change, next to the one after."""
    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        raise ProvisionError("py-spy is not installed: `make venv` installs it (pyproject's dev extra)")
    binary, _ = provision.find_qemu(explicit)
    steal = Steal.since_now()
    with contextlib.ExitStack() as stack:
        tree = stack.enter_context(checked_out(baseline)) if baseline else PROJECT
        data = _profiled(spy, binary, quick, rate, selection, tree)
    if not baseline:  # (the floor's bare requests go through this tree's request path)
        try:
            data["floor"] = floor(binary, quick)
        except HarnessError as err:  # the profiled run is kept all the same
            data["floor"] = {"error": str(err).splitlines()[0]}
    which = f" (the harness of {baseline}, {short_revision(baseline)})" if baseline else ""
    data["title"] = (f"where a `pytest cases/ -n 2{' --qemu-suite' if quick else ''}` run's time goes{which}, on "
                     f"{binary}, {rate} samples/s per thread; {load(steal)}")  # fmt: skip
    print(profile_text(data))
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {json_path}")
    return 0


def _profiled(spy: str, binary: Path, quick: bool, rate: int, selection: list[str], tree: Path) -> dict[str, Any]:
    pytest = [sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", "-n", "2"]
    pytest += ["--qemu-binary", str(binary), *(["--qemu-suite"] if quick else []), *selection]
    env = pytest_env()
    with tempfile.TemporaryDirectory(prefix="v9p-profile-") as where:
        raw = Path(where) / "samples.txt"
        argv = [spy, "record", "--subprocesses", "--nonblocking", "--format", "raw", "--rate", str(rate)]
        results = Path(where) / "results.json"
        done = children.run([*argv, "-o", str(raw), "--", *pytest, "--results-json", str(results)], cwd=tree,
                            env=env)  # fmt: skip
        output = done.stdout + done.stderr
        if not raw.exists():
            raise HarnessError(f"py-spy wrote no samples (exit {done.returncode}):\n{output[-3000:]}")
        data = measured(output, read_samples(raw.read_text()))
        # a revision from before the cases' costs were recorded has none
        costs = json.loads(results.read_text()).get("costs", {}) if results.exists() else {}
        data["functions"] = by_function(costs) if costs else None
        return data


def by_function(costs: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """The cases' costs (``--results-json``'s, each case with every key of fixtures/summary.py
    ``COSTS``) added up per case function (``cases/test_states.py::test_every_state``), the
    costliest in harness CPU first."""
    found: dict[str, dict[str, Any]] = {}
    for nodeid, cost in costs.items():
        row = found.setdefault(nodeid.split("[")[0], {"cases": 0})
        row["cases"] += 1
        for key, value in cost.items():  # (None: no QEMU CPU time measured for the case)
            row[key] = row.get(key, 0.0) + (value or 0)
    return [{"function": name, **row} for name, row in sorted(found.items(), key=lambda kv: -kv[1]["harness_cpu_s"])]


#: the empty cases of the floor's pytest runs, each size run FLOOR_ROUNDS times (``--quick``: once,
#: on FLOOR_CASES_QUICK): the difference between the two sizes' cheapest runs is what the cases cost
FLOOR_CASES = (100, 1000)
#: ``--quick``'s sizes: apart enough that one run of each tells their cost from a pytest start's own
#: swing (10 and 100 once measured the same CPU time, a floor of 0 per case, beside a busy worker)
FLOOR_CASES_QUICK = (10, 500)
#: the bare requests of the floor: each a request QEMU answers from what it holds (the export's
#: root, a fid the session never made), ``FLOOR_REQUESTS`` (``--quick``: a tenth) of each per round
FLOOR_KINDS: tuple[Request, ...] = (Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC), Tstatfs(fid=0), Tclunk(fid=4242))
FLOOR_REQUESTS, FLOOR_ROUNDS = 5000, 3


def floor(binary: Path, quick: bool) -> dict[str, Any]:
    """What a harness built as this one (pytest and xdist for the cases, Python for the request
    path) costs at the least: the CPU time of one more empty case in a ``pytest -n 2`` run (no
    fixture, no plugin of ours), and of one bare request on a session of its own, on the default
    machine configuration (encode, notify, ring, decode, and the session's history and bookkeeping
    that every request keeps; no check; its wait, with the polls and the reply's copy, left out, as
    a wait that blocks could cost nothing), the cheapest of :data:`FLOOR_KINDS`, rounds
    interleaved. Each figure is the least of its rounds: a lower bound, on a quiet machine."""
    sizes = FLOOR_CASES_QUICK if quick else FLOOR_CASES
    rounds = 1 if quick else FLOOR_ROUNDS  # (the quick mode is a self-test's, run beside others: light)
    with tempfile.TemporaryDirectory(prefix="v9p-floor-") as where:
        Path(where, "pytest.ini").write_text("[pytest]\n")  # (not the project's configuration)
        runs: dict[int, list[float]] = {size: [] for size in sizes}
        for _ in range(rounds):
            for size in sizes:
                runs[size].append(_empty_cases(Path(where), size))
    small, large = sizes
    per: dict[str, list[float]] = {type(kind).__name__: [] for kind in FLOOR_KINDS}
    count = FLOOR_REQUESTS // 10 if quick else FLOOR_REQUESTS
    config = MachineConfig(binary=binary)
    with connect(config) as conn:
        for _ in range(rounds):
            for kind in FLOOR_KINDS:
                waited, started = Channel.waits.seconds, time.thread_time()
                for _ in range(count):
                    conn.session.send(kind).wait()
                own = time.thread_time() - started - (Channel.waits.seconds - waited)
                per[type(kind).__name__].append(own / count)
    cheapest = min(per, key=lambda name: min(per[name]))
    return {"case_s": (min(runs[large]) - min(runs[small])) / (large - small), "request_s": min(per[cheapest]),
            "request": cheapest, "guest_memory": config.guest_memory, "cpus": len(os.sched_getaffinity(0))}  # fmt: skip


def _empty_cases(where: Path, count: int) -> float:
    """The CPU time of ``pytest -n 2`` on ``count`` empty cases (its processes': the controller
    reaps its workers), with xdist and no other plugin: nothing of ours, nor hypothesis's."""
    (where / "test_empty.py").write_text(f"import pytest\n\n\n@pytest.mark.parametrize('i', range({count}))\n"
                                         "def test_empty(i):\n    pass\n")  # fmt: skip
    argv = [sys.executable, "-m", "pytest", "test_empty.py", "-q", "-n", "2", "-p", "no:cacheprovider",
            "--disable-plugin-autoload", "-p", "xdist.plugin"]  # fmt: skip
    env = {key: value for key, value in pytest_env().items() if key != "PYTEST_ADDOPTS"}  # (a user's options: not here)
    before = os.times()
    done = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, check=False)
    after = os.times()
    if done.returncode != 0 or f"{count} passed" not in done.stdout:
        raise HarnessError(f"the floor's {count} empty cases did not pass:\n{(done.stdout + done.stderr)[-3000:]}")
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def measured(output: str, sampled: Sampled) -> dict[str, Any]:
    """The run's own figures (CPU lines, outcome counts) with the samples."""
    spent, phases = re.search(SUITE_CPU, output), re.search(QEMU_PHASES, output)
    spent_on, spy = re.search(HARNESS_SPENT, output), re.search(SPY_COUNTS, output)
    ends = [line for line in output.splitlines() if re.match(rf"=* ?{OUTCOMES}.* in [\d.]+s", line)]
    counts = re.findall(OUTCOMES, ends[-1]) if ends else []
    if spent is None or not counts or not sampled.total:
        raise HarnessError(f"the profiled run printed no summary to read:\n{output[-3000:]}")
    return {
        "wall": float(spent["wall"]),
        "harness": float(spent["harness"]),
        "qemu": float(spent["qemu"]),
        "cases": sum(int(n) for n, _ in counts),
        "outcome": ", ".join(f"{n} {word}" for n, word in counts),
        # None: a revision from before the summary measured QEMU's phases
        "phases": {key: float(value) for key, value in phases.groupdict().items()} if phases else None,
        # None: a revision from before the summary measured the harness's waits and notifies
        "spent": {key: float(value) for key, value in spent_on.groupdict().items()} if spent_on else None,
        "samples": sampled.buckets,
        "spy": {key: int(value) for key, value in spy.groupdict().items()} if spy else None,
    }


def profile_text(data: dict[str, Any]) -> str:
    """The profile's tables from its measurements (``--json`` keeps them; docs/speed.md quotes this):
    the harness's buckets, QEMU's phases, and the cases' costs by case function where measured."""
    samples: dict[str, int] = data["samples"]
    total, cases, phases, spent = sum(samples.values()), data["cases"], data["phases"], data.get("spent")
    # a revision from before the QEMU phases were measured: its requests are not counted either
    requests = max(phases["requests"], 1) if phases else None
    # the measured buckets take their own time; the others share the rest of the harness's by their samples
    timed = {name: spent[key] for name, key in MEASURED.items()} if spent else {}
    spread = data["harness"] - sum(timed.values())
    spread_samples = max(total - sum(samples.get(name, 0) for name in timed), 1)
    rows = []
    known = [*(name for name, _ in BUCKETS), OTHER]
    # a record's buckets of another revision's names (renamed or split since) are printed too, after ours
    for name in [*known, *(name for name in samples if name not in known)]:
        share = samples.get(name, 0) / total
        seconds = timed.get(name, samples.get(name, 0) / spread_samples * spread)
        per = f"{seconds / requests * 1e6:.1f} µs/request" if name.startswith("per request") and requests else (
            f"{seconds / cases * 1e3:.2f} ms/case")  # fmt: skip
        rows.append([name, f"{share * 100:.1f}", f"{seconds:.2f}", per])
    harness = tabulate(rows, headers=["harness: bucket", "% of samples", "CPU s", "each"], tablefmt="github")
    spy = data.get("spy")
    head = (
        f"{data['title']}\n{data['outcome']} ({cases} cases) in {data['wall']:.1f} s: harness CPU "
        f"{data['harness']:.1f} s ({data['harness'] / cases * 1e3:.1f} ms/case), QEMU CPU {data['qemu']:.1f} s "
        f"({data['qemu'] / cases * 1e3:.1f} ms/case), harness / QEMU {data['harness'] / data['qemu']:.2f}; "
        f"{total} samples" + (f" (py-spy's own count: {spy['samples']} samples, {spy['errors']} errors)" if spy else "")
    )
    if spent:
        own = data["harness"] - spent["wait_s"]
        head += (
            f"\nmeasured, not sampled: the waits for a reply, {spent['wait_s']:.1f} s in {int(spent['waits'])} "
            f"({spent['wait_s'] / max(spent['waits'], 1) * 1e6:.1f} µs each), and the notifies, "
            f"{spent['notify_s']:.1f} s in {int(spent['notifies'])}; the other rows share the rest, {spread:.1f} s, by "
            f"their samples. The harness less its waits / QEMU: {own / data['qemu']:.2f}"
        )
    if not phases:
        return f"{head}\n{harness}\n\n(QEMU's phases: not measured by this revision)"
    phase_rows = (  # (name, count key, seconds key, unit of "each")
        ("starts", "starts", "start_s", 1e-3),
        ("per-test resets", "resets", "reset_s", 1e-3),
        ("Tversion + Tattach", "attaches", "attach_s", 1e-6),
        ("the cases' requests (the rest)", "requests", "rest_s", 1e-6),
    )
    qemu_rows = [
        [name, int(phases[count]), f"{phases[seconds]:.2f}",
         f"{phases[seconds] / max(phases[count], 1) / unit:.2f} {'ms' if unit == 1e-3 else 'µs'}"]
        for name, count, seconds, unit in phase_rows
    ]  # fmt: skip
    qemu = tabulate(qemu_rows, headers=["QEMU: phase", "count", "CPU s", "each"], tablefmt="github")
    functions = data.get("functions")
    text = f"{head}\n{harness}\n\n{qemu}" + (f"\n\n{functions_text(functions)}" if functions else "")
    return text + (f"\n\n{floor_text(data)}" if data.get("floor") else "")


def floor_text(data: dict[str, Any]) -> str:
    """The floor (:func:`floor`) for the run's cases and requests, against QEMU's CPU time in it:
    what would be left for all the rest at harness / QEMU 0.5 (issue 53's target), against what
    the rest took, and the least wall time a harness at its floor would need on the CPUs the run had
    (the run's own CPU time allows no less than its harness's and QEMU's over them)."""
    found, cases = data["floor"], data["cases"]
    if "error" in found:
        return f"the floor: not measured ({found['error']})"
    requests, qemu = int(data["phases"]["requests"]), data["qemu"]
    on_cases, on_requests = cases * found["case_s"], requests * found["request_s"]
    least, cpus = on_cases + on_requests, found["cpus"]
    left, rest = max(0.5 * qemu - least, 0), data["harness"] - least
    memory = found.get("guest_memory")  # (not recorded by the first floors: they ran on shared RAM)
    path = "shared guest RAM" if memory in ("shared", None) else f"the {memory} path"
    return (
        f"the floor, what a harness built as this one costs at the least: {cases} cases at "
        f"{found['case_s'] * 1e3:.2f} ms each (one more empty case of `pytest -n 2`), {on_cases:.1f} s, and {requests}"
        f" requests at {found['request_s'] * 1e6:.1f} µs each (a bare {found['request']} on {path}: encode, notify, "
        f"ring, decode and the session's history; no check, no wait), {on_requests:.1f} s: {least:.1f} s of CPU time,"
        f" harness / QEMU {least / qemu:.2f} at the least. At harness / QEMU 0.5 all the rest (checks, fixtures, "
        f"traces, waits) would have {left:.1f} s; in this run it took {rest:.1f} s. With QEMU's CPU time as measured, "
        f"a harness at its floor could run these cases on {cpus} CPU{'s' if cpus > 1 else ''} in no less than "
        f"({least:.1f} s + {qemu:.1f} s) / {cpus} = {(least + qemu) / cpus:.1f} s, of which QEMU's alone "
        f"{qemu / cpus:.1f} s"
    )


#: how many case functions the profile's third table names (the rest are added up in one row)
FUNCTIONS_SHOWN = 12


def functions_text(functions: list[dict[str, Any]]) -> str:
    """The third table: the case functions that cost the harness most, each case measured on its
    own (CPU clocks read around it: fixtures/summary.py), not sampled."""
    shown, rest = functions[:FUNCTIONS_SHOWN], functions[FUNCTIONS_SHOWN:]
    if rest:
        shown = [*shown, {"function": f"the other {len(rest)} functions", **{key: sum(f.get(key, 0) for f in rest)
                 for key in rest[0] if key != "function"}}]  # fmt: skip
    total = sum(f["harness_cpu_s"] for f in functions)
    waited = any(f.get("wait_cpu_s") for f in functions)  # (a revision from before the waits were measured: none)
    rows = [
        [f["function"].removeprefix("cases/"), f["cases"], f"{f['harness_cpu_s']:.1f}",
         f"{f['harness_cpu_s'] / total * 100:.1f}", f"{f['harness_cpu_s'] / f['cases'] * 1e3:.1f}",
         f"{f['qemu_cpu_s']:.1f}", int(f["requests"]),
         f"{f['harness_cpu_s'] / f['qemu_cpu_s']:.1f}" if f["qemu_cpu_s"] else "-",
         *([f"{f['wait_cpu_s']:.1f}", f"{(f['harness_cpu_s'] - f['wait_cpu_s']) / f['qemu_cpu_s']:.1f}"
            if f["qemu_cpu_s"] else "-"] if waited else [])]
        for f in shown
    ]  # fmt: skip
    headers = ["case function", "cases", "harness CPU s", "% of cases' harness CPU", "ms/case", "QEMU CPU s",
               "requests", "harness / QEMU", *(["of it waiting s", "the rest / QEMU"] if waited else [])]  # fmt: skip
    return tabulate(rows, headers=headers, tablefmt="github")
