#!/usr/bin/env bash
# fastpath comparison suite: fastpath against nginx, lighttpd, h2o and Apache
# (event MPM) on the same machine, document root and workloads, one server
# at a time, each pinned to CPU 0 with the load generator on CPU 1. The load
# generator is `fastpath bench` (workloads 1-4 and the overload sweep), with
# wrk as a cross-check on workload 1.
#
# Usage: bench/run.sh [--quick] [--servers fastpath,nginx,...] [--model NAME]
#                     [--no-write] [--keep] [other bench/bench.py options]
#
#   --quick          2 s per workload, no warm-up, 5 overload steps of 1 s
#                    (smoke run, about 2.5 minutes); default is 10 s per
#                    workload after 2 s of warm-up and 8 overload steps of
#                    2 s (about 8 minutes)
#   --servers LIST   subset of fastpath,nginx,lighttpd,h2o,apache2 (default: all)
#   --model NAME     passed to `fastpath serve --model`
#   --no-write       print the tables without updating BENCHMARKS.md and the
#                    charts in bench/results/
#   --keep           keep the work directory (configs, logs, raw JSON)
#
# FASTPATH_BIN selects the fastpath binary (server and load generator);
# without it the script builds one with `cargo build --release -p fastpath`
# and uses target/release/fastpath.
#
# Missing packages (nginx, lighttpd, h2o, apache2, wrk, strace) are installed
# with apt-get. The distribution's own service configurations are not read or
# changed: every server gets its configuration from bench/peers/, with pid,
# log and temporary files in a fresh directory under /tmp that is removed at
# the end. Every process the suite starts is stopped on exit, also on failure
# or interrupt. Results go to stdout and between the bench:begin/bench:end
# markers of BENCHMARKS.md, and the charts to bench/results/*.svg.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
ORIG_ARGS=("$@")

SERVERS="fastpath,nginx,lighttpd,h2o,apache2"
KEEP=0
NO_STRACE=0
NO_WRK=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
        --servers) SERVERS="${args[$((i + 1))]:-}" ;;
        --servers=*) SERVERS="${args[$i]#--servers=}" ;;
        --keep) KEEP=1 ;;
        --no-strace) NO_STRACE=1 ;;
        --no-wrk) NO_WRK=1 ;;
        -h|--help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
            exec python3 "$BENCH_DIR/bench.py" --help ;;
    esac
done

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

has_server() { [[ ",$SERVERS," == *",$1,"* ]]; }

# --- packages -------------------------------------------------------------
export PATH="$PATH:/usr/sbin:/sbin"
need=()
has_server nginx && ! command -v nginx >/dev/null && need+=(nginx)
has_server lighttpd && ! command -v lighttpd >/dev/null && need+=(lighttpd)
has_server h2o && ! command -v h2o >/dev/null && need+=(h2o)
has_server apache2 && ! command -v apache2 >/dev/null && need+=(apache2)
[[ $NO_WRK == 1 ]] || command -v wrk >/dev/null || need+=(wrk)
command -v taskset >/dev/null || need+=(util-linux)
if [[ $NO_STRACE == 0 ]] && { has_server fastpath || has_server nginx; }; then
    command -v strace >/dev/null || need+=(strace)
fi
command -v python3 >/dev/null || need+=(python3)
if ((${#need[@]})); then
    log "installing ${need[*]}"
    SUDO=()
    [[ $(id -u) == 0 ]] || SUDO=(sudo)
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
        "${need[@]}" >/dev/null
fi

# --- fastpath (a server under test, and always the load generator) --------
GIVEN_FASTPATH_BIN="${FASTPATH_BIN:-}"
if [[ -z "${FASTPATH_BIN:-}" ]]; then
    log "building fastpath (cargo build --release -p fastpath)"
    (cd "$REPO_DIR" && cargo build --release -p fastpath)
    FASTPATH_BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/fastpath"
    [[ "$FASTPATH_BIN" == /* ]] || FASTPATH_BIN="$REPO_DIR/$FASTPATH_BIN"
fi
[[ -x "$FASTPATH_BIN" ]] || { log "error: FASTPATH_BIN=$FASTPATH_BIN is not an executable"; exit 1; }
export FASTPATH_BIN

# --- run, and clean up whatever happens -------------------------------------
WORK="$(mktemp -d /tmp/fastpath-bench.XXXXXX)"
chmod 755 "$WORK"
PY_PID=""

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n "$PY_PID" ]] && kill -0 "$PY_PID" 2>/dev/null; then
        kill -TERM "$PY_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$PY_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$PY_PID" 2>/dev/null || true
    fi
    # Servers still registered (if the orchestrator itself was killed).
    if [[ -f "$WORK/pgids" ]]; then
        while read -r pg; do
            [[ -n "$pg" ]] || continue
            kill -TERM -- "-$pg" 2>/dev/null || true
        done <"$WORK/pgids"
        sleep 1
        while read -r pg; do
            [[ -n "$pg" ]] || continue
            kill -KILL -- "-$pg" 2>/dev/null || true
        done <"$WORK/pgids"
    fi
    if [[ $KEEP == 1 ]]; then
        log "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Raise the open-file limit as far as the hard limit allows (10,000 idle
# connections in workload 5, up to 15,000 pending connections in the overload
# sweep); bench.py raises it again for itself.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

COMMAND="bench/run.sh${ORIG_ARGS[*]:+ ${ORIG_ARGS[*]}}"
if [[ -n "$GIVEN_FASTPATH_BIN" ]]; then
    COMMAND="FASTPATH_BIN=$GIVEN_FASTPATH_BIN $COMMAND"
fi
cd "$REPO_DIR"
python3 "$BENCH_DIR/bench.py" --work "$WORK" --command "$COMMAND" "$@" &
PY_PID=$!
set +e
wait "$PY_PID"
rc=$?
set -e
PY_PID=""
exit "$rc"
