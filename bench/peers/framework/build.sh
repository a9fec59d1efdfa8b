#!/usr/bin/env bash
# Builds the peers of the framework benchmark (bench/framework.py) into one directory:
#   libevent_echo, libevent_forward   C on libevent 2.1
#   tokio_echo                        Rust on tokio (its own Cargo project, not in the workspace)
#   thrift_forward                    C++ on Apache Thrift, code generated here from
#                                     examples/thrift/forwarder.thrift
# Usage: bench/peers/framework/build.sh [OUT_DIR]   (default: target/peers)
# Installs nothing. Exit status 3 when a tool or library is missing, each one named with the
# Debian package that has it; 1 when a build fails.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
out="${1:-$repo/target/peers}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2 (no $1)"); }
need_cmd cc gcc
need_cmd g++ g++
need_cmd pkg-config pkg-config
need_cmd thrift thrift-compiler
need_cmd cargo "rust toolchain"
if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists libevent || missing+=("libevent-dev (pkg-config finds no libevent)")
    pkg-config --exists thrift-nb || missing+=("libthrift-dev (pkg-config finds no thrift-nb)")
fi
# Thrift's C++ headers include boost, which libthrift-dev does not pull in.
[ -f /usr/include/boost/numeric/conversion/cast.hpp ] || missing+=("libboost-dev (no boost headers)")
if ((${#missing[@]})); then
    echo "build.sh: cannot build the framework peers; missing:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 3
fi

fail() { echo "build.sh: $*" >&2; exit 1; }
CFLAGS=(-O2 -g -Wall -Wextra)

echo "building libevent_echo, libevent_forward"
# shellcheck disable=SC2046
cc "${CFLAGS[@]}" -o "$out/libevent_echo" "$here/libevent_echo.c" $(pkg-config --cflags --libs libevent) \
    || fail "libevent_echo.c does not compile"
# shellcheck disable=SC2046
cc "${CFLAGS[@]}" -o "$out/libevent_forward" "$here/libevent_forward.c" $(pkg-config --cflags --libs libevent) \
    || fail "libevent_forward.c does not compile"

echo "building thrift_forward"
gen="$out/thrift_forward-gen"
rm -rf "$gen"
mkdir -p "$gen"
thrift --gen cpp -out "$gen" "$repo/examples/thrift/forwarder.thrift" || fail "thrift --gen cpp failed"
# shellcheck disable=SC2046
g++ -std=c++17 "${CFLAGS[@]}" -I"$gen" -o "$out/thrift_forward" \
    "$here/thrift_forward/forward.cpp" "$gen/Forwarder.cpp" \
    $(pkg-config --cflags --libs thrift-nb libevent) || fail "thrift_forward does not compile"

echo "building tokio_echo"
# Its own target directory (ignored by git) keeps rebuilds incremental whatever OUT_DIR is.
CARGO_TARGET_DIR="$here/tokio_echo/target" cargo build --quiet --release --locked \
    --manifest-path "$here/tokio_echo/Cargo.toml" || fail "tokio_echo does not build"
cp "$here/tokio_echo/target/release/tokio_echo" "$out/tokio_echo"

echo "peers built in $out"
