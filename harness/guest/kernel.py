"""Guest kernels: Debian's linux-image packages, downloaded with apt and unpacked (never
installed) into the cache, or a kernel the user names.

``6.1`` is bookworm's kernel (the ``linux-image-amd64`` meta package names the current one),
``6.12`` the newer one bookworm carries (``linux-image-6.12-amd64``); a full package name
(``linux-image-6.1.0-57-amd64``) is taken as it is. The plain ``-amd64`` flavour has 9p as
modules; ``-cloud-amd64`` has no 9p at all and is refused."""

from __future__ import annotations

import lzma
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ProvisionError
from harness.qemu.shell import locked, sh

#: short name -> the meta package whose dependency is the current kernel of that series
SERIES = {"6.1": "linux-image-amd64", "6.12": "linux-image-6.12-amd64"}
#: what ``guest`` boots unless told otherwise: Debian 12's own kernel
DEFAULT_KERNEL = "6.1"
#: the modules a v9fs mount over virtio-pci needs, where the kernel has them as modules (the
#: rest of each one's dependencies are read from its modinfo)
WANTED_MODULES = ("virtio_pci", "9pnet_virtio", "9p")


@dataclass(frozen=True)
class Kernel:
    """A bootable kernel: its image, its release (``6.1.0-57-amd64``) and its modules (None: a
    kernel with what a mount needs built in)."""

    image: Path
    release: str
    modules: Path | None
    #: where it came from: a Debian package name, or the path the user gave
    origin: str

    def config(self) -> dict[str, str]:
        """The kernel's build configuration (``CONFIG_9P_FS`` -> ``m``), where it is known."""
        found = self.image.parent / f"config-{self.release}"
        if not found.is_file():
            return {}
        pairs = (line.split("=", 1) for line in found.read_text().splitlines() if line.startswith("CONFIG_"))
        return dict(pair for pair in pairs if len(pair) == 2)

    def load_order(self) -> list[Path]:
        """The modules a mount needs, each after the ones it depends on (their ``depends=``)."""
        if self.modules is None:
            return []
        by_name: dict[str, Path] = {}
        for path in self.modules.rglob("*.ko*"):
            by_name.setdefault(re.sub(r"\.ko(\.xz|\.zst|\.gz)?$", "", path.name).replace("-", "_"), path)
        ordered: list[Path] = []

        def add(name: str) -> None:
            path = by_name.get(name)
            if path is None or path in ordered:
                return  # built in (6.12 has virtio_pci in the image), or already there
            for needed in depends(module_bytes(path)):
                add(needed)
            ordered.append(path)

        for name in WANTED_MODULES:
            add(name)
        return ordered


def module_bytes(path: Path) -> bytes:
    """A module's ELF, decompressed where Debian ships it compressed (6.12's ``.ko.xz``)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix in (".zst", ".gz"):
        raise ProvisionError(f"{path}: a {path.suffix} module; the harness unpacks .ko and .ko.xz")
    return data


def depends(module: bytes) -> list[str]:
    """The ``depends=`` of a module's modinfo."""
    found = re.search(rb"(?:^|\0)depends=([^\0]*)\0", module)
    return [name.decode() for name in found.group(1).split(b",") if name] if found else []


def package_for(name: str) -> str:
    """``6.1`` / ``6.12`` / a package name -> the concrete linux-image package to download (a meta
    package, such as ``linux-image-amd64``, depends on the current one)."""
    wanted = SERIES.get(name, name)
    if "cloud" in wanted:
        raise ProvisionError(f"{name}: the -cloud-amd64 flavour has no 9p (CONFIG_NET_9P is not set)")
    if not re.fullmatch(r"linux-image-[\w.+~-]+", wanted):
        raise ProvisionError(f"{name}: name 6.1, 6.12, a linux-image-*-amd64 package, or a kernel image's path")
    found = subprocess.run(["apt-cache", "depends", wanted], capture_output=True, text=True, check=False)
    if found.returncode != 0 or not found.stdout.strip():
        raise ProvisionError(
            f"{name}: apt knows no package {wanted} ({found.stderr.strip() or 'no answer'}; `apt-get update` "
            f"may be needed); name one of {', '.join(SERIES)}, a linux-image-*-amd64 package, or --kernel PATH"
        )
    meta = re.search(r"^\s*Depends: (linux-image-\S+)", found.stdout, re.M)
    return meta.group(1) if meta else wanted


def debian_kernel(name: str, cache: Path) -> Kernel:
    """The kernel of Debian package (or series) ``name``, downloaded and unpacked into ``cache``
    once."""
    package = package_for(name)
    root = cache / "guest-kernels"
    directory = root / package
    with locked(root):
        if not (directory / ".unpacked").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            log = directory / "fetch.log"
            try:
                sh(["apt-get", "download", package], log, cwd=directory)
                debs = list(directory.glob("*.deb"))
                if not debs:
                    raise ProvisionError(f"apt-get download {package} left no .deb; log {log}")
                sh(["dpkg-deb", "-x", str(debs[0]), str(directory / "root")], log)
                debs[0].unlink()
            except ProvisionError as err:
                raise ProvisionError(
                    f"{err}\n(`apt-get update` may be needed; the guest's kernel comes from Debian's registry)"
                ) from err
            (directory / ".unpacked").touch()
    images = sorted((directory / "root" / "boot").glob("vmlinuz-*"))
    if not images:
        raise ProvisionError(f"{package} holds no /boot/vmlinuz-*")
    release = images[0].name.removeprefix("vmlinuz-")
    return Kernel(images[0], release, directory / "root" / "lib" / "modules" / release, package)


def own_kernel(image: Path, modules: Path | None) -> Kernel:
    """A kernel the user names (``--kernel``): its image, and its modules directory if 9p and
    virtio are modules in it (``--modules``, or ``lib/modules/RELEASE`` beside a Debian-like
    tree)."""
    if not image.is_file():
        raise ProvisionError(f"--kernel {image}: no such file")
    release = image.name.removeprefix("vmlinuz-") if image.name.startswith("vmlinuz-") else image.name
    if modules is None:
        beside = image.parent.parent / "lib" / "modules" / release
        modules = beside if beside.is_dir() else None
    if modules is not None and not modules.is_dir():
        raise ProvisionError(f"--modules {modules}: no such directory")
    return Kernel(image, release, modules, str(image))


def find_kernel(name: str | None, cache: Path, modules: Path | None = None) -> Kernel:
    """``name``: a series (``6.1``, ``6.12``), a package, or a path to a kernel image."""
    name = name or DEFAULT_KERNEL
    if "/" in name or Path(name).is_file():
        return own_kernel(Path(name).expanduser().absolute(), modules)
    return debian_kernel(name, cache)
