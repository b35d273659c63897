"""The QEMU layer: finding, probing and building a qtest-capable QEMU (:mod:`.provision`),
starting and stopping its process with typed configuration (:mod:`.machine`), the qtest line
protocol to its guest memory, MMIO and PIO (:mod:`.qtest`), and QEMU's own C suite
(:mod:`.qemu_suite`), and idle CPUs kept polling while QEMU is measured (:mod:`.cpu_idle`).
Knows nothing of virtio or 9P."""
