"""Finding and probing QEMU: lookup order, the degraded mode of Debian's packaged binary, refusal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fixtures.devices import QemuUnderTest
from harness.errors import ProvisionError
from harness.qemu import build, git_tree, provision, versions

PROJECT = Path(__file__).resolve().parent.parent
#: Debian's qemu-system-x86 package: no qtest accelerator (`make test` installs it for these tests).
PACKAGED = Path("/usr/bin/qemu-system-x86_64")


def test_explicit_beats_environment_beats_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for path in (first, second):
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    monkeypatch.setenv(provision.ENV_BINARY, str(second))
    assert provision.find_qemu(first) == (first, "--qemu-binary")
    assert provision.find_qemu(None) == (second, provision.ENV_BINARY)
    monkeypatch.delenv(provision.ENV_BINARY)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(ProvisionError, match="make qemu"):
        provision.find_qemu(None)


def test_missing_explicit_binary_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="not an executable file"):
        provision.find_qemu(tmp_path / "nope")


def test_a_folder_of_qemu_sources_is_told_which_to_name(tmp_path: Path) -> None:
    """`--source DIR` where DIR keeps QEMU's sources (as ../shared/qemu-src does) and is none: the
    error, before any build step, names the tarballs and trees in it, and nothing else there."""
    folder = tmp_path / "qemu-src"
    folder.mkdir()
    (folder / "README.md").write_text("")
    (folder / "qemu-11.1.50.tar.xz.sig").write_bytes(b"")  # a signature: no tarball
    (folder / "qemu-10.0.tar.gz").mkdir()  # a folder named like a tarball: neither
    with pytest.raises(ProvisionError) as raised:
        build.origin_of(str(folder))
    assert str(raised.value) == f"{folder} is not a QEMU source tree (no configure or VERSION)"
    tarball = folder / "qemu-11.1.50.tar.xz"
    with tarfile.open(tarball, "w:xz") as archive:
        archive.add(folder / "README.md", "qemu-11.1.50/README.md")
    tree = folder / "qemu-9.2.0"
    tree.mkdir()
    (tree / "configure").write_text("")
    (tree / "VERSION").write_text("9.2.0\n")
    with pytest.raises(ProvisionError) as raised:
        build.origin_of(str(folder))
    assert str(raised.value) == (
        f"{folder} is not a QEMU source tree (no configure or VERSION); it holds qemu-11.1.50.tar.xz, "
        f"qemu-9.2.0: give one to --source, e.g. --source {tarball}"
    )
    assert build.origin_of(str(tree)) == f"source:{tree}"
    assert build.origin_of(str(tarball)) == f"source:{tarball}"
    with pytest.raises(ProvisionError) as raised:  # a file, but no tarball: said before tarfile meets it
        build.origin_of(str(folder / "qemu-11.1.50.tar.xz.sig"))
    assert str(raised.value) == f"{folder / 'qemu-11.1.50.tar.xz.sig'} is neither a QEMU source tree nor a tarball"


def test_the_provisioned_build_is_full(qemu_under_test: QemuUnderTest) -> None:
    found = qemu_under_test.probe
    assert found.usable and found.qtest_accel and found.accel == "qtest" and found.synth_tree


def test_binary_without_qtest_is_refused_saying_how(tmp_path: Path) -> None:
    fake = tmp_path / "qemu-system-x86_64"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "QEMU emulator version 9.9.9" && exit 0\nexit 1\n')
    fake.chmod(0o755)
    found = provision.probe(fake)
    assert (found.version, found.qtest_option, found.usable) == ("9.9.9", False, False)
    with pytest.raises(ProvisionError, match=r"lacks -qtest and virtio-9p-pci.*make qemu"):
        found.require_usable()


def _counting_fake(tmp_path: Path, version: str) -> tuple[Path, Path]:
    """A binary that answers --version and appends a line to a log for every run."""
    log, fake = tmp_path / "runs.log", tmp_path / "qemu-system-x86_64"
    answer = f'[ "$1" = --version ] && echo "QEMU emulator version {version}" && exit 0'
    fake.write_text(f"#!/bin/sh\necho run >> {log}\n{answer}\nexit 1\n")
    fake.chmod(0o755)
    return fake, log


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_probe_answers_are_kept_while_the_binary_is_the_same_file(tmp_path: Path) -> None:
    fake, log = _counting_fake(tmp_path, "9.9.9")
    cache = tmp_path / "cache"
    first = provision.probe_cached(fake, cache)
    probed = _runs(log)
    assert probed >= 5 and first.version == "9.9.9"
    assert provision.probe_cached(fake, cache) == first and _runs(log) == probed  # no QEMU run
    fake.write_text(fake.read_text().replace("9.9.9", "9.9.10"))  # rebuilt: same path, new file
    assert provision.probe_cached(fake, cache).version == "9.9.10" and _runs(log) == 2 * probed


def test_a_damaged_probe_cache_means_probing_again(tmp_path: Path) -> None:
    fake, log = _counting_fake(tmp_path, "9.9.9")
    cache = tmp_path / "cache"
    provision.probe_cached(fake, cache)
    (kept,) = (cache / "probes").iterdir()
    for damage in ("{not json", '{"format": 1, "identity": [], "probe": {}}', '{"format": 99}'):
        kept.write_text(damage)
        before = _runs(log)
        assert provision.probe_cached(fake, cache).version == "9.9.9" and _runs(log) > before
    unusable = tmp_path / "a-file"
    unusable.write_text("")  # no directory can be made under it: answers still come, probed each time
    before = _runs(log)
    assert provision.probe_cached(fake, unusable).version == "9.9.9" and _runs(log) > before


@pytest.mark.skipif(not PACKAGED.exists(), reason="Debian's qemu-system-x86 is not installed (make test installs it)")
def test_packaged_binary_runs_degraded() -> None:
    found = provision.probe(PACKAGED)
    assert (found.qtest_accel, found.qtest_option, found.virtio_9p_pci) == (False, True, True)
    assert found.accel == "tcg" and not found.synth_tree


@pytest.mark.skipif(not PACKAGED.exists(), reason="Debian's qemu-system-x86 is not installed (make test installs it)")
def test_cases_on_the_packaged_binary_skip_what_needs_the_synth_tree() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/", "-q", "-rs", "--qemu-binary", str(PACKAGED), "-k", "synth/version/"],
        cwd=PROJECT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(PROJECT)},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no qtest accelerator, so QEMU built no synth test tree" in run.stdout
    assert run.stdout.strip().splitlines()[-1].startswith("10 passed, 1 skipped")


def test_a_short_qemu_run_dies_with_the_harness(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """The probe's QEMU runs wait for "quit" on their monitor and do not exit at its end of file: a
    harness killed mid-probe must not leave one behind (it did, until they got PR_SET_PDEATHSIG)."""
    waits = [str(qemu_under_test.binary), "-machine", "none", "-display", "none", "-nodefaults", "-monitor", "stdio"]
    code = f"from harness.qemu import provision; provision._run({[*waits, '-accel', 'qtest']!r})"
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    harness = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env)
    try:
        qemu = _wait_for(lambda: _qemus_in(tmp_path), "the probe's QEMU never started")
        harness.kill()
        harness.wait()
        _wait_for(lambda: not _qemus_in(tmp_path), f"QEMU {qemu} outlived the harness that started it")
    finally:
        harness.kill()
        for pid in _qemus_in(tmp_path):
            os.kill(pid, 9)


def _qemus_in(cwd: Path) -> list[int]:
    """QEMU processes (by executable: the harness's own command line names QEMU too) working in ``cwd``."""
    out = subprocess.run(["pgrep", "-f", "qemu-system"], capture_output=True, text=True, check=False).stdout
    found = []
    for pid in map(int, out.split()):
        try:
            exe, where = os.readlink(f"/proc/{pid}/exe"), os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # gone meanwhile
        if "qemu-system" in Path(exe).name and where == str(cwd):
            found.append(pid)
    return found


def _wait_for(condition: Callable[[], object], failure: str, seconds: float = 10.0) -> object:
    deadline = time.monotonic() + seconds
    while not (result := condition()):
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)
    return result


def test_a_binary_that_is_not_qemu_is_called_so() -> None:
    """/bin/true answers --version with coreutils' text ("... GNU GPL version 3"): not QEMU
    "version 3"."""
    with pytest.raises(ProvisionError, match=r"/bin/true is not QEMU: `--version` says 'true \(GNU coreutils\)"):
        provision.probe(Path("/bin/true"))


@pytest.mark.parametrize("named", ["/bin/true", "/nonexistent/qemu-system-x86_64"])
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_an_unusable_named_qemu_is_one_usage_error(tmp_path: Path, named: str, workers: list[str]) -> None:
    """Named with --qemu-binary, a binary the harness cannot use stops pytest before collection
    with its usage-error status (4) and one line saying why, no traceback, no run directory left."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/test_walk.py", "-q", *workers, "--qemu-binary", named],
        cwd=PROJECT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(PROJECT), "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 4, out
    assert out.count("the QEMU under test cannot be used") == 1 and "Traceback" not in out, out
    assert not list(tmp_path.glob("v9p-run-*"))


def test_a_relative_binary_is_made_absolute(monkeypatch: pytest.MonkeyPatch, qemu_under_test: QemuUnderTest) -> None:
    """--qemu-binary build/qemu-system-x86_64 (as in a QEMU tree) works: QEMU starts elsewhere."""
    monkeypatch.chdir(qemu_under_test.binary.parent.parent)
    relative = Path(qemu_under_test.binary.parent.name) / qemu_under_test.binary.name
    found, _ = provision.find_qemu(str(relative))
    assert found == qemu_under_test.binary.absolute()


def test_sanitizer_kinds_name_one_build_variant(tmp_path: Path) -> None:
    """``--sanitize`` takes -fsanitize's names: address and undefined together, thread alone (QEMU's
    meson refuses TSan beside the others); TSan builds through --enable-tsan only, never falling
    back to 7.2's --enable-sanitizers (which would make an ASan build under TSan's name)."""
    assert build.sanitize_variant("undefined,address") == "asan+ubsan"
    assert build.sanitize_variant("thread") == build.sanitize_variant("tsan") == "tsan"
    for wrong in ("thread,address", "memory", ""):
        with pytest.raises(ProvisionError):
            build.sanitize_variant(wrong)
    tree = tmp_path / "qemu-7.2-like"
    tree.mkdir()
    (tree / "configure").write_text("--enable-sanitizers) sanitizers=yes ;;\n")
    assert build.variant_flags(tree, "asan+ubsan") == ["--enable-sanitizers"]
    with pytest.raises(ProvisionError, match="--enable-tsan"):
        build.variant_flags(tree, "tsan")
    (tree / "configure").write_text("--enable-sanitizers --enable-tsan\n")
    assert build.variant_flags(tree, "tsan") == ["--enable-tsan"]


def test_a_tsan_build_gets_qemus_suppressions(tmp_path: Path) -> None:
    """QEMU runs with TSan's options, and the suppressions file its TSan build keeps beside it."""
    from harness.qemu import sanitizers

    binary = tmp_path / "qemu-system-x86_64"
    assert "suppressions" not in sanitizers.sanitizer_env(binary)["TSAN_OPTIONS"]
    (tmp_path / "suppressions.tsan").write_text("race:pthread_mutex_init\n")
    options = sanitizers.sanitizer_env(binary)["TSAN_OPTIONS"]
    assert f"suppressions={tmp_path / 'suppressions.tsan'}" in options and "exitcode=0" in options


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout  # fmt: skip


def test_a_commit_of_an_old_tree_gets_what_git_archive_leaves_out(tmp_path: Path) -> None:
    """``qemu build --git``: an old tree's submodules come from the donor (a Debian source tree), and
    its keymap-gen calls are put in the order today's keymap-gen wants, with the keys its QKeyCode
    enum lacks left unmapped; in a newer tree, whose enum knows every key, the wrapper passes its
    calls and the table on as they are."""

    repo = tmp_path / "repo"
    (repo / "ui").mkdir(parents=True)
    (repo / "qapi").mkdir()
    (repo / ".gitmodules").write_text('[submodule "ui/keycodemapdb"]\n\tpath = ui/keycodemapdb\n\turl = x\n')
    (repo / "ui" / "meson.build").write_text("command: [keymap_gen, '--lang', 'glib2', 'code-map', '@INPUT0@']\n")
    (repo / "qapi" / "ui.json").write_text("{ 'enum': 'QKeyCode',\n  'data': [ 'unmapped', 'esc', 'a' ] }\n")
    (repo / "VERSION").write_text("5.2.0\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "old")
    donor = tmp_path / "donor"
    tools = donor / "subprojects" / "keycodemapdb" / "tools"
    tools.mkdir(parents=True)
    (donor / "subprojects" / "keycodemapdb" / "README").write_text("keycodemapdb\n")
    # a keymap-gen that prints what it was given: its arguments, then the table's QEMU column
    (tools / "keymap-gen").write_text(
        "#!/usr/bin/env python3\nimport csv, sys\nprint(sys.argv[1:])\n"
        "rows = list(csv.reader(open([a for a in sys.argv if a.endswith('.csv')][0])))\n"
        "print([r[rows[0].index('QEMU QKeyCode')] for r in rows[1:]])\n"
    )  # fmt: skip
    (tools / "keymap-gen").chmod(0o755)
    table = tmp_path / "keymaps.csv"
    table.write_text('"Linux Name","QEMU QKeyCode"\nKEY_ESC,esc\nKEY_F16,f16\nKEY_A,a\n')
    commit = git_tree.resolve(repo, "HEAD")
    assert build.git_key(build.git_origin(repo, "HEAD")) == commit[:12]
    tree = git_tree.export(repo, commit, tmp_path / "tree", donor, tmp_path / "log")
    wrapper = tree / "ui" / "keycodemapdb" / "tools" / "keymap-gen"
    assert (tree / "ui" / "keycodemapdb" / "README").exists() and (wrapper.parent / "keymap-gen.real").exists()
    done = subprocess.run([sys.executable, str(wrapper), "--lang", "glib2", "code-map", str(table), "x", "qcode"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    given, column = done.stdout.splitlines()
    assert given.startswith("['code-map', '--lang', 'glib2'")
    assert column == "['esc', '', 'a']"  # f16 is not in this QEMU's enum
    # ninja runs many at once: each writes its own copy of the table
    argv = [sys.executable, str(wrapper), "--lang", "glib2", "code-map", str(table), "x", "qcode"]
    calls = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(16)]
    assert [call.communicate()[0].splitlines()[1:] for call in calls] == [[column]] * 16
    assert not list(wrapper.parent.glob("*.part"))

    with pytest.raises(ProvisionError, match="no donor"):
        git_tree.export(repo, commit, tmp_path / "tree2", None, tmp_path / "log")
    (repo / ".gitmodules").unlink()
    (repo / "subprojects").mkdir()
    (repo / "subprojects" / "keycodemapdb.wrap").write_text("[wrap-git]\n")
    (repo / "ui" / "meson.build").write_text("command: [keymap_gen, 'code-map', '--lang', 'glib2', '@INPUT0@']\n")
    (repo / "qapi" / "ui.json").write_text("{ 'enum': 'QKeyCode',\n  'data': [ 'unmapped', 'esc', 'a', 'f16' ] }\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "new")
    newer = git_tree.export(repo, git_tree.resolve(repo, "HEAD"), tmp_path / "tree3", donor, tmp_path / "log")
    assert (newer / "subprojects" / "keycodemapdb" / "README").exists()
    wrapper = newer / "subprojects" / "keycodemapdb" / "tools" / "keymap-gen"
    done = subprocess.run([sys.executable, str(wrapper), "code-map", "--lang", "glib2", str(table), "x", "qcode"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.splitlines() == [str(["code-map", "--lang", "glib2", str(table), "x", "qcode"]),
                                        "['esc', 'f16', 'a']"]  # fmt: skip
    with pytest.raises(ProvisionError, match="names no commit"):
        git_tree.resolve(repo, "v0.0.0")


def test_a_tree_gets_only_the_configure_flags_its_configure_takes(tmp_path: Path) -> None:
    """5.2's meson knows install_blobs but its configure does not pass meson options through
    (no meson-buildoptions.sh): the flag is left out there, kept where configure passes it on."""

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "configure").write_text("--disable-tcg) ;;\n")
    (tree / "meson_options.txt").write_text("option('install_blobs', type: 'boolean')\n")
    wanted = ("--disable-tcg", "--disable-install-blobs")
    assert build.supported_flags(tree, wanted) == ["--disable-tcg"]
    (tree / "scripts").mkdir()
    (tree / "scripts" / "meson-buildoptions.sh").write_text("")
    assert build.supported_flags(tree, wanted) == list(wanted)


def test_a_plain_build_without_tcg_is_built_again(tmp_path: Path) -> None:
    """A plain build stamped before builds got TCG is not found (the guest family needs TCG where
    KVM does not work), so ``qemu build`` makes it again; a variant build (sanitizers, gcov) is
    found without it: only qtest cases run on it."""

    def made(name: str, variant: str, tcg: bool | None) -> None:
        directory = tmp_path / name
        directory.mkdir()
        (directory / build.BINARY_NAME).write_text("")
        stamp = {"version": "10.0.13", "origin": "debian:trixie", "variant": variant}
        (directory / build.STAMP).write_text(json.dumps(stamp | ({} if tcg is None else {"tcg": tcg})))

    made("qemu-10.0.13-debian-trixie", "", None)
    made("qemu-debian-trixie-asan+ubsan", "asan+ubsan", False)
    assert build.find_build("debian:trixie", tmp_path) is None
    found = build.find_build("debian:trixie", tmp_path, "asan+ubsan")
    assert found is not None and not found.tcg
    (tmp_path / "qemu-10.0.13-debian-trixie" / build.STAMP).write_text(
        json.dumps({"version": "10.0.13", "origin": "debian:trixie", "variant": "", "tcg": True})
    )
    found = build.find_build("debian:trixie", tmp_path)
    assert found is not None and found.tcg and found.variant == ""
    assert build.accel_flags("") == ("--enable-tcg",) and build.accel_flags("gcov") == ("--disable-tcg",)


def _commit(repo: Path, path: str, subject: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(subject)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", subject)
    return _git(repo, "rev-parse", "HEAD").strip()


def test_a_git_build_knows_the_9pfs_commits_its_source_holds(tmp_path: Path) -> None:
    """A build from a commit (``qemu build --git``) reads its 9pfs commits' subjects, and the probe's
    version carries them, from the probe cache too: a fix backported past the build's release
    number is had. A stamp from before histories were kept is read once and keeps what it read."""
    repo = tmp_path / "qemu"
    _git(tmp_path, "init", "-q", str(repo))
    _commit(repo, "hw/9pfs/9p.c", "hw/9pfs: an old fix")
    _commit(repo, "hw/9pfs/virtio-9p-device.c", versions.UNPLUG_DRAIN.subjects[0])
    head = _commit(repo, "block/other.c", "block: a commit of another subsystem")
    (tmp_path / "bin").mkdir()
    fake, _ = _counting_fake(tmp_path / "bin", "11.0.3")
    stamp = fake.parent / build.STAMP
    stamp.write_text(json.dumps({"version": "11.0.3", "origin": f"git:{repo}@{head}"}))
    for version in (provision.probe_cached(fake, tmp_path / "cache"), provision.probe_cached(fake, tmp_path / "cache")):
        assert version.version == "11.0.3" and versions.has(version.version, versions.UNPLUG_DRAIN)
        assert version.version.history == {"hw/9pfs: an old fix", *versions.UNPLUG_DRAIN.subjects}
        assert list(versions.beyond_number(version.version)) == ["UNPLUG_DRAIN"]
    assert json.loads(stamp.read_text())["history"] == ["hw/9pfs: an old fix", *versions.UNPLUG_DRAIN.subjects]
    stamp.write_text(json.dumps({"version": "11.0.3", "origin": f"git:{repo}@{head}", "history": ["kept"]}))
    assert build.history_of(fake) == {"kept"}  # read from the stamp, not the repository


def test_a_reverted_commit_is_not_held(tmp_path: Path) -> None:
    """Held is what the last commit about a subject says: a revert undoes it, a revert of that
    (``Reapply``, or older git's ``Revert "Revert ..."``) holds it again, and so on."""
    repo = tmp_path / "qemu"
    _git(tmp_path, "init", "-q", str(repo))
    drain = versions.UNPLUG_DRAIN.subjects[0]
    quoting = 'hw/9pfs: a subject "quoting" a word'
    steps = [
        (drain, [drain]),
        (f'Revert "{drain}"', []),
        (f'Reapply "{drain}"', [drain]),
        (f'Revert "Reapply "{drain}""', []),
        (f'Revert "Revert "Reapply "{drain}"""', [drain]),
        (quoting, [drain, quoting]),
    ]
    for subject, held in steps:
        head = _commit(repo, "hw/9pfs/a.c", subject)
        assert build.source_history(f"git:{repo}@{head}", None) == held, subject
    assert build._held(["X", 'Revert "X"', 'Revert "Revert "X""']) == ["X"]


def test_a_history_that_cannot_be_read_is_not_kept(tmp_path: Path) -> None:
    """A git build whose repository is gone goes by its number, and its stamp is left to be read
    again (a history recorded as empty would stand for good): once the repository is back, it is
    read and kept. A user's tree is not read after its build (it may have moved since)."""
    fake, _ = _counting_fake(tmp_path, "11.0.3")
    stamp, repo = tmp_path / build.STAMP, tmp_path / "qemu"
    stamp.write_text(json.dumps({"version": "11.0.3", "origin": f"git:{repo}@{'0' * 40}", "history": None}))
    assert build.history_of(fake) == frozenset() and json.loads(stamp.read_text())["history"] is None
    _git(tmp_path, "init", "-q", str(repo))
    head = _commit(repo, "hw/9pfs/a.c", "hw/9pfs: back")
    stamp.write_text(json.dumps({"version": "11.0.3", "origin": f"git:{repo}@{head}", "history": None}))
    assert build.history_of(fake) == {"hw/9pfs: back"}
    assert json.loads(stamp.read_text())["history"] == ["hw/9pfs: back"]
    stamp.write_text(json.dumps({"version": "11.0.3", "origin": f"source:{repo}", "history": None}))
    assert build.history_of(fake) == frozenset() and json.loads(stamp.read_text())["history"] is None


def test_a_binary_the_harness_did_not_build_goes_by_its_number(tmp_path: Path) -> None:
    fake, _ = _counting_fake(tmp_path, "11.0.3")
    version = provision.probe(fake).version
    assert version.history == frozenset() and not versions.has(version, versions.UNPLUG_DRAIN)
    (tmp_path / "build.json").write_text("not json")
    assert provision.probe(fake).version.history == frozenset()


def test_a_debian_source_package_s_applied_patches_are_its_history(tmp_path: Path) -> None:
    """``dpkg-source -x`` applies debian/patches through quilt, which lists them in
    .pc/applied-patches: their subjects (``[PATCH n/m]`` tags off, a folded header joined) are the
    build's history, beside its upstream release number. A ``series`` alone (a packaging checkout
    with its patches unapplied) is none."""
    tree = tmp_path / "src"
    patches = tree / "debian" / "patches"
    patches.mkdir(parents=True)
    (patches / "series").write_text("backport.patch\nplain.diff\n")
    (patches / "backport.patch").write_text(
        "From 1234 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nSubject: [PATCH 2/3] hw/9pfs/virtio: drain in-flight PDUs\n"
        " before virtio-9p unrealize\n\nbody\nSubject: not this\n"
    )
    (patches / "plain.diff").write_text("--- a/x\n+++ b/x\n")
    assert build.source_history("debian:trixie", tree) == []
    (tree / ".pc").mkdir()
    (tree / ".pc" / ".quilt_patches").write_text("debian/patches\n")
    (tree / ".pc" / "applied-patches").write_text("backport.patch\nplain.diff\nmissing.patch\n")
    assert build.source_history("debian:trixie", tree) == [
        "hw/9pfs/virtio: drain in-flight PDUs before virtio-9p unrealize"
    ]
    (tree / ".pc" / ".quilt_patches").unlink()  # an older quilt's: its patches in debian/patches all the same
    assert build.source_history("debian:trixie", tree) == [
        "hw/9pfs/virtio: drain in-flight PDUs before virtio-9p unrealize"
    ]
    assert build.source_history("source:/nowhere.tar.xz", None) is None  # not at hand: unknown, not empty


def test_a_checkout_without_its_subprojects_borrows_them_and_keeps_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``qemu build --source`` of a checkout never configured with the network (a fresh clone, a
    fork's CI job): configure runs with --disable-download, so the subprojects it lacks are copied in
    from a donor, fetched once where the cache has none (Debian's source package, faked here: apt is
    the layer below), and kept as its subprojects alone. They are untracked, so the build's key stays
    the same; a checkout that has them is left as it is."""
    tree = tmp_path / "qemu"
    (tree / "subprojects").mkdir(parents=True)
    (tree / "configure").write_text("")
    (tree / "VERSION").write_text("11.1.0\n")
    for name in ("keycodemapdb", "berkeley-softfloat-3", "berkeley-testfloat-3"):
        (tree / "subprojects" / f"{name}.wrap").write_text("[wrap-git]\n")
    (tree / "subprojects" / ".gitignore").write_text("/keycodemapdb\n/berkeley-softfloat-3\n/berkeley-testfloat-3\n")
    (tree / "ui" / "meson.build").parent.mkdir()
    (tree / "ui" / "meson.build").write_text("command: [keymap_gen, 'code-map', '--lang', 'glib2', '@INPUT0@']\n")
    _git(tmp_path, "init", "-q", str(tree))
    _git(tree, "add", ".")
    _git(tree, "commit", "-qm", "v11.1.0")
    key = build.source_key(tree)
    root = tmp_path / "cache"
    root.mkdir()
    fetched: list[str] = []

    def debian_source(suite: str, work: Path, log: Path, *, patched: bool = True) -> Path:
        fetched.append(f"{suite} patched={patched}")
        for name in ("keycodemapdb", "berkeley-softfloat-3", "berkeley-testfloat-3", "dtc"):
            (work / "src" / "subprojects" / name / "tools").mkdir(parents=True)
            (work / "src" / "subprojects" / name / "README").write_text(name)
        (work / "src" / "subprojects" / "keycodemapdb" / "tools" / "keymap-gen").write_text("")
        (work / "src" / "hw").mkdir()
        return work / "src"

    def no_root(log: Path, origin: str) -> None:
        raise ProvisionError("building QEMU needs root for apt-get")

    monkeypatch.setattr(build, "_debian_source", debian_source)
    monkeypatch.setattr(build, "ensure_packages", no_root)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(ProvisionError, match=r"meson subprojects download keycodemapdb berkeley-softfloat-3 b.*root"):
        build._unpack(f"source:{tree}", work, work / "log", root)
    assert git_tree.lacking(tree) and [p.name for p in root.iterdir()] == []  # nothing half-made
    monkeypatch.setattr(build, "ensure_packages", lambda log, origin: fetched.append(origin))
    assert build._unpack(f"source:{tree}", work, work / "log", root) == tree
    assert fetched == ["debian:trixie", "trixie patched=False"]
    assert (tree / "subprojects" / "berkeley-softfloat-3" / "README").read_text() == "berkeley-softfloat-3"
    assert sorted(p.name for p in (root / "donor-debian-trixie" / "src" / "subprojects").iterdir()) == [
        "berkeley-softfloat-3", "berkeley-testfloat-3", "keycodemapdb"
    ]  # fmt: skip
    assert [p.name for p in root.iterdir()] == ["donor-debian-trixie"]  # its work directory is gone
    assert build.source_key(tree) == key and _git(tree, "status", "--porcelain") == ""

    # the donor is fetched once; a tree that has what it wants is not touched
    (tree / "subprojects" / "keycodemapdb" / "README").write_text("the user's own")
    shutil.rmtree(tree / "subprojects" / "berkeley-testfloat-3")
    build._unpack(f"source:{tree}", work, work / "log", root)
    assert fetched == ["debian:trixie", "trixie patched=False"]
    assert (tree / "subprojects" / "keycodemapdb" / "README").read_text() == "the user's own"
    assert (tree / "subprojects" / "berkeley-testfloat-3" / "README").exists()
    assert git_tree.lacking(tree) == []
    assert not list((tree / "subprojects").glob(".*v9p-part"))


def test_an_old_checkout_gets_its_submodules_and_configures_without_updating_them(tmp_path: Path) -> None:
    """A checkout of QEMU 6.1-8.0 (git submodules ui/keycodemapdb, tests/fp/berkeley-*, never
    initialised): the empty submodule directories are filled from the donor, the key stays the same
    (``git diff HEAD`` sees no change in a submodule it never checked out), and configure is told
    not to update them (it would, from the network, in a tree with .git)."""
    tree = tmp_path / "qemu"
    modules = {"ui/keycodemapdb": "keycodemapdb", "tests/fp/berkeley-softfloat-3": "berkeley-softfloat-3",
               "tests/fp/berkeley-testfloat-3": "berkeley-testfloat-3"}  # fmt: skip
    tree.mkdir()
    (tree / ".gitmodules").write_text("".join(f'[submodule "{p}"]\n\tpath = {p}\n\turl = x\n' for p in modules))
    (tree / "configure").write_text("  --with-git-submodules=*)\n")
    (tree / "VERSION").write_text("7.2.0\n")
    _git(tmp_path, "init", "-q", str(tree))
    _git(tree, "add", ".")
    for path in modules:  # gitlinks, as a clone without --recurse-submodules leaves them: empty directories
        (tree / path).mkdir(parents=True)
        _git(tree, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},{path}")
    _git(tree, "commit", "-qm", "v7.2.0")
    key = build.source_key(tree)
    donor = tmp_path / "cache" / "qemu-10.0.13-debian-trixie" / "src"
    for name in modules.values():
        (donor / "subprojects" / name / "tools").mkdir(parents=True)
        (donor / "subprojects" / name / "README").write_text(name)
    (donor / "subprojects" / "keycodemapdb" / "tools" / "keymap-gen").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    build._unpack(f"source:{tree}", work, work / "log", tmp_path / "cache")
    assert all((tree / path / "README").read_text() == name for path, name in modules.items())
    assert (tree / "ui" / "keycodemapdb" / "tools" / "keymap-gen.real").exists()  # wrapped: its enum is older
    assert build.source_key(tree) == key
    assert build.checkout_flags(tree) == ["--with-git-submodules=ignore"]
    for path in modules:  # submodules git manages: configure goes its own way with them
        (tree / path / ".git").write_text("gitdir: x\n")
    assert build.checkout_flags(tree) == []


def test_a_borrowed_subproject_is_whole_or_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy cut short leaves nothing where the subproject goes (the next build copies it again),
    and a keycodemapdb that was copied is wrapped already, whatever fails after it."""
    tree = tmp_path / "tree"
    (tree / "subprojects").mkdir(parents=True)
    (tree / "ui").mkdir()
    (tree / "ui" / "meson.build").write_text("command: [keymap_gen, 'code-map', '--lang', 'glib2', '@INPUT0@']\n")
    for name in git_tree.BORROWED:
        (tree / "subprojects" / f"{name}.wrap").write_text("[wrap-git]\n")
    donor = tmp_path / "donor"
    (donor / "subprojects" / "keycodemapdb" / "tools").mkdir(parents=True)
    (donor / "subprojects" / "keycodemapdb" / "tools" / "keymap-gen").write_text("")
    (donor / "subprojects" / "berkeley-softfloat-3").mkdir()
    (donor / "subprojects" / "berkeley-softfloat-3" / "a.c").write_text("")
    with pytest.raises(ProvisionError, match="berkeley-testfloat-3"):
        git_tree.fill_in(tree, donor)  # the donor lacks the last one
    assert (tree / "subprojects" / "keycodemapdb" / "tools" / "keymap-gen.real").exists()
    assert [p.name for p in git_tree.lacking(tree)] == ["berkeley-testfloat-3"]

    copy = shutil.copytree

    def cut_short(source: Path, dest: Path, **kwargs: Any) -> Any:
        copy(source, dest, **kwargs)
        raise OSError("No space left on device")

    (donor / "subprojects" / "berkeley-testfloat-3").mkdir()
    (donor / "subprojects" / "berkeley-testfloat-3" / "b.c").write_text("")
    monkeypatch.setattr(shutil, "copytree", cut_short)
    with pytest.raises(OSError, match="No space"):
        git_tree.fill_in(tree, donor)
    assert not (tree / "subprojects" / "berkeley-testfloat-3").exists()
    assert sorted(p.name for p in (tree / "subprojects").iterdir() if p.is_dir()) == [
        "berkeley-softfloat-3", "keycodemapdb"
    ]  # fmt: skip
