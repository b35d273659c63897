import os, errno
def tryit(label, f):
    try:
        r = f(); print(label, "ok", r if r is not None else "")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
tryit("O_TMPFILE", lambda: os.close(os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)))
fd = os.open("scratch", os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
os.unlink("scratch")
os.write(fd, b"data"); os.lseek(fd, 0, 0)
print("unlinked while open, read back", os.read(fd, 10)); os.close(fd)
flags = {"O_RDONLY": os.O_RDONLY, "O_WRONLY|O_TRUNC": os.O_WRONLY | os.O_TRUNC, "O_RDWR|O_APPEND": os.O_RDWR | os.O_APPEND,
         "O_RDWR|O_SYNC|O_NOATIME|O_CLOEXEC|O_NONBLOCK": os.O_RDWR | os.O_SYNC | os.O_NOATIME | os.O_CLOEXEC | os.O_NONBLOCK,
         "O_RDWR|O_DIRECT|O_DSYNC": os.O_RDWR | os.O_DIRECT | os.O_DSYNC}
open("f", "w").close()
for k, v in flags.items(): tryit(k, lambda: os.close(os.open("f", v)))
tryit("O_CREAT|O_EXCL|O_RDWR|O_SYNC", lambda: os.close(os.open("g", os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_SYNC, 0o600)))
tryit("O_DIRECTORY", lambda: os.close(os.open(".", os.O_DIRECTORY | os.O_RDONLY)))
