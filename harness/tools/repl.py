"""``python -m harness repl``: a QEMU and an attached 9P session to type messages at.

    9p> Twalk fid=0 newfid=1 wnames=['WALK0']
    <-- Rwalk(qids=[{type=128, version=0, path=1}])
    9p> raw 1300000018000000000000ff3f000000000000
    <-- Rgetattr(...)

Messages by name with keyword fields (Python literals); the obvious fields have defaults (a new
fid for ``newfid``, NOFID for ``afid``, all of Tgetattr's mask, a count that fills msize); Tab
completes names and fields; ``tag=N`` picks the tag. ``help Twalk`` lists a message's fields and
types; a value must be of its field's type (``wnames='a'`` is refused: Names is a list). ``raw HEX``
sends any bytes; ``reset`` resets the device and starts a new session (after a frame that broke
it); ``save FILE`` writes the session so far as a reproducer that ``python -m harness replay``
accepts (into an existing directory). ``fids``, ``trace``, ``quit``; Ctrl-C abandons the line.

On the local backend QEMU runs with the fault injector (harness/fault): ``fault call=openat
errno=EIO nth=2 [path=d/f]`` (or ``short=N`` for preadv and pwritev) makes the next message's
``nth`` such host call fail, and ``calls`` shows the next message's host calls; a saved
reproducer arms the fault again on replay.
"""

from __future__ import annotations

import ast
import cmd
import inspect
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.fault.calls import CALLS
from harness.fault.control import Fault, Injector
from harness.p9 import wire
from harness.p9.session import Session
from harness.p9.trace import write_reproducer

REQUESTS = sorted(m.NAME for m in wire.table() if issubclass(m, wire.TMessage))
#: Values for fields left out, where one value is what a developer nearly always means.
DEFAULTS: dict[str, Any] = {
    "afid": wire.NOFID, "uname": "", "aname": "", "n_uname": 0, "request_mask": wire.GETATTR_ALL,
    "offset": 0, "flags": 0, "gid": 0, "wnames": [], "data": b"", "datasync": 0,
}  # fmt: skip


def signature(name: str) -> str:
    """``Twalk(fid: U32, newfid: U32, wnames: Names) -> Rwalk(qids: Qids)``, from the message table."""

    def fields(cls: type[wire.Message]) -> str:
        annotations = {k: str(v) for k, v in inspect.get_annotations(cls).items()}
        return ", ".join(f"{f}: {annotations.get(f, '?')}" for f in cls.field_names())

    cls = wire.lookup(name)
    reply = cls.reply_class() if issubclass(cls, wire.TMessage) else None
    return f"{name}({fields(cls)})" + (f" -> {reply.NAME}({fields(reply)})" if reply else "")


def fields_of(name: str) -> list[str]:
    return list(wire.lookup(name).field_names())


def wrong_type(name: str, field: str, value: Any) -> str | None:
    """Why ``value`` cannot go in ``field`` of message ``name`` (its annotation in the message
    table says what it takes), or None."""
    cls = wire.lookup(name)
    wanted = wire.python_type(cls, field)
    kind = str(inspect.get_annotations(cls).get(field, wanted))
    if wanted is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        example = "a number"
    elif wanted is str:
        ok, example = isinstance(value, str), "a string: 'name'"
    elif wanted is bytes:
        ok, example = isinstance(value, bytes), "bytes: b'data'"
    elif wanted == list[str]:
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        example = "a list of strings: ['a', 'b']"
    else:
        return None  # records (qids, stats) are the server's to send; taken as given
    return None if ok else f"{field} is {kind}, {example}; got {value!r}"


class Repl(cmd.Cmd):
    prompt = "9p> "
    intro = (
        "9P2000.L over virtio-9p: a message (Tab completes; help Twalk), raw HEX, reset, save FILE, fids, trace, "
        "quit; on --backend local: fault SPEC, calls (the next message's host calls)."
    )

    def __init__(
        self, session: Session, header: dict[str, str] | None = None, reset: Callable[[], Session] | None = None,
        injector: Injector | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.session = session
        #: the fault injector of QEMU (local backend), and what the next message runs with: a
        #: fault, or (None) its host calls only recorded; nothing pending: sent as it is
        self.injector = injector
        self.next_fault: Fault | None = None
        self.next_armed = False
        #: what ``save`` writes at the top of a reproducer (backend, transport, the QEMU)
        self.header = header or {}
        #: resets the device and returns a new, attached session
        self.reset = reset

    def cmdloop(self, intro: Any = None) -> None:
        """As cmd's, but Ctrl-C abandons the line being typed instead of leaving."""
        while True:
            try:
                super().cmdloop(intro)
                return
            except KeyboardInterrupt:
                print("^C")
                intro = ""

    def default(self, line: str) -> None:
        words = line.split(maxsplit=1)
        name = words[0]
        if name not in REQUESTS:
            print(f"unknown message {name!r}; one of: {' '.join(REQUESTS)}")
            return
        try:
            fields = self._parse(words[1] if len(words) > 1 else "")
        except ValueError as err:
            print(f"error: {err}")
            return
        try:
            tag = fields.pop("tag", None)
            known = fields_of(name)
            unknown = set(fields) - set(known)
            if unknown:
                print(f"{name} has no field {', '.join(sorted(unknown))}; its fields: {signature(name)}")
                return
            for field in known:
                if field not in fields and field == "newfid":
                    fields[field] = self.session.new_fid()
                elif field not in fields and field == "count":
                    fields[field] = self.session.msize - wire.IOHDRSZ
                elif field not in fields and field in DEFAULTS:
                    fields[field] = DEFAULTS[field]
            missing = [f for f in known if f not in fields]
            if missing:
                print(f"{name} needs {', '.join(missing)}: {signature(name)}")
                return
            wrong = [why for f in known if (why := wrong_type(name, f, fields[f]))]
            if wrong:
                print(f"error: {'; '.join(wrong)}")
                return
            request = wire.lookup(name)(**fields)
            assert isinstance(request, wire.TMessage)
            if not self.next_armed or self.injector is None:
                self._show(self.session.send(request, tag=tag).wait())
                return
            fault, self.next_fault, self.next_armed = self.next_fault, None, False
            if fault is not None:
                self.session.note_fault(str(fault))
            with self.injector.armed(fault) as seen:
                reply = self.session.send(request, tag=tag).wait()
            self._show(reply)
            for call in seen.calls:
                print(f"    host: {call}")
            if fault is not None and not seen.fired:
                print(f"    (the fault {fault} did not fire: that call was not made {fault.nth} time(s))")
        except (HarnessError, ValueError, SyntaxError, TypeError) as err:
            print(f"error: {err}")

    @staticmethod
    def _parse(text: str) -> dict[str, Any]:
        """``fid=0 wnames=['a']`` -> fields; ValueError saying what to type instead."""
        fields: dict[str, Any] = {}
        for part in re.split(r"\s+(?=\w+=)", text.strip()) if text.strip() else []:
            key, sep, value = part.partition("=")
            if not sep or not key.isidentifier():
                raise ValueError(f"{part!r}: fields are name=value, e.g. fid=0 wnames=['a']")
            try:
                fields[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                hint = f"{key}={value!r}" if "[" not in value else f"{key}=['a', 'b']"
                raise ValueError(f"{key}={value}: not a Python literal (strings take quotes: {hint})") from None
        return fields

    def _show(self, reply: Any) -> None:
        if reply.message is None:
            print(f"<-- buffer returned empty (used {reply.used_len})")
        else:
            print(f"<-- {reply.message}")

    def do_fault(self, arg: str) -> None:
        """fault call=NAME [nth=K] [errno=ENAME | short=BYTES] [path=P]: the next message runs with
        its nth such host call failing (host calls: harness/fault/calls.py)."""
        if self.injector is None:
            print("no fault injector: QEMU runs it on the local backend only (--backend local)")
            return
        try:
            fault = Fault.parse(arg)
        except HarnessError as err:
            print(f"error: {err}")
            return
        if fault.call not in CALLS:
            print(f"no host call {fault.call!r}; one of: {' '.join(CALLS)}")
            return
        self.next_fault, self.next_armed = fault, True
        print(f"the next message runs with {fault}")

    def do_calls(self, arg: str) -> None:
        """calls: show the host calls the next message makes."""
        if self.injector is None:
            print("no fault injector: QEMU runs it on the local backend only (--backend local)")
            return
        self.next_fault, self.next_armed = None, True

    def do_raw(self, arg: str) -> None:
        """raw HEX: send these bytes as one request"""
        try:
            self._show(self.session.send_raw(bytes.fromhex(arg.strip())).wait())
        except (HarnessError, ValueError) as err:
            print(f"error: {err}")

    def do_help(self, arg: str) -> None:
        """help [MESSAGE]: the commands, or a message's fields and types"""
        if arg.strip() in REQUESTS or arg.strip() in wire.BY_NAME:
            print(signature(arg.strip()))
            defaults = [f for f in fields_of(arg.strip()) if f in DEFAULTS or f in ("newfid", "count")]
            if defaults:
                print(f"  defaults for: {', '.join(defaults)}")
            return
        super().do_help(arg)

    def do_save(self, arg: str) -> None:
        """save FILE: the session so far as a reproducer (python -m harness replay FILE)"""
        if not arg.strip():
            print("save needs a file name")
            return
        path = Path(arg.strip())
        if not path.parent.is_dir():
            print(f"error: {path.parent} is not a directory (save makes none)")
            return
        try:
            write_reproducer(path, self.session.history, {"case": "repl", **self.header})
        except OSError as err:
            print(f"error: {err}")
            return
        print(f"wrote {path}; replay it with python -m harness replay {path}")

    def do_reset(self, arg: str) -> None:
        """reset: reset the device (what a frame that broke it asks for) and attach a new session"""
        if self.reset is None:
            print("error: this REPL has no device to reset")
            return
        try:
            self.session = self.reset()
        except HarnessError as err:
            print(f"error: {err}")
            return
        print(f"device reset; new session, msize {self.session.msize}, root attached as fid 0")

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
        return [
            name
            for name in [*REQUESTS, "raw", "fids", "trace", "save", "reset", "help", "quit"]
            if name.startswith(text)
        ]

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
    import dataclasses

    from harness.fault.library import preload_library
    from harness.qemu.config import LocalFs, SynthFs
    from harness.qemu.provision import cache_root, usable_config
    from harness.tools.connect import connect

    scratch = Path(tempfile.mkdtemp(prefix="v9p-repl-")) if backend == "local" and not export else None
    fs = LocalFs(Path(export) if export else scratch) if backend == "local" else SynthFs()  # type: ignore[arg-type]
    config, probe = usable_config(binary, fs, transport)
    if isinstance(fs, LocalFs):  # the fault and calls commands
        config = dataclasses.replace(config, injector=preload_library(cache_root()))
    header = {"backend": fs.kind, "transport": transport, "qemu": str(binary), "qemu-version": probe.version}
    try:
        with connect(config) as conn:
            machine = conn.machine
            print(f"QEMU {probe.version} {machine.argv[0]} pid {machine.pid}; msize {conn.session.msize}; "
                  "root attached as fid 0")  # fmt: skip
            if isinstance(fs, LocalFs):
                kept = "removed when you quit" if scratch else "yours: left as it is"
                print(f"exporting {fs.path} ({fs.security_model}; {kept})")

            def reset() -> Session:
                conn.channel.reset()
                conn.session = Session(conn.channel)
                conn.session.version(8192)
                conn.session.attach(0)
                return conn.session

            Repl(conn.session, header, reset, machine.injector).cmdloop()
            conn.session.close(check=False)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0
