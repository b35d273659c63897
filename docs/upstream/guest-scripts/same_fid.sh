cat > /tmp/sf.py <<'PY'
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
PY
cd /mnt/export; mkdir t; cd t; N=1000
echo 1 > $T/events/9p/9p_client_req/enable; echo 1 > $T/events/9p/9p_client_res/enable
python3 /tmp/sf.py a $N & python3 /tmp/sf.py b $N & python3 /tmp/sf.py c $N & wait
echo 0 > $T/events/9p/enable
