"""``python -m harness replay FILE``: send a reproducer's requests to a fresh QEMU and report the
first reply that differs from the recording (or from what the case expected, where it says)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.p9 import wire
from harness.p9.messages import Rlerror
from harness.p9.session import Pending, Reply
from harness.p9.trace import Step, read_reproducer
from harness.qemu import provision
from harness.qemu.machine import FsConfig, LocalFs, MachineConfig, SynthFs
from harness.tools.connect import connect


def _shown(reply: Reply | bytes) -> str:
    frame = reply if isinstance(reply, bytes) else reply.frame
    if not frame:
        return "(reply buffer returned empty)"
    try:
        return str(wire.decode(frame))
    except Exception:
        return f"undecodable {frame[:32].hex()}"


def _differs(step: Step, reply: Reply) -> str | None:
    if step.expected_errno is not None:
        message = reply.message
        if isinstance(message, Rlerror) and message.ecode == step.expected_errno:
            return None
        return f"expected {wire.describe_rlerror(step.expected_errno)}, got {_shown(reply)}"
    if step.reply is not None and reply.frame != step.reply:
        return f"recorded {_shown(step.reply)}, got {_shown(reply)}"
    return None


def replay(path: Path, explicit: str | None, timeout: float = 10.0) -> int:
    header, steps = read_reproducer(path)
    binary, _ = provision.find_qemu(explicit or header.get("qemu"))
    local = header.get("backend") == "local"
    export = Path(tempfile.mkdtemp(prefix="v9p-replay-")) if local else None
    fs: FsConfig = LocalFs(export) if export else SynthFs()
    transport = "legacy" if header.get("transport") == "legacy" else "modern"
    config, _ = provision.usable_config(binary, fs, transport)
    try:
        return _replay(path, steps, config, timeout)
    finally:
        if export:
            shutil.rmtree(export, ignore_errors=True)


def _replay(path: Path, steps: list[Step], config: MachineConfig, timeout: float) -> int:
    fs, transport, binary = config.fs, config.transport, config.binary
    print(f"replaying {len(steps)} requests of {path} on {binary} ({fs.kind}, {transport})")
    if fs.kind == "local":
        print("note: host files the case made outside 9P are not in the reproducer; the export starts empty")
    with connect(config, msize=None) as conn:
        deferred: list[tuple[int, Step, Pending[Any]]] = []
        for index, step in enumerate(steps, start=1):
            pending = conn.session.send_raw(step.request)
            if not step.in_line:
                deferred.append((index, step, pending))
                continue
            if (difference := _differs(step, pending.wait(timeout))) is not None:
                return _report(index, step, difference)
        for index, step, pending in deferred:
            if step.reply is None and step.expected_errno is None:
                continue  # never answered when recorded either
            if (difference := _differs(step, pending.wait(timeout))) is not None:
                return _report(index, step, difference)
        conn.session.close(check=False)
    print(f"no difference: all {len(steps)} replies as recorded")
    return 0


def _report(index: int, step: Step, difference: str) -> int:
    print(f"request {index}: {_shown(step.request)}")
    print(f"  {difference}")
    return 1
