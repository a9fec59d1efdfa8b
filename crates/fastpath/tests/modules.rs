//! The modules the server ships, end to end: `[[module]]` tables in the configuration,
//! requests from 127.0.0.1, over HTTP/1.1 and HTTP/2, on every model.

use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::time::Duration;

use crate::util::*;

/// What `fastpath check` says of a configuration it refuses (stdout and stderr).
fn refused_by_check(config: &std::path::Path) -> String {
    let out = crate::check::check(config);
    assert!(!out.status.success(), "{}", crate::check::show(&out));
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `Authorization: Basic` for these credentials.
fn basic(user: &str, password: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}");
    let mut out = String::new();
    for chunk in raw.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

/// An htpasswd line made by the real `htpasswd` tool (apache2-utils): bcrypt.
fn htpasswd_bcrypt(user: &str, password: &str) -> String {
    let out = Command::new("htpasswd")
        .args(["-nbB", "-C", "5", user, password])
        .output()
        .expect("htpasswd (apache2-utils) is needed: .ci/run installs it");
    assert!(out.status.success(), "htpasswd failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned() + "\n"
}

httptest!(access_refuses_by_address, h2, |model| {
    let site = Site::new();
    site.file("admin/panel.html", "panel");
    site.file("lan/page.html", "lan");
    site.file("public.html", "public");
    let srv = site.serve_config(
        model,
        concat!(
            "root = \"root\"\n",
            "[[module]]\nname = \"access\"\nprefix = \"/admin/\"\n",
            "rules = [\"allow 10.0.0.0/8\", \"deny all\"]\n",
            "[[module]]\nname = \"access\"\nprefix = \"/lan/\"\n",
            "rules = [\"deny 10.0.0.0/8\", \"allow 127.0.0.0/8\", \"deny all\"]\n",
        ),
    );
    let refused = srv.get("/admin/panel.html");
    refused.assert_status(403);
    assert!(String::from_utf8_lossy(&refused.body).contains("403 Forbidden"));
    // Decoded and normalised before the scope is looked at: no way round by spelling.
    srv.get("/%61dmin/panel.html").assert_status(403);
    srv.get("/public/../admin/panel.html").assert_status(403);
    srv.get("/lan/page.html").assert_ok(200, "lan");
    srv.get("/public.html").assert_ok(200, "public");
});

httptest!(basic_auth_asks_checks_and_rereads_its_file, h2, |model| {
    let site = Site::new();
    site.file("private/secret.txt", "the secret");
    site.file("open.txt", "open");
    site.write("htpasswd", htpasswd_bcrypt("alice", "wonderland"));
    let log = site.base().join("access.log");
    let srv = site.serve_config(
        model,
        &format!(
            concat!(
                "root = \"root\"\n[log]\naccess = \"{}\"\n",
                "[[module]]\nname = \"basic_auth\"\nprefix = \"/private/\"\n",
                "realm = \"Staff \\\"only\\\"\"\nuser_file = \"htpasswd\"\n",
            ),
            log.display()
        ),
    );
    let asked = srv.get("/private/secret.txt");
    asked.assert_status(401);
    asked.assert_header(
        "www-authenticate",
        r#"Basic realm="Staff \"only\"", charset="UTF-8""#,
    );
    let right = basic("alice", "wonderland");
    let wrong = basic("alice", "looking-glass");
    srv.get_with("/private/secret.txt", &[("Authorization", &wrong)])
        .assert_status(401);
    srv.get_with("/private/secret.txt", &[("Authorization", "Bearer abc")])
        .assert_status(401);
    srv.get_with("/private/secret.txt", &[("Authorization", &right)])
        .assert_ok(200, "the secret");
    // Remembered: the same credentials again, and HEAD.
    srv.get_with("/private/secret.txt", &[("Authorization", &right)])
        .assert_ok(200, "the secret");
    srv.get("/open.txt").assert_ok(200, "open");
    // The access log names the user, as nginx's $remote_user; "-" for the others.
    let logged = wait_for(Duration::from_secs(3), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.contains(" - alice [") && text.contains("/open.txt")).then_some(text)
    });
    let text = logged.expect("no access log line naming alice within 3 s");
    let open = text.lines().find(|l| l.contains("/open.txt")).unwrap();
    assert!(open.contains(" - - ["), "{open}");
    // The file changes while the server runs: the old password stops working, the new one
    // works, without a reload.
    let replaced = site.write("htpasswd.new", htpasswd_bcrypt("alice", "looking-glass"));
    std::fs::rename(&replaced, site.base().join("htpasswd")).unwrap();
    // Each worker looks at the file on its own, within a second or two: asked until all
    // have (several connections, spread over the workers).
    let switched = wait_for(Duration::from_secs(10), || {
        let all = (0..8).all(|_| {
            let new = srv.get_with("/private/secret.txt", &[("Authorization", &wrong)]);
            let old = srv.get_with("/private/secret.txt", &[("Authorization", &right)]);
            new.status == 200 && old.status == 401
        });
        all.then_some(())
    });
    assert!(switched.is_some(), "the new password file was never read");
});

httptest!(rewrite_redirect_and_loops, h2, |model| {
    let site = Site::new();
    site.file("new/page.html", "new page");
    site.file("private/secret.txt", "the secret");
    site.write("htpasswd", htpasswd_bcrypt("alice", "wonderland"));
    let srv = site.serve_config(
        model,
        concat!(
            "root = \"root\"\n",
            "[[module]]\nname = \"rewrite\"\nrules = [\n",
            "  { pattern = \"^/old/(.*)$\", to = \"/new/$1\" },\n",
            "  { pattern = \"^/blog/(.*)$\", to = \"https://blog.example.com/$1\", redirect = 301 },\n",
            "  { pattern = \"^/moved$\", to = \"/new/page.html?from=moved\", redirect = 308 },\n",
            "  { pattern = \"^/ping$\", to = \"/pong\" },\n",
            "  { pattern = \"^/pong$\", to = \"/ping\" },\n",
            "  { pattern = \"^/sneak/(.*)$\", to = \"/private/$1\" },\n",
            "]\n",
            "[[module]]\nname = \"basic_auth\"\nprefix = \"/private/\"\nuser_file = \"htpasswd\"\n",
        ),
    );
    srv.get("/old/page.html").assert_ok(200, "new page");
    let moved = srv.get("/blog/2026/a%20b?x=1");
    moved.assert_status(301);
    moved.assert_header("location", "https://blog.example.com/2026/a%20b?x=1");
    let kept = srv.get("/moved?y=2");
    kept.assert_status(308);
    kept.assert_header("location", "/new/page.html?from=moved&y=2");
    // A loop is refused, not followed.
    srv.get("/ping").assert_status(500);
    // A rewrite into a protected prefix meets its password.
    srv.get("/sneak/secret.txt").assert_status(401);
    let right = basic("alice", "wonderland");
    srv.get_with("/sneak/secret.txt", &[("Authorization", &right)])
        .assert_ok(200, "the secret");
});

httptest!(listing_shows_a_directory_without_an_index, h2, |model| {
    let site = Site::new();
    site.file("files/<b>&\"q'.txt", "odd");
    site.file("files/a b.txt", "spaced");
    site.file("files/.hidden", "hidden");
    site.mkdir("files/sub");
    let invalid = std::ffi::OsStr::from_bytes(b"bad\xffname.bin");
    std::fs::write(site.root().join("files").join(invalid), "bytes").unwrap();
    site.file("with-index/index.html", "the index");
    site.file("with-index/other.txt", "other");
    let srv = site.serve_config(
        model,
        concat!(
            "root = \"root\"\n",
            "[[module]]\nname = \"listing\"\nprefix = \"/files/\"\n",
            "[[module]]\nname = \"listing\"\nprefix = \"/with-index/\"\n",
            "[[module]]\nname = \"listing\"\nprefix = \"/files/sub/\"\nformat = \"json\"\n",
        ),
    );
    let page = srv.get("/files/");
    page.assert_status(200);
    page.assert_header("content-type", "text/html; charset=utf-8");
    let html = String::from_utf8(page.body.clone()).unwrap();
    assert!(html.contains("&lt;b&gt;&amp;&quot;q&#39;.txt"), "{html}");
    assert!(!html.contains("<b>&"), "a name went out unescaped: {html}");
    assert!(html.contains("href=\"a%20b.txt\""), "{html}");
    assert!(html.contains("href=\"sub/\""), "{html}");
    assert!(html.contains("href=\"bad%FFname.bin\""), "{html}");
    assert!(html.contains("bad\u{fffd}name.bin"), "{html}");
    assert!(
        !html.contains(".hidden"),
        "a hidden name was listed: {html}"
    );
    // The static path still answers for files, and for a directory with an index.
    srv.get("/files/a%20b.txt").assert_ok(200, "spaced");
    srv.get("/with-index/").assert_ok(200, "the index");
    // A directory without its slash is redirected first, as before.
    srv.get("/files").assert_status(301);
    let json = srv.get("/files/sub/");
    json.assert_status(200);
    json.assert_header("content-type", "application/json");
    let parsed: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert!(parsed.to_string().contains("[]"), "{parsed}");
});

httptest!(without_module_tables_nothing_changes, |model| {
    let site = Site::new();
    site.file("files/a.txt", "a");
    let srv = site.serve(model);
    // No listing unless a table asks for one.
    srv.get("/files/").assert_status(403);
    srv.get("/files/a.txt").assert_ok(200, "a");
});

#[test]
fn check_reports_module_errors_with_their_place() {
    let site = Site::new();
    let config = site.config(concat!(
        "root = \"root\"\n",
        "[[module]]\nname = \"basic_auth\"\nuser_file = \"missing-file\"\n",
        "[[module]]\nname = \"rewrite\"\nrules = [{ pattern = \"(\", to = \"/x\" }]\n",
    ));
    let said = refused_by_check(&config);
    assert!(said.contains(":4:13: [[module]] \"basic_auth\""), "{said}");
    assert!(said.contains("missing-file"), "{said}");
    assert!(
        said.contains(":7:22: [[module]] \"rewrite\": rule \"(\""),
        "{said}"
    );
}

/// `body` decoded by the reference tool of its coding (gzip, brotli, zstd: their command
/// lines, on the libraries every client uses).
fn decode(coding: &str, body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let tool = match coding {
        "gzip" => "gzip",
        "br" => "brotli",
        "zstd" => "zstd",
        other => panic!("no decoder for {other}"),
    };
    let mut child = Command::new(tool)
        .args(["-d", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool} is needed (.ci/run installs it): {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let body = body.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{tool} could not decode the body");
    out.stdout
}

/// `r` is a 200 whose body is `page` compressed with `coding`, saying that it varies
/// (`what` names the case in a failure).
fn assert_compressed(r: &Response, coding: &str, page: &[u8], what: &str) {
    r.assert_status(200);
    r.assert_header("content-encoding", coding);
    r.assert_header("vary", "Accept-Encoding");
    assert!(
        r.body.len() < page.len() / 2,
        "{what}: {} bytes",
        r.body.len()
    );
    assert_eq!(
        decode(coding, &r.body),
        page,
        "{what}: the body decoded differs"
    );
}

/// A page of 100 KiB that compresses as pages do.
fn page() -> Vec<u8> {
    let mut page = b"<!DOCTYPE html>\n<html><body>\n".to_vec();
    let mut n = 0u64;
    while page.len() < 100 * 1024 {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        page.extend_from_slice(
            format!(
                "<p class=\"row\">Row {} of the table, value {}</p>\n",
                page.len(),
                n >> 40
            )
            .as_bytes(),
        );
    }
    page
}

httptest!(compress_on_the_fly_by_the_clients_preference, h2, |model| {
    let site = Site::new();
    let page = page();
    site.file("page.html", &page);
    site.file("tiny.html", "<p>tiny</p>");
    site.file("image.png", vec![7u8; 4096]);
    site.file("plain.txt", "x".repeat(4096));
    let srv = site.serve_config(
        model,
        concat!(
            "root = \"root\"\n",
            "[[module]]\nname = \"compress\"\ntypes = [\"text/html\"]\n",
        ),
    );
    let mut etags = Vec::new();
    for (accept, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("gzip;q=0.5, br;q=0.8, zstd;q=0.9", "zstd"),
        ("gzip, br, zstd", "br"),
        ("*", "br"),
    ] {
        let r = srv.get_with("/page.html", &[("Accept-Encoding", accept)]);
        assert_compressed(&r, coding, &page, accept);
        let etag = r.expect_header("etag").to_owned();
        assert!(etag.ends_with(&format!("-{coding}\"")), "{etag}");
        etags.push(etag);
    }
    // Identity where nothing acceptable is offered, saying that it varies.
    for accept in [None, Some("gzip;q=0, br;q=0, zstd;q=0"), Some("identity")] {
        let r = match accept {
            Some(a) => srv.get_with("/page.html", &[("Accept-Encoding", a)]),
            None => srv.get("/page.html"),
        };
        r.assert_ok(200, &page);
        r.assert_no_header("content-encoding");
        r.assert_header("vary", "Accept-Encoding");
    }
    // The same copy each time: its tag is stable, a conditional request on it gets 304.
    let again = srv.get_with("/page.html", &[("Accept-Encoding", "gzip")]);
    assert_eq!(again.expect_header("etag"), etags[0]);
    let whole = again.body.clone();
    srv.get_with(
        "/page.html",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &etags[0])],
    )
    .assert_status(304);
    // Another coding's tag does not match.
    srv.get_with(
        "/page.html",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &etags[1])],
    )
    .assert_status(200);
    // A range of the compressed copy is a range of its bytes.
    let part = srv.get_with(
        "/page.html",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=10-109")],
    );
    part.assert_status(206);
    part.assert_header("content-encoding", "gzip");
    part.assert_header("content-range", &format!("bytes 10-109/{}", whole.len()));
    assert_eq!(part.body, &whole[10..110]);
    // What the policy leaves alone: too small, another type.
    for path in ["/tiny.html", "/image.png", "/plain.txt"] {
        let r = srv.get_with(path, &[("Accept-Encoding", "gzip, br")]);
        r.assert_status(200);
        r.assert_no_header("content-encoding");
    }
    // A changed file is compressed anew.
    let mut changed = page.clone();
    changed.extend_from_slice(b"<p>one more row</p>\n");
    site.file("page.html", &changed);
    let fresh = wait_for(Duration::from_secs(10), || {
        let r = srv.get_with("/page.html", &[("Accept-Encoding", "gzip")]);
        (r.status == 200 && decode("gzip", &r.body) == changed).then_some(r)
    });
    let fresh = fresh.expect("the changed file was never compressed anew");
    assert_ne!(fresh.expect_header("etag"), etags[0]);
});

#[test]
fn compress_rejects_bad_settings_where_they_are() {
    let site = Site::new();
    let config = site.config(concat!(
        "root = \"root\"\n",
        "[[module]]\nname = \"compress\"\ncodings = [\"gzip\", \"deflate\"]\ngzip_level = 12\n",
    ));
    let said = refused_by_check(&config);
    assert!(
        said.contains(":4:11: [[module]] \"compress\": coding \"deflate\""),
        "{said}"
    );
    assert!(
        said.contains(":5:14: [[module]] \"compress\": gzip level 12"),
        "{said}"
    );
}

httptest!(error_pages_answer_the_servers_errors, h2, |model| {
    let site = Site::new();
    site.file("errors/404.html", "<h1>Not here</h1>");
    site.file("errors/401.html", "<h1>Who are you?</h1>");
    site.file("errors/405.html", "<h1>Not that way</h1>");
    site.file("private/secret.txt", "the secret");
    site.file("dir/readme.txt", "no index here");
    site.file("other/x.txt", "x");
    site.write("htpasswd", htpasswd_bcrypt("alice", "wonderland"));
    let srv = site.serve_config(
        model,
        concat!(
            "root = \"root\"\n",
            "[[module]]\nname = \"error_pages\"\n",
            "pages = { \"404\" = \"/errors/404.html\", \"401\" = \"/errors/401.html\", ",
            "\"405\" = \"/errors/405.html\", \"403\" = \"/errors/missing.html\" }\n",
            "[[module]]\nname = \"basic_auth\"\nprefix = \"/private/\"\nuser_file = \"htpasswd\"\n",
        ),
    );
    let missing = srv.get("/no/such/file");
    missing.assert_ok(404, "<h1>Not here</h1>");
    missing.assert_header("content-type", "text/html; charset=utf-8");
    missing.assert_no_header("etag");
    // A module's answer keeps its fields: the challenge goes with the page.
    let asked = srv.get("/private/secret.txt");
    asked.assert_ok(401, "<h1>Who are you?</h1>");
    assert!(asked
        .expect_header("www-authenticate")
        .starts_with("Basic realm="));
    let refused = srv.request(req("DELETE", "/other/x.txt", &[]));
    refused.assert_ok(405, "<h1>Not that way</h1>");
    // A page that cannot be read leaves the server's own: no loop.
    let forbidden = srv.get("/dir/");
    forbidden.assert_status(403);
    assert!(String::from_utf8_lossy(&forbidden.body).contains("403 Forbidden"));
    srv.get("/other/x.txt").assert_ok(200, "x");
});

httptest!(status_page_shows_what_the_metrics_show, |model| {
    let site = Site::new();
    site.file("a.txt", "a");
    let srv = site.serve_config(
        model,
        concat!(
            "root = \"root\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            "[[module]]\nname = \"status\"\nprefix = \"/server-status\"\n",
            "[[module]]\nname = \"access\"\nprefix = \"/server-status\"\n",
            "rules = [\"allow 127.0.0.1\", \"deny all\"]\n",
        ),
    );
    for _ in 0..5 {
        srv.get("/a.txt").assert_ok(200, "a");
    }
    srv.get("/missing").assert_status(404);
    let status = srv.get("/server-status");
    status.assert_status(200);
    status.assert_header("content-type", "application/json");
    status.assert_header("cache-control", "no-store");
    let page: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
    let workers = page["workers"].as_array().unwrap();
    let total = |class: &str| -> u64 {
        workers
            .iter()
            .map(|w| w["requests"][class].as_u64().unwrap())
            .sum()
    };
    // The requests before the page's own: the page is counted once it is answered.
    assert_eq!(total("2xx"), 5, "{page}");
    assert_eq!(total("4xx"), 1, "{page}");
    let connections: u64 = workers
        .iter()
        .map(|w| w["connections_total"].as_u64().unwrap())
        .sum();
    assert!(connections >= 7, "{page}");
    // The exposition says the same, and counts the page too.
    let text =
        String::from_utf8(crate::metrics::scrape(crate::metrics::metrics_addr(&srv)).body).unwrap();
    let requests = |code: &str| {
        crate::metrics::sum(&text, "fastpath_http_requests_total", &[("code", code)]) as u64
    };
    assert_eq!(requests("2xx"), 6, "{text}");
    assert_eq!(requests("4xx"), 1, "{text}");
    let html = site.serve_config(
        model,
        "root = \"root\"\n[[module]]\nname = \"status\"\nprefix = \"/status\"\nformat = \"html\"\n",
    );
    html.get("/a.txt").assert_ok(200, "a");
    let page = html.get("/status");
    page.assert_status(200);
    page.assert_header("content-type", "text/html; charset=utf-8");
    let body = String::from_utf8(page.body.clone()).unwrap();
    assert!(
        body.contains("<th>2xx</th>") && body.contains("<td>1</td>"),
        "{body}"
    );
    html.request(req("POST", "/status", &[("Content-Length", "0")]))
        .assert_status(405);
});

/// A backend answering every request with `X-Powered-By`, `Cache-Control: public,
/// max-age=60` (so the response cache keeps it) and a 3-byte body.
fn chatty_backend() -> std::net::SocketAddr {
    canned_backend(
        "HTTP/1.1 200 OK\r\nX-Powered-By: PHP/8\r\n\
         Cache-Control: public, max-age=60\r\nContent-Length: 3\r\n\r\nok\n",
    )
}

httptest!(headers_edit_every_head_in_scope, h2, |model| {
    let site = Site::new();
    site.file("static/app.css", "body{}");
    site.file("other.txt", "other");
    let backend = chatty_backend();
    let srv = site.serve_config(
        model,
        &format!(
            concat!(
                "root = \"root\"\n",
                "[[backend]]\nname = \"app\"\naddresses = \"{}\"\n",
                "[[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n",
                "[[module]]\nname = \"headers\"\nprefix = \"/static/\"\n",
                "add = {{ \"X-Frame-Options\" = \"DENY\" }}\nexpires = \"1h\"\n",
                "[[module]]\nname = \"headers\"\nprefix = \"/app/\"\n",
                "remove = [\"X-Powered-By\"]\nset = {{ \"Cache-Control\" = \"no-store\" }}\n",
                "add = {{ \"X-Served-By\" = \"fastpath\" }}\nalways = true\n",
            ),
            backend
        ),
    );
    let css = srv.get("/static/app.css");
    css.assert_ok(200, "body{}");
    css.assert_header("x-frame-options", "DENY");
    css.assert_header("cache-control", "max-age=3600");
    let date = httpdate::parse_http_date(css.expect_header("date")).unwrap();
    let expires = httpdate::parse_http_date(css.expect_header("expires")).unwrap();
    assert_eq!(expires.duration_since(date).unwrap().as_secs(), 3600);
    // Not on an error unless `always`.
    let missing = srv.get("/static/missing.css");
    missing.assert_status(404);
    missing.assert_no_header("x-frame-options");
    missing.assert_no_header("expires");
    // Out of scope: nothing.
    srv.get("/other.txt").assert_no_header("x-frame-options");
    // A backend's head, relayed and then from the response cache: both edited.
    for _ in 0..2 {
        let app = srv.get("/app/page");
        app.assert_ok(200, "ok\n");
        app.assert_no_header("x-powered-by");
        app.assert_header("cache-control", "no-store");
        app.assert_header("x-served-by", "fastpath");
    }
});

#[test]
fn headers_refuse_the_fields_the_server_owns() {
    let site = Site::new();
    let config = site.config(concat!(
        "root = \"root\"\n",
        "[[module]]\nname = \"headers\"\nset = { \"Content-Length\" = \"5\" }\n",
        "expires = \"soon\"\n",
    ));
    let said = refused_by_check(&config);
    assert!(
        said.contains(":4:7: [[module]] \"headers\": `set` Content-Length:"),
        "{said}"
    );
    assert!(said.contains(":5:11: [[module]] \"headers\":"), "{said}");
}

/// A backend that answers by path with `page` in the framings and codings a backend uses,
/// counting the requests each path got. `/app/stream` sends its first piece, then waits
/// for `release` before the rest.
struct PageBackend {
    addr: std::net::SocketAddr,
    hits: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    release: std::sync::mpsc::Sender<()>,
}

fn page_backend(page: Vec<u8>) -> PageBackend {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(Mutex::new(released));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (page, hits, released) = (page.clone(), counted.clone(), released.clone());
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut line = String::new();
                    let mut if_none_match = false;
                    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                        let lower = line.to_ascii_lowercase();
                        if_none_match |=
                            lower.starts_with("if-none-match:") && lower.contains("\"p1\"");
                        line.clear();
                    }
                    let path = request_line.split(' ').nth(1).unwrap_or("").to_owned();
                    *hits.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                    let html = "Content-Type: text/html; charset=utf-8\r\n";
                    let sized = |fields: &str, body: &[u8]| {
                        let mut out = format!(
                            "HTTP/1.1 200 OK\r\n{fields}Content-Length: {}\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        out.extend_from_slice(body);
                        out
                    };
                    let answer = match path.as_str() {
                        // Weak comparison, as RFC 9110 §13.1.2 has it for If-None-Match.
                        "/app/length" if if_none_match => {
                            b"HTTP/1.1 304 Not Modified\r\nETag: \"p1\"\r\n\r\n".to_vec()
                        }
                        "/app/length" => sized(
                            &format!("{html}ETag: \"p1\"\r\nAccept-Ranges: bytes\r\nCache-Control: public, max-age=60\r\n"),
                            &page,
                        ),
                        "/app/chunked" => {
                            let mut out = format!("HTTP/1.1 200 OK\r\n{html}Transfer-Encoding: chunked\r\n\r\n")
                                .into_bytes();
                            for piece in page.chunks(1000) {
                                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                                out.extend_from_slice(piece);
                                out.extend_from_slice(b"\r\n");
                            }
                            out.extend_from_slice(b"0\r\n\r\n");
                            out
                        }
                        "/app/close" => {
                            let mut out =
                                format!("HTTP/1.1 200 OK\r\n{html}Connection: close\r\n\r\n").into_bytes();
                            out.extend_from_slice(&page);
                            let _ = writer.write_all(&out);
                            return;
                        }
                        "/app/coded" => sized(&format!("{html}Content-Encoding: gzip\r\n"), b"not really gzip"),
                        "/app/no-transform" => {
                            sized(&format!("{html}Cache-Control: no-transform\r\n"), &page)
                        }
                        "/app/image" => sized("Content-Type: image/png\r\n", &page),
                        "/app/small" => sized(html, b"<p>small</p>"),
                        "/app/stream" => {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\n{html}Transfer-Encoding: chunked\r\n\r\n\
                                 {:x}\r\n<p>first part</p>\r\n",
                                "<p>first part</p>".len()
                            );
                            if writer.write_all(head.as_bytes()).is_err() {
                                return;
                            }
                            let _ = released.lock().unwrap().recv_timeout(Duration::from_secs(20));
                            let rest = "<p>the rest</p>";
                            format!("{:x}\r\n{rest}\r\n0\r\n\r\n", rest.len()).into_bytes()
                        }
                        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                    };
                    if writer.write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    PageBackend {
        addr,
        hits,
        release,
    }
}

/// A site whose `/app/` goes to `backend`, compressed by the module.
fn compressing_proxy(site: &Site, model: Model, backend: std::net::SocketAddr) -> Server {
    site.serve_config(
        model,
        &format!(
            concat!(
                "root = \"root\"\n",
                "[[backend]]\nname = \"app\"\naddresses = \"{}\"\n",
                "[[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n",
                "[[module]]\nname = \"compress\"\n",
            ),
            backend
        ),
    )
}

httptest!(compress_a_backends_responses_as_they_pass, h2, |model| {
    let site = Site::new();
    let page = page();
    let backend = page_backend(page.clone());
    let hits = backend.hits.clone();
    let srv = compressing_proxy(&site, model, backend.addr);
    // Every framing the backend uses, each coding: the body decodes to the page.
    for path in ["/app/length", "/app/chunked", "/app/close"] {
        for coding in ["gzip", "br", "zstd"] {
            let r = srv.get_with(path, &[("Accept-Encoding", coding)]);
            assert_compressed(&r, coding, &page, path);
            r.assert_no_header("content-length");
            r.assert_no_header("accept-ranges");
        }
    }
    // The strong tag is made weak: the bytes are not the backend's.
    let r = srv.get_with("/app/length", &[("Accept-Encoding", "gzip")]);
    r.assert_header("etag", "W/\"p1\"");
    // Kept by the response cache per Accept-Encoding, compressed: the backend was asked
    // once for gzip, once for br, once for zstd, and once more for a client without one.
    let identity = srv.get("/app/length");
    identity.assert_ok(200, &page);
    identity.assert_header("vary", "Accept-Encoding");
    identity.assert_header("etag", "\"p1\"");
    let again = srv.get("/app/length");
    again.assert_ok(200, &page);
    let asked = hits.lock().unwrap()["/app/length"];
    if model == "prefork" {
        // Each child keeps a cache of its own: a page may be fetched once per child.
        assert!(asked >= 4, "asked {asked} times");
    } else {
        assert_eq!(asked, 4, "the backend was asked {asked} times");
    }
    // A conditional request for the compressed copy, answered from the cache.
    srv.get_with(
        "/app/length",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", "W/\"p1\"")],
    )
    .assert_status(304);
    // What is left alone: coded already, no-transform, another type, too small.
    let coded = srv.get_with("/app/coded", &[("Accept-Encoding", "gzip, br")]);
    coded.assert_ok(200, "not really gzip");
    coded.assert_header("content-encoding", "gzip");
    for path in ["/app/no-transform", "/app/image"] {
        let r = srv.get_with(path, &[("Accept-Encoding", "gzip, br")]);
        r.assert_ok(200, &page);
        r.assert_no_header("content-encoding");
    }
    let small = srv.get_with("/app/small", &[("Accept-Encoding", "gzip")]);
    small.assert_ok(200, "<p>small</p>");
    small.assert_no_header("content-encoding");
    // HEAD says what GET would send, without a length it cannot know.
    let head = srv.head_with("/app/chunked", &[("Accept-Encoding", "br")]);
    head.assert_status(200);
    head.assert_header("content-encoding", "br");
    head.assert_no_header("content-length");
});

httptest!(compress_a_backends_stream_as_it_is_made, |model| {
    // A body that pauses reaches the client decodable up to the pause: the compressor is
    // flushed whenever the backend has nothing more for now.
    use std::io::{Read, Write};
    let site = Site::new();
    let backend = page_backend(page());
    let srv = compressing_proxy(&site, model, backend.addr);
    let mut client = std::net::TcpStream::connect(srv.addr()).unwrap();
    client
        .write_all(b"GET /app/stream HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let first = wait_for(Duration::from_secs(10), || {
        let mut buf = [0u8; 4096];
        if let Ok(n) = client.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        let body_at = got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let decoded = inflate_prefix(&dechunk_prefix(&got[body_at..]));
        decoded.contains("first part").then_some(decoded)
    });
    assert!(
        first.is_some(),
        "the first part never arrived decodable: {}",
        String::from_utf8_lossy(&got)
    );
    backend.release.send(()).unwrap();
    let rest = wait_for(Duration::from_secs(10), || {
        let mut buf = [0u8; 4096];
        if let Ok(n) = client.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.ends_with(b"0\r\n\r\n").then_some(())
    });
    assert!(rest.is_some(), "the body never ended");
    let body_at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(
        decode("gzip", &dechunk_prefix(&got[body_at..])),
        b"<p>first part</p><p>the rest</p>"
    );
});

httptest!(
    compress_a_backends_response_to_http10_ends_with_the_close,
    |model| {
        let site = Site::new();
        let page = page();
        let backend = page_backend(page.clone());
        let srv = compressing_proxy(&site, model, backend.addr);
        let mut conn = srv.connect();
        conn.send("GET /app/chunked HTTP/1.0\r\nAccept-Encoding: zstd\r\n\r\n");
        let r = conn.read_response();
        r.assert_status(200);
        r.assert_header("content-encoding", "zstd");
        r.assert_no_header("transfer-encoding");
        assert_eq!(decode("zstd", &r.body), page);
        conn.expect_closed();
    }
);

/// The data of the whole chunks at the start of a chunked body.
fn dechunk_prefix(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let Ok(size) = usize::from_str_radix(std::str::from_utf8(&body[..end]).unwrap_or("x"), 16)
        else {
            break;
        };
        if size == 0 || body.len() < end + 2 + size + 2 {
            break;
        }
        data.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[end + 2 + size + 2..];
    }
    data
}

/// What the start of a gzip stream decodes to, with Python's zlib (a decoder that gives
/// what it has of an unfinished stream).
fn inflate_prefix(gzip: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, zlib; sys.stdout.buffer.write(zlib.decompressobj(31).decompress(sys.stdin.buffer.read()))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child.stdin.take().unwrap().write_all(gzip).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
