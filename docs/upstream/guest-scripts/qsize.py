import glob, mmap, os, struct
for d in glob.glob("/sys/bus/pci/devices/*"):
    if open(d + "/vendor").read().strip() != "0x1af4" or open(d + "/device").read().strip() not in ("0x1009", "0x1049"):
        continue
    cfg = open(d + "/config", "rb").read()
    cap = cfg[0x34]
    while cap:
        vndr, nxt, length, cfg_type, bar = cfg[cap], cfg[cap + 1], cfg[cap + 2], cfg[cap + 3], cfg[cap + 4]
        if vndr == 0x09 and cfg_type == 1:      # VIRTIO_PCI_CAP_COMMON_CFG
            off = struct.unpack_from("<I", cfg, cap + 8)[0]
            fd = os.open(f"{d}/resource{bar}", os.O_RDONLY | os.O_SYNC)
            m = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ, offset=off & ~(mmap.PAGESIZE - 1))
            base = off & (mmap.PAGESIZE - 1)
            sel, size = struct.unpack_from("<HH", m, base + 0x16)
            print(os.path.basename(d), "queue_select", sel, "queue_size", size)
        cap = nxt
