"""Every known bug fixed between 7.2.22 and 10.0.13 can be bisected from its reproducer: recorded on
7.2.22, ``replay --find-fix`` says "still broken" there (0) and "the fix is here" on 10.0.13 (1).
A bug seen in some runs only (``qemu_bug(race=True)``) may go unseen by the recording run; the
reproducer of a run that met it asks for several fresh replays (``# race: attempts N``), which may
still all miss it on 7.2.22."""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.qemu import provision
from harness.tools import known_bugs
from tests.subrun import PROJECT

OLD, NEW = "7.2.22", "10.0.13"
#: families whose check is not on a 9P reply: on QEMU's memory or fds (budget), or a program's on
#: a mount (posix: its reproducer is cut by hand to the reply that was wrong, as
#: docs/reproducers/local_posix_pjdfstest_mkfifo_00_passthrough is); replay cannot judge them as
#: recorded (it says so, 255); the case itself is their bisection command
NOT_REPLAYABLE = ("budget", "posix")


def replayable(case: str) -> bool:
    """Whether a known bug's cases leave reproducers replay judges: not those of NOT_REPLAYABLE,
    and not a table's cells (``… where message=…``), most of whose states are made on the host
    between requests, which a reproducer cannot carry (it says so: replay exits 255). A cell on
    a state made through 9P is replayable: :func:`test_each_table_fix_since_72_is_found_by_replay_find_fix`."""
    return case.split("/")[1] not in NOT_REPLAYABLE and " where " not in case


def _selection(case: str) -> str:
    """``local/readonly/refused/*/Topen_OREAD_OTRUNC`` as a -k expression; a set of values
    (``{dot,dotdot}``, ``{9 of them}``) matches any, as ``*`` does (a superset of the bug's cases:
    the others pass on both QEMUs and leave no xfailed reproducer)."""
    pieces = [piece for piece in re.split(r"\*|\{[^}]*\}", case) if piece.strip("/")]
    return "(" + " and ".join(pieces) + ")"


def pattern_of(case: str) -> re.Pattern[str]:
    """A known bug's cases as their reproducers' directory names show them: ``*`` and ``{N of
    them}`` any value, ``{a,b}`` one of those."""
    parts = []
    for piece in re.split(r"(\*|\{[^}]*\})", case):
        if piece == "*" or re.fullmatch(r"\{\d+ of them\}", piece):
            parts.append(".+")
        elif piece.startswith("{"):
            parts.append("(" + "|".join(re.escape(_dirname(value)) for value in piece[1:-1].split(",")) + ")")
        else:
            parts.append(re.escape(_dirname(piece)))
    return re.compile("".join(parts))


def name_of(case: str) -> str:
    """A known bug's case as it shows in its reproducer's directory name, up to its first wildcard."""
    return _dirname(re.split(r"\*|\{", case)[0].strip("/"))


def _dirname(text: str) -> str:
    return re.sub(r"[^\w.-]", "_", text)


def _recorded(old: Path, where: Path, *selection: str) -> str:
    """What a pytest run of ``selection`` on ``old`` printed; every case's reproducer kept in
    ``where`` (--trace-dir)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", f"--qemu-binary={old}",
         f"--trace-dir={where}", f"--artefact-dir={where / 'artefacts'}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600, check=False,
    ).stdout  # fmt: skip


def _found_fix(paths: list[Path], binaries: tuple[Path, Path]) -> dict[tuple[Path, Path], tuple[int, str]]:
    """``replay --find-fix`` of each reproducer on each binary, two at a time: its exit status and
    what it said."""

    def verdict(path: Path, binary: Path) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "harness", "replay", str(path), "--find-fix", f"--qemu-binary={binary}"],
            cwd=PROJECT, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        return done.returncode, done.stdout + done.stderr

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = {(path, binary): pool.submit(verdict, path, binary) for path in paths for binary in binaries}
    return {key: run.result() for key, run in runs.items()}


def test_each_fix_since_72_is_found_by_replay_find_fix(tmp_path: Path) -> None:
    old, new = provision.cached_build(origin="bookworm"), provision.cached_build(origin="trixie")
    if old is None or new is None:
        pytest.skip("needs the 7.2.22 and 10.0.13 builds in the cache (python -m harness qemu build bookworm|trixie)")
    bugs = [
        bug for bug in known_bugs.known_bugs()
        if bug.present_in(OLD) and not bug.present_in(NEW) and replayable(bug.case)
    ]  # fmt: skip
    fixed = [bug.case for bug in bugs]
    #: bugs seen in some runs only (deep_absolute_path's heap over-read on 7.2.22): the recording run
    #: may miss one, and a reproducer of a run that met it says so in its header. How often a replay
    #: on OLD meets it depends on the environment (20 fresh QEMUs of 20 in one checkout, 0 of 20 in
    #: a clean clone, though its recording run had): there any verdict will do. On NEW, with the
    #: fix, every attempt must miss it: "the fix is here"
    sometimes = [name_of(bug.case) for bug in bugs if bug.race]
    assert fixed, "no known bug is fixed between 7.2.22 and 10.0.13: this test checks nothing"
    selection = " or ".join(map(_selection, fixed))
    recorded = _recorded(old, tmp_path, "cases/", "-k", selection)
    assert re.search(r"\d+ xfailed", recorded) and not re.search(r"\d+ failed", recorded), recorded[-3000:]
    # --trace-dir keeps every case's: those of runs that met their bug (a bug seen in some runs
    # only may have been missed: an XPASS, whose reproducer records right answers)
    patterns = [pattern_of(case) for case in fixed]  # the selection may hold other bugs' cases too
    reproducers = [
        path for path in sorted(tmp_path.glob("*/reproducer.9p"))
        if "\n# outcome: xfailed\n" in path.read_text() and any(p.search(path.parent.name) for p in patterns)
    ]  # fmt: skip
    for case in fixed:  # every bug has at least one reproducer (one seen in some runs only: if it was)
        found = any(pattern_of(case).search(path.parent.name) for path in reproducers)
        assert found or name_of(case) in sometimes, (case, reproducers)

    for path in reproducers:
        race = "# race: attempts " in path.read_text()
        assert race == any(name in path.parent.name for name in sometimes), path

    for (path, binary), (status, said) in _found_fix(reproducers, (old, new)).items():
        wanted = {0} if binary == old else {1}
        if binary == old and any(name in path.parent.name for name in sometimes):
            wanted = {0, 1}
        assert status in wanted, (path.parent.name, str(binary), said)


#: a state of the states table made through 9P alone (under a mapped model, where QEMU keeps how a
#: node was made), whose fid was walked to and never opened: where a request that needs an open
#: fid must refuse
MADE_THROUGH_9P = "states/file/9p/walked/nothing/"


def test_each_table_fix_since_72_is_found_by_replay_find_fix(tmp_path: Path) -> None:
    """A table bug fixed between 7.2.22 and 10.0.13, on its one-cell cases (``--full-matrix``) of
    a state made through 9P: an xfailed cell's reproducer has its ``<==`` on the judged request
    (the model's answer, fixtures/cells.py ``Verdict.reply_check``), so ``replay --find-fix``
    says "still broken" on 7.2.22 (0) and "the fix is here" on 10.0.13 (1)."""
    old, new = provision.cached_build(origin="bookworm"), provision.cached_build(origin="trixie")
    if old is None or new is None:
        pytest.skip("needs the 7.2.22 and 10.0.13 builds in the cache (python -m harness qemu build bookworm|trixie)")
    fixed = [bug for bug in known_bugs.known_bugs()
             if " where message=" in bug.case and bug.present_in(OLD) and not bug.present_in(NEW)]  # fmt: skip
    assert fixed, "no table bug is fixed between 7.2.22 and 10.0.13: this test checks nothing"
    messages = {bug.case: re.sub(r"[{}]", "", bug.case.split(" where message=")[1]).split(",") for bug in fixed}
    every = sorted({message for names in messages.values() for message in names})
    selection = f"{MADE_THROUGH_9P} and mapped-xattr and (" + " or ".join(f"/{m}/" for m in every) + ")"
    recorded = _recorded(old, tmp_path, "cases/test_states.py", "--full-matrix", "-k", selection)
    assert not re.search(r"\d+ failed", recorded), recorded[-3000:]
    kept = sorted(tmp_path.glob("*/reproducer.9p"))
    xfailed = [path for path in kept if "\n# outcome: xfailed\n" in path.read_text()]
    met = {case for case, names in messages.items() for path in xfailed
           if any(f"_{name}_" in path.parent.name for name in names)}  # fmt: skip
    # the bugs of Tfsync and Tlock/Tgetlock of an unopened fid; the third, a chmod of a special
    # file, is passthrough's, where no state is made through 9P alone
    assert len(met) >= 2, (sorted(met), recorded[-2000:])
    for path in xfailed:
        assert "\n<== Rlerror EBADF (9)\n" in path.read_text(), path

    verdicts = {
        (path.parent.name, binary): status for (path, binary), (status, _) in _found_fix(xfailed, (old, new)).items()
    }
    assert verdicts == {(name, binary): 0 if binary == old else 1 for name, binary in verdicts}
