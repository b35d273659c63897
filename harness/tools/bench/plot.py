"""``--plot FILE.png``: a bench's medians drawn with matplotlib (the ``plot`` extra), one line per
variant and per combination of the other key columns (synth and local apart). The x axis comes
from the data: the numeric key column with the most distinct values (files for a listing, msize
for io), on a log scale; a bench whose keys are all names (``bench rtt``'s measurements) gets
them as categories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.qemu import provision
from harness.tools.bench.report import Row, Table
from harness.tools.bench.variant import Variant

#: a key column that names where a row ran rather than what it varies
NOT_AN_AXIS = ("backend",)


def x_axis(table: Table) -> str:
    """The key column to draw along x: numeric, and with the most distinct values."""
    numeric = [
        (len({row[column] for row in table.rows}), column)
        for column in table.keys
        if column not in NOT_AN_AXIS and table.rows and all(isinstance(row[column], int | float) for row in table.rows)
    ]
    return max(numeric)[1] if numeric else table.keys[0]


def plot(tables: list[Table], variants: list[Variant], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise HarnessError("--plot needs matplotlib: pip install -e '.[plot]' (make venv installs it)") from err
    first = tables[0]
    x_col = x_axis(first)
    others = [c for c in first.keys if c != x_col]  # one line per combination, backend included
    numeric = all(isinstance(row[x_col], int | float) for row in first.rows)
    figure, axes = plt.subplots(figsize=(7, 4))
    for variant, table in zip(variants, tables, strict=True):
        groups: dict[tuple[Any, ...], list[Row]] = {}
        for row in table.rows:
            key = tuple(row[c] for c in others)
            groups.setdefault(key, []).append(row)
        for key, rows in groups.items():
            if numeric:
                rows.sort(key=lambda r: r[x_col])
            name = f"{provision.probe_cached(variant.binary).version} {variant.guest_memory}"
            name += f" {dict(zip(others, key, strict=True))}" if key else ""
            axes.plot([r[x_col] for r in rows], [r[first.compare] for r in rows], marker="o", label=name)
    if numeric:
        axes.set_xscale("log")
    else:
        axes.tick_params(axis="x", labelrotation=90, labelsize=6)
    axes.set_xlabel(x_col)
    axes.set_ylabel(first.compare)
    axes.set_title(first.title)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
