"""The fault injector: makes one host call of the QEMU under test fail, the k-th time it is made,
during one request, and records which host calls each request makes.

A layer of its own, below the QEMU process (which preloads it) and above the error tree:

* ``preload.c``: the library QEMU runs with (``LD_PRELOAD``); it wraps the C library calls of
  QEMU's local backend and reads one control block in shared memory;
* :mod:`harness.fault.library`: builds it once per source into the harness's cache;
* :mod:`harness.fault.control`: the control block (:class:`Injector`): arm a :class:`Fault`,
  record, read back the calls made;
* :mod:`harness.fault.calls`: the host calls it wraps, and the errnos each can return on Linux.

Why a preload library of our own, not one of the tools that exist (docs/fault.md says more):
libfiu's POSIX preload wraps none of the ``*at`` calls nor the xattr calls the backend lives on,
and aims neither by path nor at the k-th call; strace's ``--inject`` counts per thread (a request's
calls move between the thread pool's workers), fakes short transfers without doing them, and
arming it means attaching to QEMU for each request; a fault-injecting FUSE filesystem would put
FUSE, not tmpfs, under the server, and its operations are what the kernel makes of QEMU's calls,
after its caches. This library counts once for the whole process, resolves each call's path,
does short transfers through the real call, and costs one load per call when disarmed.
"""
