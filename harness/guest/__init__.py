"""A real Linux guest on the QEMU under test: a Debian kernel (kernel.py), a small initramfs with
the host's own programs in it (initramfs.py), and a boot that mounts the export with v9fs, runs
a script and hands back what it printed, its status, the kernel's log and QEMU's v9fs trace
(vm.py). docs/guest.md says why it is built so."""
