"""``python -m harness replay FILE``: send a reproducer's requests to a fresh QEMU and give a
verdict a ``git bisect run`` can use, one meaning whatever the case was:

- **0** the server does what the case expected: every request answered, each as the case wanted
  (its ``<==`` line: an errno, or success where an Rlerror ended the case) or, where it wanted
  nothing in particular, as recorded; no crash, no hang.
  The bug is absent.
- **1** it does not: an answer other than the expected one, a request left unanswered (a hang),
  QEMU dead (as recorded or not). The bug is there.
- **125** this binary cannot test it: not QEMU, not usable, without the synth test tree the
  reproducer needs, or QEMU refusing the recorded configuration.
- **255** nothing to judge: the reproducer cannot be read (missing, not a reproducer, cut short or
  altered since it was written, a backend, transport or host file replay cannot make), or it holds
  no expectation replay can check. One line says why; ``git bisect run`` stops rather than mark
  commits.

Replies are compared as decoded messages: on the local backend, values the host decides (qid
paths and versions, times, inode numbers, block counts, directory offsets) are left out.

A race's reproducer (``# race: attempts N``, written for a known bug seen in some runs only that a
case met: a race, or undefined behaviour such as 7.2's heap over-read of a deep path) is judged on
its ``<==`` lines only (``<== anything but ENOENT (2)``, ``<== success``): the other replies are
whatever the order the server took gives, which differs run to run. It is replayed on a fresh QEMU
up to N times (or ``--attempts``); the first attempt whose judged reply comes back as the bug
answered is 1, and N attempts without it are 0 ("not seen in N attempts": the absence of a bug seen
in some runs only is a measure, never proof).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import (
    HarnessError,
    P9ProtocolError,
    ProvisionError,
    QEMUError,
    QEMUStartError,
    QTestError,
    ReproducerError,
)
from harness.errors import describe_status as describe_exit
from harness.fault.control import Fault
from harness.fault.library import InjectorBuildError, preload_library
from harness.p9 import wire
from harness.p9.messages import Rerror, Rlerror
from harness.p9.session import Pending, Reply
from harness.p9.trace import SUCCESS, Step, read_reproducer, rerun_command, restore_host
from harness.p9.wire import RMessage
from harness.qemu import provision
from harness.qemu.config import FsConfig, LocalFs, MachineConfig, SynthFs
from harness.tools.connect import Connection, connect

ABSENT, PRESENT, UNTESTABLE, UNREADABLE = 0, 1, 125, 255
#: how long a request unanswered when recorded must stay unanswered (a blocked synth request: the
#: server answers those within milliseconds when it does)
UNANSWERED_WAIT = 0.5
#: how many fresh replays a race's reproducer gets, unless its header or --attempts says otherwise
RACE_ATTEMPTS = 50
#: fields whose values the host filesystem decides, not the server: left out on local
HOST_DECIDED = {"path", "version", "offset", "blocks", "bfree", "bavail", "files", "ffree", "fsid", "blksize", "ino",
                "atime_sec", "atime_nsec", "mtime_sec", "mtime_nsec", "ctime_sec", "ctime_nsec", "btime_sec",
                "btime_nsec", "gen", "data_version", "atime", "mtime", "dev", "iounit"}  # fmt: skip


def _shown(frame: bytes | None) -> str:
    if not frame:
        return "(reply buffer returned empty)"
    try:
        return str(wire.decode(frame))
    except P9ProtocolError:
        return f"undecodable {frame[:32].hex()}"


def _decoded(frame: bytes) -> wire.Message | None:
    """The message ``frame`` holds, or None where it does not decode."""
    try:
        return wire.decode(frame)
    except P9ProtocolError:
        return None


def _errno_of(frame: bytes) -> int | None:
    message = _decoded(frame)
    if isinstance(message, Rlerror):
        return message.ecode
    if isinstance(message, Rerror):
        return message.errno
    return None


def _answers(request: bytes, frame: bytes) -> bool:
    """Whether ``frame`` is the reply type of ``request`` (a success, decoded)."""
    sent, got = _decoded(request), _decoded(frame)
    return isinstance(sent, wire.TMessage) and got is not None and type(got) is sent.reply_class()


def _comparable(frame: bytes, local: bool) -> Any:
    """What of a reply must be equal: the bytes on synth; on local the decoded fields less the
    ones the host decides."""
    if not local or not frame:
        return frame
    try:
        message = wire.decode(frame)
    except P9ProtocolError:
        return frame

    fields = message.to_fields()
    if message.NAME == "Rread" and fields["data"]:
        fields["data"] = _as_records(fields["data"])
    return (message.NAME, _strip(fields))


def _strip(value: Any) -> Any:
    """``value`` (a message's fields) less the ones the host decides."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in HOST_DECIDED}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _as_records(data: bytes) -> Any:
    """An Rread's data as replay compares it on local: a 9P2000.u directory read's stat records,
    in name order (the host's order is its own), ".." left out (outside the case's directory: the
    host's business); a file's bytes as they are."""
    try:
        records = sorted(wire.parse_stats(data), key=lambda record: record.name)
    except P9ProtocolError:
        return data
    return [dataclasses.asdict(record) for record in records if record.name != ".."]


def _names(data: Any) -> list[str] | None:
    """The names of the stat records ``data`` holds (a 9P2000.u directory read's), else None."""
    records = _as_records(data) if isinstance(data, bytes) else None
    return [record["name"] for record in records] if isinstance(records, list) else None


def _field(message: Any, dotted: str) -> Any:
    """``message``'s field ``a.b`` (a record's field), or None where the reply has none."""
    for name in dotted.split("."):
        message = getattr(message, name, None)
    return bytes(message) if isinstance(message, bytes | bytearray | memoryview) else message


def _differs(step: Step, frame: bytes | None, local: bool, died: bool, only_expected: bool = False) -> str | None:
    """Why this reply breaks the expectation, or None. A request unanswered when recorded must stay
    unanswered, unless QEMU had died then (any answer will do: it is the death that is judged).
    With ``only_expected`` (a race's reproducer, or the clean-up after the last check) only
    the expectations are judged."""
    wanted = step.expected
    if only_expected and wanted is None:
        return None
    if frame is None:
        return "no reply (QEMU hangs on it)" if step.reply is not None or wanted is not None else None
    if wanted is not None and wanted.whole_walk:
        qids = getattr(_decoded(frame), "qids", None)
        names = getattr(_decoded(step.request), "wnames", None)
        if _errno_of(frame) is not None or (qids is not None and names is not None and len(qids) == len(names)):
            return None
        return f"expected every name walked or an error, got {_shown(frame)} (the race)"
    if wanted is not None and wanted.any_error:
        if _errno_of(frame) is not None:
            return None
        return f"expected an error, got {_shown(frame)}"
    if wanted is not None and wanted.equals is not None:  # a field's value
        if wanted.or_error and _errno_of(frame) is not None:
            return None
        value = _field(_decoded(frame), wanted.field)
        if value == wanted.equals:
            return None
        # on local, stat records are equal less what the host decides (qid paths, times), as the
        # replies replay compares as recorded are
        equal_records = (
            local and wanted.field == "data" and isinstance(value, bytes) and isinstance(wanted.equals, bytes)
            and _strip(_as_records(value)) == _strip(_as_records(wanted.equals))
        )  # fmt: skip
        if equal_records:
            return None
        names = [_names(data) for data in (wanted.equals, value)] if local and wanted.field == "data" else []
        if names and all(named is not None for named in names):
            return f"expected data holding the stat records of {names[0]}, got those of {names[1]}"
        return f"expected {wanted.field} equal to {wanted.equals!r}, got {_shown(frame)}"
    if wanted is not None and wanted.errno is None:  # a field's bound
        value = _field(_decoded(frame), wanted.field)
        value = len(value) if isinstance(value, bytes) else value  # a bytes field's bound is on its length
        if isinstance(value, int) and value <= wanted.at_most:
            return None
        return f"expected {wanted.field} at most {wanted.at_most}, got {_shown(frame)}"
    if wanted is not None and wanted.errno == SUCCESS:
        if _errno_of(frame) is None and _answers(step.request, frame):
            return None
        return f"expected success, got {_shown(frame)}"
    if wanted is not None and wanted.anything_but and wanted.errno is not None:
        if _errno_of(frame) != wanted.errno:
            return None
        return f"expected anything but {wire.describe_rlerror(wanted.errno)}, got {_shown(frame)} (the race)"
    if wanted is not None and wanted.errno is not None:
        if _errno_of(frame) == wanted.errno:
            return None
        return f"expected {wire.describe_rlerror(wanted.errno)}, got {_shown(frame)}"
    if step.reply is None:
        return None if died else f"unanswered when recorded, now answered {_shown(frame)}"
    if _comparable(frame, local) != _comparable(step.reply, local):
        return f"recorded {_shown(step.reply)}, got {_shown(frame)}"
    return None


def replay(
    path: Path, explicit: str | None, timeout: float = 10.0, *, find_fix: bool = False, attempts: int | None = None
) -> int:
    """The verdict (module docstring); ``find_fix`` swaps 0 and 1, so that a bisection whose
    old commits have the bug and new ones the fix can run it as it is; ``attempts`` overrides a
    race reproducer's own count."""
    verdict = _verdict(path, explicit, timeout, attempts)
    if find_fix and verdict in (ABSENT, PRESENT):
        swapped = PRESENT if verdict == ABSENT else ABSENT
        print(f"--find-fix: exit {swapped} ({'the fix is here' if verdict == ABSENT else 'still broken'})")
        return swapped
    return verdict


def _verdict(path: Path, explicit: str | None, timeout: float, attempts: int | None = None) -> int:
    try:
        header, steps = read_reproducer(path)
    except ReproducerError as err:
        print(f"cannot read the reproducer: {err}")
        return UNREADABLE
    if "incomplete" in header:
        print(f"cannot replay {path}: it is incomplete ({header['incomplete']})")
        return UNREADABLE
    if (why := _unjudgeable(header, steps)) is not None:
        print(f"cannot judge {path}: {why}")
        return UNREADABLE
    try:
        binary, source = _binary(explicit, header)
        config = _config(binary, header, faults=any(step.fault for step in steps))
    except (ProvisionError, InjectorBuildError) as err:
        print(f"this binary cannot test the reproducer: {err}")
        return UNTESTABLE
    except ReproducerError as err:
        print(f"cannot replay {path}: {err}")
        return UNREADABLE
    print(f"QEMU under test: {binary} (from {source})")
    if "race" not in header:
        return _replay_in(path, header, steps, config, timeout)
    tries = attempts or _attempts(header["race"])
    for attempt in range(1, tries + 1):
        again = config if attempt == 1 else _config(binary, header, faults=config.injector is not None)
        verdict = _replay_in(path, header, steps, again, timeout, True)
        if verdict != ABSENT:
            what = "showed" if verdict == PRESENT else "could not be judged"
            print(f"the bug (seen in some runs only) {what} at attempt {attempt} of {tries}")
            return verdict
    print(f"the bug (seen in some runs only) was not seen in {tries} attempts")
    return ABSENT


def _attempts(race: str) -> int:
    """``attempts 200`` (the race header's value) -> 200."""
    words = race.split()
    return int(words[1]) if len(words) > 1 and words[0] == "attempts" and words[1].isdigit() else RACE_ATTEMPTS


def _replay_in(path: Path, header: dict[str, str], steps: list[Step], config: MachineConfig, timeout: float,
               race: bool = False) -> int:  # fmt: skip
    """One replay on ``config``, whose local export (a fresh directory) is removed after it."""
    export = config.fs.path if isinstance(config.fs, LocalFs) else None
    try:
        return _replay(path, header, steps, config, timeout, race)
    finally:
        if export is not None:
            shutil.rmtree(export, ignore_errors=True)


def _binary(explicit: str | None, header: dict[str, str]) -> tuple[Path, str]:
    """As everywhere: --qemu-binary, then QTEST_QEMU_BINARY; then the binary the reproducer was
    recorded on, if this machine has it; then the default build."""
    if explicit or os.environ.get(provision.ENV_BINARY):
        return provision.find_qemu(explicit)
    recorded = header.get("qemu")
    if recorded and Path(recorded).is_file():
        return Path(recorded), "the reproducer's header"
    if recorded:
        print(f"note: the reproducer was recorded on {recorded}, which this machine does not have")
    return provision.find_qemu(None)


def _config(binary: Path, header: dict[str, str], faults: bool = False) -> MachineConfig:
    """The QEMU the reproducer ran on; with ``faults`` (a step has a ``# fault:`` line), with the
    fault injector preloaded (harness/fault)."""
    fs: FsConfig
    if header.get("backend") == "local":
        options = dict(item.split("=", 1) for item in header.get("fsdev", "").split(",") if "=" in item)
        options.pop("id", None), options.pop("path", None)
        model = options.pop("security_model", "mapped-xattr")
        export = Path(tempfile.mkdtemp(prefix="v9p-replay-"))
        fs = LocalFs(export, security_model=model, extra=tuple(options.items()))  # type: ignore[arg-type]
        if problem := fs.host_problem():  # the same on every commit: nothing to judge
            export.rmdir()
            raise ReproducerError(f"its export cannot be made on this host: {problem}; set TMPDIR to a directory on "
                                  "another file system")  # fmt: skip
        if header.get("export-mode"):  # a mount's export: its root as it was (pjdfstest's is 0755)
            export.chmod(int(header["export-mode"], 8))
        if header.get("host-dir"):  # the case's directory, which the harness made on the host,
            home = export / Path(header["host-dir"]).name  # and what the case put there itself
            try:
                home.mkdir()
                restore_host(home, json.loads(header.get("host-files", "[]")))
            except (OSError, KeyError, ValueError, TypeError) as err:
                shutil.rmtree(export, ignore_errors=True)
                raise ReproducerError(f"its host files cannot be made again: {type(err).__name__}: {err}") from err
    else:
        fs = SynthFs()
    transport = "legacy" if header.get("transport") == "legacy" else "modern"
    try:
        config, found = provision.usable_config(binary, fs, transport)
    except ProvisionError:
        if isinstance(fs, LocalFs):
            shutil.rmtree(fs.path, ignore_errors=True)
        raise
    if fs.kind == "synth" and not found.synth_tree:
        raise ProvisionError(f"{binary} has no qtest accelerator, so no synth test tree, which this reproducer walks")
    if header.get("nofile"):  # the case's RLIMIT_NOFILE for QEMU: 9pfs sizes its fd reclaim from it
        config = dataclasses.replace(config, nofile=int(header["nofile"]))
    if faults:
        if not isinstance(fs, LocalFs):
            raise ReproducerError("it arms host faults, which only the local backend makes")
        config = dataclasses.replace(config, injector=preload_library(provision.cache_root()))
    return config


def _replay(path: Path, header: dict[str, str], steps: list[Step], config: MachineConfig, timeout: float,
            race: bool = False) -> int:  # fmt: skip
    local = config.fs.kind == "local"
    recorded_death = header.get("qemu-died")
    if not race:
        print(f"replaying {len(steps)} requests of {path} ({config.fs.kind}, {config.transport})")
    if local and "host-files" in header and not race:
        print("note: the case's host files are made as they were at its first request; later ones are not")
    try:
        with connect(config, msize=None) as conn:
            return _judge(conn, steps, local, recorded_death, timeout, race)
    except QEMUStartError as err:
        print(f"this binary cannot test the reproducer: QEMU does not start with its configuration: {err.message}")
        return UNTESTABLE


def _judge(conn: Connection, steps: list[Step], local: bool, recorded_death: str | None, timeout: float,
           race: bool = False) -> int:  # fmt: skip
    deferred: list[tuple[int, Step, Pending[RMessage]]] = []
    index = 0
    died = recorded_death is not None
    # the requests after the last reply a check judged are the case's clean-up, made because the
    # check failed (a Tclunk of a fid the buggy server kept): a server without the bug answers them
    # otherwise, and only the expectations are judged there
    checked = [index for group in _groups(steps) for index, step in group if step.expected is not None]
    last_checked = max(checked) if checked else None

    def only_expected(at: int) -> bool:
        return race or (last_checked is not None and at > last_checked)

    try:
        for group in _groups(steps):
            # a batch goes out as recorded, in one kick; other requests one by one
            if group[0][1].fault:  # a request with a host call failing: armed while it runs
                index, step = group[0]
                with _armed(conn, step.fault):
                    frame = _reply(conn.session.send_raw(step.request), timeout)
                if (difference := _differs(step, frame, local, died, only_expected(index))) is not None:
                    return _verdict_present(index, step, difference)
                continue
            with conn.session.batch() if group[0][1].batch else contextlib.nullcontext():
                sent = []
                for index, step in group:
                    sent.append((index, step, conn.session.send_raw(step.request)))
            for index, step, pending in sent:
                if not step.in_line:
                    deferred.append((index, step, pending))
                    continue
                difference = _differs(step, _reply(pending, timeout), local, died, only_expected(index))
                if difference is not None:
                    return _verdict_present(index, step, difference)
        for index, step, pending in deferred:
            # a request unanswered when recorded is given a short while to stay so
            wait = timeout if step.reply is not None or step.expected is not None else UNANSWERED_WAIT
            if (difference := _differs(step, _reply(pending, wait), local, died, only_expected(index))) is not None:
                return _verdict_present(index, step, difference)
        conn.session.close(check=False)
    except (QEMUError, QTestError) as err:
        if conn.machine.unresponsive:
            print(f"QEMU stopped answering at request {index} ({type(err).__name__})")
            return PRESENT
        status = conn.machine.exit_status
        death = f"QEMU died: {describe_exit(status)} at request {index}"
        same = recorded_death is not None and recorded_death.endswith(f"at request {index}")
        print(f"{death}{', as recorded' if same else ''} ({type(err).__name__})")
        return PRESENT
    if race:
        return ABSENT
    unanswered = sum(1 for step in steps if step.reply is None and step.expected is None)
    counted = f"all {len(steps)} requests answered as expected"
    if unanswered:
        counted = f"{len(steps) - unanswered} requests answered as expected, {unanswered} unanswered as recorded"
    if recorded_death:
        print(f"no difference, and QEMU lived (when recorded: {recorded_death}): {counted}")
    else:
        print(f"no difference: {counted}")
    return ABSENT


def _armed(conn: Connection, fault: str) -> contextlib.AbstractContextManager[object]:
    """The injector of the replay's QEMU armed with a step's fault (its ``# fault:`` line)."""
    injector = conn.machine.injector
    if injector is None:
        raise ReproducerError("a step arms a host fault, and this QEMU runs without the injector")
    return injector.armed(Fault.parse(fault))


def _groups(steps: list[Step]) -> list[list[tuple[int, Step]]]:
    """The steps (numbered from 1) in the kicks they went out in: a recorded batch together,
    every other request alone."""
    groups: list[list[tuple[int, Step]]] = []
    for index, step in enumerate(steps, start=1):
        if step.batch and groups and groups[-1][0][1].batch == step.batch:
            groups[-1].append((index, step))
        else:
            groups.append([(index, step)])
    return groups


def _unjudgeable(header: dict[str, str], steps: list[Step]) -> str | None:
    """Why a reproducer carries no expectation replay can judge, or None: a failing (or known-bug)
    run whose check was not on a 9P reply, nor a death, records the broken answers only, and
    answers that match them or not say nothing sure about the bug."""
    failed = header.get("outcome") in ("failed", "xfailed")
    if not failed or header.get("qemu-died") or any(step.expected is not None for step in steps):
        return None
    return (f"it records a {header['outcome']} run whose check was not on a 9P reply "
            f"({header.get('check', 'unknown')}); judge this bug with the case itself: "
            f"{rerun_command(header.get('case', ''), 'B')}")  # fmt: skip


def _reply(pending: Pending[RMessage], timeout: float) -> bytes | None:
    try:
        reply: Reply = pending.wait(timeout)
    except HarnessError as err:
        if isinstance(err, QEMUError | QTestError):
            raise
        return None
    return reply.frame


def _verdict_present(index: int, step: Step, difference: str) -> int:
    print(f"request {index}: {_shown(step.request)}")
    print(f"  {difference}")
    return PRESENT
