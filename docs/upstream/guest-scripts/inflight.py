import re, sys
# A request line is an event without _return; a reply is *_return or v9fs_rerror.
# Requests whose reply has no trace event (clunk, fsync, flush, remove, wstat, link, xattrcreate...)
# are counted as answered at once: they do not count as in flight.
NOREPLY = {"v9fs_clunk", "v9fs_fsync", "v9fs_flush", "v9fs_remove", "v9fs_wstat", "v9fs_link",
           "v9fs_xattrcreate", "v9fs_rcancel"}
inflight = {}; peak = 0; maxtag = -1; n = 0; peaklines = 0
for line in open(sys.argv[1]):
    m = re.match(r"(v9fs_\w+) tag[ =](\d+)", line)
    if not m: continue
    ev, tag = m.group(1), int(m.group(2))
    if ev.endswith("_return") or ev == "v9fs_rerror":
        inflight.pop(tag, None)
    elif ev not in NOREPLY:
        n += 1
        maxtag = max(maxtag, tag) if tag != 65535 else maxtag
        inflight[tag] = ev
        peak = max(peak, len(inflight))
print(f"requests {n}, highest tag {maxtag}, most requests in flight at the server at once {peak}")
