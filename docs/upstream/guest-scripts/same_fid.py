import collections, os, sys
me, n = sys.argv[1], int(sys.argv[2])
out = collections.Counter()
for i in range(n):
    for name in ("p%s-%d" % (me, i % 50), "shared%d" % (i % 5)):
        try: os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)); out["create ok"] += 1
        except OSError as e: out["create " + e.strerror] += 1
    if i % 50 == 49:
        for j in range(50): os.unlink("p%s-%d" % (me, j))
print(me, dict(sorted(out.items())))
