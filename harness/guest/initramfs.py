"""The guest's initramfs: busybox (Debian's busybox-static, downloaded and unpacked), the host's
own programs the guest family runs (git, sqlite3, python3, GNU tar and cp, the xattr and ACL
tools) with every shared library they load, the kernel's 9p and virtio modules, and ``/init``.

Why not the host's root over a second 9p export (virtme-ng's way): every program the guest runs
would then be read through the server under test, whose bugs would break the tools before the
case, and QEMU's v9fs trace would mix the tools' requests with the case's. Why not virtme-ng
itself: it wants the kernel's modules under the host's /lib/modules (an install) and writes its
own QEMU command line, where the export must be configured as the cases configure it.

The archive is ``cpio -H newc`` (the kernel's initramfs format), written here with construct.
Built once per kernel and program set into the cache; each run appends a small archive of its
own (the script and the mounts), which the kernel unpacks over the first."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import construct as c

from harness.errors import ProvisionError
from harness.guest.kernel import Kernel, module_bytes
from harness.qemu.shell import locked, missing_packages, sh

#: the host programs put in the guest, by the Debian package that brings each
PROGRAMS = {
    "git": "git", "sqlite3": "sqlite3", "python3": "python3", "tar": "tar", "cp": "coreutils",
    "getfattr": "attr", "setfattr": "attr", "getfacl": "acl", "setfacl": "acl", "flock": "util-linux",
    "bash": "bash", "find": "findutils", "stat": "coreutils", "ls": "coreutils", "sort": "coreutils",
    "timeout": "coreutils", "date": "coreutils",
}  # fmt: skip
#: python3's library, less what no guest program imports (tests, GUIs, installers): 20 MB less
PYTHON_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "config-3")
#: the host's program directories, in the order a program is looked up (not $PATH: a pyenv shim
#: or a user's ~/bin would put another program in the guest)
HOST_PATH = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
#: bumped when the layout or /init changes, so that a cached archive is built again
FORMAT = 1

_hex8 = c.ExprAdapter(c.Bytes(8), lambda raw, ctx: int(raw, 16), lambda value, ctx: b"%08x" % value)
#: one newc entry's header; the name (NUL-terminated) and the data follow, each padded to 4 bytes
NEWC = c.Struct(
    "magic" / c.Const(b"070701"),
    "ino" / _hex8, "mode" / _hex8, "uid" / _hex8, "gid" / _hex8, "nlink" / _hex8, "mtime" / _hex8,
    "filesize" / _hex8, "devmajor" / _hex8, "devminor" / _hex8, "rdevmajor" / _hex8, "rdevminor" / _hex8,
    "namesize" / _hex8, "check" / _hex8,
)  # fmt: skip


class Archive:
    """A newc archive being written: directories made on the way to each entry."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.names: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        name = name.strip("/")
        if name in self.names:
            return
        self.names.add(name)
        encoded = name.encode() + b"\0"
        header = NEWC.build(dict(
            ino=len(self.names), mode=mode, uid=0, gid=0, nlink=2 if stat.S_ISDIR(mode) else 1, mtime=0,
            filesize=len(data), devmajor=0, devminor=0, rdevmajor=0, rdevminor=0, namesize=len(encoded), check=0,
        ))  # fmt: skip
        head = header + encoded
        self.parts += [head, b"\0" * (-len(head) % 4), data, b"\0" * (-len(data) % 4)]

    def directory(self, name: str) -> None:
        parts = name.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            self._entry("/".join(parts[:depth]), stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self.directory(os.path.dirname(name.strip("/")) or ".")
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self.directory(os.path.dirname(name.strip("/")) or ".")
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def host_file(self, path: Path, name: str | None = None) -> None:
        """A host file (a symlink kept as one, its target added too) at its own path."""
        name = name or str(path)
        if path.is_symlink():
            target = os.readlink(path)
            self.symlink(name, target)
            self.host_file(path.parent / target if not os.path.isabs(target) else Path(target))
            return
        self.file(name, path.read_bytes(), stat.S_IMODE(path.stat().st_mode))

    def tree(self, root: Path, skip: Iterable[str] = ()) -> None:
        skipped = tuple(skip)
        for directory, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(skipped)]
            self.directory(directory)
            for name in files:
                self.host_file(Path(directory) / name)

    def bytes(self) -> bytes:
        trailer = Archive()
        trailer._entry("TRAILER!!!", 0)
        return b"".join(self.parts + trailer.parts)


def libraries(binary: Path) -> list[Path]:
    """The shared libraries ``binary`` loads (ldd), the dynamic loader too."""
    found = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    paths = []
    for line in found.stdout.splitlines():
        words = line.split()
        for word in words:
            if word.startswith("/"):
                paths.append(Path(word))
                break
    return paths


def host_program(name: str) -> Path:
    for directory in HOST_PATH:
        path = Path(directory) / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ProvisionError(f"{name}: not in {', '.join(HOST_PATH)} (Debian package {PROGRAMS.get(name, '?')})")


def ensure_programs(log: Path) -> None:
    """The Debian packages of :data:`PROGRAMS`, installed where missing (as root)."""
    missing = missing_packages(sorted(set(PROGRAMS.values())))
    if not missing:
        return
    if os.geteuid() != 0:
        raise ProvisionError(f"the guest's programs need {' '.join(missing)}: install them, or run as root")
    sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], log)


def busybox(cache: Path, log: Path) -> Path:
    """Debian's static busybox, downloaded and unpacked into the cache once."""
    directory = cache / "guest-userland" / "busybox-static"
    binary = directory / "root" / "bin" / "busybox"
    if not binary.is_file():
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        sh(["apt-get", "download", "busybox-static"], log, cwd=directory)
        sh(["dpkg-deb", "-x", str(next(directory.glob("*.deb"))), str(directory / "root")], log)
    return binary


INIT = Path(__file__).with_name("init.sh")


@dataclass(frozen=True)
class Initramfs:
    path: Path
    #: the modules /init loads, in order (their names under /lib/modules)
    modules: tuple[str, ...]


def build(kernel: Kernel, cache: Path) -> Initramfs:
    """The initramfs for ``kernel``, from the cache or made now (~2 s)."""
    root = cache / "guest-userland"
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    with locked(root):
        ensure_programs(log)
        box = busybox(cache, log)
        programs = [host_program(name) for name in PROGRAMS]
        order = kernel.load_order()
        key = hashlib.sha256(
            repr((FORMAT, INIT.read_bytes(), kernel.release, str(kernel.modules), sorted(PROGRAMS),
                  [(p, p.stat().st_mtime_ns) for p in programs])).encode()
        ).hexdigest()[:16]  # fmt: skip
        path = root / f"initramfs-{kernel.release}-{key}.cpio"
        names = tuple(p.name.split(".ko")[0] + ".ko" for p in order)
        if path.is_file():
            return Initramfs(path, names)
        archive = Archive()
        for name in ("proc", "sys", "dev", "tmp", "run", "mnt", "root", "etc", "var/tmp", "usr/bin", "usr/sbin"):
            archive.directory(name)
        archive.file("bin/busybox", box.read_bytes(), 0o755)
        applets = subprocess.run([str(box), "--list"], capture_output=True, text=True, check=True).stdout.split()
        for program in programs:
            archive.host_file(program)
            for library in libraries(program):
                archive.host_file(library)
        for applet in applets:  # the host's program where there is one (GNU tar, cp), busybox's else
            if f"usr/bin/{applet}" not in archive.names and f"bin/{applet}" not in archive.names:
                archive.symlink(f"bin/{applet}", "busybox")
        python = host_program("python3").resolve()
        library = Path("/usr/lib") / python.name
        archive.tree(library, skip=PYTHON_SKIP)
        for extension in (library / "lib-dynload").glob("*.so"):
            for needed in libraries(extension):
                archive.host_file(needed)
        templates = Path("/usr/share/git-core/templates")
        if templates.is_dir():
            archive.tree(templates)
        for module, name in zip(order, names, strict=True):
            archive.file(f"lib/modules/{name}", module_bytes(module))
        archive.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
                     b"user:x:1000:1000:user:/tmp:/bin/sh\n")  # fmt: skip
        archive.file("etc/group", b"root:x:0:\nnogroup:x:65534:\nuser:x:1000:\n")
        archive.file("etc/v9p-modules", "".join(f"{name}\n" for name in names).encode())
        archive.file("init", INIT.read_bytes(), 0o755)
        partial = path.with_suffix(".partial")
        partial.write_bytes(archive.bytes())
        partial.rename(path)
        for old in root.glob(f"initramfs-{kernel.release}-*.cpio"):
            if old != path:
                old.unlink()
        return Initramfs(path, names)


def run_archive(files: dict[str, bytes]) -> bytes:
    """The per-run archive appended to the cached one (the kernel unpacks both, in order)."""
    archive = Archive()
    for name, data in files.items():
        archive.file(name, data, 0o755)
    return archive.bytes()
