import collections, re, sys
# QEMU's v9fs trace: each Twalk that failed or named several names, by the path its fid was walked
# to (as walked: renames not followed) and the attach the fid comes from.
path, root, pending, st = {}, {}, {}, collections.Counter()
for line in open(sys.argv[1]):
    if m := re.match(r"v9fs_attach tag \d+ id 104 fid (\d+)", line):
        path[m[1]], root[m[1]] = "/", m[1]
    elif m := re.match(r"v9fs_walk tag=(\d+) id=110 fid=(\d+) newfid=(\d+) nwnames=\d+ wnames=\{(.*)\}", line):
        pending[m[1]] = (m[2], m[3], [n for n in m[4].split(", ") if n])
    elif m := re.match(r"v9fs_(walk_return|rerror) tag (\d+) id 110 (?:nwnames|err) (\d+)", line):
        if m[2] not in pending:
            continue
        fid, newfid, names = pending.pop(m[2])
        what = "%d-name Twalk of %s from %s (attach fid %s)" % (
            len(names), "/".join(names), path.get(fid, "?"), root.get(fid, "?"))
        if m[1] == "rerror":
            st[what + ": Rlerror " + m[3]] += 1
            continue
        if len(names) > 1:
            st[what + (": all names" if int(m[3]) == len(names) else ": PARTIAL")] += 1
        if int(m[3]) == len(names):
            path[newfid] = path.get(fid, "?").rstrip("/") + "/" + "/".join(names) if names else path.get(fid, "?")
            root[newfid] = root.get(fid)
for k, v in sorted(st.items(), key=lambda kv: (-kv[1], kv[0])):
    print("%6d  %s" % (v, k))
