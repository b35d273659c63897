"""The tools a developer drives by hand, against a real QEMU: the REPL (typed requests, refusals,
completion, Ctrl-C, the reproducers it saves), the A/B matrix and the doctor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.tools.matrix import runs_text
from harness.tools.repl import Repl
from tests.subrun import PROJECT, default_signals, table_rows
from tests.test_tools import PACKAGED, harness


def test_matrix_of_a_binary_against_itself_shows_no_difference(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    binary = str(qemu_under_test.binary)
    done = harness("matrix", "--qemu", binary, "--qemu", binary, "--json", "m.json", "--", "-k",
                   "version/ or synth/config", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 0 differ; each run's output and artefacts:" in done.stdout, done.stdout
    kept = json.loads((tmp_path / "m.json").read_text())
    passed = [run["counts"]["passed"] for run in kept["runs"]]
    assert passed[0] == passed[1] == len(kept["runs"][0]["cases"]) > 0, kept
    assert [run["build"] for run in kept["runs"]] == ["plain", "plain"]  # the cache's own build
    assert runs_text(kept) in done.stdout  # the runs' table, last, as the file prints it again
    runs = sorted((tmp_path / "v9p-matrix").iterdir())
    assert [p.name for p in runs] == [f"0-{qemu_under_test.probe.version}", f"1-{qemu_under_test.probe.version}"]
    assert all((p / "pytest.txt").exists() and json.loads((p / "results.json").read_text())["cases"] for p in runs)


def test_matrix_refuses_one_binary_and_an_empty_selection(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    binary = str(qemu_under_test.binary)
    one = harness("matrix", "--qemu", binary, cwd=tmp_path)
    assert one.returncode != 0 and "two or more QEMUs" in one.stdout + one.stderr
    empty = harness("matrix", "--qemu", binary, "--qemu", binary, "--", "-k", "no-such-case-anywhere", cwd=tmp_path)
    assert empty.returncode != 0 and "matched no case" in empty.stdout + empty.stderr, empty.stdout + empty.stderr


@pytest.mark.skipif(not PACKAGED.exists(), reason="Debian's qemu-system-x86 is not installed (make test installs it)")
def test_matrix_against_the_degraded_packaged_binary(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    done = harness(
        "matrix", "--qemu", str(qemu_under_test.binary), "--qemu", str(PACKAGED), "--", "-k", "version/", cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]] for line in done.stdout.splitlines()
            if line.startswith("| synth/")}  # fmt: skip
    assert rows["synth/version/drops_fids"] == ["passed", "skipped"]  # needs the synth test tree
    assert rows["synth/version/basic"] == ["passed", "passed"]
    first = next(line for line in done.stdout.splitlines() if line.startswith("| synth/"))
    assert "skipped" in first  # differences come first


def repl(qemu: QemuUnderTest, *lines: str) -> tuple[str, str]:
    """The REPL's stdout and stderr for ``lines`` then ``quit``; it must exit 0."""
    done = harness("repl", "--qemu-binary", str(qemu.binary), stdin="\n".join([*lines, "quit"]))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, done.stderr


def test_repl_session(qemu_under_test: QemuUnderTest) -> None:
    out, _ = repl(qemu_under_test, "Twalk fid=0 newfid=1 wnames=['WALK0']", "Twalk fid=0 newfid=2 wnames=['nope']",
                  "fids", "raw 1300000018000000000000ff3f000000000000", "Tgetattr")  # fmt: skip
    assert "<-- Rwalk(qids=[{type=128, version=0, path=1}])" in out
    assert "<-- Rlerror ENOENT (2)" in out
    assert "[0, 1]" in out
    assert "<-- Rgetattr(valid=6143" in out
    assert "Tgetattr needs fid: Tgetattr(fid: Fid, request_mask: GetattrMask) -> Rgetattr(" in out


def test_repl_refuses_and_explains_and_saves_a_reproducer(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """An unknown field is refused with the message's fields; a bare word gets a hint; help names
    fields and types; obvious fields default (newfid, request_mask); ``save`` writes a reproducer
    that replay passes; the local export's path is shown."""
    saved = tmp_path / "session.9p"
    out, errors = repl(qemu_under_test, "Tclunk fid=0 bogus=1", "Twalk fid=0 wnames=WALK0", "help Twalk",
                       "Twalk fid=0 wnames=['WALK0']", "Tgetattr fid=1", f"save {saved}")  # fmt: skip
    assert "Tclunk has no field bogus; its fields: Tclunk(fid: Fid) -> Rclunk()" in out
    assert "wnames=WALK0: not a Python literal (strings take quotes: wnames='WALK0')" in out
    assert "Twalk(fid: Fid, newfid: NewFid, wnames: Names) -> Rwalk(qids: Qids)" in out
    assert "<-- Rwalk(qids=[{type=128, version=0, path=1}])" in out and "<-- Rgetattr(valid=6143" in out
    assert "Traceback" not in out + errors
    replayed = harness("replay", str(saved), "--qemu-binary", str(qemu_under_test.binary))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    local = harness("repl", "--backend", "local", "--qemu-binary", str(qemu_under_test.binary), stdin="quit\n")
    assert "exporting /" in local.stdout and "removed when you quit" in local.stdout, local.stdout


def test_repl_completes_names_and_fields() -> None:
    repl = Repl(session=None)  # type: ignore[arg-type]
    assert repl.completenames("Tw") == ["Twalk", "Twrite", "Twstat"]  # 9P2000.u's too: a REPL sends anything
    assert repl.completedefault("n", "Twalk fid=0 n", 13, 14) == ["newfid="]
    assert repl.completedefault("", "Tclunk ", 7, 7) == ["fid=", "tag="]


def test_repl_ctrl_c_abandons_the_line_not_the_session(qemu_under_test: QemuUnderTest) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "repl", "--qemu-binary", str(qemu_under_test.binary)], cwd=PROJECT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert "root attached as fid 0" in proc.stdout.readline()
        time.sleep(0.5)  # at the prompt, waiting for a line
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        out, _ = proc.communicate("Tgetattr fid=0\nquit\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "^C" in out and "<-- Rgetattr(valid=6143" in out and "Traceback" not in out


def test_repl_checks_types_resets_and_saves_only_where_told(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A value of the wrong type is refused by the field's type (a string for Names is not five
    names); after a frame that breaks the device, ``reset`` brings a working session back; ``save``
    into a directory that does not exist makes none."""
    missing = tmp_path / "nonexistent" / "x.9p"
    script = "\n".join([
        "Twalk fid=0 newfid=1 wnames='WALK0'",
        "raw 0300",  # a frame shorter than a header: QEMU marks the device broken
        "reset",
        "Twalk fid=0 newfid=1 wnames=['WALK0']",
        f"save {missing}",
        "quit",
    ])  # fmt: skip
    done = harness("repl", "--qemu-binary", str(qemu_under_test.binary), stdin=script)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "error: wnames is Names, a list of strings: ['a', 'b']; got 'WALK0'" in out
    assert "device reset; new session, msize 8192, root attached as fid 0" in out
    assert out.count("<-- Rwalk(qids=[{type=128, version=0, path=1}])") == 1, out
    assert f"error: {missing.parent} is not a directory (save makes none)" in out
    assert not missing.parent.exists()
    refused = harness("repl", "--export", str(tmp_path), "--qemu-binary", str(qemu_under_test.binary), stdin="quit\n")
    assert refused.returncode == 2 and "--export names the directory of --backend local" in refused.stderr


def test_doctor_one_table_and_one_exit_code_per_meaning(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """0 usable, 1 degraded, 2 no usable QEMU (missing or not QEMU): the same table every time."""
    runs = {
        "usable": (str(qemu_under_test.binary), 0),
        "missing": (str(tmp_path / "none"), 2),
        "not QEMU": ("/bin/true", 2),
    }
    if PACKAGED.exists():
        runs["degraded"] = (str(PACKAGED), 1)
    for what, (binary, status) in runs.items():
        done = harness("doctor", "--qemu-binary", binary)
        assert done.returncode == status, (what, done.stdout, done.stderr)
        rows = dict(row[:2] for row in table_rows(done.stdout))
        assert rows["usable for the whole suite"].startswith(("yes", "degraded", "no")[status]), (what, rows)
        assert "Traceback" not in done.stdout + done.stderr


def test_doctor_names_each_builds_variant_and_the_default_as_the_harness_chooses_it(tmp_path: Path) -> None:
    """A cache with the default origin built three ways: plain with TCG, plain from before the
    guest family (no TCG, which the harness no longer takes) and ASan+UBSan. Each row names its
    variant; the one the harness would run when no binary is named is the only "default"."""
    from harness.qemu import build, provision
    from harness.tools.doctor import build_row

    origin = build.DEFAULT_ORIGIN
    for name, variant, tcg in (("plain", "", True), ("old", "", False), ("asan", "asan+ubsan", False)):
        directory = tmp_path / f"qemu-{name}"
        directory.mkdir()
        (directory / build.BINARY_NAME).write_text("")
        stamp = {"version": "10.0.13", "origin": origin, "variant": variant, "tcg": tcg}
        (directory / build.STAMP).write_text(json.dumps(stamp))
    default = provision.cached_build(tmp_path)
    rows = sorted(build_row(b, default)[0] for b in build.builds(tmp_path))
    assert default == tmp_path / "qemu-plain" / build.BINARY_NAME, (default, rows)
    assert rows == sorted([f"cached build {origin} (plain, the default)",
                           f"cached build {origin} (plain)", f"cached build {origin} (asan+ubsan)"])  # fmt: skip


def test_the_usage_text_names_every_bench_command() -> None:
    """cli.py's usage text lists each ``bench`` command its parser has."""
    import argparse

    from harness.tools import cli

    parser = argparse.ArgumentParser()
    top = parser.add_subparsers()
    cli._add_bench(top)
    bench = top.choices["bench"]
    commands = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    assert cli.__doc__ is not None
    missing = [name for name in commands.choices if f"bench {name}" not in cli.__doc__]
    assert not missing, f"harness/tools/cli.py's usage text names no {missing}"


def test_a_matrix_stopped_stops_its_run_as_ctrl_c_does(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """SIGTERM to ``harness matrix`` while its pytest run goes: the run gets SIGTERM too, which it
    takes as Ctrl-C (harness/tools/children.py), not a SIGKILL: the matrix exits 130, and no run
    directory (its QEMUs' sockets and exports) and no QEMU of the run is left."""
    from tests.test_bench import qemus_in

    binary = str(qemu_under_test.binary)
    matrix = subprocess.Popen(
        [sys.executable, "-m", "harness", "matrix", "--qemu", binary, "--qemu", binary, "--", "-k", "states/every"],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_signals,
    )  # fmt: skip

    def running() -> list[int]:  # the QEMUs of the pytest run (a version probe's runs elsewhere)
        return [pid for run in tmp_path.glob("v9p-run-*") for pid in qemus_in(run)]

    deadline = time.monotonic() + 60
    while not running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(), "the matrix's pytest run started no QEMU"
    matrix.send_signal(signal.SIGTERM)
    out, err = matrix.communicate(timeout=120)
    assert matrix.returncode == 130, out + err
    assert list(tmp_path.glob("v9p-run-*")) == [], out + err
    assert qemus_in(tmp_path) == []
