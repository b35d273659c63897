"""The injector's control block, shared with the library in QEMU (harness/fault/preload.c's
``struct control``, whose layout :data:`CONTROL` declares), and what it records.

An :class:`Injector` belongs to one QEMU process: :meth:`Injector.create` makes its control block
and log in the process's directory before QEMU starts (:meth:`Injector.env` is what QEMU runs
with), :meth:`Injector.armed` arms a :class:`Fault` (or only records) around what the caller
sends, and reads back the host calls made meanwhile (:class:`HostCall`).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from construct import Int32sl, Int32ul, Int64ul, PaddedString, Struct

from harness.errors import HarnessMisuse

#: "V9PF": the harness mapped the block (the library's disarmed block is all zeroes)
MAGIC = 0x46503956
MODE_RECORD, MODE_FAIL, MODE_SHORT = 1, 2, 4
NAME_FIELD, PATH_FIELD = 32, 1024
CONTROL = Struct(
    "magic" / Int32ul,
    "mode" / Int32ul,
    "err" / Int32sl,
    "nth" / Int32ul,
    "seen" / Int32ul,
    "fired" / Int32ul,
    "short_len" / Int64ul,
    "call" / PaddedString(NAME_FIELD, "ascii"),
    "root" / PaddedString(PATH_FIELD, "utf8"),
    "path" / PaddedString(PATH_FIELD, "utf8"),
)
#: where :attr:`Injector.mode`, ``seen`` and ``fired`` sit in the block
MODE_AT, SEEN_AT, FIRED_AT = 4, 16, 20
CONTROL_FILE, LOG_FILE = "fault.ctl", "fault.log"


@dataclass(frozen=True)
class Fault:
    """Host call ``call`` fails with ``errno`` (or, with ``short``, transfers at most that many
    bytes) the ``nth`` time it is made on ``path`` (relative to the export; "" for any path in it)."""

    call: str
    errno: int = errno.EIO
    nth: int = 1
    path: str = ""
    short: int | None = None

    def __post_init__(self) -> None:
        from harness.fault.calls import CALLS

        kind = CALLS.get(self.call)
        if kind is None:
            raise HarnessMisuse(f"no host call {self.call!r} is wrapped; one of: {' '.join(CALLS)}")
        if self.nth < 1 or (self.short is None and self.errno <= 0):
            raise HarnessMisuse(f"{self}: nth counts from 1, and an errno is above 0")
        if self.short is not None and (self.short < 0 or not kind.transfers):
            raise HarnessMisuse(f"{self}: only a call that moves data can be cut short, by 0 bytes or more")
        if len(self.call) >= NAME_FIELD or len(self.path.encode()) >= PATH_FIELD // 2:
            raise HarnessMisuse(f"{self}: the call's name or the path is too long for the control block")

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno, str(self.errno))
        what = f"short={self.short}" if self.short is not None else f"errno={code}"
        where = f" path={self.path}" if self.path else ""
        return f"call={self.call} nth={self.nth} {what}{where}"

    @classmethod
    def parse(cls, text: str) -> Fault:
        """The fault :meth:`__str__` wrote (a reproducer's ``# fault:`` line)."""
        try:
            fields = dict(part.split("=", 1) for part in text.split())
            code = fields.get("errno", "EIO")
            number = int(code) if code.isdigit() else getattr(errno, code)
            short = int(fields["short"]) if "short" in fields else None
            return cls(fields["call"], number, int(fields.get("nth", "1")), fields.get("path", ""), short)
        except (KeyError, AttributeError, ValueError) as err:
            raise HarnessMisuse(f"not a fault: {text!r} (call=NAME nth=K errno=ENAME|short=BYTES [path=P])") from err


@dataclass(frozen=True)
class HostCall:
    """One host call QEMU made while the injector was armed: its thread, the call, its result and
    errno, its path relative to the export ("." for the export's root), and what the injector did
    ("", "injected" or "short")."""

    thread: int
    call: str
    result: int
    errno: int
    path: str
    done: str = ""

    def __str__(self) -> str:
        failed = f" {errno.errorcode.get(self.errno, self.errno)}" if self.errno else ""
        done = f" [{self.done}]" if self.done else ""
        return f"{self.call}({self.path}) = {self.result}{failed}{done}"


@dataclass
class Armed:
    """What :meth:`Injector.armed` saw: the host calls made, and how often the fault fired."""

    calls: list[HostCall] = field(default_factory=list)
    fired: int = 0


class Injector:
    """The control block of one QEMU process (see the module's docstring)."""

    def __init__(self, directory: Path, root: Path, block: mmap.mmap) -> None:
        self.directory, self.root, self._block = directory, root, block

    @classmethod
    def create(cls, directory: Path, root: Path) -> Injector:
        """The control block and log of a QEMU about to start in ``directory`` and export ``root``."""
        root = root.resolve()
        size = max(CONTROL.sizeof(), mmap.PAGESIZE)
        fd = os.open(directory / CONTROL_FILE, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
            block = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        (directory / LOG_FILE).touch()
        made = cls(directory, root, block)
        made._arm(None)
        made._set(MODE_AT, 0)
        return made

    def env(self, library: Path, base: dict[str, str]) -> dict[str, str]:
        """``base`` (QEMU's environment) and what it adds for the library to find this block. An
        ASan build wants its runtime first in the library list: the injector's comes first."""
        asan = base.get("ASAN_OPTIONS", "")
        return {**base, "LD_PRELOAD": str(library), "V9P_FAULT_CTL": str(self.directory / CONTROL_FILE),
                "V9P_FAULT_LOG": str(self.directory / LOG_FILE),
                "ASAN_OPTIONS": f"{asan}:verify_asan_link_order=0" if asan else "verify_asan_link_order=0"}  # fmt: skip

    @staticmethod
    def loaded_in(pid: int, library: Path) -> bool:
        """Whether the process ``pid`` has the library mapped (the dynamic loader only warns when
        a preload cannot be loaded: QEMU would run, and no call would ever be seen)."""
        try:
            return str(library) in Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return False

    @contextlib.contextmanager
    def armed(self, fault: Fault | None = None) -> Iterator[Armed]:
        """``fault`` armed (None: the calls only recorded) while the body runs; then disarmed, and
        the calls made meanwhile (and whether the fault fired) in what it yields."""
        log = self.directory / LOG_FILE
        start = log.stat().st_size
        self._arm(fault)
        seen = Armed()
        try:
            yield seen
        finally:
            self._set(MODE_AT, 0)
            seen.fired = struct.unpack_from("<I", self._block, FIRED_AT)[0]
            with log.open("rb") as lines:
                lines.seek(start)
                seen.calls = [self._parsed(line) for line in lines.read().decode(errors="replace").splitlines()]

    def _arm(self, fault: Fault | None) -> None:
        self._set(MODE_AT, 0)
        mode, aim = MODE_RECORD, {"err": 0, "nth": 0, "short_len": 0, "call": "", "path": ""}
        if fault is not None:
            mode |= MODE_SHORT if fault.short is not None else MODE_FAIL
            aim = {"err": fault.errno, "nth": fault.nth, "short_len": fault.short or 0, "call": fault.call,
                   "path": os.path.normpath(self.root / fault.path) if fault.path else ""}  # fmt: skip
        block = {"magic": MAGIC, "mode": 0, "seen": 0, "fired": 0, "root": str(self.root), **aim}
        self._block[: CONTROL.sizeof()] = CONTROL.build(block)
        self._set(MODE_AT, mode)  # last: the library reads the rest once it sees a mode

    def _set(self, offset: int, value: int) -> None:
        struct.pack_into("<I", self._block, offset, value)

    def _parsed(self, line: str) -> HostCall:
        thread, call, result, number, path, done = line.split("\t", 5)
        relative = os.path.relpath(path, self.root) if path.startswith(str(self.root)) else path
        return HostCall(int(thread), call, int(result), int(number), relative, done)

    def close(self) -> None:
        self._block.close()
