#!/usr/bin/env bash
# Instructions per request of a fastpath binary, counted by callgrind: exact and repeatable
# (the same binary and inputs give the same count whatever else the machine is doing), so a
# change can be compared with the code it changes where a timed benchmark would be noisy.
#
# Usage: bench/instructions.sh [--close|--proxy|--h2] BINARY [BASELINE_BINARY]
#        bench/instructions.sh [--close] --metrics BINARY
#
# Serves a 1 KiB file with one worker (epoll) under valgrind --tool=callgrind, loads it with
# `fastpath bench` (8 connections, keep-alive, or a new connection per request with
# --close) for 2 s and then for 5 s, and reports the slope: (instructions of the long run -
# instructions of the short run) / (replies of the long run - replies of the short run),
# which leaves out start-up and exit. With a second binary, both are measured and the
# ratio is given. With --metrics, the one binary is measured with Prometheus metrics off and
# on (`[metrics] listen`), and the ratio on / off is given. The load generator is the first
# binary's `fastpath bench`. With --proxy, the request is proxied instead (`/app/1k.bin`,
# one [[backend]]: nginx serving the same file, started here on a port of its own, outside
# valgrind), keep-alive both ways. With --h2, the file is asked for over HTTP/2 (h2c, prior
# knowledge) by h2load: 4 connections of 100 concurrent streams, 4,000 requests for each
# second. Needs valgrind (apt-get install valgrind), nginx for --proxy, h2load
# (nghttp2-client) for --h2. With CALLGRIND_OUT=FILE in the environment, the callgrind
# output of the first binary's longer run is kept there, for callgrind_annotate.
set -euo pipefail

MODE=keepalive
if [[ "${1:-}" == "--close" ]]; then
    MODE=close
    shift
elif [[ "${1:-}" == "--proxy" ]]; then
    MODE=proxy
    shift
elif [[ "${1:-}" == "--h2" ]]; then
    MODE=h2
    shift
fi
METRICS=no
if [[ "${1:-}" == "--metrics" ]]; then
    METRICS=yes
    shift
fi
[[ $# -ge 1 ]] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }

LOADGEN="$(realpath "$1")"
WORK="$(mktemp -d /tmp/fastpath-instructions.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www"
head -c 1024 /dev/urandom > "$WORK/www/1k.bin"
cat > "$WORK/fastpath.toml" <<EOF
workers = 1
model = "epoll"
root = "$WORK/www"
[log]
access = "off"
error = "stderr"
level = "warn"
EOF
PATH_SERVED=/1k.bin
if [[ $MODE == proxy ]]; then
    command -v nginx >/dev/null || { echo "nginx is required for --proxy (apt-get install nginx)" >&2; exit 1; }
    BACKEND_PORT=18778
    cat > "$WORK/backend.conf" <<EOF
daemon off; master_process off; worker_processes 1; pid $WORK/backend.pid;
error_log $WORK/backend.err warn;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server { listen 127.0.0.1:$BACKEND_PORT; location /app/ { alias $WORK/www/; } } }
EOF
    nginx -c "$WORK/backend.conf" -p "$WORK" > /dev/null 2>&1 &
    BACKEND=$!
    trap 'kill $BACKEND 2>/dev/null; rm -rf "$WORK"' EXIT
    printf '[[backend]]\nname = "app"\naddresses = "127.0.0.1:%s"\n[[route]]\nprefix = "/app/"\nbackend = "app"\n' \
        "$BACKEND_PORT" >> "$WORK/fastpath.toml"
    PATH_SERVED=/app/1k.bin
fi
cp "$WORK/fastpath.toml" "$WORK/metrics.toml"
printf '[metrics]\nlisten = "127.0.0.1:18779"\n' >> "$WORK/metrics.toml"
CONFIG="$WORK/fastpath.toml"

# Prints "REPLIES INSTRUCTIONS" for one run of `seconds` against `binary`.
run() {
    local binary=$1 seconds=$2 port=$3
    # As root, a binary that refuses to run as root without being told must be told (an
    # older one has no such option).
    local as_root=()
    if [[ $(id -u) == 0 ]] && "$binary" serve --help 2>/dev/null | grep -q -- --run-as-root; then
        as_root=(--run-as-root)
    fi
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "$binary" serve \
        "${as_root[@]}" --config "$CONFIG" --listen "127.0.0.1:$port" \
        > "$WORK/server.log" 2>&1 &
    local server=$!
    for _ in $(seq 100); do
        curl -sf -o /dev/null "http://127.0.0.1:$port$PATH_SERVED" && break
        sleep 0.2
    done
    local extra=()
    [[ $MODE == close ]] && extra=(--no-keepalive)
    local replies
    if [[ $MODE == h2 ]]; then
        replies=$(h2load -n $((seconds * 4000)) -c 4 -m 100 "http://127.0.0.1:$port$PATH_SERVED" |
            awk '/^requests:/ {print $8}')
    else
    replies=$("$LOADGEN" bench -t 1 -q --json -d "${seconds}s" -c 8 "${extra[@]}" \
        "http://127.0.0.1:$port$PATH_SERVED" | python3 -c 'import json,sys; print(json.load(sys.stdin)["replies"])')
    fi
    kill -INT "$server"
    wait "$server" 2>/dev/null || true
    local instructions
    instructions=$(grep -h '^summary:' "$WORK/cg.out" | awk '{print $2}')
    echo "$replies $instructions"
}

# Prints the instructions per request of `binary`.
per_request() {
    local binary=$1
    read -r r1 i1 < <(run "$binary" 2 18771)
    read -r r2 i2 < <(run "$binary" 5 18772)
    cp "$WORK/cg.out" "$WORK/cg.out.kept"
    python3 -c "print(round(($i2 - $i1) / ($r2 - $r1)))"
}

if [[ $METRICS == yes ]]; then
    off=$(per_request "$1")
    echo "$1: $off instructions per request ($MODE, metrics off)"
    CONFIG="$WORK/metrics.toml"
    on=$(per_request "$1")
    echo "$1: $on instructions per request ($MODE, metrics on)"
    python3 -c "print(f'ratio on / off: {$on / $off:.3f}')"
    exit 0
fi
first=$(per_request "$1")
echo "$1: $first instructions per request ($MODE)"
[[ -n "${CALLGRIND_OUT:-}" ]] && cp "$WORK/cg.out.kept" "$CALLGRIND_OUT"
if [[ $# -ge 2 ]]; then
    second=$(per_request "$2")
    echo "$2: $second instructions per request ($MODE)"
    python3 -c "print(f'ratio: {$first / $second:.3f}')"
fi
