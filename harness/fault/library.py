"""The injector's library (harness/fault/preload.c), built once per source into the harness's
cache with the C compiler; a build of the same source is shared by every process and run."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from harness.errors import HarnessError

SOURCE = Path(__file__).with_name("preload.c")
CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-attribute-alias")


class InjectorBuildError(HarnessError):
    """The injector's library could not be built."""


def preload_library(cache: Path) -> Path:
    """The library built from :data:`SOURCE`, in ``cache`` (built there first if it is not)."""
    source = SOURCE.read_bytes()
    built = cache / f"fault-preload-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if built.is_file():
        return built
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise InjectorBuildError(f"no C compiler to build the fault injector from {SOURCE} (apt install gcc)")
    cache.mkdir(parents=True, exist_ok=True)
    partial = built.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run([compiler, *CFLAGS, "-o", str(partial), str(SOURCE), "-ldl"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise InjectorBuildError(f"building the fault injector failed:\n{done.stderr.strip()}")
    os.replace(partial, built)  # whole or absent: another worker may build it at the same time
    return built
