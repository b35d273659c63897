import os, sys, time
d, stop = sys.argv[1], sys.argv[2]
n, t0 = 0, time.time()
while not os.path.exists(stop) and time.time() - t0 < 400:
    for i in range(20):
        p = os.path.join(d, "h%d" % i)
        open(p, "w").close(); os.unlink(p); n += 1
print("host: %d create+unlink" % n, file=sys.stderr)
