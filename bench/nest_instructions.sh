#!/usr/bin/env bash
# Instructions per reply, counted by callgrind, of the server generated from
# examples/nest/http10.nest against `fastpath serve`, both on one epoll loop, serving a
# 2 KiB file with a new connection per request (bench/nest.py's workload): exact and
# repeatable whatever else the machine is doing, where bench/nest.py's CPU times are not.
#
# Usage: bench/nest_instructions.sh [FASTPATH_BIN [HTTP10_BIN]]
#
# Each server runs under valgrind --tool=callgrind for 2 s and then for 5 s of
# `fastpath bench --conn-rate 500 --no-keepalive`; the slope (instructions of the long run -
# of the short run) / (replies of the long run - of the short run) leaves out start-up and
# exit. Then, for each, the functions that cost the most per reply (callgrind_annotate's
# self cost, the same slope). Without arguments it uses target/release/fastpath and
# target/nest-examples/http10/target/release/http10, building them if missing. Needs
# valgrind (apt-get install valgrind).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
FASTPATH="${1:-$REPO/target/release/fastpath}"
HTTP10="${2:-$REPO/target/nest-examples/http10/target/release/http10}"
if [[ ! -x "$FASTPATH" ]]; then
    (cd "$REPO" && cargo build --release -p fastpath)
fi
if [[ ! -x "$HTTP10" ]]; then
    "$FASTPATH" nest build "$REPO/examples/nest/http10.nest" -o "$REPO/target/nest-examples/http10" >/dev/null
fi
FASTPATH="$(realpath "$FASTPATH")"
HTTP10="$(realpath "$HTTP10")"

WORK="$(mktemp -d /tmp/fastpath-nest-instructions.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/www"
head -c 2048 /dev/urandom > "$WORK/www/lex.ll"
cat > "$WORK/fastpath.toml" <<EOF
workers = 1
model = "epoll"
root = "$WORK/www"
[log]
access = "off"
error = "stderr"
level = "warn"
EOF
printf 'logLevel warn\n' > "$WORK/config.nest"

# Prints "REPLIES INSTRUCTIONS" for one run of `seconds` against server `which`; keeps
# callgrind's output as $WORK/which.seconds.out.
run() {
    local which=$1 seconds=$2 port=$3
    local out="$WORK/$which.$seconds.out"
    if [[ $which == fastpath ]]; then
        local as_root=()
        [[ $(id -u) == 0 ]] && as_root=(--run-as-root)
        valgrind --tool=callgrind --callgrind-out-file="$out" "$FASTPATH" serve "${as_root[@]}" \
            --config "$WORK/fastpath.toml" --listen "127.0.0.1:$port" >"$WORK/server.log" 2>&1 &
    else
        DOCUMENT_ROOT="$WORK/www" valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$HTTP10" --config "$WORK/config.nest" --listen "127.0.0.1:$port" \
            --model "eventServer 1" >"$WORK/server.log" 2>&1 &
    fi
    local server=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/lex.ll" && break
        sleep 0.2
    done
    local replies
    replies=$("$FASTPATH" bench -t 1 -q --json -d "${seconds}s" --conn-rate 500 --no-keepalive \
        --expect-length 2048 "http://127.0.0.1:$port/lex.ll" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["replies"])')
    kill -INT "$server"
    wait "$server" 2>/dev/null || true
    echo "$replies $(grep -h '^summary:' "$out" | awk '{print $2}')"
}

declare -A PER
for which in http10 fastpath; do
    read -r r1 i1 < <(run "$which" 2 18781)
    read -r r2 i2 < <(run "$which" 5 18782)
    PER[$which]=$(python3 -c "print(round(($i2 - $i1) / ($r2 - $r1)))")
    echo $((r2 - r1)) > "$WORK/$which.replies"
    echo "$which: ${PER[$which]} instructions per reply ($r1 and $r2 replies)"
done
python3 -c "print(f'ratio http10 / fastpath: {${PER[http10]} / ${PER[fastpath]}:.2f}')"

# Self cost per function, per reply: the 5 s run minus the 2 s run, over the replies between.
for which in http10 fastpath; do
    for s in 2 5; do
        callgrind_annotate --inclusive=no --auto=no --threshold=100 "$WORK/$which.$s.out" \
            > "$WORK/$which.$s.fns" 2>/dev/null
    done
done
python3 - "$WORK" <<'EOF'
import re, sys
work = sys.argv[1]
LINE = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$")

def load(path):
    out = {}
    for line in open(path):
        m = LINE.match(line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        name = m.group(2).split(" [")[0]
        name = name.rsplit(":", 1)[-1] if ":" in name else name
        out[name] = out.get(name, 0) + int(m.group(1).replace(",", ""))
    return out

for which in ("http10", "fastpath"):
    a, b = load(f"{work}/{which}.2.fns"), load(f"{work}/{which}.5.fns")
    n = int(open(f"{work}/{which}.replies").read())
    diff = sorted(((b.get(k, 0) - a.get(k, 0)) / n, k) for k in set(a) | set(b))
    print(f"\n{which}: instructions per reply by function (self cost, top 12)")
    for per, name in reversed(diff[-12:]):
        print(f"  {per:>8,.0f}  {name[:100]}")
EOF
