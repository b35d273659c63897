T=/sys/kernel/tracing; mount -t tracefs nodev $T
cd /mnt/export; mkdir -p d/sub; for i in 0 1 2 3 4 5 6 7 8 9; do echo $i > d/sub/f$i; done
echo 1 > $T/events/9p/9p_client_req/enable
python3 -c '
import os, subprocess
fds = [os.open("d/sub/f%d" % i, os.O_RDONLY) for i in range(10)]
os.chdir("d/sub")
subprocess.run(["mv", "/mnt/export/d", "/mnt/export/e"], check=True)
bad = 0
for i, fd in enumerate(fds):
    try: os.fstat(fd)
    except OSError as e: bad += 1; print("fstat f%d:" % i, e.strerror)
for what, f in (("listdir .", lambda: os.listdir(".")), ("stat f0", lambda: os.stat("f0")),
                ("open f1", lambda: os.open("f1", os.O_RDONLY))):
    try: f(); print(what, "ok")
    except OSError as e: print(what + ":", e.strerror)
print("fstat failures:", bad)'
echo 0 > $T/events/9p/9p_client_req/enable
grep -v "^#" $T/trace | awk '{print $NF == "0" ? $(NF-2) : $NF}' | sort | uniq -c | sort -rn | tr '\n' ' '; echo
