"""Truncations a program can ask for, each on a fresh 5-byte file: the result and the size after."""
import errno
import os

def fresh(name):
    with open(name, "wb") as f:
        f.write(b"hello")
    return name

def attempt(label, action, name):
    try:
        action()
        said = "ok"
    except OSError as e:
        said = errno.errorcode[e.errno]
    print(f"{label}: {said}, size {os.stat(name).st_size}")

f = fresh("a")
attempt("open(O_RDONLY|O_TRUNC)", lambda: os.close(os.open(f, os.O_RDONLY | os.O_TRUNC)), f)
f = fresh("b")
fd = os.open(f, os.O_RDONLY)
attempt("truncate(name, 2) while open O_RDONLY", lambda: os.truncate(f, 2), f)
attempt("ftruncate(O_RDONLY fd, 1)", lambda: os.truncate(fd, 1), f)
os.close(fd)
f = fresh("c")
attempt("open(O_WRONLY|O_TRUNC)", lambda: os.close(os.open(f, os.O_WRONLY | os.O_TRUNC)), f)
f = fresh("d")
fd = os.open(f, os.O_RDWR)
attempt("ftruncate(O_RDWR fd, 3)", lambda: os.truncate(fd, 3), f)
os.close(fd)
