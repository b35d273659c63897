"""``python -m harness repl``: a QEMU and an attached 9P session to type messages at.

    9p> Twalk fid=0 newfid=1 wnames=['WALK0']
    <-- Rwalk(qids=[{type=128, version=0, path=1}])
    9p> raw 1300000018000000000000ff3f000000000000
    <-- Rgetattr(...)

Messages by name with keyword fields (Python literals); Tab completes names and fields; ``tag=N``
picks the tag. ``raw HEX`` sends any bytes. ``fids``, ``trace``, ``help``, ``quit``.
"""

from __future__ import annotations

import ast
import cmd
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.p9 import wire
from harness.p9.session import Session

REQUESTS = sorted(m.NAME for m in wire.table() if issubclass(m, wire.TMessage))


def fields_of(name: str) -> list[str]:
    return list(wire.lookup(name).field_names())


class Repl(cmd.Cmd):
    prompt = "9p> "
    intro = "9P2000.L over virtio-9p: type a message (Tab completes), raw HEX, fids, trace, quit."

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def default(self, line: str) -> None:
        words = line.split(maxsplit=1)
        name = words[0]
        if name not in REQUESTS:
            print(f"unknown message {name!r}; one of: {' '.join(REQUESTS)}")
            return
        try:
            fields = self._parse(words[1] if len(words) > 1 else "")
            tag = fields.pop("tag", None)
            missing = set(fields_of(name)) - set(fields)
            if missing:
                print(f"{name} needs {', '.join(sorted(missing))}")
                return
            request = wire.lookup(name)(**fields)
            assert isinstance(request, wire.TMessage)
            self._show(self.session.send(request, tag=tag).wait())
        except (HarnessError, ValueError, SyntaxError, TypeError) as err:
            print(f"error: {err}")

    @staticmethod
    def _parse(text: str) -> dict[str, Any]:
        joined = ", ".join(re.split(r"\s+(?=\w+=)", text.strip())) if text.strip() else ""
        call = ast.parse(f"f({joined})", mode="eval").body
        assert isinstance(call, ast.Call)
        return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}

    def _show(self, reply: Any) -> None:
        if reply.message is None:
            print(f"<-- buffer returned empty (used {reply.used_len})")
        else:
            print(f"<-- {reply.message}")

    def do_raw(self, arg: str) -> None:
        """raw HEX: send these bytes as one request"""
        try:
            self._show(self.session.send_raw(bytes.fromhex(arg.strip())).wait())
        except (HarnessError, ValueError) as err:
            print(f"error: {err}")

    def do_fids(self, arg: str) -> None:
        """fids: the fids this session holds"""
        print(sorted(self.session.fids))

    def do_trace(self, arg: str) -> None:
        """trace: the messages so far"""
        print(self.session.format_history())

    def do_quit(self, arg: str) -> bool:
        """quit: stop QEMU and leave"""
        return True

    do_EOF = do_quit

    def completenames(self, text: str, *ignored: Any) -> list[str]:
        return [name for name in [*REQUESTS, "raw", "fids", "trace", "quit"] if name.startswith(text)]

    def completedefault(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        name = line.split()[0]
        if name not in REQUESTS:
            return []
        given = {word.split("=")[0] for word in line.split()[1:]}
        return [f"{f}=" for f in [*fields_of(name), "tag"] if f.startswith(text) and f not in given]

    def emptyline(self) -> bool:
        return False


def repl(binary: Path, backend: str, export: str | None, transport: str) -> int:
    """Start a QEMU (on local: exporting ``export``, or a new empty directory removed afterwards)."""
    from harness.qemu.machine import LocalFs, SynthFs
    from harness.qemu.provision import usable_config
    from harness.tools.connect import connect

    scratch = Path(tempfile.mkdtemp(prefix="v9p-repl-")) if backend == "local" and not export else None
    fs = LocalFs(Path(export) if export else scratch) if backend == "local" else SynthFs()  # type: ignore[arg-type]
    config, _ = usable_config(binary, fs, transport)
    try:
        with connect(config) as conn:
            machine = conn.machine
            print(f"QEMU {machine.argv[0]} pid {machine.pid}; msize {conn.session.msize}; root attached as fid 0")
            Repl(conn.session).cmdloop()
            conn.session.close(check=False)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0
