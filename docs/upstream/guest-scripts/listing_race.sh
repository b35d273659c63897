cat > /tmp/lr.py <<'PY'
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
PY
cd /mnt/export; mkdir d; for i in $(seq 1 50); do : > d/f$i; done; N=3000
echo 1 > $T/events/9p/9p_client_req/enable; echo 1 > $T/events/9p/9p_client_res/enable
python3 /tmp/lr.py list $N & python3 /tmp/lr.py unlink $N & python3 /tmp/lr.py unlink $N & wait
echo 0 > $T/events/9p/enable
