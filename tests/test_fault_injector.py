"""The fault injector (harness/fault) in a real process: the library preloaded into a Python
child, armed from here, fails exactly the call it is aimed at, cuts a read short with the file's
own bytes, records what it sees, and stays out of the way when disarmed; its control block's
layout is the C struct's."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.fault import control
from harness.fault.control import CONTROL, Fault, Injector
from harness.fault.library import SOURCE, preload_library

#: the child's work: each step's outcome ("ok", the bytes read, or the errno's name), as JSON
CHILD = textwrap.dedent("""
    import errno, json, os, sys
    root, out = sys.argv[1], []
    def attempt(step):
        try:
            got = step()
            out.append(got.hex() if isinstance(got, bytes) else "ok")
        except OSError as err:
            out.append(errno.errorcode[err.errno])
    for name in ("a", "a", "a", "b"):
        attempt(lambda: os.close(os.open(os.path.join(root, name), os.O_RDONLY)))
    fd = os.open(os.path.join(root, "a"), os.O_RDONLY)
    buffer = bytearray(8)
    attempt(lambda: bytes(buffer[: os.preadv(fd, [buffer], 0)]))
    os.close(fd)
    attempt(lambda: os.close(os.open(os.path.join(root, "..", "outside"), os.O_RDONLY)))
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return preload_library(tmp_path_factory.mktemp("fault-cache"))


@pytest.fixture
def injector(tmp_path: Path) -> Iterator[Injector]:
    export = tmp_path / "export"
    export.mkdir()
    (export / "a").write_bytes(b"abcdefgh")
    (export / "b").write_bytes(b"")
    (tmp_path / "outside").write_bytes(b"")
    made = Injector.create(tmp_path, export)
    yield made
    made.close()


def _run(injector: Injector, library: Path) -> list[str]:
    env = injector.env(library, dict(os.environ))
    done = subprocess.run([sys.executable, "-c", CHILD, str(injector.root)], env=env, capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    result: list[str] = json.loads(done.stdout)
    return result


def test_the_nth_call_on_its_path_fails_and_no_other(injector: Injector, library: Path) -> None:
    with injector.armed(Fault("open", errno.EACCES, nth=2, path="a")) as seen:
        outcomes = _run(injector, library)
    assert outcomes == ["ok", "EACCES", "ok", "ok", "6162636465666768", "ok"]
    assert seen.fired == 1
    injected = [call for call in seen.calls if call.done]
    assert [(call.call, call.path, call.errno) for call in injected] == [("open", "a", errno.EACCES)]


def test_a_short_read_moves_the_files_own_bytes(injector: Injector, library: Path) -> None:
    with injector.armed(Fault("preadv", short=3)) as seen:
        outcomes = _run(injector, library)
    assert outcomes[4] == b"abc".hex() and seen.fired == 1
    assert any(call.call == "preadv" and call.result == 3 and call.done == "short" for call in seen.calls)


def test_a_recording_names_each_call_below_the_export_and_nothing_outside(injector: Injector,
                                                                          library: Path) -> None:  # fmt: skip
    with injector.armed() as seen:
        assert _run(injector, library) == ["ok", "ok", "ok", "ok", "6162636465666768", "ok"]
    assert seen.fired == 0
    opened = [call.path for call in seen.calls if call.call == "open"]
    assert opened == ["a", "a", "a", "b", "a"], seen.calls
    assert all(not call.path.startswith("..") for call in seen.calls)
    assert any(call.call == "preadv" and call.result == 8 for call in seen.calls)


def test_disarmed_it_records_nothing_and_fails_nothing(injector: Injector, library: Path) -> None:
    log = injector.directory / control.LOG_FILE
    assert _run(injector, library) == ["ok", "ok", "ok", "ok", "6162636465666768", "ok"]
    assert log.stat().st_size == 0


def test_the_control_block_is_laid_out_as_the_c_struct(tmp_path: Path) -> None:
    probe = tmp_path / "layout.c"
    probe.write_text(f'#include "{SOURCE}"\n#include <stddef.h>\nint main(void) {{\n'
                     + "".join(f'    printf("{name} %zu\\n", offsetof(struct control, {name}));\n'
                               for name in ("mode", "err", "nth", "seen", "fired", "short_len", "call", "root", "path"))
                     + '    printf("size %zu\\n", sizeof(struct control));\n    return 0;\n}\n')  # fmt: skip
    binary = tmp_path / "layout"
    subprocess.run(["cc", "-o", str(binary), str(probe), "-ldl"], check=True, capture_output=True)
    printed = dict(line.split() for line in subprocess.run([str(binary)], capture_output=True, text=True,
                                                           check=True).stdout.splitlines())  # fmt: skip
    offsets, at = {}, 0
    for sub in CONTROL.subcons:
        offsets[sub.name] = at
        at += sub.sizeof()
    assert {name: int(value) for name, value in printed.items() if name != "size"} == {
        name: offsets[name] for name in printed if name != "size"}  # fmt: skip
    assert int(printed["size"]) == CONTROL.sizeof()
    assert (offsets["mode"], offsets["seen"], offsets["fired"]) == (control.MODE_AT, control.SEEN_AT, control.FIRED_AT)


@pytest.mark.parametrize("fault", [Fault("openat", errno.EIO, 3, "d/f"), Fault("preadv", nth=2, short=5),
                                   Fault("lsetxattr", errno.ENOSPC)])  # fmt: skip
def test_a_fault_is_written_as_it_is_read(fault: Fault) -> None:
    assert Fault.parse(str(fault)) == fault
