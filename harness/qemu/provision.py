"""Finding, probing and building the QEMU under test.

Lookup order (as QEMU's own tests): an explicit ``--qemu-binary``, then ``QTEST_QEMU_BINARY``,
then the harness's own build in the cache (``${XDG_CACHE_HOME:-~/.cache}/virtio9p-harness``).

Debian's packaged ``qemu-system-x86`` has no qtest accelerator, so :func:`build` makes one from
Debian's own source package: deb-src entries, build dependencies, ``apt-get source``, a
configure with TCG off (which is what makes it take two minutes), ``ninja``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from harness.errors import ProvisionError
from harness.qemu.machine import FsConfig, MachineConfig, SynthFs, die_with_parent

PROJECT = "virtio9p-harness"
BINARY_NAME = "qemu-system-x86_64"
FIRMWARE_DIRS = (Path("/usr/share/seabios"), Path("/usr/share/qemu"))
BUILD_DEPS = (
    "build-essential", "ninja-build", "meson", "libglib2.0-dev", "libpixman-1-dev", "libcap-ng-dev",
    "libattr1-dev", "pkg-config", "python3-venv", "flex", "bison", "libfdt-dev", "zlib1g-dev", "dpkg-dev",
)  # fmt: skip
RUNTIME_DEPS = ("seabios", "qemu-system-data", "ipxe-qemu")  # ipxe-qemu: NIC ROMs for qos-test's machine
#: TCG off is what makes the build take two minutes; the qtest accelerator does not need it.
CONFIGURE = (
    "--target-list=x86_64-softmmu", "--disable-tcg", "--enable-kvm", "--enable-virtfs",
    "--without-default-features", "--enable-attr", "--enable-cap-ng", "--disable-docs", "--disable-tools",
    "--disable-werror",
)  # fmt: skip
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
SRC_SOURCES = Path(f"/etc/apt/sources.list.d/{PROJECT}-src.sources")
STAMP = "build.json"
ENV_BINARY = "QTEST_QEMU_BINARY"
#: Bumped when :class:`Probe` changes, so that older cached answers are not read.
PROBE_FORMAT = 1


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / PROJECT


# -- finding --------------------------------------------------------------------------------------


def cached_build(root: Path | None = None) -> Path | None:
    """The newest completed build in the cache, or None."""
    root = root or cache_root()
    stamps = sorted(root.glob(f"qemu-*/{STAMP}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stamp in stamps:
        binary = stamp.parent / BINARY_NAME
        if binary.is_file():
            return binary
    return None


def find_qemu(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The QEMU binary to test and where the choice came from."""
    for value, source in ((explicit, "--qemu-binary"), (os.environ.get(ENV_BINARY), ENV_BINARY)):
        if value:
            path = Path(value)
            resolved = path if path.is_file() else shutil.which(str(value))
            if not resolved:
                raise ProvisionError(f"{source} names {value}, which is not an executable file")
            return Path(resolved), source
    built = cached_build()
    if built is not None:
        return built, "cache"
    raise ProvisionError(
        "no QEMU binary to test. Build a qtest-capable one with `make qemu` "
        "(or `python -m harness qemu build`, about 2 minutes), or point "
        f"{ENV_BINARY} / --qemu-binary at your own build."
    )


# -- probing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What a binary can do, found by running it."""

    binary: str
    version: str
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
    parent = os.getpid()
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=lambda: die_with_parent(parent),
    )


def probe(binary: Path) -> Probe:
    """Ask ``binary`` for its version, devices, and whether ``-accel qtest`` and ``max_xattr`` work.

    The five QEMU runs go in parallel (about 15 ms each).
    """
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
        with ThreadPoolExecutor(len(runs)) as pool:
            done = dict(zip(runs, pool.map(lambda run: _run(*run), runs.values()), strict=True))
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ProvisionError(f"cannot run {binary}: {err}") from err
    match = re.search(r"version (\S+)", done["version"].stdout)
    if done["version"].returncode != 0 or not match:
        raise ProvisionError(f"{binary} --version failed: {done['version'].stderr.strip() or done['version'].stdout}")
    qtest_accel = done["qtest"].returncode == 0
    max_xattr = done["xattr_qtest"].returncode == 0
    if not qtest_accel:  # degraded binaries answer the max_xattr question under tcg
        max_xattr = _run([*base, "-accel", "tcg", *fsdev], "quit\n").returncode == 0
    return Probe(
        binary=str(binary),
        version=match.group(1).rstrip(","),
        qtest_accel=qtest_accel,
        qtest_option=done["option"].returncode == 0 or qtest_accel,
        virtio_9p_pci='"virtio-9p-pci"' in done["devices"].stdout,
        max_xattr=max_xattr,
    )


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
            return Probe(**kept["probe"])
    found = probe(binary)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"format": PROBE_FORMAT, "identity": identity, "probe": asdict(found)}
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            json.dump(record, out)
        os.replace(out.name, path)  # atomic: a concurrent worker reads the old file or the new one
    return found


def usable_config(
    binary: Path, fs: FsConfig | None = None, transport: str = "modern", ram_mib: int = 128
) -> tuple[MachineConfig, Probe]:
    """Probe ``binary`` (cached), refuse it if it cannot be tested, and configure a machine on it
    (with the qtest accelerator, or degraded ``-accel tcg -S``)."""
    found = probe_cached(binary)
    found.require_usable()
    config = MachineConfig(
        binary=binary,
        fs=fs or SynthFs(),
        transport=transport,  # type: ignore[arg-type]
        accel=found.accel,
        ram_mib=ram_mib,
    )
    return config, found


# -- building -------------------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"[qemu build] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _sh(argv: list[str], log: Path, cwd: Path | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        result = subprocess.run(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )  # fmt: skip
    if result.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise ProvisionError(f"`{' '.join(argv)}` failed with status {result.returncode}; log {log}:\n{tail}")


def _missing_packages(packages: tuple[str, ...] | list[str]) -> list[str]:
    query = _run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *packages])
    installed = {line.split()[0] for line in query.stdout.splitlines() if line.split()[1:2] == ["ii"]}
    return [p for p in packages if p not in installed]


def _ensure_packages(log: Path) -> None:
    missing = _missing_packages([*BUILD_DEPS, *RUNTIME_DEPS])
    sources_missing = not SRC_SOURCES.exists() and "deb-src" not in _all_sources()
    if not missing and not sources_missing:
        say("build dependencies and deb-src entries present")
        return
    if os.geteuid() != 0:
        raise ProvisionError(
            "building QEMU needs root for apt-get (missing: "
            f"{', '.join(missing) or 'deb-src entries'}); run `make qemu` as root or install them yourself"
        )
    if sources_missing:
        if not DEBIAN_SOURCES.exists():
            raise ProvisionError(f"{DEBIAN_SOURCES} not found: add deb-src entries for Debian by hand")
        text = DEBIAN_SOURCES.read_text()
        SRC_SOURCES.write_text(re.sub(r"^Types:\s*deb\s*$", "Types: deb-src", text, flags=re.MULTILINE))
        say(f"wrote {SRC_SOURCES}")
    say("apt-get update")
    _sh(["apt-get", "update", "-q"], log)
    if missing:
        say(f"installing {len(missing)} packages: {' '.join(missing)}")
        _sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], log)


def _all_sources() -> str:
    texts = []
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        with contextlib.suppress(OSError):
            texts.append(path.read_text())
    return "\n".join(texts)


def _ninja(build_dir: Path, targets: list[str], log: Path) -> None:
    """Run ninja, printing its progress every few seconds."""
    with open(log, "a") as out:
        proc = subprocess.Popen(["ninja", *targets], cwd=build_dir, stdout=subprocess.PIPE, stderr=out, text=True)
        assert proc.stdout is not None
        last = 0.0
        for line in proc.stdout:
            out.write(line)
            if (step := re.match(r"\[(\d+)/(\d+)\]", line)) and time.monotonic() - last > 5:
                say(f"compiling {step.group(1)}/{step.group(2)}")
                last = time.monotonic()
        status = proc.wait()
    if status != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise ProvisionError(f"ninja {' '.join(targets)} failed; log {log}:\n{tail}")


def build(*, with_qos_test: bool = False, root: Path | None = None) -> Path:
    """Build (or find already built) a qtest-capable QEMU; returns the binary's path."""
    root = root or cache_root()
    with _locked(root):
        done = cached_build(root)
        if done is not None and (not with_qos_test or (done.parent / "qos-test").is_file()):
            return done
        if done is not None:
            return _add_qos_test(done.parent)
        return _build_fresh(root, with_qos_test)


def _build_fresh(root: Path, with_qos_test: bool) -> Path:
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    log = work / "build.log"
    say(f"building a qtest-capable QEMU from Debian's source package in {work} (log: {log})")
    try:
        _ensure_packages(log)
        say("apt-get source qemu")
        _sh(["apt-get", "source", "--download-only", "-q", "qemu"], log, cwd=work)
        dsc = next(work.glob("qemu_*.dsc"))
        _sh(["dpkg-source", "-x", str(dsc), "src"], log, cwd=work)
        version = (work / "src" / "VERSION").read_text().strip()
        (work / "src" / "build").mkdir()
        say(f"configure (QEMU {version}, TCG off, virtfs on)")
        _sh(["../configure", *CONFIGURE], log, cwd=work / "src" / "build")
        targets = [BINARY_NAME] + (["tests/qtest/qos-test"] if with_qos_test else [])
        _ninja(work / "src" / "build", targets, log)
        for name in (p.name for p in work.glob("qemu_*")):
            (work / name).unlink()
        shutil.copy2(work / "src" / "build" / BINARY_NAME, work / BINARY_NAME)
        if with_qos_test:
            shutil.copy2(work / "src" / "build" / "tests" / "qtest" / "qos-test", work / "qos-test")
        final = root / f"qemu-{version}"
        if final.exists():
            shutil.rmtree(final)
        stamp = {"version": version, "source": dsc.name, "seconds": round(time.monotonic() - start, 1)}
        (work / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        work.rename(final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    say(f"done in {time.monotonic() - start:.0f} s")
    return final / BINARY_NAME


def _add_qos_test(build: Path) -> Path:
    log = build / "build.log"
    say("building QEMU's C qos-test in the existing tree")
    _ninja(build / "src" / "build", ["tests/qtest/qos-test"], log)
    shutil.copy2(build / "src" / "build" / "tests" / "qtest" / "qos-test", build / "qos-test")
    return build / BINARY_NAME


def qos_test_for(binary: Path) -> Path | None:
    """QEMU's own C qos-test built beside ``binary`` by ``qemu build --with-qos-test``."""
    candidate = binary.parent / "qos-test"
    return candidate if candidate.is_file() else None
