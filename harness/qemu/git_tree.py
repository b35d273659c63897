"""A QEMU source tree from any commit of a QEMU git repository (``qemu build --git REF``), made
buildable here without a network: every release from 5.1 on, for benchmarks across releases and
``git bisect run`` over performance.

``git archive`` leaves out the git submodules (5.x-7.x: ``ui/keycodemapdb``,
``tests/fp/berkeley-*``, ``meson``) and meson's subprojects (8.0 on: fetched at configure time),
which configure then tries to download. They are copied in from a *donor*: the source of a Debian
build in the cache (``qemu build trixie`` keeps it), or the subprojects of Debian trixie's source
package, fetched once (``harness.qemu.build``); these are what the newer trees pin. A user's checkout
that lacks them (``qemu build --source``, never configured with the network) gets them the same
way. A borrowed keycodemapdb is newer than an old tree, so its ``keymap-gen`` is wrapped: QEMU
before 6.0 passes it its options before the subcommand, which keycodemapdb since 2022 refuses (the
wrapper puts the subcommand first), and QEMU before 8.0 lacks keys in its QKeyCode enum that the
newer ``keymaps.csv`` maps (the wrapper leaves those unmapped). In a newer tree it changes nothing.
Old trees need two more things, each applied only where a tree needs it:

- a meson of the version the tree asks for (5.2-8.0 carry their own as a submodule, which
  ``git archive`` leaves out): installed from PyPI into a venv in the cache, once per version;
- QEMU before 5.2 has no meson at all: configure and make (``harness.qemu.build``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness.errors import ProvisionError
from harness.qemu.shell import sh

#: The submodules and subprojects a configure of ours needs, and where a Debian source tree has them.
BORROWED = ("keycodemapdb", "berkeley-softfloat-3", "berkeley-testfloat-3")
#: keymap-gen's subcommands: the wrapper moves the first one it sees to the front.
KEYMAP_COMMANDS = ("code-map", "code-table", "name-map", "name-table", "code-docs", "name-docs")
KEYMAP_WRAPPER = f"""#!/usr/bin/env python3
# added by virtio9p-harness: this keycodemapdb is newer than the QEMU around it. QEMU before 6.0
# passes --lang/--varname before the subcommand, which keymap-gen since 2022 wants first; QEMU
# before 8.0 lacks keys in its QKeyCode enum (qapi/ui.json) that keymaps.csv since then maps:
# their cells are emptied (unmapped) in a copy of the table, kept beside this wrapper. Where the
# enum knows every key (or cannot be read), the table is passed on as it is.
import csv, hashlib, os, re, sys
commands = {set(KEYMAP_COMMANDS)!r}
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
command = [a for a in args if a in commands][:1]
args = [a for a in args if a not in command]
ui_json = os.path.join(here, "..", "..", "..", "qapi", "ui.json")
table = [a for a in args if a.endswith(".csv")]
if table and os.path.exists(ui_json):
    enum = re.search(r"'enum': 'QKeyCode',(.*?)\\]", open(ui_json).read(), re.S)
    known = set(re.findall(r"'([a-z0-9_]+)'", enum.group(1))) if enum else set()
    rows = list(csv.reader(open(table[0], newline="")))
    column = rows[0].index("QEMU QKeyCode")
    unknown = [row for row in rows[1:] if len(row) > column and row[column] and row[column].lower() not in known]
    if known and unknown:
        for row in unknown:
            row[column] = ""
        digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:12]
        copy = os.path.join(here, f"keymaps-{{digest}}.csv")  # in the tree: it goes with the build
        part = f"{{copy}}.{{os.getpid()}}.part"  # ninja runs several of these at once
        with open(part, "w", newline="") as out:
            csv.writer(out).writerows(rows)
        os.replace(part, copy)
        args = [copy if a == table[0] else a for a in args]
real = os.path.join(here, "keymap-gen.real")
os.execv(sys.executable, [sys.executable, real, *command, *args])
"""


def resolve(repo: Path, ref: str) -> str:
    """The full commit hash ``ref`` names in ``repo``."""
    if not (repo / "HEAD").exists() and not (repo / ".git").exists():
        raise ProvisionError(f"{repo} is not a git repository (set --repo or $V9P_QEMU_GIT to a QEMU clone)")
    done = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ProvisionError(f"{ref!r} names no commit in {repo}")
    return done.stdout.strip()


def export(repo: Path, commit: str, dest: Path, donor: Path | None, log: Path) -> Path:
    """``commit``'s files in ``dest``, with what its configure and build need filled in."""
    dest.mkdir(parents=True)
    with open(log, "a") as out:
        archive = subprocess.Popen(["git", "-C", str(repo), "archive", commit], stdout=subprocess.PIPE, stderr=out)
        unpacked = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, stderr=out, check=False)
        if archive.wait() != 0 or unpacked.returncode != 0:
            raise ProvisionError(f"git archive {commit} | tar -x failed; log {log}")
    fill_in(dest, donor)
    return dest


def fill_in(tree: Path, donor: Path | None) -> list[Path]:
    """Copy into ``tree`` from ``donor`` each of :data:`BORROWED` that it wants and lacks (absent, or
    an empty submodule directory: what ``git archive`` leaves, and a checkout before ``meson
    subprojects download`` or ``git submodule update``); the places filled. A copied keymap-gen
    is wrapped (the module's docstring: why)."""
    filled = lacking(tree)
    for place in filled:
        _borrow(place.name, place, donor)
    return filled


def unmanaged(tree: Path) -> list[Path]:
    """The places of :data:`BORROWED` in ``tree`` that git does not manage: not checked out as a
    submodule (no ``.git`` in them), so filled in by the harness or by hand."""
    return [place for place in _borrowed_places(tree) if not (place / ".git").exists()]


def lacking(tree: Path) -> list[Path]:
    """Where ``tree`` wants one of :data:`BORROWED` and has none (absent, or an empty directory)."""
    return [place for place in _borrowed_places(tree) if not place.is_dir() or not any(place.iterdir())]


def _borrowed_places(tree: Path) -> list[Path]:
    return [place for name in BORROWED for place in _places(tree, name)]


def _places(tree: Path, name: str) -> list[Path]:
    """Where ``tree`` wants submodule or subproject ``name``: its .gitmodules' path for it, else
    ``subprojects/NAME`` where a wrap file names it."""
    modules = tree / ".gitmodules"
    paths = re.findall(r"^\s*path\s*=\s*(\S+)", modules.read_text(), re.MULTILINE) if modules.exists() else []
    found = [tree / p for p in paths if Path(p).name == name]
    if not found and (tree / "subprojects" / f"{name}.wrap").exists():
        found = [tree / "subprojects" / name]
    return found


def _borrow(name: str, place: Path, donor: Path | None) -> None:
    source = donor / "subprojects" / name if donor else None
    if source is None or not source.is_dir():
        raise ProvisionError(
            f"this tree has no {place} (a git submodule or meson subproject: git archive leaves it out, and a "
            "checkout has it after `meson subprojects download` or `git submodule update --init`, which need the "
            "network) and no donor to copy it from (a Debian QEMU source tree, which `python -m harness qemu "
            "build` fetches where the cache has none)"
        )
    if place.is_symlink() or (place.exists() and not place.is_dir()):
        raise ProvisionError(f"{place} is not a directory: QEMU wants {name} there")
    # copied beside it, then renamed into place: a copy cut short is never taken for the subproject
    part = place.with_name(f".{place.name}.v9p-part")
    shutil.rmtree(part, ignore_errors=True)
    try:
        shutil.copytree(source, part, symlinks=True)
        if name == "keycodemapdb":
            _wrap_keymap_gen(part)
        if place.exists():
            place.rmdir()  # an empty submodule directory
        part.rename(place)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _wrap_keymap_gen(keycodemapdb: Path) -> None:
    tools = keycodemapdb / "tools"
    (tools / "keymap-gen").rename(tools / "keymap-gen.real")
    (tools / "keymap-gen").write_text(KEYMAP_WRAPPER)
    (tools / "keymap-gen").chmod(0o755)


def donor(root: Path) -> Path | None:
    """A Debian source tree in the cache (a build's, ``qemu-*-debian-*/src``, or the subprojects
    fetched alone, ``donor-debian-*/src``), the newest, or None."""
    found = [*root.glob("qemu-*-debian-*/src"), *root.glob("donor-debian-*/src")]
    trees = sorted((p for p in found if all((p / "subprojects" / name).is_dir() for name in BORROWED)),
                   key=lambda p: p.stat().st_mtime)  # fmt: skip
    return trees[-1] if trees else None


def meson_flag(tree: Path, root: Path, log: Path) -> list[str]:
    """``--meson=M`` for a meson-era tree that carries its meson as a submodule and builds no venv
    of its own (5.2 to 8.0): the version its configure asks for, from PyPI, once per version."""
    configure = (tree / "configure").read_text(errors="replace")
    if (tree / "python" / "scripts" / "mkvenv.py").exists() or "--meson=" not in configure:
        return []
    if (tree / "meson" / "meson.py").exists():
        return []
    wanted = re.search(r'version_ge "\$\(\$?meson --version\)" ([0-9.]+)', configure)
    if wanted is None:
        wanted = re.search(r"meson_version:\s*'>=\s*([0-9.]+)'", (tree / "meson.build").read_text())
    if wanted is None:
        raise ProvisionError(f"{tree}: cannot tell which meson this QEMU wants")
    version = wanted.group(1)
    venv = root / f"meson-{version}"
    meson = venv / "bin" / "meson"
    if not (venv / ".installed").exists():
        shutil.rmtree(venv, ignore_errors=True)
        sh([sys.executable, "-m", "venv", str(venv)], log)
        sh([str(venv / "bin" / "python3"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
            f"meson=={version}"], log)  # fmt: skip
        (venv / ".installed").touch()
    return [f"--meson={meson}"]


def make(build_dir: Path, log: Path) -> Path:
    """Build a pre-meson tree's x86_64 system emulator (QEMU < 5.2); the binary."""
    jobs = str(len(os.sched_getaffinity(0)))
    sh(["make", f"-j{jobs}", "x86_64-softmmu/all"], log, cwd=build_dir)
    return build_dir / "x86_64-softmmu" / "qemu-system-x86_64"
