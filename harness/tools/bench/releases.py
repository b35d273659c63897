"""``bench releases``: Treaddir, file I/O and round trips over a set of QEMU binaries (every cached
build, one per version, or the ones named), measured round by round and interleaved: round 1 of
every measure on every binary, then round 2, so that a machine's drift falls on all of them alike.

Each measure's table has one line per row and release, the releases in version order: the
median over the rounds with its min and max, QEMU's CPU time per request (what the request cost
the server, however fast the client drove it), and the ratio to the release before it, which is
printed only where the rounds tell the two apart (``report.ratio``: "noise" otherwise). The
changes list names each such step; ``--plot-dir`` draws one figure per measure.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import HarnessError
from harness.qemu import build, provision, versions
from harness.tools.bench.readdir import readdir_export
from harness.tools.bench.registry import Measure, Settings, measures
from harness.tools.bench.report import NOISE, Table, chance_apart, ratio, row_name
from harness.tools.bench.run import Run, Steal, load
from harness.tools.bench.variant import Variant, home

MEASURES = measures()

#: a step between releases smaller than this is marked small in the changes list: with few rounds,
#: a chance ordering of the rounds, not the server, is the likelier cause
SMALL = 0.10

#: which cached build stands for a version when several have it: a Debian source package, then a
#: git commit, then a tarball, then a source tree (a patched master is a tree; master is a tarball)
PREFERENCE = ("debian:", "git:", "tarball", "source:")


def cached_releases(root: Path | None = None) -> list[Path]:
    """Every plain build in the cache, one per version (:data:`PREFERENCE`), in version order."""
    chosen: dict[str, tuple[int, Path]] = {}
    for found in build.builds(root or provision.cache_root()):
        if found.variant or not found.binary.is_file():
            continue
        origin = found.origin
        kind = "tarball" if origin.startswith("source:") and Path(origin[7:]).is_file() else origin.split(":")[0] + ":"
        rank = PREFERENCE.index(kind) if kind in PREFERENCE else len(PREFERENCE)
        if found.version not in chosen or rank < chosen[found.version][0]:
            chosen[found.version] = (rank, found.binary)
    return [chosen[v][1] for v in sorted(chosen, key=versions.parse)]


def _measuring(measure: Measure, settings: Settings, export: Path) -> Callable[[Variant], Table]:
    return lambda variant: measure.table(variant, settings, export)


def bench_releases(
    binaries: Sequence[Path], rounds: int, quick: bool, json_path: str | None, plot_dir: str | None
) -> int:
    """Measure, print the tables and the changes, write ``--json`` and the plots; 1 if a binary
    failed (the others' results are still printed)."""
    if len(binaries) < 2:
        raise HarnessError("bench releases compares binaries: name two or more (--qemu), or build them first")
    order = sorted(binaries, key=lambda b: versions.parse(provision.probe_cached(b).version))
    variants = [Variant(binary, "shared", slot) for slot, binary in enumerate(order)]
    settings = Settings.quick() if quick else Settings()
    steal = Steal.since_now()
    runs = {measure.name: Run(variants, rounds, steal) for measure in MEASURES}
    with readdir_export() as export:
        for _ in range(max(1, rounds)):
            for variant in variants:
                for measure in MEASURES:
                    runs[measure.name].measure_once(variant, _measuring(measure, settings, export), measure.name)
    failed = {v for run in runs.values() for v in run.failed}
    kept = [v for v in variants if v not in failed]
    if len(kept) < 2:
        raise HarnessError("fewer than two binaries measured: nothing to compare (above: why)")
    data = record(runs, kept, settings, steal)
    print(releases_text(data))
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {json_path}")
    if plot_dir:
        for path in plot(data, Path(plot_dir)):
            print(f"wrote {path}")
    steal.warn()
    return 1 if failed else 0


def from_json(path: Path, plot_dir: str | None) -> int:
    """Print a saved run's tables again (``--json``'s file) and, with ``plot_dir``, draw its plots."""
    data = json.loads(path.read_text())
    print(releases_text(data))
    for written in plot(data, Path(plot_dir)) if plot_dir else []:
        print(f"wrote {written}")
    return 0


def record(runs: dict[str, Run], variants: list[Variant], settings: Settings, steal: Steal) -> dict[str, Any]:
    """What ``--json`` keeps: per measure, per release, every round's rows."""
    return {
        "bench": "releases",
        "releases": [{"version": provision.probe_cached(v.binary).version, "binary": home(v.binary)} for v in variants],
        "settings": settings.__dict__ | {"depths": list(settings.depths)},
        "host": platform.node(),
        "machine": f"{os.cpu_count()} CPUs, {load(steal)}",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "measures": {
            name: {
                "title": run.results[variants[0]][0].title,
                "keys": run.results[variants[0]][0].keys,
                "compare": run.results[variants[0]][0].compare,
                "rounds": [[t.rows for t in run.results[v]] for v in variants],
            }
            for name, run in runs.items()
        },
    }


def _lines(data: dict[str, Any], measure: Measure) -> list[dict[str, Any]]:
    """One line per row and release: median, min, max, QEMU's CPU per request, against the release before."""
    shape = data["measures"][measure.name]
    compare, keys = shape["compare"], shape["keys"]
    lines = []
    for index, row in enumerate(shape["rounds"][0][0]):
        name = row_name(row, keys)
        before: list[float] = []
        for release, rounds in zip(data["releases"], shape["rounds"], strict=True):
            samples = [r[index][compare] for r in rounds]
            lines.append({
                "row": name, "release": release["version"], "median": round(statistics.median(samples), 3),
                "min": min(samples), "max": max(samples),
                "cpu": round(statistics.median(measure.cpu_of(r[index]) for r in rounds), 1),
                "vs before": ratio(before, samples) if before else "",
            })  # fmt: skip
            before = samples
    return lines


def changes(data: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(measure, row, from, to, ratio) for each step between releases the rounds tell apart."""
    found = []
    for measure in MEASURES:
        lines = _lines(data, measure)
        for earlier, later in itertools.pairwise(lines):
            step = later["vs before"]
            if earlier["row"] == later["row"] and step not in ("", NOISE, "-") and "round" not in step:
                direction = (float(step) > 1) == measure.higher_is_better
                verdict = "faster" if direction else "slower"
                found.append((measure.name, later["row"], earlier["release"], later["release"], f"{step} ({verdict})"))
    return found


def releases_text(data: dict[str, Any]) -> str:
    """What the command prints, and docs/speed.md quotes (a self-test keeps them equal)."""
    rounds = len(next(iter(data["measures"].values()))["rounds"][0])
    names = ", ".join(r["version"] for r in data["releases"])
    parts = [f"bench releases — {names}; {rounds} round(s), interleaved; {data['machine']}"]
    for measure in MEASURES:
        shape = data["measures"][measure.name]
        headers = ["row", "release", f"{shape['compare']} (median)", "min", "max", measure.cpu, "vs release before"]
        rows = [[line[k] for k in ("row", "release", "median", "min", "max", "cpu", "vs before")]
                for line in _lines(data, measure)]  # fmt: skip
        parts += ["", f"{measure.name}: {shape['title']}", tabulate(rows, headers=headers, tablefmt="github")]
    found = changes(data)
    odds = round(1 / chance_apart(rounds)) if rounds > 1 else 0
    parts += ["", "changes beyond the noise (every round of one release on one side of every round of the other;"]
    parts += [f"two runs of one binary lie so by chance 1 time in {odds}: a step under {SMALL:.0%} is marked small):"]
    for m, row, a, b, r in found:
        small = abs(float(r.split()[0]) - 1) < SMALL and float(r.split()[0]) > 0
        parts.append(f"- {m}, {row}: {a} -> {b}: {r}{' small' if small else ''}")
    parts += [] if found else ["- none"]
    return "\n".join(parts)


def plot(data: dict[str, Any], where: Path) -> list[Path]:
    """One PNG per measure: the compared value per release (median, min-max bars) above, QEMU's
    CPU per request below, one line per row."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise HarnessError("--plot-dir needs matplotlib: pip install -e '.[plot]' (make venv installs it)") from err
    where.mkdir(parents=True, exist_ok=True)
    written = []
    releases = [r["version"] for r in data["releases"]]
    for measure in MEASURES:
        lines = _lines(data, measure)
        figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        for row in dict.fromkeys(line["row"] for line in lines):
            mine = [line for line in lines if line["row"] == row]
            x = range(len(mine))
            medians = [line["median"] for line in mine]
            bars = [[m - line["min"] for m, line in zip(medians, mine, strict=True)],
                    [line["max"] - m for m, line in zip(medians, mine, strict=True)]]  # fmt: skip
            top.errorbar(x, medians, yerr=bars, marker="o", capsize=3, label=row)
            bottom.plot(x, [line["cpu"] for line in mine], marker="o", label=row)
        shape = data["measures"][measure.name]
        values = [line["median"] for line in lines if line["median"] > 0]
        if values and max(values) / min(values) > 50:  # releases orders of magnitude apart
            top.set_yscale("log")
            bottom.set_yscale("log")
        top.set_ylabel(shape["compare"])
        top.set_title(f"{shape['title']}, per release")
        top.legend(fontsize=6)
        bottom.set_ylabel(measure.cpu)
        bottom.set_xticks(range(len(releases)), releases, rotation=45, fontsize=7)
        figure.tight_layout()
        path = where / f"bench-releases-{measure.name}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written
