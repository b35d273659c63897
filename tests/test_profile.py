"""``python -m harness profile``: each sample lands in the bucket of its first matching rule, and
the quick mode profiles a real ``-n 2`` run whose figures add up."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.tools import profile
from tests.test_tools import harness

#: py-spy's raw lines as a run of ours gives them (process frames first, then the thread's stack)
WORKER = 'process 2:"worker";pytest_runtest_protocol (_pytest/runner.py:1)'
CELLS = f"{WORKER};run_cells (fixtures/cells.py:1)"
RAW = "\n".join(
    f"{stack} {count}"
    for stack, count in (
        ('process 1:"pytest";<module> (<string>:1);_find_and_load (<frozen importlib._bootstrap>:1);x (a.py:1)', 5),
        (f"{WORKER};MachinePool.get (fixtures/pool.py:80);Driver.reset (harness/virtio/driver.py:9)", 3),
        (f"{WORKER};MachinePool.get (fixtures/pool.py:80);Channel.wait (harness/p9/channel.py:261)", 2),
        (f"{CELLS};Session.send (harness/p9/session.py:213);encode (harness/p9/wire.py:10)", 7),
        (f"{CELLS};Pending.wait (harness/p9/session.py:153);Channel.wait (harness/p9/channel.py:261)", 11),
        (f"{CELLS};Channel.submit (harness/p9/channel.py:190);Channel._publish (harness/p9/channel.py:262)", 4),
        (f"{CELLS};Export.copy (fixtures/model.py:9)", 13),
        (f"{WORKER};CallInfo.from_call (_pytest/runner.py:2)", 2),
        ('process 0:"";serve (execnet/gateway_base.py:1)', 1),
    )
)


def test_each_sample_goes_to_the_first_bucket_one_of_its_frames_matches() -> None:
    sampled = profile.read_samples(RAW)
    assert sampled.total == 48
    assert sampled.buckets == {
        "start-up: imports": 5,
        "per case: per-test reset": 3,  # not "ring (the rest)": the reset comes first
        "per request: encode": 7,
        "per request: waiting for the reply": 13,  # the reset's wait too: all of them are measured
        "per request: notify": 4,  # not "ring (the rest)", which Channel.submit's frame matches too
        "per case: checks (model, judge, tables)": 13,
        "per case: pytest and pluggy": 2,
        "xdist: controller and channels": 1,
    }


def test_a_record_of_other_bucket_names_loses_no_row() -> None:
    """A --json record of a revision whose buckets had other names prints every row it has: the
    rows' CPU time adds up to the harness's (nothing measured apart in such a record)."""
    data = {"title": "t", "outcome": "3 passed", "cases": 3, "wall": 1.0, "harness": 10.0, "qemu": 5.0,
            "phases": None, "samples": {"per request: ring and notify": 3, "per request: encode": 1}}  # fmt: skip
    rows = {row.split("|")[1].strip(): float(row.split("|")[3]) for row in profile.profile_text(data).splitlines()
            if row.startswith("| per ")}  # fmt: skip
    assert rows["per request: ring and notify"] == 7.5 and rows["per request: encode"] == 2.5
    assert sum(rows.values()) == 10.0


@pytest.mark.skipif(
    shutil.which("py-spy", path=str(Path(sys.executable).parent)) is None,
    reason="py-spy is not installed (make venv installs it: pyproject's dev extra)",
)
def test_quick_profile_of_a_real_run(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """QEMU's own cases, profiled: every sample is in a bucket, the CPU shares add up to the
    harness's measured CPU time, QEMU's phases are counted (a start per configuration at least, a
    Tversion and Tattach per case that attaches), and so is each case's cost, by case function."""
    out = tmp_path / "profile.json"
    done = harness("profile", "--quick", "--qemu-binary", str(qemu_under_test.binary), "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert data["cases"] >= 27 and re.fullmatch(r"\d+ passed", data["outcome"]), data
    assert sum(data["samples"].values()) > 0 and set(data["samples"]) <= {*dict(profile.BUCKETS), profile.OTHER}
    text = profile.profile_text(data)
    assert text in done.stdout
    shares = [float(row.split("|")[3]) for row in text.splitlines() if row.startswith("| per ")]
    assert sum(shares) <= data["harness"] + 0.05
    phases = data["phases"]
    assert (
        phases["starts"] >= 2 and phases["attaches"] >= data["cases"] // 2 and phases["requests"] > phases["attaches"]
    )
    assert phases["start_s"] + phases["reset_s"] + phases["attach_s"] <= data["qemu"] + 0.01
    # the third table: every case measured once, its requests those the run counted, its CPU within the run's
    functions = data["functions"]
    assert sum(f["cases"] for f in functions) == data["cases"]
    assert sum(f["requests"] for f in functions) == phases["requests"]
    assert 0 < sum(f["harness_cpu_s"] for f in functions) <= data["harness"]
    assert 0 < sum(f["qemu_cpu_s"] for f in functions) <= data["qemu"]
    # the waits and notifies measured: the run's, its cases' part of the waits, and their rows the measured times
    spent = data["spent"]
    assert 0 < sum(f["wait_cpu_s"] for f in functions) <= spent["wait_s"] + 0.01
    assert spent["waits"] > 0 and spent["notifies"] > 0 and spent["wait_s"] + spent["notify_s"] < data["harness"]
    rows = {
        row.split("|")[1].strip(): float(row.split("|")[3]) for row in text.splitlines() if row.startswith("| per ")
    }
    assert rows[profile.WAITING] == round(spent["wait_s"], 2) and rows[profile.NOTIFYING] == round(spent["notify_s"], 2)
    costliest = [f["harness_cpu_s"] for f in functions]
    assert costliest == sorted(costliest, reverse=True) and profile.functions_text(functions) in text
    # the floor: measured (an empty case, a bare request: each costs something), and below what the run spent
    least = data["floor"]
    assert least["request"] in {type(kind).__name__ for kind in profile.FLOOR_KINDS}
    assert least["case_s"] > 0 and least["request_s"] > 0
    assert data["cases"] * least["case_s"] + phases["requests"] * least["request_s"] < data["harness"]


def test_the_floor_is_its_cases_and_requests_at_their_least_cost() -> None:
    """The floor's parts and sum, its ratio to QEMU's CPU time, what harness / QEMU 0.5 would leave
    for all the rest against what the rest took, and the wall time two CPUs need at the least."""
    data = {"cases": 100, "qemu": 4.0, "harness": 3.0, "phases": {"requests": 12000},
            "floor": {"case_s": 0.002, "request_s": 50e-6, "request": "Tgetattr", "guest_memory": "shared",
                      "cpus": 2}}  # fmt: skip
    text = profile.floor_text(data)
    assert "100 cases at 2.00 ms each (one more empty case of `pytest -n 2`), 0.2 s," in text
    assert "12000 requests at 50.0 µs each (a bare Tgetattr on shared guest RAM" in text
    assert "0.8 s of CPU time, harness / QEMU 0.20 at the least" in text
    assert "would have 1.2 s; in this run it took 2.2 s" in text
    assert "in no less than (0.8 s + 4.0 s) / 2 = 2.4 s, of which QEMU's alone 2.0 s" in text


def test_a_record_without_a_floor_prints_none() -> None:
    """A record of a revision before the floor, or of a --baseline profile, has no floor line; a
    floor that could not be measured says why."""
    data = {"title": "t", "outcome": "3 passed", "cases": 3, "wall": 1.0, "harness": 10.0, "qemu": 5.0,
            "phases": {"start_s": 1.0, "starts": 1, "reset_s": 0.1, "resets": 3, "attach_s": 0.1, "attaches": 3,
                       "rest_s": 3.8, "requests": 30},
            "samples": {"per request: encode": 1}}  # fmt: skip
    assert "the floor" not in profile.profile_text(data)
    failed = profile.profile_text({**data, "floor": {"error": "QEMU did not start"}})
    assert failed.endswith("\n\nthe floor: not measured (QEMU did not start)")
