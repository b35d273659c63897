/*
 * The harness's fault injector, preloaded into the QEMU under test (LD_PRELOAD).
 *
 * It wraps the C library calls QEMU's local 9p backend makes on the host (the list is
 * harness/fault/calls.py's CALLS, under the same names) and reads one control block that the
 * harness maps too (harness/fault/control.py declares its layout; the two are checked against
 * each other by tests/test_fault_injector.py).  Disarmed (mode 0), a wrapped call costs one load before
 * the real call.  Armed, a call on a host path under the control block's root:
 *   - is written to the log, one line per call: thread, call, result, errno, path, and "injected"
 *     or "short" for the call the injector changed;
 *   - when it is the call named (or any call, for an empty name) on the path named (or any
 *     path under the root, for an empty one), the nth such call since arming fails with the
 *     errno given, without the real call being made, or, in short mode, transfers at most
 *     short_len bytes (preadv, pwritev) through the real call.
 * The count is one atomic counter for the whole process: the nth call is the nth whichever of
 * QEMU's threads (the main loop, the thread pool's workers) makes it.
 *
 * Nothing here calls a function it wraps: paths are read with raw syscalls, and the log is
 * written with one write(2) per line on a descriptor opened with O_APPEND.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define CONTROL_MAGIC 0x46503956u /* "V9PF" */
#define MODE_RECORD 1u
#define MODE_FAIL 2u
#define MODE_SHORT 4u
#define NAME_MAX_CALL 32
#define PATH_FIELD 1024

struct control {
    uint32_t magic;
    uint32_t mode;
    int32_t err;
    uint32_t nth;
    uint32_t seen;
    uint32_t fired;
    uint64_t short_len;
    char call[NAME_MAX_CALL];
    char root[PATH_FIELD];
    char path[PATH_FIELD];
};

static struct control disarmed;
static struct control *ctl = &disarmed;
static int log_fd = -1;

__attribute__((constructor)) static void v9p_fault_init(void)
{
    const char *control = getenv("V9P_FAULT_CTL");
    const char *logged = getenv("V9P_FAULT_LOG");
    if (control) {
        int fd = syscall(SYS_openat, AT_FDCWD, control, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            void *map = mmap(NULL, sizeof(struct control), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (map != MAP_FAILED) {
                ctl = map;
            }
            syscall(SYS_close, fd);
        }
    }
    if (logged) {
        log_fd = syscall(SYS_openat, AT_FDCWD, logged, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    }
}

/* -- paths ---------------------------------------------------------------------------------- */

static void fd_path(int fd, char *out, size_t size)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    long got = syscall(SYS_readlinkat, AT_FDCWD, link, out, size - 1);
    out[got > 0 ? got : 0] = '\0';
}

static void join(char *out, size_t size, const char *name)
{
    size_t used = strlen(out);
    if (name && name[0] && used + 1 < size) {
        snprintf(out + used, size - used, "/%s", name);
    }
}

/* `path` with its "." and ".." components resolved by name (as QEMU's own paths never need) */
static void normalize(char *path)
{
    char *read = path, *write = path;
    while (*read) {
        while (*read == '/') {
            read++;
        }
        char *end = strchrnul(read, '/');
        size_t length = (size_t)(end - read);
        if (length == 1 && read[0] == '.') {
            /* nothing */
        } else if (length == 2 && read[0] == '.' && read[1] == '.') {
            while (write > path && *--write != '/') {
            }
        } else if (length) {
            *write++ = '/';
            memmove(write, read, length);
            write += length;
        }
        read = end;
    }
    if (write == path) {
        *write++ = '/';
    }
    *write = '\0';
}

/* the host path a call names by directory descriptor and name (or "/proc/self/fd/N/name") */
static void at_path(int dirfd, const char *name, char *out, size_t size)
{
    out[0] = '\0';
    if (name == NULL) {
        name = "";
    }
    if (strncmp(name, "/proc/self/fd/", 14) == 0) {
        char *rest;
        long fd = strtol(name + 14, &rest, 10);
        fd_path((int)fd, out, size);
        join(out, size, *rest == '/' ? rest + 1 : rest);
    } else if (name[0] == '/') {
        snprintf(out, size, "%s", name);
    } else {
        if (dirfd == AT_FDCWD) {
            long got = syscall(SYS_getcwd, out, size);
            if (got <= 0) {
                out[0] = '\0';
            }
        } else {
            fd_path(dirfd, out, size);
        }
        join(out, size, name);
    }
    normalize(out);
}

static int under_root(const char *path)
{
    size_t length = strnlen(ctl->root, PATH_FIELD);
    return length && strncmp(path, ctl->root, length) == 0 && (path[length] == '/' || path[length] == '\0');
}

/* -- the decision ----------------------------------------------------------------------------- */

enum verdict { REAL, FAIL, SHORT };

struct armed {
    uint32_t mode;
    enum verdict verdict;
    char path[PATH_MAX];
};

static enum verdict decide(const char *call, struct armed *a)
{
    if (!under_root(a->path)) {
        return REAL;
    }
    int named = ctl->call[0] == '\0' || strncmp(ctl->call, call, NAME_MAX_CALL) == 0;
    int here = ctl->path[0] == '\0' || strncmp(ctl->path, a->path, PATH_FIELD) == 0;
    if (!(a->mode & (MODE_FAIL | MODE_SHORT)) || !named || !here) {
        return REAL;
    }
    if (__atomic_add_fetch(&ctl->seen, 1, __ATOMIC_SEQ_CST) != ctl->nth) {
        return REAL;
    }
    __atomic_add_fetch(&ctl->fired, 1, __ATOMIC_SEQ_CST);
    return a->mode & MODE_SHORT ? SHORT : FAIL;
}

static void note(const char *call, const struct armed *a, long result, int err)
{
    if (log_fd < 0 || !under_root(a->path)) {
        return;
    }
    char line[PATH_MAX + 128];
    int length = snprintf(line, sizeof(line), "%ld\t%s\t%ld\t%d\t%s\t%s\n", (long)syscall(SYS_gettid), call, result,
                          err, a->path, a->verdict == REAL ? "" : a->verdict == FAIL ? "injected" : "short");
    if (length > 0) {
        syscall(SYS_write, log_fd, line, (size_t)length < sizeof(line) ? (size_t)length : sizeof(line) - 1);
    }
}

#define REAL_OF(type, name, ...)                                                                    \
    static type (*real_##name)(__VA_ARGS__);                                                        \
    if (!real_##name) {                                                                             \
        real_##name = (type(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);                                \
    }

/*
 * The body every wrapper shares: `WHERE` fills a.path, `CALL` is the real call, `FAILED` the
 * value the call returns on failure, `RESULT` turns the call's value into the logged number.
 */
#define WRAP(call, type, failed, where, real_call, result) WRAP_WHEN(0, call, type, failed, where, real_call, result)

/* `after`: the failure comes after the real call, as close(2)'s does (the descriptor is gone) */
#define WRAP_WHEN(after, call, type, failed, where, real_call, result)                              \
    uint32_t armed_mode = __atomic_load_n(&ctl->mode, __ATOMIC_ACQUIRE);                            \
    if (armed_mode == 0) {                                                                          \
        return real_call;                                                                           \
    }                                                                                               \
    struct armed a = {.mode = armed_mode};                                                          \
    where;                                                                                          \
    a.verdict = decide(call, &a);                                                                   \
    if (a.verdict == FAIL) {                                                                        \
        if (after) {                                                                                \
            (void)real_call;                                                                        \
        }                                                                                           \
        note(call, &a, -1, ctl->err);                                                               \
        errno = ctl->err;                                                                           \
        return failed;                                                                              \
    }                                                                                               \
    type value = real_call;                                                                         \
    int saved = errno;                                                                              \
    note(call, &a, result, value == failed ? saved : 0);                                            \
    errno = saved;                                                                                  \
    return value;

#define AT(dirfd, name) at_path((dirfd), (name), a.path, sizeof(a.path))
#define FD(fd) fd_path((fd), a.path, sizeof(a.path))

/* -- descriptors and nodes -------------------------------------------------------------------- */

static int open_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
}

int openat64(int dirfd, const char *name, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode_arg = open_mode(flags, ap);
    va_end(ap);
    REAL_OF(int, openat64, int, const char *, int, ...)
    WRAP("openat", int, -1, AT(dirfd, name), real_openat64(dirfd, name, flags, mode_arg), value)
}

int openat(int dirfd, const char *name, int flags, ...) __attribute__((alias("openat64")));

int open64(const char *name, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode_arg = open_mode(flags, ap);
    va_end(ap);
    REAL_OF(int, open64, const char *, int, ...)
    WRAP("open", int, -1, AT(AT_FDCWD, name), real_open64(name, flags, mode_arg), value)
}

int open(const char *name, int flags, ...) __attribute__((alias("open64")));

int close(int fd)
{
    REAL_OF(int, close, int)
    WRAP_WHEN(1, "close", int, -1, FD(fd), real_close(fd), value)
}

int dup(int fd)
{
    REAL_OF(int, dup, int)
    WRAP("dup", int, -1, FD(fd), real_dup(fd), value)
}

int fstatat64(int dirfd, const char *name, struct stat64 *st, int flags)
{
    REAL_OF(int, fstatat64, int, const char *, struct stat64 *, int)
    WRAP("fstatat", int, -1, AT(dirfd, name), real_fstatat64(dirfd, name, st, flags), value)
}

int fstatat(int, const char *, struct stat *, int) __attribute__((alias("fstatat64")));

int fstat64(int fd, struct stat64 *st)
{
    REAL_OF(int, fstat64, int, struct stat64 *)
    WRAP("fstat", int, -1, FD(fd), real_fstat64(fd, st), value)
}

int fstat(int, struct stat *) __attribute__((alias("fstat64")));

int lstat64(const char *name, struct stat64 *st)
{
    REAL_OF(int, lstat64, const char *, struct stat64 *)
    WRAP("lstat", int, -1, AT(AT_FDCWD, name), real_lstat64(name, st), value)
}

int lstat(const char *, struct stat *) __attribute__((alias("lstat64")));

int stat64(const char *name, struct stat64 *st)
{
    REAL_OF(int, stat64, const char *, struct stat64 *)
    WRAP("stat", int, -1, AT(AT_FDCWD, name), real_stat64(name, st), value)
}

int stat(const char *, struct stat *) __attribute__((alias("stat64")));

int mkdirat(int dirfd, const char *name, mode_t mode)
{
    REAL_OF(int, mkdirat, int, const char *, mode_t)
    WRAP("mkdirat", int, -1, AT(dirfd, name), real_mkdirat(dirfd, name, mode), value)
}

int mknodat(int dirfd, const char *name, mode_t mode, dev_t dev)
{
    REAL_OF(int, mknodat, int, const char *, mode_t, dev_t)
    WRAP("mknodat", int, -1, AT(dirfd, name), real_mknodat(dirfd, name, mode, dev), value)
}

int symlinkat(const char *target, int dirfd, const char *name)
{
    REAL_OF(int, symlinkat, const char *, int, const char *)
    WRAP("symlinkat", int, -1, AT(dirfd, name), real_symlinkat(target, dirfd, name), value)
}

int linkat(int olddirfd, const char *oldname, int newdirfd, const char *newname, int flags)
{
    REAL_OF(int, linkat, int, const char *, int, const char *, int)
    WRAP("linkat", int, -1, AT(newdirfd, newname), real_linkat(olddirfd, oldname, newdirfd, newname, flags), value)
}

int renameat(int olddirfd, const char *oldname, int newdirfd, const char *newname)
{
    REAL_OF(int, renameat, int, const char *, int, const char *)
    WRAP("renameat", int, -1, AT(olddirfd, oldname), real_renameat(olddirfd, oldname, newdirfd, newname), value)
}

int unlinkat(int dirfd, const char *name, int flags)
{
    REAL_OF(int, unlinkat, int, const char *, int)
    WRAP("unlinkat", int, -1, AT(dirfd, name), real_unlinkat(dirfd, name, flags), value)
}

ssize_t readlinkat(int dirfd, const char *name, char *buf, size_t size)
{
    REAL_OF(ssize_t, readlinkat, int, const char *, char *, size_t)
    WRAP("readlinkat", ssize_t, -1, AT(dirfd, name), real_readlinkat(dirfd, name, buf, size), value)
}

/* -- attributes ------------------------------------------------------------------------------- */

int fchmod(int fd, mode_t mode)
{
    REAL_OF(int, fchmod, int, mode_t)
    WRAP("fchmod", int, -1, FD(fd), real_fchmod(fd, mode), value)
}

int fchmodat(int dirfd, const char *name, mode_t mode, int flags)
{
    REAL_OF(int, fchmodat, int, const char *, mode_t, int)
    WRAP("fchmodat", int, -1, AT(dirfd, name), real_fchmodat(dirfd, name, mode, flags), value)
}

int fchownat(int dirfd, const char *name, uid_t uid, gid_t gid, int flags)
{
    REAL_OF(int, fchownat, int, const char *, uid_t, gid_t, int)
    WRAP("fchownat", int, -1, AT(dirfd, name), real_fchownat(dirfd, name, uid, gid, flags), value)
}

int utimensat(int dirfd, const char *name, const struct timespec times[2], int flags)
{
    REAL_OF(int, utimensat, int, const char *, const struct timespec *, int)
    WRAP("utimensat", int, -1, AT(dirfd, name), real_utimensat(dirfd, name, times, flags), value)
}

int futimens(int fd, const struct timespec times[2])
{
    REAL_OF(int, futimens, int, const struct timespec *)
    WRAP("futimens", int, -1, FD(fd), real_futimens(fd, times), value)
}

int ftruncate64(int fd, off_t length)
{
    REAL_OF(int, ftruncate64, int, off_t)
    WRAP("ftruncate", int, -1, FD(fd), real_ftruncate64(fd, length), value)
}

int ftruncate(int, off_t) __attribute__((alias("ftruncate64")));

int fstatfs64(int fd, struct statfs64 *st)
{
    REAL_OF(int, fstatfs64, int, struct statfs64 *)
    WRAP("fstatfs", int, -1, FD(fd), real_fstatfs64(fd, st), value)
}

int fstatfs(int, struct statfs *) __attribute__((alias("fstatfs64")));

ssize_t lgetxattr(const char *name, const char *attr, void *value_buf, size_t size)
{
    REAL_OF(ssize_t, lgetxattr, const char *, const char *, void *, size_t)
    WRAP("lgetxattr", ssize_t, -1, AT(AT_FDCWD, name), real_lgetxattr(name, attr, value_buf, size), value)
}

ssize_t fgetxattr(int fd, const char *attr, void *value_buf, size_t size)
{
    REAL_OF(ssize_t, fgetxattr, int, const char *, void *, size_t)
    WRAP("fgetxattr", ssize_t, -1, FD(fd), real_fgetxattr(fd, attr, value_buf, size), value)
}

int lsetxattr(const char *name, const char *attr, const void *value_buf, size_t size, int flags)
{
    REAL_OF(int, lsetxattr, const char *, const char *, const void *, size_t, int)
    WRAP("lsetxattr", int, -1, AT(AT_FDCWD, name), real_lsetxattr(name, attr, value_buf, size, flags), value)
}

ssize_t llistxattr(const char *name, char *list, size_t size)
{
    REAL_OF(ssize_t, llistxattr, const char *, char *, size_t)
    WRAP("llistxattr", ssize_t, -1, AT(AT_FDCWD, name), real_llistxattr(name, list, size), value)
}

int lremovexattr(const char *name, const char *attr)
{
    REAL_OF(int, lremovexattr, const char *, const char *)
    WRAP("lremovexattr", int, -1, AT(AT_FDCWD, name), real_lremovexattr(name, attr), value)
}

/* -- data ------------------------------------------------------------------------------------- */

/* iov cut to at most `limit` bytes, in `out` (at most IOV_MAX entries): its count */
static int shortened(const struct iovec *iov, int count, uint64_t limit, struct iovec *out)
{
    int kept = 0;
    for (int i = 0; i < count && i < IOV_MAX && limit > 0; i++) {
        out[kept] = iov[i];
        if (out[kept].iov_len > limit) {
            out[kept].iov_len = limit;
        }
        limit -= out[kept].iov_len;
        kept++;
    }
    return kept;
}

/* `real_call` the transfer as asked; `cut_call` the same with `cut` and `kept` for its vector */
#define TRANSFER(call, real_call, cut_call)                                                         \
    uint32_t armed_mode = __atomic_load_n(&ctl->mode, __ATOMIC_ACQUIRE);                            \
    if (armed_mode == 0) {                                                                          \
        return real_call;                                                                           \
    }                                                                                               \
    struct armed a = {.mode = armed_mode};                                                          \
    FD(fd);                                                                                         \
    a.verdict = decide(call, &a);                                                                   \
    if (a.verdict == FAIL) {                                                                        \
        note(call, &a, -1, ctl->err);                                                               \
        errno = ctl->err;                                                                           \
        return -1;                                                                                  \
    }                                                                                               \
    ssize_t value;                                                                                  \
    if (a.verdict == SHORT) {                                                                       \
        struct iovec cut[IOV_MAX];                                                                  \
        int kept = shortened(iov, count, ctl->short_len, cut);                                      \
        value = kept ? cut_call : 0;                                                                \
    } else {                                                                                        \
        value = real_call;                                                                          \
    }                                                                                               \
    int saved = errno;                                                                              \
    note(call, &a, value, value < 0 ? saved : 0);                                                   \
    errno = saved;                                                                                  \
    return value;

ssize_t preadv64(int fd, const struct iovec *iov, int count, off_t offset)
{
    REAL_OF(ssize_t, preadv64, int, const struct iovec *, int, off_t)
    TRANSFER("preadv", real_preadv64(fd, iov, count, offset), real_preadv64(fd, cut, kept, offset))
}

ssize_t preadv(int, const struct iovec *, int, off_t) __attribute__((alias("preadv64")));

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset)
{
    REAL_OF(ssize_t, pwritev64, int, const struct iovec *, int, off_t)
    TRANSFER("pwritev", real_pwritev64(fd, iov, count, offset), real_pwritev64(fd, cut, kept, offset))
}

ssize_t pwritev(int, const struct iovec *, int, off_t) __attribute__((alias("pwritev64")));

/* the same calls with flags (the C library's readers may take these: CPython's os.preadv does) */
ssize_t preadv64v2(int fd, const struct iovec *iov, int count, off_t offset, int flags)
{
    REAL_OF(ssize_t, preadv64v2, int, const struct iovec *, int, off_t, int)
    TRANSFER("preadv", real_preadv64v2(fd, iov, count, offset, flags),
             real_preadv64v2(fd, cut, kept, offset, flags))
}

ssize_t preadv2(int, const struct iovec *, int, off_t, int) __attribute__((alias("preadv64v2")));

ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off_t offset, int flags)
{
    REAL_OF(ssize_t, pwritev64v2, int, const struct iovec *, int, off_t, int)
    TRANSFER("pwritev", real_pwritev64v2(fd, iov, count, offset, flags),
             real_pwritev64v2(fd, cut, kept, offset, flags))
}

ssize_t pwritev2(int, const struct iovec *, int, off_t, int) __attribute__((alias("pwritev64v2")));

int fsync(int fd)
{
    REAL_OF(int, fsync, int)
    WRAP("fsync", int, -1, FD(fd), real_fsync(fd), value)
}

int fdatasync(int fd)
{
    REAL_OF(int, fdatasync, int)
    WRAP("fdatasync", int, -1, FD(fd), real_fdatasync(fd), value)
}

/* -- directories ------------------------------------------------------------------------------ */

DIR *fdopendir(int fd)
{
    REAL_OF(DIR *, fdopendir, int)
    WRAP("fdopendir", DIR *, NULL, FD(fd), real_fdopendir(fd), value ? 0 : -1)
}

DIR *opendir(const char *name)
{
    REAL_OF(DIR *, opendir, const char *)
    WRAP("opendir", DIR *, NULL, AT(AT_FDCWD, name), real_opendir(name), value ? 0 : -1)
}

/* readdir's NULL is the end of the directory unless errno changed: only an injected one fails */
struct dirent64 *readdir64(DIR *dir)
{
    REAL_OF(struct dirent64 *, readdir64, DIR *)
    WRAP("readdir", struct dirent64 *, NULL, FD(dirfd(dir)), real_readdir64(dir), value ? 0 : -1)
}

struct dirent *readdir(DIR *) __attribute__((alias("readdir64")));

int closedir(DIR *dir)
{
    REAL_OF(int, closedir, DIR *)
    WRAP_WHEN(1, "closedir", int, -1, FD(dirfd(dir)), real_closedir(dir), value)
}
