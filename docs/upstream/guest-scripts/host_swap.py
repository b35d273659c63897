# host: once the guest has opened EXPORT/d (it makes EXPORT/opened), swap d for a new directory as
# a deployment does (the old one renamed aside, a new one made at its name), then say so (swapped)
import os, sys, time
e = sys.argv[1]
t0 = time.time()
while not os.path.exists(os.path.join(e, "opened")) and time.time() - t0 < 300:
    time.sleep(0.05)
os.rename(os.path.join(e, "d"), os.path.join(e, "d.old"))
os.mkdir(os.path.join(e, "d"))
open(os.path.join(e, "d", "c"), "w").close()
open(os.path.join(e, "swapped"), "w").close()
print("host: d swapped", file=sys.stderr)
