"""The guest layer (harness/guest) and the guest family's judging (fixtures/guest.py): the pieces
on their own, and one real boot on the QEMU under test that hands back everything it promises
and leaves nothing behind."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from fixtures.guest import Config, host_tree, normalised, parse
from harness.errors import ProvisionError
from harness.guest import initramfs, kernel, vm
from harness.qemu import pjdfstest
from harness.qemu.config import LocalFs
from harness.qemu.provision import cache_root
from harness.tools import guest_pjdfstest

REPO = Path(__file__).resolve().parents[1]


def test_console_blocks_and_lines_are_read_whatever_surrounds_them() -> None:
    """Kernel lines outside the markers are ignored; a block is base64 up to END; FAIL and
    PROGRESS lines are collected in order."""
    console = "\n".join([
        "[    1.0] a kernel line", "@@V9P-BOOTED 1.5", "@@V9P-FAIL insmod x: no", "@@V9P-PROGRESS one",
        "@@V9P-STATUS 3", "@@V9P-STDOUT", "aGVs", "bG8K", "@@V9P-END", "[ 2.0] another", "@@V9P-PROGRESS two\r",
        "@@V9P-DONE",
    ])  # fmt: skip
    marks = vm.parse_console(console)
    assert marks["FAIL"] == ["insmod x: no"] and marks["PROGRESS"] == ["one", "two"]
    assert marks["STATUS"] == ["3"] and "DONE" in marks
    assert vm._decoded(marks["STDOUT"]) == b"hello\n"


def test_module_order_follows_depends_and_unpacks_xz(tmp_path: Path) -> None:
    """The modules a mount needs, each after what its modinfo's depends= names; a built-in one
    (absent) is skipped; .ko.xz is unpacked."""
    modules = tmp_path / "lib" / "modules" / "6.99.0"
    (modules / "kernel").mkdir(parents=True)
    deps = {"9p": "9pnet,netfs", "9pnet_virtio": "9pnet,virtio_ring", "9pnet": "", "netfs": "", "virtio_ring": ""}
    for name, depends in deps.items():
        body = b"\x7fELF junk\0license=GPL\0depends=" + depends.encode() + b"\0vermagic=6.99\0"
        if name == "netfs":
            (modules / "kernel" / f"{name}.ko.xz").write_bytes(lzma.compress(body))
        else:
            (modules / "kernel" / f"{name}.ko").write_bytes(body)
    found = kernel.Kernel(tmp_path / "vmlinuz-6.99.0", "6.99.0", modules, "test")
    names = [path.name for path in found.load_order()]
    assert names.index("9pnet.ko") < names.index("9pnet_virtio.ko") and names.index("virtio_ring.ko") < names.index(
        "9pnet_virtio.ko"
    )
    assert names.index("netfs.ko.xz") < names.index("9p.ko") and len(names) == len(set(names)) == 5
    assert kernel.module_bytes(modules / "kernel" / "netfs.ko.xz").startswith(b"\x7fELF")


def test_kernel_names_are_checked_before_anything_is_fetched(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="no 9p"):
        kernel.package_for("linux-image-6.1.0-57-cloud-amd64")
    assert kernel.package_for("linux-image-6.1.0-57-amd64") == "linux-image-6.1.0-57-amd64"
    with pytest.raises(ProvisionError, match="no such file"):
        kernel.find_kernel(str(tmp_path / "bzImage"), tmp_path)


def test_a_binary_without_tcg_or_kvm_is_refused_saying_which(tmp_path: Path) -> None:
    fake = tmp_path / "qemu-system-x86_64"
    fake.write_text('#!/bin/sh\nprintf "Accelerators supported in QEMU binary:\\nqtest\\n"\n')
    fake.chmod(0o755)
    assert vm.accelerators(fake) == {"qtest"}
    some = kernel.Kernel(tmp_path / "vmlinuz", "x", None, "test")
    with pytest.raises(ProvisionError, match=r"has no TCG .*accelerators: qtest"):
        vm.choose_accel(fake, some, tmp_path, "tcg")
    with pytest.raises(ProvisionError, match="has no TCG"):  # auto: no KVM in it either
        vm.choose_accel(fake, some, tmp_path, "auto")


def test_the_kvm_probe_gives_up_on_a_silent_boot_early(tmp_path: Path) -> None:
    """A boot that prints its first line and then panics works; one silent past the first-line
    limit (a vCPU spinning in the host kernel), one that stops after its first line, one whose
    console never stops talking, and one whose QEMU exits before the panic (an abort) do not.
    Each is over once it is decided (no sooner, no later), and its QEMU is gone after."""
    pid_file = tmp_path / "pid"
    first, whole = 1.5, 4.0
    boots = {  # script, works, how long its verdict may take: the limits apart by more than a loaded host's delays
        "panics": ("echo 'Linux version 6.1'; sleep 0.2; echo 'Kernel panic - not syncing'; exec sleep 30",
                   True, 0.2, first),
        "silent": ("exec sleep 30", False, first, whole),
        "stalls": ("echo 'Linux version 6.1'; exec sleep 30", False, whole, whole + 2.5),
        "talks": ("echo 'Linux version 6.1'; exec yes 'rcu: INFO: rcu_sched self-detected stall'", False, whole,
                  whole + 2.5),
        "aborts": ("echo 'Linux version 6.1'; echo 'error: failed to set MSR 0x10a' >&2; kill -ABRT $$", False, 0.0,
                   first),
    }  # fmt: skip
    for what, (script, works, least, most) in boots.items():
        start = time.monotonic()
        argv = ["sh", "-c", f'echo $$ > {pid_file}; exec sh -c "{script}"']
        assert vm.boots_to_panic(argv, first, whole) is works, what
        took = time.monotonic() - start
        assert least <= took <= most, (what, took)
        time.sleep(0.1)
        assert not Path(f"/proc/{pid_file.read_text().strip()}").exists(), what  # killed and reaped


def test_the_archive_is_newc_as_the_kernel_reads_it() -> None:
    """Each entry: the 070701 header of 13 eight-digit hex fields, its NUL-ended name and its data
    each padded to 4 bytes; directories made on the way; the TRAILER!!! entry last."""
    archive = initramfs.Archive()
    archive.file("a/b/file", b"12345", 0o640)
    archive.symlink("a/link", "b/file")
    raw = archive.bytes()
    entries, at = [], 0
    while True:
        header = initramfs.NEWC.parse(raw[at : at + 110])
        name = raw[at + 110 : at + 110 + header.namesize - 1].decode()
        at += 110 + header.namesize
        at += -at % 4
        data = raw[at : at + header.filesize]
        at += header.filesize
        at += -at % 4
        if name == "TRAILER!!!":
            break
        entries.append((name, header.mode, data))
    assert entries == [
        ("a", 0o40755, b""), ("a/b", 0o40755, b""), ("a/b/file", 0o100640, b"12345"), ("a/link", 0o120777, b"b/file"),
    ]  # fmt: skip
    assert at == len(raw) and raw[:6] == b"070701"


def test_a_run_hands_back_output_status_kernel_log_and_trace(qemu_under_test: QemuUnderTest, tmp_path: Path) -> None:
    """One boot of Debian's kernel on the QEMU under test: the script's stdout, stderr and status,
    the kernel's log, QEMU's v9fs trace, the file it wrote on the host; and afterwards no QEMU
    and no directory of the run."""
    export = tmp_path / "export"
    export.mkdir()
    before = set(Path(tempfile.gettempdir()).glob("v9p-guest-*"))
    run = vm.run(
        qemu_under_test.binary, kernel.find_kernel(None, cache_root()), LocalFs(export, "passthrough"),
        "echo out; echo err >&2; echo made > /mnt/export/f; progress half way; exit 3",
        cache=cache_root(), timeout=60,
    )  # fmt: skip
    assert (run.status, run.stdout, run.stderr, run.failures) == (3, b"out\n", b"err\n", []), run.explain()
    assert "9p" in run.dmesg and "v9fs_attach" in run.trace and run.progress == ["half way"]
    assert (export / "f").read_text() == "made\n"
    assert run.mounted_after is not None and run.mounted_after < run.seconds
    assert set(Path(tempfile.gettempdir()).glob("v9p-guest-*")) == before
    # no QEMU of this run (its -fsdev names this export) outlives it
    assert subprocess.run(["pgrep", "-f", f"path={export}"], capture_output=True, check=False).stdout == b""


def test_the_command_line_runs_a_command_and_returns_its_status(qemu_under_test: QemuUnderTest) -> None:
    binary = str(qemu_under_test.binary)
    found = subprocess.run(
        [sys.executable, "-m", "harness", "guest", "--qemu-binary", binary, "--", "ls /mnt; exit 7"],
        capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
    )  # fmt: skip
    assert found.returncode == 7 and "export" in found.stdout, found.stderr
    assert "mounted after" in found.stderr


def test_a_synth_export_is_its_root_alone_and_takes_no_host_options(qemu_under_test: QemuUnderTest) -> None:
    """``--synth``: the guest mounts QEMU's synth backend, whose root (no qtest, no test tree)
    lists "." and ".." alone; options that need a host directory are refused before any boot."""
    binary = str(qemu_under_test.binary)
    refused = subprocess.run(
        [sys.executable, "-m", "harness", "guest", "--qemu-binary", binary, "--synth", "--export", "/tmp"],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "--synth exports no host directory" in refused.stdout + refused.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "harness", "guest", "--qemu-binary", binary, "--synth", "--", "ls -a /mnt/export"],
        capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
    )  # fmt: skip
    assert listed.returncode == 0 and listed.stdout.split() == [".", ".."], listed.stdout + listed.stderr


def test_host_tree_reads_a_mapped_node_as_its_client_sees_it(tmp_path: Path) -> None:
    """The mode and owner a mapped-xattr export keeps in user.virtfs.*, a symlink kept as a file
    holding its target: the lines the guest's manifest prints for them."""
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "l").write_bytes(b"f")
    (tmp_path / "f").chmod(0o600)
    try:
        os.setxattr(tmp_path / "f", "user.virtfs.mode", (0o100751).to_bytes(4, "little"))
        os.setxattr(tmp_path / "f", "user.virtfs.uid", (1000).to_bytes(4, "little"))
        os.setxattr(tmp_path / "l", "user.virtfs.mode", (0o120777).to_bytes(4, "little"))
    except OSError as err:
        pytest.skip(f"no user xattrs on {tmp_path}'s filesystem: {err}")
    gid = os.getgid()
    assert host_tree(tmp_path, "mapped-xattr") == [
        f"f f 0751 1000:{gid} 3", "l l f", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  f",
    ]  # fmt: skip


def test_batch_output_is_parsed_per_program_and_place() -> None:
    text = "\n".join([
        "@@P ls export begin", "| a line", "@@P ls export status 0 12", "> f a 0644 0:0 1", "@@P ls export end",
        "@@P ls local begin", "@@P ls local status 137", "@@P ls local end",
    ])  # fmt: skip
    found = parse(text)
    assert (found["ls", "export"].status, found["ls", "export"].output, found["ls", "export"].tree) == (
        0, "a line\n", ["f a 0644 0:0 1"],
    )  # fmt: skip
    assert found["ls", "local"].status == 137
    assert normalised("/mnt/second/ls/x /tmp/local/ls", Config("9p2000.L", "none"), "ls") == "$D/x $D"


def test_pjdfstest_in_the_guest_is_read_per_file_and_reported() -> None:
    """--pjdfstest: each .t's TAP between its markers is read as the posix family reads it; a
    failing check, a short run and a .t the run never reached are each reported, a clean one not."""
    out = "\n".join([
        "noise before", f"{guest_pjdfstest.BEGIN} chmod/00", "1..3", "ok 1", "ok 2", "ok 3",
        f"{guest_pjdfstest.END} chmod/00 0", f"{guest_pjdfstest.BEGIN} link/00", "1..3", "ok 1",
        "not ok 2 - tried 'link a b', expected 0, got EPERM", "ok 3", f"{guest_pjdfstest.END} link/00 1",
        f"{guest_pjdfstest.BEGIN} open/00", "1..4", "ok 1", f"{guest_pjdfstest.END} open/00 124",
    ])  # fmt: skip
    taps = guest_pjdfstest.results(out)
    assert taps["chmod/00"].ok and taps["link/00"].failed == {2: "tried 'link a b', expected 0, got EPERM"}
    assert (taps["open/00"].planned, taps["open/00"].ran, taps["open/00"].status) == (4, 1, 124)
    table, clean = guest_pjdfstest.report(taps, ["chmod/00", "link/00", "open/00", "rename/00"])
    assert not clean and "chmod/00" not in table and "got EPERM" in table and "no result" in table
    assert table.endswith("1 of 4 .t files passed")
    assert guest_pjdfstest.report({"chmod/00": taps["chmod/00"]}, ["chmod/00"]) == ("1 of 1 .t files passed", True)


def test_pjdfstest_selection_names_files_and_directories(tmp_path: Path) -> None:
    for name in ("chmod/00.t", "chmod/01.t", "chown/00.t", "misc.sh"):
        (tmp_path / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / name).write_text("")
    assert guest_pjdfstest.chosen(tmp_path, []) == ["chmod/00", "chmod/01", "chown/00"]
    assert guest_pjdfstest.chosen(tmp_path, ["chmod", "chown/00.t"]) == ["chmod/00", "chmod/01", "chown/00"]
    with pytest.raises(ProvisionError, match="no pjdfstest"):
        guest_pjdfstest.chosen(tmp_path, ["chm"])


def test_pjdfstest_json_prints_the_table_the_run_printed(tmp_path: Path) -> None:
    taps = {"chmod/00": pjdfstest_tap(3, {}), "link/00": pjdfstest_tap(3, {2: "got EPERM"})}
    names = ["chmod/00", "link/00", "open/00"]
    guest_pjdfstest.write_json(tmp_path / "r.json", taps, names, {"security_model": "passthrough"})
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["security_model"] == "passthrough" and data["chosen"] == names
    assert guest_pjdfstest.text_of_json(data) == guest_pjdfstest.report(taps, names)[0]


def pjdfstest_tap(planned: int, failed: dict[int, str]) -> pjdfstest.Tap:
    return pjdfstest.Tap(planned, planned - len(failed), failed, "", 1 if failed else 0)


def test_a_guest_that_prints_nothing_is_killed_after_the_boot_allowance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A QEMU whose guest says nothing (a boot that hung) is killed BOOT_ALLOWANCE seconds in,
    not at the run's whole deadline; one that says BOOTED is left to its deadline."""
    monkeypatch.setattr(vm, "BOOT_ALLOWANCE", 0.5)
    hung = subprocess.Popen(["sleep", "60"])
    start = time.monotonic()
    assert vm._wait(hung, tmp_path / "console", start, 3600.0) == (None, [])
    assert time.monotonic() - start < 10
    console = tmp_path / "console2"
    console.write_text("@@V9P-BOOTED 1.0\n")
    booted = subprocess.Popen(["sleep", "1.5"])
    status, moments = vm._wait(booted, console, time.monotonic(), 3600.0)
    assert status == 0 and [m.mark for m in moments] == ["BOOTED 1.0"]
