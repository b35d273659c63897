"""-fsdev local options as QEMU checks them at start-up (local_parse_opts()): a missing or unknown
security_model, an unknown multidevs value, no path, fmode/dmode outside the mapped models, each
refused with its own message before the guest runs; and fmode/dmode, where they are allowed, the
host modes of what the client creates."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.place import Place
from harness.errors import QEMUStartError
from harness.qemu.config import MachineConfig, SynthFs
from harness.qemu.machine import Machine

#: the -fsdev options (path is the case's own directory where given) -> what QEMU says
REFUSED = {
    "no_security_model": ("local,id=bad,path={path}", "security_model property not set"),
    "bogus_security_model": ("local,id=bad,path={path},security_model=bogus",
                             "invalid security_model property 'bogus'"),
    "bogus_multidevs": ("local,id=bad,path={path},security_model=none,multidevs=bogus",
                        "invalid multidevs property 'bogus'"),
    "no_path": ("local,id=bad,security_model=none", "path property not set"),
    "fmode_passthrough": ("local,id=bad,path={path},security_model=passthrough,fmode=0600",
                          "fmode is only valid for mapped security modes"),
    "dmode_none": ("local,id=bad,path={path},security_model=none,dmode=0700",
                   "dmode is only valid for mapped security modes"),
}  # fmt: skip


@case_path("fsdev_options/refused/{option}", backends=["local"], option=list(REFUSED))
def test_bad_fsdev_option_stops_qemu(qemu_under_test: QemuUnderTest, tmp_path: Path, backend: str, option: str) -> None:
    """QEMU does not start, and its message names the option."""
    spec, message = REFUSED[option]
    config = MachineConfig(binary=qemu_under_test.binary, fs=SynthFs(), accel=qemu_under_test.probe.accel,
                           extra_args=("-fsdev", spec.format(path=tmp_path)))  # fmt: skip
    with pytest.raises(QEMUStartError) as refused:
        Machine(config).launch()
    assert message in str(refused.value), str(refused.value)


@pytest.mark.fsdev(fmode="0640", dmode="0750")
@case_path("fsdev_options/fmode_dmode/{security_model}", backends=["local"],
           security_model=["mapped-xattr", "mapped-file"])  # fmt: skip
def test_fmode_dmode_are_the_host_modes(place: Place, security_model: str) -> None:
    """Under a mapped model the host file of what the client creates has fmode (0640 here, 0600 by
    default) and a directory dmode (0750), whatever mode the client asked for; the client still
    sees its own."""
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    p9.lcreate(fid, "file", os.O_RDWR, 0o604)
    p9.clunk(fid)
    p9.mkdir(place.fid, "dir", 0o711)
    host = {name: stat.S_IMODE(place.host_path(name).lstat().st_mode) for name in ("file", "dir")}
    assert host == {"file": 0o640, "dir": 0o750}
    for name, mode in (("file", 0o604), ("dir", 0o711)):
        fid = p9.walk_fid(place.fid, [name])
        assert stat.S_IMODE(p9.getattr(fid).mode) == mode
        p9.clunk(fid)
