"""What a QEMU under test is started as: typed configuration (the backend, resources, the machine
and its argv), the guest-memory path (shared RAM or qtest) this host can give, and the names
both sides of a machine agree on (device id, sockets, the RAM backend)."""

from __future__ import annotations

import errno
import functools
import mmap
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from harness.errors import HarnessMisuse

SecurityModel = Literal["passthrough", "mapped-xattr", "mapped-file", "none"]
#: every security model QEMU's local backend has
SECURITY_MODELS: tuple[SecurityModel, ...] = get_args(SecurityModel)
Accel = Literal["qtest", "tcg"]
#: the qdev id of the virtio-9p device (for device_del)
DEVICE_ID = "v9p0"
#: the memory backend of shared guest RAM
RAM_ID = "v9p-ram"

GuestMemoryMode = Literal["qtest", "shared"]


@functools.cache
def shared_ram_problem() -> str | None:
    """Why guest RAM cannot be shared with QEMU on this host, or None: a memfd of one page,
    sized and mapped, is tried once per process. The answer never changes while the process runs."""
    if platform.machine() not in ("x86_64", "AMD64"):  # the ordering SharedRam relies on (x86 TSO)
        return f"shared guest RAM is implemented for x86-64 hosts (its memory ordering), not {platform.machine()}"
    try:
        fd = os.memfd_create("v9p-probe")
    except (OSError, AttributeError) as err:
        return f"memfd_create: {err}"
    try:
        os.ftruncate(fd, mmap.PAGESIZE)
        mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE).close()
    except OSError as err:
        return f"a shared mapping of a memfd: {err}"
    finally:
        os.close(fd)
    return None


#: The guest-memory path asked for when nobody says (``python -m harness --guest-memory`` sets it,
#: and the pytest option's default reads it): "shared" or "qtest".
GUEST_MEMORY_ENV = "V9P_GUEST_MEMORY"


def wanted_guest_memory() -> GuestMemoryMode:
    """$V9P_GUEST_MEMORY, or "shared"."""
    wanted = os.environ.get(GUEST_MEMORY_ENV, "shared")
    if wanted not in ("shared", "qtest"):
        raise HarnessMisuse(f"${GUEST_MEMORY_ENV} is {wanted!r}: shared or qtest")
    return wanted  # type: ignore[return-value]


def default_guest_memory() -> GuestMemoryMode:
    """The path a machine gets unless told: the one asked for, where this host can give it."""
    return guest_memory(wanted_guest_memory())[0]


def guest_memory(wanted: GuestMemoryMode) -> tuple[GuestMemoryMode, str]:
    """The guest-memory path to use when ``wanted`` is asked for, and a note when it is not the
    one asked for (shared RAM unavailable here: the qtest path, said once by the caller)."""
    problem = shared_ram_problem() if wanted == "shared" else None
    if problem is None:
        return wanted, ""
    return "qtest", f"guest memory: qtest, not shared ({problem})"


@dataclass(frozen=True)
class SynthFs:
    """QEMU's synthetic backend; under the qtest accelerator it holds the qtest test tree."""

    extra: tuple[tuple[str, str], ...] = ()

    kind = "synth"

    def fsdev(self, fsdev_id: str) -> list[tuple[str, str]]:
        return [("id", fsdev_id), *self.extra]


#: the local backend's ways with an export spanning several host devices (fsdev multidevs=)
Multidevs = Literal["warn", "remap", "forbid"]


@dataclass(frozen=True)
class LocalFs:
    """The passthrough-to-host backend, exporting ``path``."""

    path: Path
    security_model: SecurityModel = "mapped-xattr"
    multidevs: Multidevs | None = None
    readonly: bool = False
    extra: tuple[tuple[str, str], ...] = ()

    kind = "local"

    def host_problem(self) -> str | None:
        """Why the host cannot hold this export, or None: mapped-xattr keeps mode and owner in user
        xattrs, which the file system under ``path`` must take (QEMU would start, then refuse each
        request that sets a mode or an owner with EOPNOTSUPP)."""
        if self.security_model != "mapped-xattr" or (problem := user_xattr_problem(self.path)) is None:
            return None
        return f"security_model=mapped-xattr keeps mode and owner in user xattrs, and {problem}"

    def fsdev(self, fsdev_id: str) -> list[tuple[str, str]]:
        opts = [("id", fsdev_id), ("path", str(self.path)), ("security_model", self.security_model)]
        if self.multidevs:
            opts.append(("multidevs", self.multidevs))
        if self.readonly:
            opts.append(("readonly", "on"))
        return opts + list(self.extra)


FsConfig = SynthFs | LocalFs


#: st_dev -> why a probe file there took no user xattr (its strerror), or None: one probe per file
#: system for the process's life
_NO_USER_XATTRS: dict[int, str | None] = {}


def user_xattr_problem(directory: Path) -> str | None:
    """Why files under ``directory`` cannot carry user xattrs, which the local backend's
    mapped-xattr model keeps a file's mode and owner in (ramfs has none, tmpfs none before Linux
    6.6), or None. A probe file's setxattr(), asked once per file system; an error other than "not
    supported" (a directory missing or not writable) is not this question's and answers None: QEMU
    says what it makes of that."""
    try:
        device = os.stat(directory).st_dev
    except OSError:
        return None
    if device not in _NO_USER_XATTRS:
        _NO_USER_XATTRS[device] = _probe_user_xattr(directory)
    why = _NO_USER_XATTRS[device]
    return None if why is None else f"the file system under {directory} takes no user xattrs ({why})"


def _probe_user_xattr(directory: Path) -> str | None:
    """The strerror of a probe file's setxattr() of a user xattr in ``directory`` when the file
    system does not support it, else None."""
    try:
        with tempfile.NamedTemporaryFile(prefix=".v9p-xattr-probe-", dir=directory) as probe:
            os.setxattr(probe.name, "user.v9p-probe", b"1")
    except OSError as err:
        if err.errno == errno.EOPNOTSUPP:
            return err.strerror
    return None


@dataclass(frozen=True)
class Resources:
    """A QEMU process's footprint at one moment (:meth:`Machine.resources`)."""

    rss_kib: int
    hwm_kib: int
    fds: int
    nofile: int
    #: a sanitizer that pads every allocation runs in it (ASan, TSan: its runtime is mapped)
    sanitized: bool = False
    #: ThreadSanitizer runs in it: its history per thread and per coroutine (each a TSan fiber)
    #: is megabytes that grow with what QEMU does, so QEMU's memory then measures TSan
    tsan: bool = False


@dataclass(frozen=True)
class MachineConfig:
    """Everything that goes into QEMU's argv.  Equal configs can share a QEMU process."""

    binary: Path
    fs: FsConfig = field(default_factory=SynthFs)
    transport: Literal["modern", "legacy"] = "modern"
    accel: Accel = "qtest"
    mount_tag: str = "qtest"
    machine_type: str = "pc"
    ram_mib: int = 128
    pci_addr: str = "04.0"
    ioeventfd: bool | None = None
    firmware_dirs: tuple[Path, ...] = (Path("/usr/share/seabios"), Path("/usr/share/qemu"))
    extra_args: tuple[str, ...] = ()
    #: QEMU's RLIMIT_NOFILE (soft and hard), None to inherit ours: 9pfs sizes its fd reclaim from it
    nofile: int | None = None
    #: "shared": guest RAM is a memfd the harness maps too (Machine.guest_ram); "qtest": every guest
    #: memory access goes over the qtest socket. Callers choose with :func:`guest_memory`.
    guest_memory: GuestMemoryMode = field(default_factory=default_guest_memory)
    #: the fault injector's library (harness/fault), preloaded into QEMU; None: QEMU runs as built
    injector: Path | None = None

    def device_opts(self) -> list[tuple[str, str]]:
        opts = [("id", DEVICE_ID), ("fsdev", "fsdev0"), ("mount_tag", self.mount_tag), ("addr", self.pci_addr)]
        if self.transport == "legacy":
            opts.append(("disable-modern", "on"))
        if self.ioeventfd is not None:
            opts.append(("ioeventfd", "on" if self.ioeventfd else "off"))
        return opts

    def argv(self, qtest_socket: Path, qmp_socket: Path, ram_fd: int | None = None) -> list[str]:
        """``ram_fd``: with guest_memory "shared", the memfd QEMU inherits as its RAM (opened again
        through /proc/self/fd: a memory-backend-file every QEMU from 7.2 on takes, and no file
        anywhere that could outlive the two processes)."""
        argv = [str(self.binary)]
        for directory in self.firmware_dirs:
            argv += ["-L", str(directory)]
        machine = self.machine_type
        if self.guest_memory == "shared":
            fd = "N" if ram_fd is None else str(ram_fd)
            argv += [
                "-object",
                f"memory-backend-file,id={RAM_ID},size={self.ram_mib}M,mem-path=/proc/self/fd/{fd},share=on",
            ]
            machine += f",memory-backend={RAM_ID}"
        argv += [
            "-machine", machine,
            "-m", f"{self.ram_mib}M",
            "-display", "none",
            "-nodefaults",
            "-qtest", f"unix:{qtest_socket}",
            "-qtest-log", "none",  # not "/dev/null": QEMU would still format every command and reply
            # QMP as a client of our socket; not -chardev + -mon, which QEMU 11.1 deprecates
            "-qmp", f"unix:{qmp_socket}",
            "-fsdev", driver_options(self.fs.kind, self.fs.fsdev("fsdev0")),
            "-device", driver_options("virtio-9p-pci", self.device_opts()),
        ]  # fmt: skip
        argv += ["-accel", "qtest"] if self.accel == "qtest" else ["-accel", "tcg", "-S"]
        return argv + list(self.extra_args)


def driver_options(driver: str, opts: list[tuple[str, str]]) -> str:
    """QEMU's ``driver,key=value,...`` syntax; a comma inside a value is doubled."""
    return ",".join([driver, *(f"{key}={value.replace(',', ',,')}" for key, value in opts)])
