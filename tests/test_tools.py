"""The bug-hunting tools against a real QEMU: reproducers that replay to the same difference,
captures that tshark's 9P dissector decodes, the live trace (the REPL, the matrix and the
doctor: test_front_ends.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.p9.trace import reseal
from harness.qemu import provision
from harness.tools import profile
from harness.tools.bench import suite
from tests.subrun import PROJECT, run_pytest

PACKAGED = Path("/usr/bin/qemu-system-x86_64")

CASES = textwrap.dedent(
    """
    import errno
    from fixtures.expect import expect_rlerror
    from fixtures.case_path import case_path

    @case_path("tools/walks", backends=["synth"])
    def test_a_walks(attached):
        fid = attached.walk_fid(0, ["WALK0"])
        attached.clunk(fid)
        with expect_rlerror(errno.ENOENT):
            attached.walk(0, ["nope"], 2)

    @case_path("tools/deliberately_wrong", backends=["synth"])
    def test_b_deliberately_wrong(attached):
        with expect_rlerror(errno.ENOENT):  # WALK0 exists: this case fails on purpose
            attached.walk(0, ["WALK0"], 1)
    """
)


def harness(
    *args: str, stdin: str = "", cwd: Path = PROJECT, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m harness ARGS``; a matrix runs in a ``cwd`` of its own (its v9p-matrix/ is there);
    ``tmpdir``: its TMPDIR, so that what it leaves there is its own, not another worker's."""
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300,
        env=env,
    )  # fmt: skip


def test_last_failed_reruns_just_the_failing_case(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """With the project's own pytest configuration, pytest's cache works: --lf after a failing run
    reruns that case alone, and a later full run has the cache to go by (--ff)."""
    config = ("-c", str(PROJECT / "pyproject.toml"), "-o", f"cache_dir={tmp_path / 'cache'}")
    first, _ = run_pytest(tmp_path, qemu_under_test, *config, source=CASES).communicate(timeout=60)
    assert "1 failed, 1 passed" in first, first
    again, _ = run_pytest(tmp_path, qemu_under_test, *config, "--lf", source=CASES).communicate(timeout=60)
    assert "1 failed, 1 deselected" in again and "test_b_deliberately_wrong" in again, again
    ordered, _ = run_pytest(tmp_path, qemu_under_test, *config, "--ff", "-v", source=CASES).communicate(timeout=60)
    assert "run-last-failure: rerun previous 1 failure first" in ordered, ordered
    assert "test_case.py F." in ordered, ordered  # the failed one first, then the other


def test_a_failing_case_leaves_a_reproducer_that_replays_to_the_same_difference(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    proc = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", source=CASES)
    out, _ = proc.communicate(timeout=60)
    assert "1 failed, 1 passed" in out, out
    command = next(line for line in out.splitlines() if line.startswith(f"{sys.executable} -m harness replay "))
    failing = Path(command.split()[-1])
    assert failing.is_relative_to(tmp_path / "traces") and failing.exists()
    assert "<== Rlerror ENOENT (2)" in failing.read_text()
    replayed = harness("replay", str(failing), "--qemu-binary", str(qemu_under_test.binary))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "Twalk(fid=0, newfid=1, wnames=['WALK0'])" in replayed.stdout
    assert "expected Rlerror ENOENT (2), got Rwalk(qids=[{type=128, version=0, path=1}])" in replayed.stdout
    # the passing case's reproducer replays without a difference
    passing = next(p for p in (tmp_path / "traces").rglob("reproducer.9p") if "tools_walks" in str(p))
    clean = harness("replay", str(passing), "--qemu-binary", str(qemu_under_test.binary))
    assert clean.returncode == 0 and "no difference: all 5 requests answered as expected" in clean.stdout, clean.stdout


def test_replay_verdicts_for_what_cannot_be_tested(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """125 for a binary that cannot test the reproducer (not QEMU; no synth test tree), 255 for a
    reproducer that cannot be read; a one-line reason each, never a traceback."""
    proc = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", "-k", "tools/walks", source=CASES)
    assert "1 passed" in proc.communicate(timeout=60)[0]
    (synth,) = (tmp_path / "traces").rglob("reproducer.9p")
    broken = tmp_path / "broken.9p"
    broken.write_text(synth.read_text().replace("--> ", "--> zz", 1))
    runs = {
        "not QEMU": (harness("replay", str(synth), "--qemu-binary", "/bin/true"), 125, "is not QEMU"),
        "missing": (harness("replay", str(tmp_path / "nothing.9p")), 255, "cannot read the reproducer"),
        "bad hex": (harness("replay", str(broken)), 255, "cannot read the reproducer"),
    }
    if PACKAGED.exists():
        runs["no synth tree"] = (
            harness("replay", str(synth), "--qemu-binary", str(PACKAGED)),
            125,
            "no synth test tree",
        )
    for what, (done, status, said) in runs.items():
        assert done.returncode == status and said in done.stdout, (what, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, what


def test_replay_finds_qemu_as_everything_else_does(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """QTEST_QEMU_BINARY is taken when no --qemu-binary is given, and the one used is named."""
    proc = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", "-k", "tools/walks", source=CASES)
    assert "1 passed" in proc.communicate(timeout=60)[0]
    (synth,) = (tmp_path / "traces").rglob("reproducer.9p")
    text = synth.read_text().replace(f"# qemu: {qemu_under_test.binary}", "# qemu: /elsewhere/qemu-system-x86_64")
    synth.write_text(text)
    reseal(synth)  # a deliberate edit: sealed again, or replay would refuse the file as changed
    done = subprocess.run(
        [sys.executable, "-m", "harness", "replay", str(synth)], cwd=PROJECT, capture_output=True, text=True,
        timeout=120, env={**os.environ, "QTEST_QEMU_BINARY": str(qemu_under_test.binary)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"QEMU under test: {qemu_under_test.binary} (from QTEST_QEMU_BINARY)" in done.stdout


CRASH = textwrap.dedent(
    """
    import pytest
    from harness.p9.messages import Tlock
    from fixtures.case_path import case_path

    @case_path("tools/crash", backends=["synth"])
    def test_crash(attached):
        fid = attached.walk_fid(0, [])
        attached.rpc(Tlock(fid=fid, type=1, flags=0, start=0, length=0, proc_id=1, client_id="c"))
    """
)
#: bookworm's 7.2.22 as `python -m harness qemu build bookworm` caches it (.ci/run builds it)
OLD_QEMU = provision.cached_build(origin="bookworm") or Path("/nonexistent/qemu-7.2")


def _crash_reproducer(tmp_path: Path, qemu_under_test: QemuUnderTest) -> Path:
    """A reproducer of QEMU 7.2's synth Tlock SIGSEGV, recorded from a failing case."""
    crashing = QemuUnderTest(OLD_QEMU, "test", qemu_under_test.probe)
    out, _ = run_pytest(tmp_path, crashing, source=CRASH).communicate(timeout=60)
    assert "1 failed" in out, out
    (found,) = (tmp_path / "v9p-artefacts").rglob("reproducer.9p")
    assert "# qemu-died: killed by SIGSEGV (-11) at request 4" in found.read_text()
    return found


@pytest.mark.skipif(
    not OLD_QEMU.exists(), reason="no QEMU 7.2 build in the cache (python -m harness qemu build bookworm)"
)
def test_a_crash_replays_as_died_and_a_fixed_qemu_as_absent(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """The verdicts git bisect run wants: on the crashing QEMU the death is the result (exit 1),
    on one with the fix (10.0.12 and later answer EBADF, the recording's unanswered request) 0."""
    reproducer = _crash_reproducer(tmp_path, qemu_under_test)
    crashed = harness("replay", str(reproducer), "--qemu-binary", str(OLD_QEMU))
    assert crashed.returncode == 1, crashed.stdout + crashed.stderr
    assert "QEMU died: killed by SIGSEGV (-11) at request 4, as recorded" in crashed.stdout, crashed.stdout
    fixed = harness("replay", str(reproducer), "--qemu-binary", str(qemu_under_test.binary))
    if qemu_under_test.probe.version.startswith("7.2"):
        pytest.skip("the QEMU under test is 7.2 itself: no fixed QEMU to replay on")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "QEMU lived (when recorded: killed by SIGSEGV (-11) at request 4)" in fixed.stdout


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (make test installs it)")
def test_tshark_decodes_the_capture(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    proc = run_pytest(tmp_path, qemu_under_test, "--pcap", "pcaps", "-k", "tools/walks", source=CASES)
    out, _ = proc.communicate(timeout=60)
    assert "1 passed" in out, out
    (capture,) = (tmp_path / "pcaps").glob("*.pcap")
    fields = ["9p.msgtype", "9p.tag", "9p.maxsize", "9p.version", "9p.fid", "9p.newfid", "9p.wname", "9p.qidpath"]
    shown = subprocess.run(
        ["tshark", "-r", str(capture), "-Y", "9p", "-T", "fields", "-E", "separator=|", *(f"-e{f}" for f in fields)],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in shown]
    kinds = [row["9p.msgtype"] for row in rows]
    assert kinds[:2] == ["100", "101"] and rows[0]["9p.maxsize"] == "8192" and rows[1]["9p.version"] == "9P2000.L"
    walks = [row for row in rows if row["9p.msgtype"] == "110"]
    assert [(w["9p.fid"], w["9p.newfid"], w["9p.wname"]) for w in walks] == [("0", "1", "WALK0"), ("0", "2", "nope")]
    rwalk = next(row for row in rows if row["9p.msgtype"] == "111")
    assert rwalk["9p.qidpath"] == "1"
    lerror = [row for row in rows if row["9p.msgtype"] == "7"]
    assert len(lerror) == 1
    detail = subprocess.run(
        ["tshark", "-r", str(capture), "-Y", "9p.msgtype == 7", "-V"], capture_output=True, text=True
    ).stdout
    assert "Rlerror (7)" in detail and "Message data: 02000000" in detail  # ecode 2, ENOENT


def test_live_trace_prints_every_message(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    proc = run_pytest(tmp_path, qemu_under_test, "--trace-9p", "-k", "tools/walks", source=CASES)
    out, _ = proc.communicate(timeout=60)
    assert "--> tag=0 Twalk(fid=0, newfid=1, wnames=['WALK0'])" in out
    assert "<-- tag=0 Rlerror ENOENT (2)" in out
    assert out.index("Twalk(fid=0, newfid=1") < out.index("1 passed")  # printed as it went


def test_junit_and_results_name_the_qemu_under_test(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """The summary's title names the QEMU (with -q too); each JUnit testcase carries the QEMU's
    version, binary and accelerator; --results-json names it beside the outcomes and keeps the
    failure's text; trace.txt starts with it."""
    junit, results = tmp_path / "junit.xml", tmp_path / "results.json"
    proc = run_pytest(tmp_path, qemu_under_test, "--junitxml", str(junit), "--results-json", str(results),
                      "--trace-dir", "traces", source=CASES)  # fmt: skip
    out = proc.communicate(timeout=60)[0]
    assert "1 failed, 1 passed" in out
    xml = junit.read_text()
    version = qemu_under_test.probe.version
    # run_pytest runs with -q, which drops the header: the summary's title names the QEMU
    assert f"virtio-9p summary: QEMU {version} ({qemu_under_test.binary})" in out, out
    assert xml.count(f'<property name="qemu" value="{version}" />') == 2
    assert xml.count(f'<property name="qemu_binary" value="{qemu_under_test.binary}" />') == 2
    found = json.loads(results.read_text())
    assert found["qemu"]["version"] == version and found["qemu"]["binary"] == str(qemu_under_test.binary)
    (failed,) = found["failures"]
    assert "deliberately_wrong" in failed and "expected Rlerror ENOENT" in found["failures"][failed]
    for trace in (tmp_path / "traces").rglob("trace.txt"):
        assert trace.read_text().startswith(f"# QEMU {version} ({qemu_under_test.binary}), synth, modern, ")


@pytest.mark.skipif(not PACKAGED.exists(), reason="Debian's qemu-system-x86 is not installed (make test installs it)")
def test_malformed_report_refuses_a_binary_without_the_synth_tree_at_once() -> None:
    started = time.monotonic()
    done = harness("malformed-report", "--qemu-binary", str(PACKAGED))
    assert done.returncode != 0 and "no synth test tree" in done.stdout + done.stderr, done.stdout + done.stderr
    assert time.monotonic() - started < 5 and "Traceback" not in done.stdout + done.stderr


HOST_CHECK = textwrap.dedent(
    """
    from fixtures.case_path import case_path

    @case_path("tools/host_check", backends=["synth"])
    def test_host_check(attached):
        attached.clunk(attached.walk_fid(0, ["WALK0"]))
        assert 1 + 1 == 3, "a check outside the 9P replies"
    """
)


def test_a_failure_outside_the_replies_is_not_judged(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A case that failed on a check no reply carries: replay will not guess (255) and names the
    pytest command that judges the bug."""
    out, _ = run_pytest(tmp_path, qemu_under_test, source=HOST_CHECK).communicate(timeout=60)
    assert "1 failed" in out, out
    (reproducer,) = (tmp_path / "v9p-artefacts").rglob("reproducer.9p")
    assert "# outcome: failed" in reproducer.read_text() and "# check: AssertionError" in reproducer.read_text()
    done = harness("replay", str(reproducer), "--qemu-binary", str(qemu_under_test.binary))
    assert done.returncode == 255, done.stdout + done.stderr
    assert f"{sys.executable} -m pytest cases/ -k 'synth/tools/host_check' --runxfail --qemu-binary B" in done.stdout


CHECKED_THEN_CLEANED = textwrap.dedent(
    """
    import errno
    from fixtures.case_path import case_path
    from fixtures.expect import expect_rlerror

    @case_path("tools/checked_then_cleaned", backends=["synth"])
    def test_checked_then_cleaned(attached):
        try:
            with expect_rlerror(errno.ENOENT):  # WALK0 exists: fails on purpose
                attached.walk(0, ["WALK0"], 1)
        finally:
            attached.clunk(1)  # a clean-up request after the check
    """
)


def test_the_expectation_sits_on_the_request_the_case_checked(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A clean-up request after the failed check does not take the expectation: replay names the
    Twalk the case judged, not the Tclunk after it."""
    out, _ = run_pytest(tmp_path, qemu_under_test, source=CHECKED_THEN_CLEANED).communicate(timeout=60)
    assert "1 failed" in out, out
    (reproducer,) = (tmp_path / "v9p-artefacts").rglob("reproducer.9p")
    lines = reproducer.read_text().splitlines()
    expectation = lines.index("<== Rlerror ENOENT (2)")
    assert "Rwalk(" in lines[expectation - 1] and "Tclunk(fid=1)" in lines[expectation + 1], lines
    done = harness("replay", str(reproducer), "--qemu-binary", str(qemu_under_test.binary))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Twalk(fid=0, newfid=1, wnames=['WALK0'])" in done.stdout
    assert "expected Rlerror ENOENT (2), got Rwalk(" in done.stdout and "Tclunk" not in done.stdout


CELL_THEN_CLEANED = textwrap.dedent(
    """
    import errno
    from fixtures.answers import OK, Err, answer_of
    from fixtures.case_path import case_path
    from fixtures.cells import Verdict, assert_verdict
    from harness.p9.messages import Twalk

    @case_path("tools/cell_{wanted}", backends=["synth"], wanted=["refusal", "success"])
    def test_cell(attached, wanted):
        # as run_cell() judges a cell: the request, its fids clunked, and only then the verdict
        request = Twalk(fid=0, newfid=1, wnames=["WALK0" if wanted == "refusal" else "missing"])
        done = attached.send(request).wait()
        attached.clunk(1 if wanted == "refusal" else attached.walk_fid(0, []))
        want = Err(errno.ENOENT) if wanted == "refusal" else OK
        assert_verdict(Verdict("cell", request, want, answer_of(done.message), ["not the model's answer"],
                               frame=done.frame))
    """
)


def test_a_cells_expectation_sits_on_its_request_not_on_its_clean_up(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """A table's cell is judged after its fids are clunked: the verdict names its reply, so the
    reproducer's <== line is on the cell's Twalk (a refusal wanted, or a success), and replay finds
    the difference there instead of calling the clean-up's Rclunk right (exit 0 on the bug)."""
    out, _ = run_pytest(tmp_path, qemu_under_test, source=CELL_THEN_CLEANED).communicate(timeout=60)
    assert "2 failed" in out, out
    for wanted, line, got in (
        ("refusal", "<== Rlerror ENOENT (2)", "expected Rlerror ENOENT (2), got Rwalk("),
        ("success", "<== success (no error)", "expected success, got Rlerror ENOENT (2)"),
    ):
        (reproducer,) = (tmp_path / "v9p-artefacts").glob(f"*cell_{wanted}*/reproducer.9p")
        lines = reproducer.read_text().splitlines()
        assert "<-- " in lines[lines.index(line) - 1] and "Twalk(" in lines[lines.index(line) - 2], lines
        done = harness("replay", str(reproducer), "--qemu-binary", str(qemu_under_test.binary))
        assert done.returncode == 1 and got in done.stdout and "Tclunk" not in done.stdout, done.stdout + done.stderr


def test_a_damaged_reproducer_is_never_judged(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """Cut in half, cut inside its last line, cut before a recorded death, edited, or naming a
    backend, transport or host files replay cannot make: exit 255 with one line, no traceback, no
    temporary directory left."""
    from harness.p9.trace import read_reproducer, write_reproducer

    proc = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", "-k", "tools/walks", source=CASES)
    assert "1 passed" in proc.communicate(timeout=60)[0]
    (good,) = (tmp_path / "traces").rglob("reproducer.9p")
    text = good.read_text()
    lines = text.splitlines(keepends=True)
    header, _ = read_reproducer(good)
    damaged = {
        "half": ("".join(lines[: len(lines) // 2]), "cut short"),
        "inside the last line": (text[:-20], "cut short"),
        "without its end line": ("".join(lines[:-1]), "cut short"),
        "edited": (text.replace("WALK0", "WALK1", 1), "was changed after it was written"),
        "a death cut away": ("".join(lines[:-2]) + "# qemu-died: killed by SIGSEGV (-11) at request 9\n", "cut short"),
    }
    files: dict[str, tuple[Path, str]] = {}
    for what, (content, said) in damaged.items():
        files[what] = (tmp_path / f"{len(files)}.9p", said)
        files[what][0].write_text(content)
    fields = {k: v for k, v in header.items() if k != "replay"}
    for what, (changed, said) in {
        "backend nfs": ({"backend": "nfs"}, "its backend is 'nfs'"),
        "transport pcie": ({"transport": "pcie"}, "its transport is 'pcie'"),
        "host-files not JSON": ({"backend": "local", "host-dir": "d", "host-files": "[{bad"}, "not JSON"),
    }.items():
        path = tmp_path / f"{len(files)}.9p"
        write_reproducer(path, [], {**fields, **changed})  # complete files, naming what replay cannot make
        files[what] = (path, said)
    scratch = tmp_path / "tmp"  # replay's TMPDIR: the other workers' replays make theirs elsewhere
    scratch.mkdir()
    for what, (path, said) in files.items():
        done = harness("replay", str(path), "--qemu-binary", str(qemu_under_test.binary), tmpdir=scratch)
        assert done.returncode == 255, (what, done.stdout, done.stderr)
        assert said in done.stdout and len(done.stdout.strip().splitlines()) == 1, (what, done.stdout)
        assert "Traceback" not in done.stdout + done.stderr, what
    assert not list(scratch.iterdir())


def test_a_trace_that_lost_its_start_names_the_case_to_run(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A failing case whose session kept only its last messages (here 5, its first reply's request
    gone with the rest): its report and its reproducer name the pytest command that runs the case
    again, and replay refuses the reproducer as incomplete (255, one line), not as unreadable."""
    source = "import harness.p9.session\nharness.p9.session.HISTORY = 5\n" + CASES
    proc = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", "-k", "deliberately_wrong", source=source)
    out, _ = proc.communicate(timeout=60)
    assert "1 failed" in out, out
    run_it = (f"run the case, {sys.executable} -m pytest cases/ -k 'synth/tools/deliberately_wrong' --runxfail "
              f"--qemu-binary {qemu_under_test.binary}")  # fmt: skip
    kept = "it kept its last 5 messages, the first are missing"
    assert "is incomplete, so replay refuses it: the session's history was full" in out, out
    assert kept in out and run_it in out, out
    (reproducer,) = (tmp_path / "traces").rglob("reproducer.9p")
    messages = [line for line in reproducer.read_text().splitlines() if line.startswith(("-->", "<--"))]
    assert len(messages) == 5 and messages[0].startswith("<-- "), messages  # a reply whose request was lost
    replayed = harness("replay", str(reproducer), "--qemu-binary", str(qemu_under_test.binary))
    assert replayed.returncode == 255 and replayed.stdout.count("\n") == 1, replayed.stdout + replayed.stderr
    assert "it is incomplete (the session's history was full" in replayed.stdout, replayed.stdout
    assert kept in replayed.stdout and run_it in replayed.stdout, replayed.stdout
    assert "# replay:" not in reproducer.read_text()  # the command it has is the case's


def test_a_request_unanswered_when_recorded_must_stay_unanswered(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """A REPL session whose last request got no reply (synth FLUSH blocks until flushed) replays
    as exactly that; the same file claiming it was answered is judged against the answer."""
    saved = tmp_path / "blocked.9p"
    script = "\n".join(["Twalk fid=0 newfid=1 wnames=['FLUSH']", "Tlopen fid=1 flags=1",
                        "Twrite fid=1 offset=0 data=b'x' tag=7", f"save {saved}", "quit"])  # fmt: skip
    done = harness("repl", "--qemu-binary", str(qemu_under_test.binary), stdin=script)
    assert done.returncode == 0 and f"wrote {saved}" in done.stdout, done.stdout + done.stderr
    replayed = harness("replay", str(saved), "--qemu-binary", str(qemu_under_test.binary))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "4 requests answered as expected, 1 unanswered as recorded" in replayed.stdout, replayed.stdout


BATCHED = textwrap.dedent(
    """
    from fixtures.case_path import case_path
    from harness.p9.messages import Tgetattr, Twalk

    @case_path("tools/batched", backends=["synth"])
    def test_batched(attached):
        with attached.batch():  # one kick
            walk = attached.send(Twalk(fid=0, newfid=1, wnames=["WALK0"]))
            getattr = attached.send(Tgetattr(fid=0, request_mask=2047))
        walk.result()
        getattr.result()
        attached.clunk(1)
    """
)


def test_a_batch_replays_as_one_kick(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """Requests a case sent together are marked so in its reproducer, and replay sends them so."""
    from harness.p9.trace import read_reproducer

    out, _ = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", source=BATCHED).communicate(timeout=60)
    assert "1 passed" in out, out
    (reproducer,) = (tmp_path / "traces").rglob("reproducer.9p")
    text = reproducer.read_text()
    assert "=== batch: one kick" in text and "=== end of batch" in text, text
    _, steps = read_reproducer(reproducer)
    assert [step.batch for step in steps] == [0, 0, 1, 1, 0], steps
    done = harness("replay", str(reproducer), "--qemu-binary", str(qemu_under_test.binary))
    assert done.returncode == 0 and "all 5 requests answered as expected" in done.stdout, done.stdout


def test_a_race_reproducer_is_judged_on_its_expectations_only() -> None:
    """``<== anything but ENOENT (2)`` reads back as written; in a race's reproducer a reply
    without an expectation is not compared (its order differs run to run), the raced one is:
    ENOENT there is the race (1), anything else is not (0)."""
    import errno as errnos

    from harness.p9 import wire
    from harness.p9.messages import Rlerror, Rmkdir, Tmkdir
    from harness.p9.trace import Expectation, Step
    from harness.tools import replay

    race = Expectation(errnos.ENOENT, anything_but=True)
    assert Expectation.parse(race.line()) == race and race.line() == "<== anything but Rlerror ENOENT (2)"
    request = wire.encode(Tmkdir(dfid=1, name="a", mode=0o755, gid=0), 3)
    enoent, eexist = (wire.encode(Rlerror(ecode=code), 3) for code in (errnos.ENOENT, errnos.EEXIST))
    made = wire.encode(Rmkdir(qid=wire.Qid(wire.QTDIR, 0, 7)), 3)
    other = Step(request, reply=made)  # recorded as made; this time the order gave EEXIST
    assert replay._differs(other, eexist, local=True, died=False, only_expected=True) is None
    assert replay._differs(other, eexist, local=True, died=False) is not None  # a plain reproducer compares
    raced = Step(request, reply=enoent, expected=race)
    assert replay._differs(raced, eexist, local=True, died=False, only_expected=True) is None
    assert replay._differs(raced, made, local=True, died=False, only_expected=True) is None
    assert "(the race)" in str(replay._differs(raced, enoent, local=True, died=False, only_expected=True))
    assert replay._attempts("attempts 7") == 7 and replay._attempts("seen") == replay.RACE_ATTEMPTS


def test_a_reply_to_no_recorded_request_is_read_past_only_where_the_trace_lost_its_start(tmp_path: Path) -> None:
    """A trace marked incomplete that starts past its Tversion: a reply (and its ``<==`` line)
    answering a request that went with the start is read past, the rest read as written. The same
    reply in a trace that starts at Tversion, or one not marked incomplete, is damage: refused."""
    import errno as errnos

    from harness.errors import ReproducerError
    from harness.p9 import wire
    from harness.p9.messages import Rlerror, Rversion, Rwalk, Tversion, Twalk
    from harness.p9.trace import Direction, Expectation, Record, read_reproducer, write_reproducer

    version = [(Direction.SENT, wire.encode(Tversion(msize=8192, version="9P2000.L"), 0xFFFF)),
               (Direction.RECEIVED, wire.encode(Rversion(msize=8192, version="9P2000.L"), 0xFFFF))]  # fmt: skip
    orphan = (Direction.RECEIVED, wire.encode(Rlerror(ecode=errnos.ENOENT), 5))
    walk = [(Direction.SENT, wire.encode(Twalk(fid=0, newfid=1, wnames=["a"]), 1)),
            (Direction.RECEIVED, wire.encode(Rwalk(qids=[wire.Qid(0, 0, 7)]), 1))]  # fmt: skip
    incomplete = {"backend": "synth", "transport": "modern", "incomplete": "the first are missing"}

    def written(frames: list[tuple[Direction, bytes]], header: dict[str, str], name: str) -> Path:
        records = [Record(float(i), d, None, f, wire.decode(f)) for i, (d, f) in enumerate(frames)]
        checked = {i: Expectation(errnos.EEXIST) for i, (d, f) in enumerate(frames) if (d, f) == orphan}
        return write_reproducer(tmp_path / name, records, header, checked)

    header, steps = read_reproducer(written([orphan, *walk], incomplete, "cut.9p"))
    assert header["incomplete"] == "the first are missing" and "replay" not in header
    assert [(wire.decode(s.request), s.reply and wire.decode(s.reply), s.expected) for s in steps] == [
        (wire.decode(walk[0][1]), wire.decode(walk[1][1]), None)  # the orphan's <== went with it
    ]
    for frames, head, name in (([*version[:1], orphan, version[1], *walk], incomplete, "whole.9p"),
                               ([orphan, *walk], {"backend": "synth", "transport": "modern"}, "plain.9p")):  # fmt: skip
        with pytest.raises(ReproducerError, match="a reply with tag 5 answers no recorded request"):
            read_reproducer(written(frames, head, name))


def test_an_expectation_on_a_request_never_answered_is_judged(tmp_path: Path) -> None:
    """A check written on a request that got no reply (``expect_a_reply``) reads back onto that
    request, not onto the last answered one; replay calls a QEMU that still does not answer the
    bug (1) and judges an answer by the check (a bytes field's bound is on its length)."""
    from harness.p9 import wire
    from harness.p9.messages import Rlopen, Rread, Tlopen, Tread
    from harness.p9.trace import Direction, Expectation, Record, read_reproducer, write_reproducer
    from harness.tools import replay

    opened = wire.encode(Rlopen(qid=wire.Qid(0, 0, 7), iounit=4096), 1)
    frames = [(Direction.SENT, wire.encode(Tlopen(fid=2, flags=0), 1)), (Direction.RECEIVED, opened),
              (Direction.SENT, wire.encode(Tread(fid=2, offset=0, count=16384), 2))]  # fmt: skip
    records = [Record(float(i), d, None, f, wire.decode(f)) for i, (d, f) in enumerate(frames)]
    wanted = Expectation(field="data", at_most=8168)
    path = write_reproducer(tmp_path / "r.9p", records, {"backend": "synth", "transport": "modern"}, {2: wanted})
    assert "Tread(fid=2, offset=0, count=16384)\n<== data at most 8168\n" in path.read_text()
    _, (lopen, read) = read_reproducer(path)
    assert lopen.expected is None and read.expected == wanted and read.reply is None
    assert replay._differs(read, None, local=False, died=False) == "no reply (QEMU hangs on it)"
    assert replay._differs(read, wire.encode(Rread(data=bytes(8168)), 2), local=False, died=False) is None
    too_long = replay._differs(read, wire.encode(Rread(data=bytes(8169)), 2), local=False, died=False)
    assert too_long is not None and "data at most 8168" in too_long


SOMETIMES = textwrap.dedent(
    """
    import pytest
    from harness.errors import P9Rlerror
    from fixtures.case_path import case_path

    @pytest.mark.qemu_bug(fixed_in=(), reason="made up", raises=P9Rlerror, race=True, attempts=3)
    @case_path("tools/sometimes/{hit}", backends=["synth"], hit=["met", "missed"])
    def test_sometimes(attached, hit):
        attached.walk_fid(0, ["nope" if hit == "met" else "WALK0"])  # ENOENT: the made-up bug
    """
)


def test_a_bug_seen_in_some_runs_only_leaves_a_reproducer_that_tries_again(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """Under qemu_bug(race=True) a run that met the bug (xfailed) leaves a reproducer that asks
    for the marker's attempts and judges the reply that showed it; replay stops at the first
    attempt that shows it. A run that missed it (XPASS) records right answers, replayed as such."""
    out, _ = run_pytest(tmp_path, qemu_under_test, "--trace-dir", "traces", source=SOMETIMES).communicate(timeout=60)
    assert "1 xfailed, 1 xpassed" in out, out
    met, missed = (next((tmp_path / "traces").glob(f"*sometimes_{hit}*/reproducer.9p")) for hit in ("met", "missed"))
    assert {"# race: attempts 3", "# outcome: xfailed", "<== success (no error)"} <= set(met.read_text().splitlines())
    assert "# outcome: xpassed" in missed.read_text() and "# race:" not in missed.read_text()
    shown = harness("replay", str(met), "--qemu-binary", str(qemu_under_test.binary))
    assert shown.returncode == 1 and "showed at attempt 1 of 3" in shown.stdout, shown.stdout
    right = harness("replay", str(missed), "--qemu-binary", str(qemu_under_test.binary))
    assert right.returncode == 0 and "no difference" in right.stdout, right.stdout


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_summary_says_where_the_cpu_time_went(
    tmp_path: Path, qemu_under_test: QemuUnderTest, workers: tuple[str, ...]
) -> None:
    """The summary's CPU line accounts for what the OS counted for the whole process tree: the
    pytest processes' own time (an xdist worker's included, recorded before it says it has
    finished) and that of the QEMUs they started; `bench suite --whole` reads it with SUITE_CPU."""
    proc = run_pytest(tmp_path, qemu_under_test, *workers, "-k", "tools/walks", source=CASES)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, tree = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, out
    spent = re.search(suite.SUITE_CPU, out)
    assert spent, out
    harness, qemu = float(spent["harness"]), float(spent["qemu"])
    total = tree.ru_utime + tree.ru_stime
    print(f"harness {harness} qemu {qemu} tree {total:.2f}")
    assert qemu > 0 and harness > 0
    assert -0.2 <= total - (harness + qemu) <= 0.15 * total + 0.3, (harness, qemu, total)
    # QEMU's by phase: what the harness asked of it is a part of it, and the cases made requests
    phases = re.search(profile.QEMU_PHASES, out)
    assert phases, out
    asked = float(phases["start_s"]) + float(phases["reset_s"]) + float(phases["attach_s"])
    assert int(phases["starts"]) >= 1 and float(phases["start_s"]) > 0 and int(phases["requests"]) > 0, out
    assert asked <= qemu + 0.01, out
    # the harness's waits and notifies: counted, and a part of its time
    spent = re.search(suite.HARNESS_SPENT, out)
    assert spent, out
    assert int(spent["waits"]) >= 1 and int(spent["notifies"]) >= 1, out
    assert float(spent["wait_s"]) + float(spent["notify_s"]) < harness, out


def test_a_directory_reads_expected_records_are_judged_less_what_the_host_decides() -> None:
    """``<== data equal to`` on a 9P2000.u directory read (stat records): on local, records equal
    but for qid paths and versions and times (the host's, new on every replay) answer as expected;
    other names are a difference, said by the names; on synth the bytes must be equal."""
    from harness.p9 import wire
    from harness.p9.layout import layout
    from harness.p9.messages import Rread, Tread
    from harness.p9.trace import Expectation, Step
    from harness.tools import replay

    def records(*named: tuple[str, int, int]) -> bytes:
        return b"".join(
            layout(wire.Stat).body.build(layout(wire.Stat).to_wire(wire.Stat(
                type=0, dev=0, qid=wire.Qid(0, version, path), mode=0o644, atime=path, mtime=path, length=0,
                name=name, uid="", gid="", muid="", extension="HARDLINKCOUNT 1", n_uid=0, n_gid=0, n_muid=0)))
            for name, version, path in named
        )  # fmt: skip

    wanted = records(("f01", 1, 70), ("f11", 1, 71))
    step = Step(wire.encode(Tread(fid=3, offset=162, count=200), 1), None, Expectation(field="data", equals=wanted))
    again = wire.encode(Rread(data=records(("f01", 9, 900), ("f11", 9, 901))), 1)
    assert replay._differs(step, again, local=True, died=False) is None
    assert replay._differs(step, again, local=False, died=False) is not None  # synth: the bytes
    lost = replay._differs(step, wire.encode(Rread(data=records((".", 9, 2), ("f07", 9, 907))), 1), True, False)
    assert lost == "expected data holding the stat records of ['f01', 'f11'], got those of ['.', 'f07']"
    file_bytes = replay._differs(step, wire.encode(Rread(data=b"hello"), 1), True, False)
    assert file_bytes is not None and "equal to" in file_bytes
