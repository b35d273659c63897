"""How cases are handed to xdist workers: the ones marked slow first, a couple at a time, so that
a run does not end with one worker on a long case and the other idle (fixtures/plugin.py)."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from fixtures.plugin import SCHEDULE_CHUNK, pytest_cmdline_main
from tests.subrun import run_pytest


class Options:
    def __init__(self, **options: object) -> None:
        self.option = argparse.Namespace(**options)


@pytest.mark.parametrize(
    ("given", "chunk"),
    [
        ({"numprocesses": 2, "dist": "no", "maxschedchunk": None}, SCHEDULE_CHUNK),
        ({"numprocesses": "auto", "dist": "no", "maxschedchunk": None}, SCHEDULE_CHUNK),
        ({"numprocesses": None, "dist": "no", "maxschedchunk": None}, None),  # no xdist
        ({"numprocesses": 0, "dist": "no", "maxschedchunk": None}, None),  # -n 0
        ({"numprocesses": 2, "dist": "loadfile", "maxschedchunk": None}, None),  # --dist given
        ({"numprocesses": 2, "dist": "no", "maxschedchunk": 50}, 50),  # --maxschedchunk given
    ],
    ids=["-n 2", "-n auto", "plain", "-n 0", "--dist loadfile", "--maxschedchunk 50"],
)
def test_chunk_only_where_nothing_was_asked_for(given: dict[str, object], chunk: int | None) -> None:
    config = Options(**given)
    pytest_cmdline_main(config)  # type: ignore[arg-type]
    assert config.option.maxschedchunk == chunk
    assert config.option.dist == given["dist"]  # xdist itself makes "no" into "load" after this


CASES = textwrap.dedent(
    """
    import os, time
    import pytest

    def started(name):
        with open(os.path.join(os.environ["TMPDIR"], "started"), "a") as log:
            log.write(f"{time.monotonic()} {name} {os.getpid()}\\n")

    @pytest.mark.parametrize("n", range(12))
    def test_short(n):
        started(f"short{n}")

    @pytest.mark.slow
    @pytest.mark.parametrize("n", range(4))
    def test_long(n):
        started(f"long{n}")
        time.sleep(0.2)
    """
)


def test_slow_cases_start_first_on_both_workers(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """The four slow cases come last in the file; under -n 2 each worker starts with its share of
    them, and both get some (without the ordering they would be the last)."""
    proc = run_pytest(tmp_path, qemu_under_test, "-n", "2", source=CASES)
    out, _ = proc.communicate(timeout=120)
    assert "16 passed" in out, out
    by_worker: dict[str, list[str]] = {}
    for line in sorted((tmp_path / "started").read_text().splitlines(), key=lambda line: float(line.split()[0])):
        _, name, pid = line.split()
        by_worker.setdefault(pid, []).append(name)
    assert len(by_worker) == 2, by_worker
    for names in by_worker.values():
        longs = sum(name.startswith("long") for name in names)
        assert longs and all(name.startswith("long") for name in names[:longs]), by_worker
