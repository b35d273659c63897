import collections, os, sys, time
op, n = sys.argv[1], int(sys.argv[2])
out = collections.Counter()
def run(f, name):
    try: f(); out[name + " ok"] += 1
    except OSError as e: out[name + " " + e.strerror] += 1
if op == "rename":
    for i in range(n):
        os.rename("d", "e"); os.rename("e", "d")
    out["renamed d to e and back"] = n
elif op == "fd":
    fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
    while not os.path.exists("/tmp/stop"):
        run(lambda: os.stat("x", dir_fd=fd), "stat x by d's fd")
        run(lambda: os.stat("sub/y", dir_fd=fd), "stat sub/y by d's fd")
else:
    if op == "user": os.setgid(1000); os.setuid(1000)
    while not os.path.exists("/tmp/stop"):
        for p in ("d/x", "e/x", "d/sub/y", "e/sub/y"):
            run(lambda: os.stat(p), op + ": stat " + p)
print(op, dict(sorted(out.items())))
