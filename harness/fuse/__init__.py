"""The export as a host filesystem: FUSE requests answered with 9P2000.L requests of our client,
so that any program on the host is a 9P client of the QEMU under test (``python -m harness mount``)."""
