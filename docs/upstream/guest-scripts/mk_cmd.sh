# usage: mk_cmd.sh WORKLOAD_FILE PAIRS...  -> prints a guest command
W=$1; shift
printf "cat > /tmp/overlap.py <<'PY'\n%s\nPY\n" "$(cat "$(dirname "$0")"/overlap.py)"
printf "T=/sys/kernel/tracing; mount -t tracefs nodev \$T; echo 65536 > \$T/buffer_size_kb\n"
cat "$W"
printf "python3 /tmp/overlap.py"; for p in "$@"; do printf " '%s'" "$p"; done; echo
