#!/usr/bin/env bash
# Serves the demo site on http://127.0.0.1:8080 with its dynamic pages (/app/...) handed
# over to an unmodified Python WSGI application running under gunicorn on 127.0.0.1:8081.
# Installs gunicorn for the current user if it is missing; stops both servers on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import gunicorn' 2>/dev/null; then
    echo "installing gunicorn (pip, for this user)" >&2
    python3 -m pip install --quiet --user gunicorn 2>/dev/null || python3 -m pip install --quiet gunicorn
fi
echo "building fastpath (release; the first build takes a minute or two)" >&2
cargo build --release --quiet -p fastpath
echo "starting the backend (gunicorn on 127.0.0.1:8081) and fastpath on http://127.0.0.1:8080" >&2

python3 -m gunicorn --chdir examples/backend --bind 127.0.0.1:8081 --workers 2 \
    --log-level warning app:application &
backend=$!
target/release/fastpath serve --config examples/demo.toml "$@" &
server=$!
# Waiting in the background lets a signal reach the trap at once.
trap 'kill "$server" "$backend" 2>/dev/null || true; wait' INT TERM EXIT
wait "$server"
