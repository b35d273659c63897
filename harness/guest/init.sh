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
# the guest's clock from the host's, as the server stamps a node it touches (the RTC gives whole
# seconds, and a file the host stamps a moment "in the future" makes tar and make complain). A
# 9P2000.u stat has whole seconds only: there, touch until the second turns, and take that moment.
first=$(head -n 1 /v9p/mounts | cut -d' ' -f2)
clock="$first/.v9p-clock"
if [ -n "$first" ] && touch "$clock" 2>/dev/null; then
    stamp=$(/usr/bin/stat -c %.9Y "$clock")
    if [ "${stamp#*.}" = 000000000 ]; then
        start=${stamp%.*}
        tries=0
        while [ "${stamp%.*}" = "$start" ] && [ "$tries" -lt 2000 ]; do
            touch "$clock"; stamp=$(/usr/bin/stat -c %.9Y "$clock"); tries=$((tries + 1))
        done
    fi
    /usr/bin/date -s "@$stamp" > /dev/null
    rm -f "$clock"
fi
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
        umount "$dir" 2>/tmp/umount.err || say FAIL "umount $dir: $(cat /tmp/umount.err); in use by:" \
            "$(ls -l /proc/[0-9]*/cwd /proc/[0-9]*/fd/* 2>/dev/null | grep " -> $dir" | tr '\n' ';')"
    done
fi
say DMESG; dmesg | base64 > /dev/console; say END
say DONE
poweroff -f
