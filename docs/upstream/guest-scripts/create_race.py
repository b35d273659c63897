import collections, os, sys
op, n = sys.argv[1], int(sys.argv[2])
out = collections.Counter()
def run(f, name):
    try: f(); out[name + " ok"] += 1
    except OSError as e: out[name + " " + e.strerror] += 1
for i in range(n):
    if op == "mkdir": run(lambda: os.mkdir("a"), "mkdir")
    elif op == "rmdir": run(lambda: os.rmdir("a"), "rmdir")
    else:
        run(lambda: os.symlink("x", "a"), "symlink"); run(lambda: os.unlink("a"), "unlink")
print(op, dict(sorted(out.items())))
