import collections, re, sys
# QEMU's v9fs trace: was any fid given to a second Tlcreate without a new Twalk to it in between?
fresh, st = {}, collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"v9fs_walk tag=\d+ id=110 fid=(\d+) newfid=(\d+) nwnames=(\d+)", line)
    if m:
        fresh[m.group(2)] = "walked" if m.group(3) == "0" else "walked to a name"
        continue
    m = re.match(r"v9fs_lcreate tag (\d+) id 14 dfid (\d+)", line)
    if m:
        st["Tlcreate, tag %s" % ("0" if m.group(1) == "0" else ">0")] += 1
        st["Tlcreate on a fid last %s" % fresh.get(m.group(2), "never walked")] += 1
        fresh[m.group(2)] = "used by a Tlcreate"
print(dict(sorted(st.items())))
