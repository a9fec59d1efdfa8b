#!/usr/bin/env bash
# Interleaved A/B of the server's CPU per reply when its workers share the machine's cores:
# each binary in turn serves one 1 KiB file with `workers = 2` (model epoll, not pinned), loaded
# by `fastpath bench -t 1 -c 64` for DURATION seconds after one second of warm-up, for ROUNDS
# rounds; prints "round binary replies µs-per-reply" (user + system time of the server from
# /proc). The load generator is the first binary's `fastpath bench`.
#
# Usage: [ROUNDS=5] [DURATION=4] [WORKERS=2] bench/ab_hot.sh BINARY [BINARY...]
set -euo pipefail
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4}
WORKERS=${WORKERS:-2}
[[ $# -ge 1 ]] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
LOADGEN="$(realpath "$1")"
WORK="$(mktemp -d /tmp/fastpath-ab.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/www"
head -c 1024 /dev/urandom > "$WORK/www/1k.bin"
printf 'workers = %s\nmodel = "epoll"\nroot = "%s/www"\n[log]\naccess = "off"\nerror = "stderr"\nlevel = "warn"\n' \
    "$WORKERS" "$WORK" > "$WORK/fastpath.toml"
TCK=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
    for binary in "$@"; do
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        "$binary" serve --run-as-root --config "$WORK/fastpath.toml" --listen "127.0.0.1:$port" \
            > "$WORK/server.log" 2>&1 &
        server=$!
        for _ in $(seq 100); do
            curl -s -o /dev/null "http://127.0.0.1:$port/1k.bin" && break
            sleep 0.1
        done
        "$LOADGEN" bench -t 1 -q -c 64 -d 1s "http://127.0.0.1:$port/1k.bin" > /dev/null
        t0=$(awk '{print $14 + $15}' "/proc/$server/stat")
        replies=$("$LOADGEN" bench -t 1 -q --json -c 64 -d "${DURATION}s" \
            "http://127.0.0.1:$port/1k.bin" |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["replies"])')
        t1=$(awk '{print $14 + $15}' "/proc/$server/stat")
        kill -INT "$server"
        wait "$server" 2>/dev/null || true
        python3 -c "print($round, '$binary', $replies, round(($t1 - $t0) / $TCK * 1e6 / $replies, 2))"
    done
done
