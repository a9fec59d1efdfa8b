"""The demo's dynamic backend: a small WSGI application, run unmodified under gunicorn.

fastpath serves the static site itself and hands requests under /app/ to this
application (see examples/demo.toml). It answers:

  /app/hello            a dynamic HTML page (time, client address as the backend sees it)
  /app/echo             the request as the backend received it, as JSON (method, path,
                        query, headers, body length): what the integration tests check
  /app/cached?ms=N      a page marked `Cache-Control: public, max-age=60`, made in N
                        milliseconds (0 if not given), naming when it was made
  /app/slow?ms=N        answers after N milliseconds
  /app/big?n=N          N bytes of body, streamed in chunks (no Content-Length)
  /app/status?code=N    an empty answer with that status
"""

import json
import time


def _query(environ):
    pairs = {}
    for item in environ.get("QUERY_STRING", "").split("&"):
        if "=" in item:
            key, value = item.split("=", 1)
            pairs[key] = value
    return pairs


def application(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    query = _query(environ)
    if path == "/app/hello":
        body = (
            "<!DOCTYPE html><html><head><title>Dynamic page</title>"
            '<link rel="stylesheet" href="/style.css"></head><body><main>'
            "<h1>Hello from the backend</h1>"
            "<p>This page was made by a Python WSGI application under gunicorn; "
            "fastpath handed the request over and relayed the answer.</p>"
            f"<p>Backend time: {time.strftime('%Y-%m-%d %H:%M:%S')}</p>"
            f"<p>Client as seen by the backend: {environ.get('HTTP_X_FORWARDED_FOR', '-')}</p>"
            '<p><a href="/">Back to the static site</a></p>'
            "</main></body></html>\n"
        ).encode()
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    if path == "/app/echo":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else environ["wsgi.input"].read()
        headers = {key[5:].replace("_", "-").lower(): value
                   for key, value in environ.items() if key.startswith("HTTP_")}
        answer = json.dumps({
            "method": environ["REQUEST_METHOD"],
            "path": path,
            "query": environ.get("QUERY_STRING", ""),
            "headers": headers,
            "body_length": len(body),
            "body": body.decode("latin-1"),
        }).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(answer)))])
        return [answer]
    if path == "/app/cached":
        time.sleep(int(query.get("ms", "0")) / 1000)
        body = f"cached at {time.time()}\n".encode()
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Cache-Control", "public, max-age=60"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    if path == "/app/slow":
        time.sleep(int(query.get("ms", "1000")) / 1000)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"slow\n"]
    if path == "/app/big":
        n = int(query.get("n", "1000000"))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        chunk = b"x" * 65536
        return (chunk[: min(65536, n - i)] for i in range(0, n, 65536))
    if path == "/app/status":
        code = int(query.get("code", "200"))
        start_response(f"{code} Status", [("Content-Length", "0")])
        return [b""]
    body = b"no such page\n"
    start_response("404 Not Found", [("Content-Type", "text/plain"),
                                     ("Content-Length", str(len(body)))])
    return [body]
