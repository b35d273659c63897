import collections, os, sys
op, n = sys.argv[1], int(sys.argv[2])
out = collections.Counter()
for i in range(n):
    try:
        if op == "list": os.listdir("d"); out["listdir ok"] += 1
        else:
            name = "d/c%d-%d" % (os.getpid(), i % 20)
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)); os.unlink(name); out["create+unlink ok"] += 1
    except OSError as e: out[op + " " + e.strerror] += 1
print(op, dict(sorted(out.items())))
