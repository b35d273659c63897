import os, sys, threading, time
# N threads each create a file, then (after all have, and 'ready' is on the export) write 20 x 4 KiB
n = int(sys.argv[1])
fds = [os.open(f"w{i}", os.O_CREAT | os.O_WRONLY, 0o644) for i in range(n)]
open("ready", "w").close()
time.sleep(3)
def work(fd):
    for _ in range(20):
        os.write(fd, b"x" * 4096)
    os.close(fd)
threads = [threading.Thread(target=work, args=(fd,)) for fd in fds]
for t in threads: t.start()
for t in threads: t.join()
print(n, "writers done")
