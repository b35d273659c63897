#!/bin/bash
# usage: freeze.sh DIR [SECONDS]: freeze the filesystem mounted at DIR (fsfreeze) once a guest
# program has made DIR/ready, thaw it SECONDS (default 20) later, and thaw it on any exit.
# DIR is the mount point of a filesystem of its own (a loop-mounted ext4 image), the export.
dir=$1 seconds=${2:-20}
trap 'fsfreeze -u "$dir" 2>/dev/null' EXIT
for _ in $(seq 600); do [ -e "$dir/ready" ] && break; sleep 0.2; done
fsfreeze -f "$dir" && echo "$(date +%T.%N) frozen"
sleep "$seconds"
fsfreeze -u "$dir" && echo "$(date +%T.%N) thawed"
