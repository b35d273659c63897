"""``python -m harness guest --pjdfstest``: pjdfstest's ``.t`` files run by a Linux guest on its
v9fs mount of the export, the same source the posix family runs through the FUSE bridge
(docs/guest.md, "pjdfstest through v9fs").

One boot runs every chosen ``.t`` (each in a fresh directory on the mount, as root, as ``prove``
would, under a deadline of its own); its TAP comes back on the console and is read as the posix
family reads it (:func:`harness.qemu.pjdfstest.read_tap`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from tabulate import tabulate

from harness.errors import ProvisionError
from harness.qemu import pjdfstest
from harness.qemu.pjdfstest import Tap

#: where the guest finds the suite (its root, in the per-run archive)
ROOT = "/pjd"
#: seconds one ``.t`` may take in the guest (the FUSE cases allow 120 on the host; TCG is slower)
T_TIMEOUT = 300
#: pjdfstest's misc.sh names files with ``openssl md5``; the guest has BusyBox's md5sum instead
OPENSSL_SHIM = b'#!/bin/sh\n# pjdfstest calls "openssl md5" on stdin: the digest alone\nmd5sum | cut -d" " -f1\n'
#: the console lines that frame one .t's TAP
BEGIN, END = "@@PJD-BEGIN", "@@PJD-END"


def tree() -> Path:
    """pjdfstest's built source tree (the posix family's: built once into the cache)."""
    tarball = pjdfstest.find_tarball()
    if tarball is None:
        raise ProvisionError(pjdfstest.where_to_put())
    return pjdfstest.built(tarball)


def files(source: Path) -> dict[str, bytes]:
    """The binary, the tests directory and the openssl shim, for the guest's root."""
    found = {f"{ROOT}/pjdfstest": (source / "pjdfstest").read_bytes(), f"{ROOT}/bin/openssl": OPENSSL_SHIM}
    for path in sorted((source / "tests").rglob("*")):
        if path.is_file():
            found[f"{ROOT}/{path.relative_to(source)}"] = path.read_bytes()
    return found


def chosen(source: Path, selection: Sequence[str]) -> list[str]:
    """The ``.t`` files (``chmod/00``) the words name: a file, a directory, or all of them."""
    every = [name.removesuffix(".t") for name in pjdfstest.test_files(source)]
    if not selection:
        return every
    picked = [t for t in every if any(t == word.removesuffix(".t") or t.startswith(word.rstrip("/") + "/")
                                      for word in selection)]  # fmt: skip
    if not picked:
        raise ProvisionError(f"no pjdfstest .t file is named by {' '.join(selection)} (e.g. chmod/00, chmod)")
    return picked


def script(names: Sequence[str], export: str) -> str:
    """The guest's bash: each .t in a directory of its own on the mount, its TAP between markers."""
    listed = " ".join(names)
    return f"""export PATH={ROOT}/bin:$PATH LC_ALL=C
work={export}/pjdfstest.$$
mkdir -p "$work"
for t in {listed}; do
    progress "pjdfstest $t"
    dir=$(mktemp -d -p "$work")
    chmod 755 "$work" "$dir"  # as the posix family's: the checks that run as another user look it up
    cd "$dir"
    echo "{BEGIN} $t"
    timeout {T_TIMEOUT} sh {ROOT}/tests/$t.t 2>&1
    echo "{END} $t $?"
    cd /
    rm -rf "$dir"
done
rm -rf "$work"
"""


def results(stdout: str) -> dict[str, Tap]:
    """Each .t's TAP, read from the guest's output."""
    found: dict[str, Tap] = {}
    lines: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(BEGIN):
            lines = []
        elif line.startswith(END):
            _, name, status = line.split()
            found[name] = pjdfstest.read_tap("\n".join(lines), int(status))
        else:
            lines.append(line)
    return found


def report(taps: dict[str, Tap], names: Sequence[str]) -> tuple[str, bool]:
    """A table of every .t that did not pass (its failing checks, what each says), and whether all
    passed; a .t with no result (the guest stopped before it) counts as failed."""
    rows: list[list[object]] = []
    for name in names:
        tap = taps.get(name)
        if tap is None:
            rows.append([name, "-", "-", "no result: the run ended before it"])
        elif not tap.ok:
            said = "; ".join(f"{n}: {why}" for n, why in sorted(tap.failed.items())) or f"status {tap.status}"
            rows.append([name, tap.planned, tap.ran, said[:300]])
    passed = len(names) - len(rows)
    table = tabulate(rows, headers=[".t", "planned", "ran", "failing checks"]) if rows else ""
    return f"{table}\n{passed} of {len(names)} .t files passed".lstrip(), not rows


def write_json(path: Path, taps: dict[str, Tap], names: Sequence[str], facts: dict[str, str]) -> None:
    """The run as ``--json`` keeps it: what ran where (``facts``), the .t files chosen, and each
    one's TAP (its output left out); :func:`text_of_json` prints its table again."""
    results = {name: {k: v for k, v in asdict(tap).items() if k != "output"} for name, tap in taps.items()}
    path.write_text(json.dumps({**facts, "chosen": list(names), "taps": results}, indent=1, sort_keys=True) + "\n")


def text_of_json(data: dict[str, object]) -> str:
    """The table a ``--json`` record's run printed (docs/guest.md quotes it; a self-test keeps them equal)."""
    chosen, results = data["chosen"], data["taps"]
    assert isinstance(chosen, list) and isinstance(results, dict)
    taps = {
        name: Tap(tap["planned"], tap["passed"], {int(n): why for n, why in tap["failed"].items()}, "", tap["status"])
        for name, tap in results.items()
    }
    return report(taps, chosen)[0]
