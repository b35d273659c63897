"""Finding and probing the QEMU under test (building it: :mod:`harness.qemu.build`).

Lookup order (as QEMU's own tests): an explicit ``--qemu-binary``, then ``QTEST_QEMU_BINARY``,
then the harness's own build of its default origin in the cache
(``${XDG_CACHE_HOME:-~/.cache}/virtio9p-harness``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from harness.errors import ProvisionError
from harness.qemu import build as qemu_build
from harness.qemu import versions
from harness.qemu.build import DEFAULT_ORIGIN

if TYPE_CHECKING:  # imported where used: the xdist controller prints the header with this module
    # alone, and machine (qtest, sockets) would add ~25 ms before it starts its workers
    from harness.qemu.config import FsConfig, MachineConfig

PROJECT = "virtio9p-harness"
FIRMWARE_DIRS = (Path("/usr/share/seabios"), Path("/usr/share/qemu"))
ENV_BINARY = "QTEST_QEMU_BINARY"
#: Bumped when :class:`Probe` changes, so that older cached answers are not read.
PROBE_FORMAT = 1


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / PROJECT


#: Directories to look in for third-party sources the harness builds but does not ship (pjdfstest's
#: tarball), ``os.pathsep``-separated, before the cache's ``third_party/``. This project's CI sets
#: it to the ``shared/third_party`` beside its checkout (``.ci/run``).
THIRD_PARTY_ENV = "V9P_THIRD_PARTY"


def third_party_dirs() -> list[Path]:
    """Where third-party sources are looked for, in order: ``$V9P_THIRD_PARTY``'s entries, then
    the cache's ``third_party/``."""
    named = [Path(entry) for entry in os.environ.get(THIRD_PARTY_ENV, "").split(os.pathsep) if entry]
    return [*named, cache_root() / "third_party"]


# -- finding --------------------------------------------------------------------------------------


def cached_build(root: Path | None = None, origin: str = DEFAULT_ORIGIN, variant: str = "") -> Path | None:
    """The cached build of ``origin`` (by default the one ``make qemu`` makes), or None."""
    found = qemu_build.find_build(qemu_build.origin_of(origin), root or cache_root(), variant)
    return found.binary if found else None


def find_qemu(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The QEMU binary to test and where the choice came from."""
    for value, source in ((explicit, "--qemu-binary"), (os.environ.get(ENV_BINARY), ENV_BINARY)):
        if value:
            path = Path(value)
            resolved = path if path.is_file() else shutil.which(str(value))
            if not resolved:
                raise ProvisionError(f"{source} names {value}, which is not an executable file")
            # absolute: QEMU is started in a directory of its own (build/qemu-system-x86_64 would not be found)
            return Path(resolved).absolute(), source
    built = cached_build()
    if built is not None:
        return built, "cache"
    others = qemu_build.builds(cache_root())
    listed = "".join(f"\n  {b.binary}  ({b.origin}, QEMU {b.version})" for b in others)
    raise ProvisionError(
        f"no QEMU binary to test: the default build ({DEFAULT_ORIGIN}) is not in the cache. Build it with "
        "`make qemu` (python -m harness qemu build, 3-9 minutes), or point "
        f"{ENV_BINARY} / --qemu-binary at your own build" + (f"; cached builds:{listed}" if others else ".")
    )


# -- probing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What a binary can do, found by running it."""

    binary: str
    #: its number, with what the harness knows of its source
    version: versions.Version
    qtest_accel: bool
    qtest_option: bool
    virtio_9p_pci: bool
    #: The fsdev option that caps open xattr fids (upstream 2026; QEMU 7.2 lacks it).
    max_xattr: bool = False

    @property
    def usable(self) -> bool:
        return self.qtest_option and self.virtio_9p_pci

    @property
    def accel(self) -> Literal["qtest", "tcg"]:
        """``qtest``, or ``tcg`` (vCPUs stopped with -S) in degraded mode."""
        return "qtest" if self.qtest_accel else "tcg"

    @property
    def synth_tree(self) -> bool:
        """QEMU builds the synth test tree only under the qtest accelerator."""
        return self.qtest_accel

    def require_usable(self) -> None:
        if not self.usable:
            missing = [w for w, ok in (("-qtest", self.qtest_option), ("virtio-9p-pci", self.virtio_9p_pci)) if not ok]
            raise ProvisionError(
                f"{self.binary} cannot be tested: it lacks {' and '.join(missing)}. "
                "Build a full one with `make qemu` (python -m harness qemu build)."
            )


def _run(argv: list[str], stdin: str = "", timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """A short QEMU run; it dies with us like any other QEMU (a probe waiting for "quit" on its
    monitor would otherwise outlive a harness killed mid-probe)."""
    from harness.qemu import process

    parent = os.getpid()
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=lambda: process.die_with_parent(parent),
    )


def probe(binary: Path) -> Probe:
    """Ask ``binary`` for its version, devices, and whether ``-accel qtest`` and ``max_xattr`` work.

    The five QEMU runs go in parallel (about 15 ms each).
    """
    import concurrent.futures  # here, not at the top: most processes answer from the probe cache

    base = [str(binary), "-machine", "none", "-display", "none", "-nodefaults", "-monitor", "stdio"]
    fsdev = ["-fsdev", "local,id=probe,path=/,security_model=none,max_xattr=1"]
    runs = {
        "version": ([str(binary), "--version"], ""),
        "devices": ([str(binary), "-machine", "none", "-device", "help"], ""),
        "qtest": ([*base, "-accel", "qtest"], "quit\n"),
        "option": ([*base, "-qtest", "/dev/null", "-accel", "tcg"], "quit\n"),
        "xattr_qtest": ([*base, "-accel", "qtest", *fsdev], "quit\n"),
    }
    try:
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            done = dict(zip(runs, pool.map(lambda run: _run(*run), runs.values()), strict=True))
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ProvisionError(f"cannot run {binary}: {err}") from err
    said = (done["version"].stdout or done["version"].stderr).strip()
    match = re.search(r"^QEMU emulator version (\d+\.\d+\.\d+)", done["version"].stdout, re.MULTILINE)
    if done["version"].returncode != 0 or not match:
        first = said.splitlines()[0] if said else "nothing"
        raise ProvisionError(
            f'{binary} is not QEMU: `--version` says {first!r}, not "QEMU emulator version ..."; '
            "name a qemu-system-x86_64 (python -m harness qemu path shows the one the harness would use)"
        )
    qtest_accel = done["qtest"].returncode == 0
    max_xattr = done["xattr_qtest"].returncode == 0
    if not qtest_accel:  # degraded binaries answer the max_xattr question under tcg
        max_xattr = _run([*base, "-accel", "tcg", *fsdev], "quit\n").returncode == 0
    return Probe(
        binary=str(binary),
        version=_version(match.group(1).rstrip(","), binary),
        qtest_accel=qtest_accel,
        qtest_option=done["option"].returncode == 0 or qtest_accel,
        virtio_9p_pci='"virtio-9p-pci"' in done["devices"].stdout,
        max_xattr=max_xattr,
    )


def _version(number: str, binary: Path) -> versions.Version:
    """``binary``'s version number with what the harness knows of its source (read anew by every
    process, cached answers too: not part of the probe cache, which does not see a stamp change)."""
    return versions.Version(number, qemu_build.history_of(binary))


def probe_cached(binary: Path, root: Path | None = None) -> Probe:
    """:func:`probe`, answered from the cache while ``binary`` is the same file.

    Every pytest process (each xdist worker too) needs the answers, and the five QEMU runs cost
    ~40 ms of CPU. The key is the file's identity (device, inode, size, mtime, ctime): a rebuilt,
    replaced or touched binary is probed again. A cache that cannot be read or written is no
    error; the binary is then probed every time.
    """
    info = binary.stat()
    identity = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    path = (
        (root or cache_root()) / "probes" / (hashlib.sha256(str(binary.resolve()).encode()).hexdigest()[:16] + ".json")
    )
    with contextlib.suppress(OSError, ValueError, TypeError):
        kept = json.loads(path.read_text())
        if kept["format"] == PROBE_FORMAT and kept["identity"] == identity:
            return Probe(**(kept["probe"] | {"version": _version(kept["probe"]["version"], binary)}))
    found = probe(binary)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"format": PROBE_FORMAT, "identity": identity, "probe": asdict(found)}
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            json.dump(record, out)
        os.replace(out.name, path)  # atomic: a concurrent worker reads the old file or the new one
    return found


def usable_config(
    binary: Path,
    fs: FsConfig | None = None,
    transport: str = "modern",
    ram_mib: int = 128,
    guest_memory: str | None = None,
) -> tuple[MachineConfig, Probe]:
    """Probe ``binary`` (cached), refuse it if it cannot be tested, and configure a machine on it
    (with the qtest accelerator, or degraded ``-accel tcg -S``; guest RAM shared where the host
    allows, said once on stderr where it does not)."""
    from harness.qemu import config as qemu_config

    found = probe_cached(binary)
    found.require_usable()
    mode, note = qemu_config.guest_memory(guest_memory or qemu_config.wanted_guest_memory())  # type: ignore[arg-type]
    if note:
        _say_once(note)
    config = qemu_config.MachineConfig(
        binary=binary,
        fs=fs or qemu_config.SynthFs(),
        transport=transport,  # type: ignore[arg-type]
        accel=found.accel,
        ram_mib=ram_mib,
        guest_memory=mode,
    )
    return config, found


@functools.cache
def _say_once(note: str) -> None:
    print(note, file=sys.stderr)


# -- building (harness.qemu.build) -----------------------------------------------------------------


def build(
    origin: str = DEFAULT_ORIGIN, *, with_qos_test: bool = True, root: Path | None = None, variant: str = ""
) -> Path:
    """Build (or find already built) a qtest-capable QEMU of ``origin``; returns the binary."""
    where = root or cache_root()
    return qemu_build.build(qemu_build.origin_of(origin), where, with_qos_test=with_qos_test, variant=variant).binary


def qos_test_for(binary: Path) -> Path | None:
    """QEMU's own C qos-test built beside ``binary`` by ``qemu build``."""
    candidate = binary.parent / "qos-test"
    return candidate if candidate.is_file() else None
