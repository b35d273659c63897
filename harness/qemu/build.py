"""Building qtest-capable QEMUs into the cache, one directory per origin.

Debian's packaged ``qemu-system-x86`` has no qtest accelerator, so the harness builds
``qemu-system-x86_64`` itself, with QEMU's C ``qos-test`` beside it, from one of:

- ``debian:bookworm`` — QEMU 7.2 (Debian 12's source package)
- ``debian:trixie`` — QEMU 10.0 LTS (Debian 13's source package, with its 9pfs backports)
- ``source:PATH`` — a QEMU source tree or release/``git archive`` tarball the user names (their
  checkout, with or without their patch; the master tarball in ``../shared/qemu-src``)
- ``git:REPO@COMMIT`` — any commit of a QEMU git repository, 5.1 on (``harness.qemu.git_tree``:
  what an old tree needs to build here)

Each build lives in ``<cache>/qemu-<version>-<origin label>/`` with a ``build.json`` stamp that
says what it was built from; a source tree is keyed by its git commit and uncommitted diff (or,
outside git, by its files' sizes and times), a tarball by its contents, so a changed tree is
built again into a directory of its own. Newer trees need a Python venv with meson and pycotap
from PyPI (QEMU >= 8.1 builds its own venv at configure time and bookworm's meson is too old),
Debian's patches for ``+ds`` sources (``dpkg-source -x`` applies them) and configure flags that
keep it offline; configure flags a tree does not know are left out.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ProvisionError
from harness.qemu import git_tree, versions
from harness.qemu.shell import locked, missing_packages, sh, tail

BINARY_NAME = "qemu-system-x86_64"
STAMP = "build.json"
#: The libraries QEMU links with, as their -dev packages: those bring the shared libraries whatever
#: a release names them (libglib2.0-0 on bookworm, libglib2.0-0t64 on trixie).
LIBRARIES = ("libglib2.0-dev", "libpixman-1-dev", "libcap-ng-dev", "libattr1-dev", "libfdt-dev", "zlib1g-dev")
BUILD_DEPS = (
    "build-essential", "ninja-build", "meson", "pkg-config", "python3-venv", "flex", "bison", "dpkg-dev", *LIBRARIES,
)  # fmt: skip
RUNTIME_DEPS = ("seabios", "qemu-system-data", "ipxe-qemu")  # ipxe-qemu: NIC ROMs for qos-test's machine
#: Newer trees: no downloads (subprojects come with the tree), no firmware blobs, no Rust.
#: TCG (what a guest kernel runs on where KVM does not work, harness/guest) is added by
#: :func:`accel_flags`: a variant build is for qtest cases only and leaves it out.
CONFIGURE = (
    "--target-list=x86_64-softmmu", "--enable-kvm", "--enable-virtfs",
    "--without-default-features", "--enable-attr", "--enable-cap-ng", "--disable-docs", "--disable-tools",
    "--disable-werror", "--disable-download", "--disable-install-blobs", "--disable-rust",
)  # fmt: skip
#: Trees without --without-default-features (before 6.1) would look for these in git submodules.
OLD_TREE_CONFIGURE = ("--disable-capstone", "--disable-slirp", "--disable-fdt", "--disable-git-update")
#: A git checkout's configure (6.1 to 8.0) updates its submodules unless told not to: where the
#: harness filled them in, that would need the network, and would fail on their copies.
CHECKOUT_CONFIGURE = ("--with-git-submodules=ignore",)
#: Below this, no qos-test is built: the suite's floor (its comparisons need none older).
QOS_TEST_FLOOR = (7, 2, 0)
#: What QEMU >= 8.1's configure needs in the Python it is given (its own mkvenv checks them).
PYTHON_DEPS = ("meson>=1.9,<2", "pycotap==1.3.1", "qemu.qmp==0.0.6", "wheel", "setuptools")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
PROJECT = "virtio9p-harness"
#: Debian suites the harness builds from, and the QEMU each serves.
SUITES = {"bookworm": "7.2", "trixie": "10.0"}
#: What a bare ``qemu build`` (and ``make qemu``) builds: Debian stable's QEMU (README: why).
DEFAULT_ORIGIN = "debian:trixie"


def say(message: str) -> None:
    print(f"[qemu build] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Build:
    """One completed build in the cache."""

    directory: Path
    origin: str
    version: str
    seconds: float
    key: str = ""
    #: "" for a plain build, "gcov" for one with coverage counters (configure --enable-gcov),
    #: "asan", "ubsan", "asan+ubsan" or "tsan" for one with sanitizers (see :data:`VARIANTS`)
    variant: str = ""
    #: built with TCG: a guest kernel can run on it (every plain build since the guest family)
    tcg: bool = False

    @property
    def binary(self) -> Path:
        return self.directory / BINARY_NAME

    @property
    def qos_test(self) -> Path | None:
        path = self.directory / "qos-test"
        return path if path.is_file() else None


def builds(root: Path) -> list[Build]:
    """Every completed build under ``root``, newest first."""
    found = []
    for stamp in root.glob(f"qemu-*/{STAMP}"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            data = json.loads(stamp.read_text())
            if not (stamp.parent / BINARY_NAME).is_file():
                continue
            # stamps from before several origins existed: a bookworm build
            origin = data.get("origin", "debian:bookworm")
            found.append(
                Build(
                    stamp.parent, origin, data["version"], data.get("seconds", 0.0), data.get("key", ""),
                    data.get("variant", ""), data.get("tcg", False),
                )
            )  # fmt: skip
    return sorted(found, key=lambda b: b.directory.stat().st_mtime, reverse=True)


def origin_of(name: str) -> str:
    """``bookworm``, ``trixie``, ``debian:trixie``, ``7.2``, ``10.0`` or a path: the origin it names."""
    for suite, version in SUITES.items():
        if name in (suite, f"debian:{suite}", version):
            return f"debian:{suite}"
    if name.startswith("git:"):
        return name
    path = Path(name.removeprefix("source:")).expanduser()
    if not path.exists():
        raise ProvisionError(f"{name!r} names no Debian suite ({', '.join(SUITES)}) and no source tree or tarball")
    # said before any lock, package or work directory
    if path.is_dir() and not _is_tree(path):
        raise _not_a_tree(path.resolve(), _within(path))
    if path.is_file() and not _is_tarball(path):
        raise ProvisionError(f"{path.resolve()} is neither a QEMU source tree nor a tarball")
    return f"source:{path.resolve()}"


def _is_tree(path: Path) -> bool:
    return (path / "configure").is_file() and (path / "VERSION").is_file()


def _is_tarball(path: Path) -> bool:
    import tarfile  # only where a source is a file

    return tarfile.is_tarfile(path)


def _not_a_tree(tree: Path, hint: str = "") -> ProvisionError:
    return ProvisionError(f"{tree} is not a QEMU source tree (no configure or VERSION){hint}")


def _within(folder: Path) -> str:
    """What to name instead of ``folder``, which is no source tree: the QEMU tarballs and trees in
    it (a folder that keeps QEMU's sources, as ../shared/qemu-src does, is an easy slip for one)."""
    inside = sorted(folder.resolve().glob("qemu-*"))
    found = [p for p in inside if (p.is_file() and _is_tarball(p)) or (p.is_dir() and _is_tree(p))]
    if not found:
        return ""
    names = ", ".join(p.name for p in found)
    return f"; it holds {names}: give one to --source, e.g. --source {shlex.quote(str(found[0]))}"


def find_build(origin: str, root: Path, variant: str = "") -> Build | None:
    """The cached build of ``origin`` (and ``variant``); for a source tree or tarball, one of its
    current contents, wherever it was built from (a copy of the same tarball elsewhere is the
    same build)."""
    candidates = [b for b in builds(root) if b.variant == variant and (b.tcg or variant)]
    if origin.startswith("git:"):  # keyed by the commit, whichever clone it came from
        key = git_key(origin)
        return next((b for b in candidates if b.origin.startswith("git:") and b.key == key), None)
    if not origin.startswith("source:"):
        return next((b for b in candidates if b.origin == origin), None)
    key = source_key(Path(origin.removeprefix("source:")))
    return next((b for b in candidates if b.origin.startswith("source:") and b.key == key), None)


# -- keys of source trees ------------------------------------------------------------------------


def source_key(path: Path) -> str:
    """What a source build is keyed by: a tarball's contents; a git tree's commit and uncommitted
    diff; any other tree's files (names, sizes, times), build directories left out."""
    digest = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as tarball:
            for block in iter(lambda: tarball.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()[:12]
    if (path / ".git").exists():
        head = _git(path, "rev-parse", "HEAD")
        digest.update(head.encode() + _git(path, "diff", "HEAD").encode())
        return digest.hexdigest()[:12]
    for file in sorted(path.rglob("*")):
        rel = file.relative_to(path)
        if rel.parts[0].startswith("build") or not file.is_file():
            continue
        info = file.stat()
        digest.update(f"{rel}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


def git_origin(repo: Path, ref: str) -> str:
    """The origin of ``ref``'s commit in the QEMU git repository ``repo``."""
    return f"git:{repo.resolve()}@{git_tree.resolve(repo, ref)}"


def git_key(origin: str) -> str:
    return origin.rsplit("@", 1)[1][:12]


def _git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ProvisionError(f"git {' '.join(args)} in {tree} failed: {done.stderr.strip()}")
    return done.stdout


# -- what a build's source holds -------------------------------------------------------------------

#: The paths whose commits make a build's history (every change versions.py names touches them).
HISTORY_PATHS = ("hw/9pfs", "fsdev")


def source_history(origin: str, tree: Path | None) -> list[str] | None:
    """The subject lines of the 9pfs commits ``origin``'s source holds, oldest first (``tree``: its
    unpacked source, where the harness has one): a git commit's history (``git:``, or a ``source:``
    tree that is a git checkout, its HEAD) and the patches quilt applied to it (a Debian source
    package: ``.pc/applied-patches``, every patch, 9pfs or not; a ``series`` alone is not proof
    that they were). A commit that a later revert undid is not held (:func:`_held`). Empty where
    neither exists: its version number then says what it has (harness/qemu/versions.py); None
    where a history should be there and cannot be read (a ``source:`` tree not at hand)."""
    ordered: list[str] = []
    if origin.startswith("source:") and tree is None:
        return None
    if origin.startswith("git:") or (tree is not None and (tree / ".git").exists()):
        repo, commit = origin.removeprefix("git:").rsplit("@", 1) if origin.startswith("git:") else (str(tree), "HEAD")
        read = _subjects(Path(repo), commit)
        if read is None:
            return None
        ordered += read
    if tree is not None and (applied := tree / ".pc" / "applied-patches").is_file():
        named = tree / ".pc" / ".quilt_patches"  # where quilt took them from (dpkg-source writes it)
        where = tree / ((named.read_text().strip() if named.is_file() else "") or "debian/patches")
        for name in applied.read_text(errors="replace").split():
            if (where / name).is_file():
                ordered += _patch_subject((where / name).read_text(errors="replace"))
    return _held(ordered)


def _held(ordered: list[str]) -> list[str]:
    """The subjects of ``ordered`` (oldest first) that the history still holds at its end. git
    names a revert ``Revert "S"`` and a revert of that ``Reapply "S"`` (older git: ``Revert
    "Revert "S""``): each ``Revert`` wrapper undoes once, each ``Reapply`` twice, so the last
    commit about S holds it when its wrappers undo an even number of times."""
    held: dict[str, bool] = {}  # (a dict: in history order)
    for subject in ordered:
        undone = 0
        while wrapped := re.fullmatch(r'(Revert|Reapply) "(.*)"', subject):
            undone, subject = undone + (1 if wrapped.group(1) == "Revert" else 2), wrapped.group(2)
        held[subject] = undone % 2 == 0
    return [subject for subject, holds in held.items() if holds]


def _subjects(repo: Path, commit: str) -> list[str] | None:
    done = subprocess.run(  # --topo-order: a revert after what it reverts, whatever the commit dates say
        ["git", "-C", str(repo), "log", "--reverse", "--topo-order", "--format=%s", commit, "--", *HISTORY_PATHS],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.splitlines() if done.returncode == 0 else None


def _patch_subject(text: str) -> list[str]:
    """A ``git format-patch`` file's subject, without its ``[PATCH ...]`` tag (a folded header
    joined); none for a patch without one."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Subject:"):
            folded = [line.removeprefix("Subject:")]
            folded += [more for more in itertools.takewhile(lambda x: x[:1] in (" ", "\t"), lines[index + 1 :])]
            return [re.sub(r"^\s*(\[[^]]*\]\s*)*", "", " ".join(part.strip() for part in folded))]
        if not line.strip():
            break  # the headers end at the first empty line
    return []


def history_of(binary: Path) -> frozenset[str]:
    """What :func:`source_history` read of the build beside ``binary`` (its ``build.json``): empty
    for a binary the harness did not build. A stamp from before histories were kept is read now
    from what cannot have moved since (a git commit, the source kept beside the binary; not a
    user's tree), and kept; one whose git history cannot be read now is not kept, and is empty
    (its number alone then says what it has)."""
    stamp = binary.parent / STAMP
    try:
        data = json.loads(stamp.read_text())
        origin = data["origin"]
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()
    if data.get("history") is None:
        kept = binary.parent / "src"
        read = source_history(origin, kept if kept.is_dir() else None)
        if read is None:
            return frozenset()
        data["history"] = read
        with contextlib.suppress(OSError):
            with tempfile.NamedTemporaryFile("w", dir=stamp.parent, suffix=".tmp", delete=False) as out:
                out.write(json.dumps(data, indent=2) + "\n")
            os.replace(out.name, stamp)  # atomic: another process reads the old stamp or this one
    return frozenset(data["history"])


# -- building --------------------------------------------------------------------------------------


#: Configure flags per variant. QEMU >= 8.0 has meson options asan/ubsan; 7.2 has one
#: --enable-sanitizers that turns both on. Flags a tree does not know are dropped as usual, but a
#: variant none of whose flags the tree knows is refused rather than built plain.
VARIANTS = {
    "": (),
    "gcov": ("--enable-gcov",),
    "asan": ("--enable-asan",),
    "ubsan": ("--enable-ubsan",),
    "asan+ubsan": ("--enable-asan", "--enable-ubsan"),
    # QEMU annotates its coroutine switches for TSan (__tsan_switch_to_fiber); meson refuses a
    # compiler without that interface. Linked against a glib built with TSan (tsan_glib()).
    "tsan": ("--enable-tsan",),
}
#: the variants with sanitizers, in the order a matrix lists them beside a plain build
SANITIZED = ("asan", "ubsan", "asan+ubsan", "tsan")
#: Where a tree has neither --enable-asan nor --enable-ubsan: the flag that gives both.
SANITIZERS_FALLBACK = "--enable-sanitizers"


def sanitize_variant(kinds: str) -> str:
    """``address,undefined`` or ``thread`` (as ``--sanitize`` takes it, -fsanitize's names) ->
    ``asan+ubsan``, ``tsan``."""
    names = {"address": "asan", "undefined": "ubsan", "thread": "tsan"}
    names |= {short: short for short in names.values()}
    chosen = set()
    for kind in filter(None, (k.strip() for k in kinds.split(","))):
        if kind not in names:
            raise ProvisionError(
                f"--sanitize {kind!r}: QEMU builds with address and undefined (ASan, UBSan), or thread (TSan)"
            )
        chosen.add(names[kind])
    if not chosen:
        raise ProvisionError("--sanitize needs address, undefined or both, or thread")
    if "tsan" in chosen and len(chosen) > 1:
        raise ProvisionError("--sanitize thread cannot be combined with address or undefined (QEMU's meson refuses it)")
    return "+".join(sorted(chosen))


def accel_flags(variant: str) -> tuple[str, ...]:
    """TCG on in a plain build, so that a guest kernel can run on the QEMU under test (it adds
    QEMU's x86 translator: docs/guest.md says what that costs); off in a variant build (gcov,
    sanitizers), which only qtest cases run, where it would only add instrumented code."""
    return ("--disable-tcg",) if variant else ("--enable-tcg",)


def variant_flags(tree: Path, variant: str) -> list[str]:
    """The configure flags of ``variant`` this tree knows (a sanitizer variant falls back to 7.2's
    --enable-sanitizers)."""
    wanted = VARIANTS[variant]
    kept = supported_flags(tree, wanted)
    if wanted and not kept and variant in ("asan", "ubsan", "asan+ubsan"):
        kept = supported_flags(tree, (SANITIZERS_FALLBACK,))
    if wanted and not kept:
        raise ProvisionError(f"this QEMU tree's configure knows none of {' '.join(wanted)}: no {variant} build")
    return kept


def build(origin: str, root: Path, *, with_qos_test: bool = True, variant: str = "") -> Build:
    """The build of ``origin`` (``variant``: a key of :data:`VARIANTS`), made now unless it is in
    the cache."""
    if variant not in VARIANTS:
        raise ProvisionError(f"unknown build variant {variant!r}; one of {', '.join(filter(None, VARIANTS))}")
    with locked(root):
        done = find_build(origin, root, variant)
        if done is not None and (done.qos_test or not with_qos_test or versions.parse(done.version) < QOS_TEST_FLOOR):
            return done
        return _build_fresh(origin, root, with_qos_test, variant)


def _build_fresh(origin: str, root: Path, with_qos_test: bool, variant: str) -> Build:
    start = time.monotonic()
    # a tarball's key reads all of it (~0.1 s for 34 MB): once per build
    key = source_key(Path(origin.removeprefix("source:"))) if origin.startswith("source:") else ""
    key = git_key(origin) if origin.startswith("git:") else key
    if variant:  # built where it stays: a gcov build's counter files have their paths compiled in
        work = root / f"qemu-{label(origin, key)}-{variant}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    log = work / "build.log"
    say(f"building a qtest-capable QEMU from {origin} in {work} (log: {log})")
    try:
        ensure_packages(log, origin)
        tree = _unpack(origin, work, log, root)
        history = source_history(origin, tree)  # before the build: a user's tree may move meanwhile
        version = (tree / "VERSION").read_text().strip()
        with_qos_test = with_qos_test and versions.parse(version) >= QOS_TEST_FLOOR
        build_dir = work / "build"
        build_dir.mkdir()
        flags = [
            *supported_flags(tree),
            *supported_flags(tree, accel_flags(variant)),
            *variant_flags(tree, variant),
            *_python_flag(tree, root, log),
        ]
        if "--without-default-features" not in flags:
            flags += supported_flags(tree, OLD_TREE_CONFIGURE) + git_tree.meson_flag(tree, root, log)
        flags += checkout_flags(tree)
        env = {}
        if variant == "tsan":
            glib = tsan_glib(root, log)
            # this glib at configure time (pkg-config) and at run time (rpath: no LD_LIBRARY_PATH for
            # the user to remember); QEMU's known benign races beside the binary (machine.py reads it)
            env["PKG_CONFIG_PATH"] = str(glib / "lib" / "pkgconfig")
            flags.append(f"--extra-ldflags=-Wl,-rpath,{glib / 'lib'}")
            suppressions = tree / "tests" / "tsan" / "suppressions.tsan"
            if suppressions.is_file():
                shutil.copy2(suppressions, work / TSAN_SUPPRESSIONS)
        tcg = not variant
        say(f"configure (QEMU {version}, TCG {'on' if tcg else 'off'}, virtfs on{', ' + variant if variant else ''})")
        sh([str(tree / "configure"), *flags], log, cwd=build_dir, env=env)
        if (tree / "meson.build").exists():
            targets = [BINARY_NAME] + (["tests/qtest/qos-test"] if with_qos_test else [])
            _ninja(build_dir, targets, log)
            shutil.copy2(build_dir / BINARY_NAME, work / BINARY_NAME)
        else:  # before 5.2: configure and make
            shutil.copy2(git_tree.make(build_dir, log), work / BINARY_NAME)
        if with_qos_test:
            shutil.copy2(build_dir / "tests" / "qtest" / "qos-test", work / "qos-test")
        seconds = round(time.monotonic() - start, 1)
        stamp = {
            "version": version, "origin": origin, "key": key, "variant": variant, "seconds": seconds, "tcg": tcg,
            "configure": flags, "history": history,
        }  # fmt: skip
        (work / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        final = work if variant else root / f"qemu-{version}-{label(origin, key)}"
        if final != work:
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    say(f"done in {seconds:.0f} s: {final / BINARY_NAME}")
    return Build(final, origin, version, seconds, key, variant, tcg)


# -- a glib that TSan can see -------------------------------------------------------------------

#: Where a TSan build keeps QEMU's suppressions of its known benign races (tests/tsan/).
TSAN_SUPPRESSIONS = "suppressions.tsan"
#: glib's locks are invisible to TSan unless glib itself is instrumented: without it, every
#: GMutex-protected access between QEMU's threads is a false report. Built from Debian's source of
#: the glib this machine runs (the same version QEMU is compiled against otherwise), without the
#: parts QEMU does not use; about 3.5 minutes here.
GLIB_MESON = (
    "--libdir=lib", "-Dselinux=disabled", "-Dlibmount=disabled", "-Dxattr=false", "-Dtests=false", "-Dman=false",
    "-Dgtk_doc=false", "-Dnls=disabled", "-Dlibelf=disabled", "-Dsysprof=disabled", "-Dwrap_mode=nodownload",
)  # fmt: skip


def tsan_glib(root: Path, log: Path) -> Path:
    """The prefix of a TSan-instrumented glib in the cache, built once per glib version."""
    version = _installed_version("libglib2.0-0")
    prefix = root / f"glib-tsan-{version}"
    if (prefix / ".installed").exists():
        return prefix
    suite = _machine_suite()
    ensure_packages(log, f"debian:{suite}")  # deb-src entries of the machine's own suite
    shutil.rmtree(prefix, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="glib-", dir=root) as scratch:
        work = Path(scratch)
        say(f"building glib {version} with -fsanitize=thread (Debian's source) into {prefix}")
        sh(["apt-get", "source", "--download-only", "-q", f"glib2.0={version}"], log, cwd=work)
        sh(["dpkg-source", "-x", str(max(work.glob("glib2.0_*.dsc"))), "src"], log, cwd=work)
        flags = {"CFLAGS": "-O2 -g -fsanitize=thread", "LDFLAGS": "-fsanitize=thread"}
        setup = ["meson", "setup", str(work / "build"), f"--prefix={prefix}", *GLIB_MESON]
        sh(setup, log, cwd=work / "src", env=flags)
        _ninja(work / "build", ["install"], log)
    (prefix / ".installed").touch()
    return prefix


def _installed_version(package: str) -> str:
    query = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    if query.returncode != 0 or not query.stdout:
        raise ProvisionError(f"a TSan build needs {package}'s source, and {package} is not installed")
    return query.stdout.strip()


def _machine_suite() -> str:
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    found = re.search(r"^VERSION_CODENAME=(\w+)", release, re.MULTILINE)
    if found is None:
        raise ProvisionError("a TSan build takes glib's source from Debian, and this machine names no Debian suite")
    return found.group(1)


def label(origin: str, key: str) -> str:
    """``debian-trixie``, ``git-<commit>``, ``src-<key>``: the build directory's suffix."""
    if origin.startswith("debian:"):
        return origin.replace("debian:", "debian-")
    return f"git-{key}" if origin.startswith("git:") else f"src-{key}"


def _unpack(origin: str, work: Path, log: Path, root: Path) -> Path:
    """The source tree to configure (inside ``work`` unless the user's own tree)."""
    if origin.startswith("debian:"):
        return _debian_source(origin.removeprefix("debian:"), work, log)
    if origin.startswith("git:"):
        repo, commit = origin.removeprefix("git:").rsplit("@", 1)
        say(f"git archive {commit[:12]} of {repo}")
        tree = git_tree.export(Path(repo), commit, work / "src", _donor(root, log), log)
        _check_tree(tree)
        return tree
    path = Path(origin.removeprefix("source:"))
    if path.is_dir():
        tree = path
    else:
        import tarfile  # only where a tarball is unpacked

        say(f"unpacking {path}")
        with tarfile.open(path) as archive:
            archive.extractall(work / "src", filter="tar")
        (tree,) = [p for p in (work / "src").iterdir() if p.is_dir()] or [work / "src"]
    _check_tree(tree)
    lacking = git_tree.lacking(tree) if (tree / ".git").exists() else []
    if lacking:  # a checkout: its key (commit and `git diff HEAD`) ignores what is filled in
        names = " ".join(place.name for place in lacking)
        try:
            donor = _donor(root, log)
        except ProvisionError as err:
            raise ProvisionError(
                f"{tree} lacks {names}, which configure here cannot download (--disable-download): run `meson "
                f"subprojects download {names}` (or `git submodule update --init`, before QEMU 8.1) in it, with "
                f"the network, or let the harness copy them from Debian's QEMU source ({err})"
            ) from err
        filled = git_tree.fill_in(tree, donor)
        say(
            f"copied in from {donor}, as this tree lacked them and configure runs offline (--disable-download): "
            f"{', '.join(str(place.relative_to(tree)) for place in filled)}. They are the donor's revisions, not "
            "the ones the tree pins: remove them before a configure of your own with the network"
        )
    return tree


def _check_tree(tree: Path) -> None:
    if not _is_tree(tree):
        raise _not_a_tree(tree)
    keymaps = [tree / where / "keycodemapdb" / "README" for where in ("subprojects", "ui")]
    if not (tree / ".git").exists() and not any(readme.exists() for readme in keymaps):
        raise ProvisionError(
            f"{tree} is neither a git checkout nor a release tarball: QEMU's configure needs "
            "subprojects/keycodemapdb (and berkeley-softfloat-3, berkeley-testfloat-3); copy them in from a "
            "release tarball or Debian's source package"
        )


def _debian_source(suite: str, work: Path, log: Path, *, patched: bool = True) -> Path:
    say(f"apt-get source qemu ({suite})")
    sh(["apt-get", "source", "--download-only", "-q", f"qemu/{suite}"], log, cwd=work)
    dsc = max(work.glob("qemu_*.dsc"))
    # applies Debian's patches, unless only the unpatched files are wanted
    sh(["dpkg-source", "-x", *([] if patched else ["--skip-patches"]), str(dsc), "src"], log, cwd=work)
    for name in (p.name for p in work.glob("qemu_*")):
        (work / name).unlink()
    return work / "src"


#: The Debian suite whose QEMU source lends its subprojects when no Debian build is in the cache.
DONOR_SUITE = "trixie"


def _donor(root: Path, log: Path) -> Path:
    """The source tree whose subprojects a tree without them borrows (:mod:`harness.qemu.git_tree`):
    a Debian build's in the cache, else the subprojects of :data:`DONOR_SUITE`'s source package,
    fetched once into ``donor-debian-SUITE/`` (a fork's CI runner, or a machine that never built
    Debian's QEMU). Called with the build lock held."""
    found = git_tree.donor(root)
    if found is not None:
        return found
    ensure_packages(log, f"debian:{DONOR_SUITE}")  # its deb-src entries
    final = root / f"donor-debian-{DONOR_SUITE}"
    work = Path(tempfile.mkdtemp(prefix="donor-", dir=root))
    try:
        source = _debian_source(DONOR_SUITE, work, log, patched=False)
        kept = work / "kept" / "src" / "subprojects"
        kept.mkdir(parents=True)
        for name in git_tree.BORROWED:  # a few MB of its 400
            shutil.copytree(source / "subprojects" / name, kept / name, symlinks=True)
        shutil.rmtree(final, ignore_errors=True)
        (work / "kept").rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"kept in {final}: the subprojects of Debian {DONOR_SUITE}'s QEMU source, for trees without them")
    return final / "src"


def checkout_flags(tree: Path) -> list[str]:
    """:data:`CHECKOUT_CONFIGURE` for a git checkout with submodules that git does not manage (the
    harness filled them in), where its configure knows it."""
    return supported_flags(tree, CHECKOUT_CONFIGURE) if (tree / ".git").exists() and git_tree.unmanaged(tree) else []


def supported_flags(tree: Path, wanted: tuple[str, ...] = CONFIGURE) -> list[str]:
    """``wanted`` (:data:`CONFIGURE`), less the flags this tree's configure does not know (7.2 has
    no ``--disable-download`` or ``--disable-rust``)."""
    texts = [tree / "configure", tree / "scripts" / "meson-buildoptions.sh"]
    configure = "".join(path.read_text(errors="replace") for path in texts if path.exists())
    options_file = tree / "meson_options.txt"
    # configure hands meson's options through only since 6.2 (meson-buildoptions.sh): 5.2's meson
    # knows install_blobs, its configure refuses --disable-install-blobs
    passes_through = (tree / "scripts" / "meson-buildoptions.sh").exists()
    options = options_file.read_text(errors="replace") if options_file.exists() and passes_through else ""
    kept = []
    for flag in wanted:
        name = re.sub(r"^--(enable|disable|without|with)-", "", flag.split("=")[0])
        if flag.split("=")[0] in configure or f"option('{name.replace('-', '_')}'" in options:
            kept.append(flag)
    return kept


def _python_flag(tree: Path, root: Path, log: Path) -> list[str]:
    """``--python=VENV`` for a tree whose configure builds its own venv (QEMU >= 8.1): one venv
    in the cache with meson and pycotap from PyPI, made once."""
    if not (tree / "python" / "scripts" / "mkvenv.py").exists():
        return []
    venv = root / "configure-python"
    python = venv / "bin" / "python3"
    if not (venv / ".installed").exists():
        say(f"a Python venv for configure: {' '.join(PYTHON_DEPS)}")
        shutil.rmtree(venv, ignore_errors=True)
        sh([sys.executable, "-m", "venv", str(venv)], log)
        sh([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PYTHON_DEPS], log)
        (venv / ".installed").touch()
    return [f"--python={python}"]


def ensure_packages(log: Path, origin: str) -> None:
    """Build dependencies, and deb-src entries for the suite a Debian origin names."""
    missing = missing_packages([*BUILD_DEPS, *RUNTIME_DEPS])
    suite = origin.removeprefix("debian:") if origin.startswith("debian:") else None
    sources = Path(f"/etc/apt/sources.list.d/{PROJECT}-src-{suite}.sources") if suite else None
    if not missing and (sources is None or sources.exists()):
        return
    if os.geteuid() != 0:
        raise ProvisionError(
            f"building QEMU needs root for apt-get (missing: {', '.join(missing) or f'deb-src entries of {suite}'}); "
            "run `make qemu` as root or install them yourself"
        )
    if sources is not None and not sources.exists():
        sources.write_text(_deb_src(suite or ""))
        say(f"wrote {sources} (source packages only: no binary package of {suite} is installed)")
    say("apt-get update")
    sh(["apt-get", "update", "-q"], log)
    if missing:
        say(f"installing {len(missing)} packages: {' '.join(missing)}")
        sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], log)


def ensure_runtime() -> None:
    """What a build made on another machine (a CI job's artifact) needs to run here: its libraries
    and firmware. Installed with apt-get (as root) when missing."""
    missing = missing_packages([*LIBRARIES, *RUNTIME_DEPS])
    if not missing:
        return
    if os.geteuid() != 0:
        raise ProvisionError(f"running this QEMU needs {', '.join(missing)}: install them (apt-get, as root)")
    say(f"installing {len(missing)} packages QEMU needs to run: {' '.join(missing)}")
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ProvisionError(f"{' '.join(argv[:2])} failed:\n{(done.stdout + done.stderr)[-2000:]}")


def _deb_src(suite: str) -> str:
    """deb-src entries for ``suite``, from the mirror the machine's own sources use."""
    text = DEBIAN_SOURCES.read_text() if DEBIAN_SOURCES.exists() else ""
    mirror = re.search(r"^URIs:\s*(\S+)", text, re.MULTILINE)
    security = re.search(r"^URIs:\s*(\S*security\S*)", text, re.MULTILINE)
    main = mirror.group(1) if mirror else "http://deb.debian.org/debian"
    entries = [f"Types: deb-src\nURIs: {main}\nSuites: {suite} {suite}-updates\nComponents: main\n"]
    if security:
        entries.append(f"Types: deb-src\nURIs: {security.group(1)}\nSuites: {suite}-security\nComponents: main\n")
    signed = re.search(r"^Signed-By:\s*(\S+)", text, re.MULTILINE)
    if signed:
        entries = [e + f"Signed-By: {signed.group(1)}\n" for e in entries]
    return "\n".join(entries)


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
        raise ProvisionError(f"ninja {' '.join(targets)} failed; log {log}:\n{tail(log)}")
