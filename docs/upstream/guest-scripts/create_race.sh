cat > /tmp/cr.py <<'PY'
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
PY
cd /mnt/export; mkdir t; cd t; N=3000
echo 1 > $T/events/9p/9p_client_req/enable; echo 1 > $T/events/9p/9p_client_res/enable
python3 /tmp/cr.py mkdir $N & python3 /tmp/cr.py rmdir $N & python3 /tmp/cr.py symlink $N & wait
echo 0 > $T/events/9p/enable
