import collections, re, sys
# QEMU's v9fs trace: each Twalk by its number of names, and how it was answered.
pending, st = {}, collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"v9fs_walk tag=(\d+) id=110 fid=\d+ newfid=\d+ nwnames=(\d+)", line)
    if m:
        pending[m.group(1)] = int(m.group(2)); continue
    m = re.match(r"v9fs_walk_return tag (\d+) id 110 nwnames (\d+)", line)
    if m and m.group(1) in pending:
        k, got = pending.pop(m.group(1)), int(m.group(2))
        st["%d-name Twalk: %s" % (k, "all names" if got == k else "PARTIAL")] += 1; continue
    m = re.match(r"v9fs_rerror tag (\d+) id 110 err (\d+)", line)
    if m and m.group(1) in pending:
        st["%d-name Twalk: Rlerror %s" % (pending.pop(m.group(1)), m.group(2))] += 1
for k, v in sorted(st.items()):
    print("%6d  %s" % (v, k))
