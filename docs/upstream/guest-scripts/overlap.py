import collections, re, sys
# Which 9P requests were in flight together, from the guest's 9p_client_req/_res tracepoints.
want = sys.argv[1:]
inflight, pairs, reqs, maxin = {}, collections.Counter(), collections.Counter(), 0
for line in open("/sys/kernel/tracing/trace"):
    m = re.search(r"(request|response) (P9_\w+) tag\s+(\d+)", line)
    if not m:
        continue
    kind, t, tag = m.groups()
    if kind == "request":
        reqs[t] += 1
        for other in inflight.values():
            pairs[" + ".join(sorted((t, other)))] += 1
        inflight[tag] = t
        maxin = max(maxin, len(inflight))
    else:
        inflight.pop(tag, None)
print("requests:", " ".join("%s %d" % kv for kv in reqs.most_common()))
print("most in flight at once:", maxin)
print("pairs in flight together, most seen:", ", ".join("%s %d" % kv for kv in pairs.most_common(3)))
for p in want:
    print("in flight together, %s: %d" % (p, pairs[p]))
