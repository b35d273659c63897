"""QEMU built with a sanitizer (``qemu build --sanitize``): the environment it runs with, and a
report found in its output, which fails the case it happened in."""

from __future__ import annotations

import re
from pathlib import Path

from harness.qemu.build import TSAN_SUPPRESSIONS

#: Sanitizer settings for a QEMU built with ASan/UBSan (``qemu build --sanitize``), unless the
#: user's environment sets its own: no leak report at exit (QEMU frees little on quit, and a leak
#: report there belongs to no case), UBSan stack traces, and the report on stderr, where the
#: harness reads it (sanitizer_report()).
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:print_summary=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=0",
}
#: ThreadSanitizer (``--sanitize thread``), as QEMU's testing docs run it: no deadlock detector
#: (QEMU's lock order is not one TSan models), more history for reports between worker threads,
#: QEMU's exit status unchanged (a report fails the case it happened in, read from stderr like an
#: ASan report), and QEMU's own suppressions of its known benign races where the build kept them.
TSAN_OPTIONS = "detect_deadlocks=0:history_size=7:exitcode=0:halt_on_error=0"
_SANITIZER_START = re.compile(
    r"^(==\d+==ERROR: \w+Sanitizer|.*: runtime error: |WARNING: ThreadSanitizer: )", re.MULTILINE
)
_SANITIZER_SUMMARY = re.compile(r"^SUMMARY: \w+Sanitizer.*$", re.MULTILINE)


def sanitizer_env(binary: Path) -> dict[str, str]:
    """:data:`SANITIZER_ENV` and TSan's options for ``binary`` (its build's suppressions file)."""
    suppressions = binary.parent / TSAN_SUPPRESSIONS
    extra = f":suppressions={suppressions}" if suppressions.is_file() else ""
    return {**SANITIZER_ENV, "TSAN_OPTIONS": TSAN_OPTIONS + extra}


#: A TSan report is the device's when the place its SUMMARY line names (the first frame of the
#: racing access in QEMU's own code) is in the 9p server or the fsdev layer below it; the others
#: are QEMU core's (util/async.c's lock-free bottom-half list, say, whose plain reads beside
#: atomics TSan reports on every machine, 9p or not, even when a 9p function scheduled the bottom
#: half) and fail no 9p case. Nor does a report whose other access is qtest's own read or write of
#: guest memory: qtest stands in for the guest's CPU, which the virtio protocol orders against the
#: device through the used ring in guest RAM, an ordering TSan cannot see (seen on master: a
#: Tread's preadv into a reply buffer "racing" the harness's read of that buffer's previous reply).
NINEP_FRAMES = re.compile(r"^SUMMARY: ThreadSanitizer: .*(\bhw/9pfs/|\bfsdev/)", re.MULTILINE)
GUEST_ACCESS = re.compile(r"\bqtest_process_command\b")


def sanitizer_report(output: str) -> str | None:
    """The first report in QEMU's ``output`` that a case answers for (from its first line to its
    SUMMARY line, or to the end), or None: any AddressSanitizer or UndefinedBehaviorSanitizer
    report; a ThreadSanitizer report only when it names 9pfs code (:data:`NINEP_FRAMES`) and
    its other access is not qtest's access to guest memory (:data:`GUEST_ACCESS`)."""
    for found in _SANITIZER_START.finditer(output):
        summary = _SANITIZER_SUMMARY.search(output, found.start())  # no copy of the rest per report
        report = output[found.start() : summary.end() if summary else len(output)]
        tsan = report.startswith("WARNING: ThreadSanitizer")
        if not tsan or (NINEP_FRAMES.search(report) and not GUEST_ACCESS.search(report)):
            return report
    return None
