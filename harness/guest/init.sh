#!/bin/busybox sh
# The guest's /init (harness/guest/initramfs.py puts it there): mount the kernel's filesystems,
# load the 9p modules, mount the exports /v9p/mounts names, run /v9p/run.sh (bash: busybox sh would
# run its own applets before the host's programs on PATH) with a deadline, and
# print what it printed, its status and the kernel's log between @@V9P markers on the console
# (harness/guest/vm.py reads them), then power off.
export PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME=/root TERM=dumb LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t tmpfs tmp /tmp
mount -t tmpfs shm /dev/shm
mount -t tmpfs mnt /mnt
mkdir -p /tmp/local
say() { echo "@@V9P-$*" > /dev/console; }
say BOOTED "$(cut -d' ' -f1 /proc/uptime)"
while read -r module; do
    insmod "/lib/modules/$module" 2>/tmp/insmod.err || { say FAIL "insmod $module: $(cat /tmp/insmod.err)"; }
done < /etc/v9p-modules
mounted=""
while read -r tag dir options; do
    [ -n "$tag" ] || continue
    mkdir -p "$dir"
    if ! mount -t 9p -o "$options" "$tag" "$dir" 2>/tmp/mount.err; then
        say FAIL "mount -t 9p -o $options $tag $dir: $(cat /tmp/mount.err)"
    fi
    mounted="$dir $mounted"
done < /v9p/mounts
# the guest's clock from the host's, as the server stamps a node it makes (the RTC gives whole
# seconds, and a file stamped a moment "in the future" makes tar and make complain). A 9P2000.u
# stat has whole seconds only: there, make files until the second turns, and take that moment.
# A read-only export keeps the RTC's time.
first=$(head -n 1 /v9p/mounts | cut -d' ' -f2)
[ -n "$first" ] && /usr/bin/python3 - "$first" <<'EOF'
import os, sys, time
def stamp(n):
    path = os.path.join(sys.argv[1], f".v9p-clock-{n}")
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    made = os.stat(path).st_mtime_ns
    os.unlink(path)
    return made
try:
    now = stamp(0)
    if now % 10**9 == 0:
        second, tries = now, 1
        while now == second and tries < 5000:
            now, tries = stamp(tries), tries + 1
    time.clock_settime_ns(time.CLOCK_REALTIME, now)
except OSError:
    pass
EOF
say MOUNTED "$(cut -d' ' -f1 /proc/uptime)"
deadline=$(cat /v9p/timeout)
cd /tmp
( bash /v9p/run.sh > /tmp/v9p.out 2> /tmp/v9p.err < /dev/null; echo $? > /tmp/v9p.rc.new; mv /tmp/v9p.rc.new /tmp/v9p.rc ) &
ticks=0
while [ ! -e /tmp/v9p.rc ] && [ "$ticks" -lt $((deadline * 10)) ]; do
    usleep 100000
    ticks=$((ticks + 1))
done
say RAN "$(cut -d' ' -f1 /proc/uptime)"
if [ -e /tmp/v9p.rc ]; then say STATUS "$(cat /tmp/v9p.rc)"; else say TIMEOUT "$deadline"; fi
say STDOUT; base64 /tmp/v9p.out > /dev/console; say END
say STDERR; base64 /tmp/v9p.err > /dev/console; say END
if [ -e /tmp/v9p.rc ]; then
    for dir in $mounted; do
        # what holds the mount: each process once, with how many of its descriptors are there
        umount "$dir" 2>/tmp/umount.err || say FAIL "umount $dir: $(cat /tmp/umount.err); in use by:" \
            "$(ls -l /proc/[0-9]*/cwd /proc/[0-9]*/fd/* 2>/dev/null | grep " -> $dir" |
               sed 's#.* /proc/\([0-9]*\)/\([a-z]*\).*#pid \1 (\2)#' | sort | uniq -c | tr -s ' \n' ' ;')"
    done
fi
say DMESG; dmesg | base64 > /dev/console; say END
say DONE
poweroff -f
