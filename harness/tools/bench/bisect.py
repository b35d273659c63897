"""``bench bisect-step``: one step of ``git bisect run`` over a performance change.

It measures one row of one of ``bench releases``' measures on the binary under test and on a
reference binary (a build of the bisection's good end), interleaved over ``--rounds``, and exits
as ``git bisect run`` reads it:

- **1** (new/bad) or **0** (old/good) by :func:`harness.tools.bench.report.decide`'s rule: 1 when
  the rounds tell the two apart and the binary is slower than the reference by ``--threshold`` or
  more (``--when faster``: faster by that factor, to find where a speed-up came in);
- **125** (skip this commit) when the binary cannot be measured (it does not start, or the row
  is missing), so that a commit that does not build or run does not decide the bisection.

Pick the threshold between the two ends' ratio and 1 (ends 6x apart: 2 or 3), so that no step
falls near it.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError
from harness.tools.bench.readdir import readdir_export
from harness.tools.bench.registry import Settings, measures
from harness.tools.bench.report import decide, row_name
from harness.tools.bench.run import Run
from harness.tools.bench.variant import Variant

SKIP = 125


def bisect_step(
    binary: Path, reference: Path, measure: str, row: str, threshold: float, rounds: int, when: str, quick: bool
) -> int:
    """The exit status (module docstring); prints one line saying why."""
    chosen = next((m for m in measures() if m.name == measure), None)
    if chosen is None:
        raise HarnessError(f"no measure {measure!r}: one of {', '.join(m.name for m in measures())}")
    settings = Settings.quick() if quick else Settings()
    # absolute: QEMU starts in a directory of its own, and a bisection names build/qemu-system-x86_64
    binary, reference = binary.absolute(), reference.absolute()
    tested, base = Variant(binary, "shared", 0), Variant(reference, "shared", 1)
    run = Run([base, tested], rounds)
    with readdir_export() as export:
        run.interleave(lambda v: chosen.table(v, settings, export), f"bisect-step {measure}")
    if base in run.failed:
        raise HarnessError(f"the reference {reference} cannot be measured: {run.failed[base]}")
    if tested in run.failed:
        print(f"bisect-step: skip ({SKIP}): {binary} cannot be measured: {run.failed[tested]}")
        return SKIP
    samples = {}
    for variant in (base, tested):
        tables = run.results[variant]
        names = [row_name(r, tables[0].keys) for r in tables[0].rows]
        if row not in names:
            print(f"bisect-step: skip ({SKIP}): no row {row!r} on {variant.binary}; rows: {'; '.join(names)}")
            return SKIP
        samples[variant] = [t.rows[names.index(row)][t.compare] for t in tables]
    status, why = decide(samples[base], samples[tested], chosen.higher_is_better, threshold, when)
    print(f"bisect-step: exit {status}: {row}: {why} ({run.results[base][0].compare}, {rounds} rounds each)")
    return status
