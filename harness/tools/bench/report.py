"""A bench's results: :class:`Table` per variant and round, merged over rounds, compared between
variants, printed, and kept as JSON (``--json``) that prints the same table again."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import HarnessError
from harness.tools.bench.variant import CPU_COLUMNS, Variant

Row = dict[str, Any]


@dataclass
class Table:
    """One bench's result on one binary: ``keys`` columns name a row, ``values`` columns measure it.
    A row is keyed by column name (:meth:`add` checks it has every column and no other)."""

    title: str  # per whole directory listing for Treaddir
    keys: list[str]
    values: list[str]
    rows: list[Row] = field(default_factory=list)
    #: the value column compared between binaries (B / A)
    compare: str = ""
    #: value columns also shown per variant when variants are compared (their medians)
    also: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return [*self.keys, *self.values]

    def add(self, row: Row) -> None:
        if set(row) != set(self.columns):
            raise ValueError(f"{self.title}: a row of {sorted(row)}, not of the columns {self.columns}")
        self.rows.append({column: row[column] for column in self.columns})

    def cells(self) -> list[list[Any]]:
        """The rows as lists in column order: for tabulate and the --json record."""
        return [[row[column] for column in self.columns] for row in self.rows]


def stats(samples: Sequence[float]) -> tuple[float, float, float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return ordered[0], statistics.median(ordered), statistics.fmean(ordered), p95


def merged(rounds: list[Table]) -> Table:
    """One table from several rounds of the same bench: each numeric cell the median of its rounds."""
    first = rounds[0]
    table = Table(first.title, first.keys, first.values, compare=first.compare, also=first.also)
    for index, row in enumerate(first.rows):
        cells = dict(row)
        for column in first.values:
            samples = [t.rows[index][column] for t in rounds]
            if all(isinstance(v, int | float) for v in samples):
                middle = statistics.median(samples)
                cells[column] = round(middle, 3) if isinstance(middle, float) else middle
        table.add(cells)
    return table


def _spread(rounds: list[Table], index: int) -> tuple[Any, Any, Any]:
    """min, median and max over the rounds of row ``index``'s compared value."""
    samples = [t.rows[index][t.compare] for t in rounds]
    return min(samples), statistics.median(samples), max(samples)


#: what a ratio cell says when the rounds cannot tell two variants apart
NOISE = "noise"


def chance_apart(rounds: int) -> float:
    """How often two runs of one binary, ``rounds`` rounds each, lie apart by chance (all of one
    run's rounds below all of the other's, or above): 2 / C(2n, n). 3 rounds: 1 in 10; 5: 1 in 126."""
    return 2 / math.comb(2 * rounds, rounds)


def told_apart(base: Sequence[float], other: Sequence[float]) -> bool:
    """Whether two or more rounds each lie apart: every round of one below every round of the other."""
    if len(base) < 2 or len(other) < 2:
        return False
    return max(other) < min(base) or min(other) > max(base)


def check_threshold(threshold: float) -> None:
    """Refuse a ``threshold`` :func:`decide` cannot judge by: it must be finite and 1 or more (below
    1 a binary no slower would count as slower)."""
    if not (math.isfinite(threshold) and threshold >= 1):
        raise HarnessError(f"a threshold is a finite factor of 1 or more, not {threshold}")


def decide(
    base: Sequence[float], tested: Sequence[float], higher_is_better: bool, threshold: float, when: str = "slower",
    reference: str = "the reference",
) -> tuple[int, str]:  # fmt: skip
    """Whether ``tested`` is slower than ``base`` (``when="faster"``: faster), from their rounds:
    (exit status, why). **1** when the rounds tell the two apart (every round of one on one side of
    every round of the other, which rounds of one binary do by chance as often as
    :func:`chance_apart` says) and the change is ``threshold`` (:func:`check_threshold`) or beyond;
    **0** otherwise, within the noise or the threshold. ``bench bisect-step`` exits by it, and so
    does ``bench suite --whole --baseline --threshold``; ``reference`` names ``base`` in the why."""
    check_threshold(threshold)
    middle = statistics.median(tested) / statistics.median(base)
    slower = 1 / middle if higher_is_better else middle  # a time grows, a rate falls
    factor = slower if when == "slower" else 1 / slower
    decided = told_apart(base, tested)
    status = 1 if decided and factor >= threshold else 0
    apart = "told apart" if decided else "within the noise"
    return status, f"{middle:.3f}x {reference}, {apart}; {when} by {factor:.3f}, threshold {threshold}"


def row_name(row: Row, keys: Sequence[str]) -> str:
    """A row as the releases table and ``bench bisect-step --row`` name it: its key cells, joined."""
    return " ".join(str(row[key]) for key in keys)


def ratio(base: Sequence[float], other: Sequence[float]) -> str:
    """``other``'s median over ``base``'s, where the rounds tell them apart: every round of one
    is below every round of the other. Where their ranges overlap the run's own noise is as large
    as the difference, and the cell says :data:`NOISE` instead of a ratio; one round each shows no
    noise at all, so the ratio says so."""
    if not base or not other or not statistics.median(base):
        return "-"
    shown = f"{statistics.median(other) / statistics.median(base):.2f}"
    if len(base) < 2 or len(other) < 2:
        return f"{shown} (1 round)"
    return shown if told_apart(base, other) else NOISE


def comparison(results: dict[Variant, list[Table]]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Headers and rows: per variant the compared value's median, min and max and the CPU split,
    then each variant's median over A's (:func:`ratio`: or "noise")."""
    variants = list(results)
    first = results[variants[0]][0]
    letters = [chr(65 + i) for i in range(len(variants))]
    headers = list(first.keys)
    shown = [c for c in (*first.also, *CPU_COLUMNS) if c in first.values]
    for letter in letters:
        headers += [f"{letter} {first.compare}", f"{letter} min", f"{letter} max"]
        headers += [f"{letter} {column}" for column in shown]
    headers += [f"{letter}/A" for letter in letters[1:]]
    rows = []
    for index, row in enumerate(first.rows):
        cells: list[Any] = [row[key] for key in first.keys]
        samples = []
        for variant in variants:
            low, middle, high = _spread(results[variant], index)
            samples.append([t.rows[index][t.compare] for t in results[variant]])
            whole = merged(results[variant]).rows[index]
            cells += [middle, low, high, *(whole[column] for column in shown)]
        cells += [ratio(samples[0], other) for other in samples[1:]]
        rows.append(tuple(cells))
    return headers, rows


def text(results: dict[Variant, list[Table]], labels: list[str], machine: str) -> str:
    """What a bench prints: a line naming the variants (``labels``), the rounds and the machine,
    then the table (one variant and round: its rows; one variant: medians with the compared
    value's spread; several: :func:`comparison`)."""
    variants = list(results)
    first = results[variants[0]][0]
    rounds = len(results[variants[0]])
    names = "; ".join(f"{chr(65 + i)} = {label}" for i, label in enumerate(labels))
    title = f"{first.title} — {names}; {rounds} round(s), interleaved; {machine}"
    if len(variants) == 1 and rounds == 1:
        return title + "\n" + tabulate(first.cells(), headers=first.columns, tablefmt="github")
    if len(variants) == 1:
        table = merged(results[variants[0]])
        spreads = [_spread(results[variants[0]], i) for i in range(len(table.rows))]
        headers = [*first.keys, *(f"{v} (median)" for v in first.values)]
        headers += [f"{first.compare} min", f"{first.compare} max"]
        rows = [(*row, low, high) for row, (low, _, high) in zip(table.cells(), spreads, strict=True)]
        return title + "\n" + tabulate(rows, headers=headers, tablefmt="github")
    headers, rows = comparison(results)
    return title + "\n" + tabulate(rows, headers=headers, tablefmt="github")


def text_of_json(path: Path) -> str:
    """What the bench printed when it wrote ``path`` (``--json``): the docs quote this, and a
    self-test keeps them equal."""
    data = json.loads(path.read_text())
    shape, columns = data["table"], data["columns"]

    def table(rows: list[list[Any]]) -> Table:
        named = [dict(zip(columns, row, strict=True)) for row in rows]
        return Table(data["bench"], shape["keys"], shape["values"], named, shape["compare"], shape["also"])

    results = {
        Variant(Path(v["binary"]), v["guest_memory"], slot, v.get("multidevs"), v.get("security_model")): [
            table(rows) for rows in rounds
        ]
        for slot, (v, rounds) in enumerate(zip(data["variants"], data["rounds"], strict=True))
    }
    return text(results, data["labels"], data["machine"])


def record(results: dict[Variant, list[Table]], labels: list[str], machine: str, **about: Any) -> dict[str, Any]:
    """What ``--json`` keeps of a run: every round of every variant, with what :func:`text_of_json`
    needs to print the run's table again (``about``: the host, the date and the like)."""
    variants = list(results)
    first = results[variants[0]][0]
    return {
        "bench": first.title,
        "variants": [
            {"binary": str(v.binary), "guest_memory": v.guest_memory, "multidevs": v.multidevs}
            | ({"security_model": v.security_model} if v.security_model else {})
            for v in variants
        ],
        "labels": labels,
        **about,
        "machine": machine,
        "table": {"keys": first.keys, "values": first.values, "compare": first.compare, "also": first.also},
        "columns": [*first.keys, *first.values],
        "rounds": [[t.cells() for t in results[v]] for v in variants],  # as "variants"; cells as "columns"
    }
