//! A real client: curl. Skipped, with a message, where curl is not installed.

use crate::util::*;

const JS: &str = "function hello() { return 'hello from app.js'; }\n";

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site.file("b.txt", "bee");
    site.file("digits.txt", "0123456789");
    site.file("app.js", JS);
    site.file("app.js.gz", gzip_stored(JS.as_bytes()));
    site
}

/// curl's `-D -` output: the status line, the fields (names lowercased) and the body.
struct Dumped {
    status_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Dumped {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn dumped(out: &[u8]) -> Dumped {
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header block in {:?}", String::from_utf8_lossy(out)));
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap().to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Dumped {
        status_line,
        headers,
        body: out[split + 4..].to_vec(),
    }
}

/// Runs curl; `None` when curl is missing. Panics if curl fails.
fn run(args: &[&str]) -> Option<Dumped> {
    let out = curl(args)?;
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(dumped(&out.stdout))
}

httptest!(curl_get, |model| {
    let site = site();
    let srv = site.serve(model);
    let Some(d) = run(&["-sS", "-D", "-", &srv.url("/a.txt")]) else {
        return;
    };
    assert_eq!(d.status_line, "HTTP/1.1 200 OK");
    assert_eq!(d.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(d.header("content-length"), Some("5"));
    assert!(d.header("etag").is_some() && d.header("last-modified").is_some());
    assert_eq!(d.body, b"hello");
});

httptest!(curl_compressed, |model| {
    let site = site();
    let srv = site.serve(model);
    let Some(d) = run(&["-sS", "--compressed", "-D", "-", &srv.url("/app.js")]) else {
        return;
    };
    assert_eq!(d.status_line, "HTTP/1.1 200 OK");
    assert_eq!(d.header("content-encoding"), Some("gzip"));
    assert_eq!(d.header("vary"), Some("Accept-Encoding"));
    assert_eq!(
        d.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    // curl decoded the .gz bytes back to the original.
    assert_eq!(String::from_utf8_lossy(&d.body), JS);
});

httptest!(curl_range, |model| {
    let site = site();
    let srv = site.serve(model);
    let Some(d) = run(&["-sS", "-r", "0-4", "-D", "-", &srv.url("/digits.txt")]) else {
        return;
    };
    assert!(
        d.status_line.starts_with("HTTP/1.1 206"),
        "{}",
        d.status_line
    );
    assert_eq!(d.header("content-range"), Some("bytes 0-4/10"));
    assert_eq!(d.body, b"01234");
});

httptest!(curl_head, |model| {
    let site = site();
    let srv = site.serve(model);
    let Some(d) = run(&["-sS", "-I", &srv.url("/a.txt")]) else {
        return;
    };
    assert_eq!(d.status_line, "HTTP/1.1 200 OK");
    assert_eq!(d.header("content-length"), Some("5"));
    assert!(d.body.is_empty());
});

httptest!(curl_http10, |model| {
    let site = site();
    let srv = site.serve(model);
    let Some(d) = run(&["-sS", "--http1.0", "-D", "-", &srv.url("/a.txt")]) else {
        return;
    };
    assert_eq!(d.status_line, "HTTP/1.1 200 OK");
    assert_eq!(d.body, b"hello");
});

httptest!(curl_reuses_connection, |model| {
    let site = site();
    let srv = site.serve(model);
    let Some(out) = curl(&["-sS", &srv.url("/a.txt"), &srv.url("/b.txt")]) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hellobee");
});
