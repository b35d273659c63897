"""The harness's one error tree.

Every exception the harness raises on purpose is a :class:`HarnessError`.  None of them is an
``OSError``: an Rlerror from the server is data about the server, not a failure of the host.

::

    HarnessError
     ├── HarnessMisuse             the harness used out of order: a bug in a case or the harness,
     │                             never blamed on QEMU
     ├── ProvisionError            no usable QEMU binary, or the build failed
     ├── QEMUError                 the QEMU process
     │    ├── QEMUStartError       QEMU did not come up (argv, status, stderr tail)
     │    └── QEMUExited           QEMU died while we were talking to it
     ├── QTestError                the qtest line protocol
     │    ├── QTestFail            QEMU answered "FAIL ..." or "ERR ..."
     │    ├── QTestProtocolError   a reply line we cannot parse
     │    ├── QTestTimeout         no reply line in time
     │    └── QTestDisconnected    the socket closed
     ├── DeviceError               PCI / virtio driver
     │    ├── DeviceNotFound       no virtio-9p function on the bus
     │    ├── NegotiationError     status or feature handshake refused
     │    ├── DeviceNeedsReset     the device set DEVICE_NEEDS_RESET (0x40)
     │    ├── RingFull             no free descriptors for a chain
     │    └── GuestMemoryError     allocator out of memory / double free / leak
     ├── P9Error                   9P layer
     │    ├── P9Rlerror            the server answered Rlerror (or Rerror); carries errno
     │    ├── P9ProtocolError      bad tag, wrong reply type, size mismatch, undecodable frame
     │    ├── P9Timeout            a request got no reply within the limit
     │    ├── P9StateError         the session used out of order (attach before version, ...)
     │    └── ReproducerError      a reproducer file cut, changed, or naming what the harness lacks
     └── LeakError                 fids, tags, descriptors or guest buffers left at close (any layer)

Wrap at layer boundaries with ``raise ... from err`` so the whole story stays in the traceback.
"""

from __future__ import annotations

import errno as _errno
import os
import time
from collections.abc import Sequence


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""


class HarnessMisuse(HarnessError):
    """The harness was used out of order (``connect()`` before ``spawn()``, qtest of a QEMU never
    started): a bug of the caller, not a fault of QEMU."""


class ProvisionError(HarnessError):
    """No usable QEMU binary could be found or built."""


class QEMUError(HarnessError):
    """A problem with the QEMU process itself; carries argv, exit status and stderr tail."""

    def __init__(
        self, message: str, *, argv: Sequence[str] = (), status: int | None = None, output_tail: str = ""
    ) -> None:
        self.message = message
        self.argv = list(argv)
        self.status = status
        self.output_tail = output_tail
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [self.message]
        if self.status is not None:
            parts.append(f"exit status: {describe_status(self.status)}")
        if self.argv:
            parts.append("argv: " + " ".join(self.argv))
        if self.output_tail:
            parts.append("stderr tail:\n" + self.output_tail.rstrip())
        return "\n".join(parts)

    @property
    def crashed(self) -> bool:
        """True when QEMU died of a signal other than the ones we send to stop it."""
        return self.status is not None and self.status < 0


class QEMUStartError(QEMUError):
    """QEMU exited or hung before both the qtest and the QMP connection were up."""


class QEMUExited(QEMUError):
    """QEMU died while the harness was using it."""


def describe_status(status: int | None) -> str:
    """Popen-style return code as words: ``0``, ``1``, ``killed by SIGKILL (-9)``; None (no exit
    status: the process has not ended) is ``still running``."""
    if status is None:
        return "still running"
    if status >= 0:
        return str(status)
    import signal

    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"killed by {name} ({status})"


class QTestError(HarnessError):
    """The qtest conversation went wrong."""


class QTestFail(QTestError):
    """QEMU refused a qtest command with ``FAIL`` or ``ERR``."""

    def __init__(self, command: str, reply: str) -> None:
        self.command = command
        self.reply = reply
        super().__init__(f"qtest {command!r} -> {reply!r}")


class QTestProtocolError(QTestError):
    """A reply line that does not fit the command sent."""


class QTestTimeout(QTestError):
    """No reply line arrived within the socket timeout."""


class QTestDisconnected(QTestError):
    """The qtest socket closed: QEMU has most likely died."""


class DeviceError(HarnessError):
    """The PCI or virtio layer found the device in an unexpected state."""


class DeviceNotFound(DeviceError):
    """No matching PCI function."""


class NegotiationError(DeviceError):
    """Status or feature negotiation did not read back as the spec requires."""


class DeviceNeedsReset(DeviceError):
    """The device set DEVICE_NEEDS_RESET: QEMU called virtio_error()."""

    def __init__(self, status: int, output_tail: str = "") -> None:
        self.status = status
        self.output_tail = output_tail
        message = f"virtio device status {status:#04x} has DEVICE_NEEDS_RESET (0x40) set"
        if output_tail:
            message += "\nQEMU stderr:\n" + output_tail.rstrip()
        super().__init__(message)


class RingFull(DeviceError):
    """Not enough free descriptors for the chain; nothing was written to the ring."""


class GuestMemoryError(DeviceError):
    """Guest allocator misuse: out of memory, bad free, or blocks leaked."""


class P9Error(HarnessError):
    """Base of the 9P layer's errors."""


class P9Rlerror(P9Error):
    """The server answered a request with Rlerror (9P2000.L) or Rerror (9P2000.u)."""

    def __init__(self, request: str, errno: int, reply: str | None = None) -> None:
        self.request = request
        self.errno = errno
        #: when it was raised (time.monotonic, the sessions' clock): a reproducer finds the reply by it
        self.at = time.monotonic()
        self.reply = reply or f"Rlerror {errno_name(errno)} ({errno})"
        super().__init__(f"{request} -> {self.reply}: {os.strerror(errno)}")

    @property
    def errno_name(self) -> str:
        return errno_name(self.errno)


def errno_name(code: int) -> str:
    """``ENOENT`` for 2; the number itself for one Linux does not name. The one errno-to-name
    conversion of the harness: replies, errors, traces, reproducers and outcomes all print so."""
    return _errno.errorcode.get(code, str(code))


class P9ProtocolError(P9Error):
    """The server broke the protocol: wrong tag, wrong reply type, size mismatch, bad frame."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        #: when it was found (the sessions' clock): the reply it judged is the last one before
        self.at = time.monotonic()


class P9Timeout(P9Error):
    """A request got no reply within the limit."""


class P9StateError(P9Error):
    """The session was used out of order (e.g. attach before version, request after close)."""


class ReproducerError(P9Error):
    """A reproducer that cannot be judged: not one, cut short, altered since it was written, or
    naming a backend, transport or host file the harness cannot make."""


class LeakError(HarnessError):
    """Resources were left at close: fids, tags, descriptors or guest buffers."""
