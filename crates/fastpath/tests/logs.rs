//! The access log (Combined Log Format) and the error log, to the standard
//! streams and to files.

use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `[21/Nov/2026:22:50:00 +0000]` (without the brackets) to seconds since the epoch.
fn parse_clf_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 26 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[14] != b':' {
        return None;
    }
    if b[17] != b':' || b[20] != b' ' || !(b[21] == b'+' || b[21] == b'-') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = &s[r];
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let day = num(0..2)?;
    let month = MONTHS.iter().position(|m| *m == &s[3..6])? as i64 + 1;
    let year = num(7..11)?;
    let (h, mi, sec) = (num(12..14)?, num(15..17)?, num(18..20)?);
    let off = num(22..24)? * 3600 + num(24..26)? * 60;
    let off = if b[21] == b'-' { -off } else { off };
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + sec - off)
}

/// Checks one access log line: the fixed client fields, a well-formed time
/// close to now, and then exactly `rest` (request line, status, size,
/// referer, user agent).
#[track_caller]
fn assert_clf(line: &str, rest: &str) {
    let prefix = "127.0.0.1 - - [";
    assert!(line.starts_with(prefix), "access log line {line:?}");
    let close = line
        .find("] ")
        .unwrap_or_else(|| panic!("access log line {line:?}"));
    let time = &line[prefix.len()..close];
    let t = parse_clf_time(time)
        .unwrap_or_else(|| panic!("bad time {time:?} in access log line {line:?}"));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now - t).abs() < 120,
        "time {time:?} is not now; line {line:?}"
    );
    assert_eq!(&line[close + 2..], rest, "access log line {line:?}");
}

fn find_line(text: &str, needle: &str) -> Option<String> {
    text.lines()
        .find(|l| l.contains(needle))
        .map(str::to_string)
}

httptest!(access_log_format, |model| {
    let site = site();
    let srv = site.serve(model);
    srv.get_with(
        "/a.txt",
        &[
            ("User-Agent", "fp-test/1.0"),
            ("Referer", "http://ref.example/page"),
        ],
    )
    .assert_ok(200, "hello");
    let missing = srv.get("/missing.txt");
    missing.assert_status(404);
    srv.request("GET /a.txt?q=1 HTTP/1.0\r\n\r\n")
        .assert_ok(200, "hello");
    let wait = |needle: &str| {
        srv.wait_stdout_line(Duration::from_secs(3), |l| l.contains(needle))
            .unwrap_or_else(|| panic!("no access log line with {needle:?} within 3 s"))
    };
    assert_clf(
        &wait("GET /a.txt HTTP/1.1"),
        "\"GET /a.txt HTTP/1.1\" 200 5 \"http://ref.example/page\" \"fp-test/1.0\"",
    );
    assert_clf(
        &wait("GET /missing.txt"),
        &format!(
            "\"GET /missing.txt HTTP/1.1\" 404 {} \"-\" \"-\"",
            missing.body.len()
        ),
    );
    assert_clf(
        &wait("GET /a.txt?q=1"),
        "\"GET /a.txt?q=1 HTTP/1.0\" 200 5 \"-\" \"-\"",
    );
    // One line per request, nothing else on stdout.
    let lines: Vec<String> = srv.stdout().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "stdout:\n{}", srv.stdout());
});

httptest!(access_log_flushed_within_a_second, |model| {
    let site = site();
    let srv = site.serve(model);
    srv.get("/a.txt").assert_ok(200, "hello");
    let line = srv.wait_stdout_line(Duration::from_millis(2500), |l| l.contains("/a.txt"));
    assert!(
        line.is_some(),
        "the access log was not flushed within 2.5 s"
    );
});

httptest!(access_log_flushed_at_exit, |model| {
    let site = site();
    let mut srv = site.serve(model);
    for _ in 0..3 {
        srv.get("/a.txt").assert_ok(200, "hello");
    }
    let status = srv.stop(libc::SIGTERM, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0));
    let out = srv.stdout();
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("\"GET /a.txt HTTP/1.1\" 200 5"))
            .count(),
        3,
        "stdout after exit:\n{out}"
    );
});

httptest!(access_log_to_file, |model| {
    let site = site();
    let path = site.base().join("access.log");
    let mut srv = site.serve_config(
        model,
        &format!("root = \"root\"\n[log]\naccess = \"{}\"\n", path.display()),
    );
    srv.get_with("/a.txt", &[("User-Agent", "to-file")])
        .assert_ok(200, "hello");
    let line = wait_for(Duration::from_secs(3), || {
        find_line(&fs::read_to_string(&path).unwrap_or_default(), "/a.txt")
    })
    .expect("no access log line in the file within 3 s");
    assert_clf(&line, "\"GET /a.txt HTTP/1.1\" 200 5 \"-\" \"to-file\"");
    srv.stop(libc::SIGTERM, Duration::from_secs(5));
    assert!(
        !srv.stdout().contains("/a.txt"),
        "stdout:\n{}",
        srv.stdout()
    );
});

httptest!(access_log_to_stderr, |model| {
    let site = site();
    let srv = site.serve_config(model, "root = \"root\"\n[log]\naccess = \"stderr\"\n");
    srv.get("/a.txt").assert_ok(200, "hello");
    let found = wait_for(Duration::from_secs(3), || {
        find_line(&srv.stderr(), "GET /a.txt")
    })
    .expect("no access log line on stderr within 3 s");
    assert_clf(&found, "\"GET /a.txt HTTP/1.1\" 200 5 \"-\" \"-\"");
});

httptest!(access_log_off, |model| {
    let site = site();
    let mut srv = site.serve_config(model, "root = \"root\"\n[log]\naccess = \"off\"\n");
    srv.get("/a.txt").assert_ok(200, "hello");
    srv.stop(libc::SIGTERM, Duration::from_secs(5));
    assert!(
        !srv.stdout().contains("/a.txt"),
        "stdout:\n{}",
        srv.stdout()
    );
    assert!(
        !srv.stderr().contains("GET /a.txt"),
        "stderr:\n{}",
        srv.stderr()
    );
});

httptest!(error_log_says_listening, |model| {
    let site = site();
    let srv = site.serve(model);
    let want = format!("listening on {}", srv.addr());
    assert!(srv.stderr().contains(&want), "stderr:\n{}", srv.stderr());
    // And nothing of it goes to stdout, the access log.
    assert!(
        !srv.stdout().contains("listening on"),
        "stdout:\n{}",
        srv.stdout()
    );
});

httptest!(error_log_to_file, |model| {
    let site = site();
    let path = site.base().join("error.log");
    let srv = site
        .server(model)
        .config(&format!(
            "root = \"root\"\n[log]\nerror = \"{}\"\n",
            path.display()
        ))
        .listening_line_in(path.clone())
        .start();
    srv.get("/a.txt").assert_ok(200, "hello");
    let text = fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(&format!("listening on {}", srv.addr())),
        "error log file:\n{text}"
    );
    assert!(
        !srv.stderr().contains("listening on"),
        "stderr:\n{}",
        srv.stderr()
    );
});
