"""The virtio layer, seen from the guest: PCI enumeration and BARs (:mod:`.pci`), the virtio-pci
modern and legacy transports (:mod:`.virtio_pci`), split virtqueues (:mod:`.virtqueue`), the guest
memory allocator (:mod:`.guestmem`), and our driver of one virtio-9p function (:mod:`.driver`).
Reaches QEMU only through qtest; knows nothing of 9P messages."""
