//! Validators and conditional requests (RFC 9110 section 13).

use std::time::Duration;

use crate::util::*;

const LM: &str = "Wed, 01 Jan 2020 00:00:00 GMT";
const BEFORE: &str = "Tue, 31 Dec 2019 23:59:59 GMT";
const AFTER: &str = "Wed, 01 Jan 2020 00:00:01 GMT";

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site.set_mtime("a.txt", jan_2020());
    site.file("b.txt", "other");
    site.set_mtime("b.txt", jan_2020());
    site
}

/// The current ETag of `path`.
fn etag(srv: &Server, path: &str) -> String {
    let r = srv.get(path);
    r.assert_status(200);
    r.expect_header("etag").to_string()
}

#[track_caller]
fn assert_304(r: &Response, etag: &str) {
    r.assert_status(304).assert_common(false);
    assert!(r.body.is_empty());
    r.assert_header("etag", etag);
}

httptest!(validators, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.get("/a.txt");
    r.assert_header("last-modified", LM);
    let tag = r.expect_header("etag");
    assert!(!tag.starts_with("W/"), "ETag must be strong: {tag}");
    assert!(
        tag.starts_with('"') && tag.ends_with('"') && tag.len() > 2,
        "{tag}"
    );
    // Stable across requests, distinct across files.
    assert_eq!(etag(&srv, "/a.txt"), tag);
    assert_ne!(etag(&srv, "/b.txt"), tag);
});

httptest!(if_none_match, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let tag = etag(&srv, "/a.txt");
    assert_304(&srv.get_with("/a.txt", &[("If-None-Match", &tag)]), &tag);
    assert_304(&srv.get_with("/a.txt", &[("If-None-Match", "*")]), &tag);
    let list = format!("\"nope\", {tag} , \"other\"");
    assert_304(&srv.get_with("/a.txt", &[("If-None-Match", &list)]), &tag);
    // Weak comparison: W/ of the same tag also matches.
    let weak = format!("W/{tag}");
    assert_304(&srv.get_with("/a.txt", &[("If-None-Match", &weak)]), &tag);
    // No match: the full response.
    srv.get_with("/a.txt", &[("If-None-Match", "\"nope\"")])
        .assert_ok(200, "hello");
    srv.get_with("/a.txt", &[("If-None-Match", "\"nope\", \"neither\"")])
        .assert_ok(200, "hello");
    // HEAD too.
    let r = srv.head_with("/a.txt", &[("If-None-Match", &tag)]);
    r.assert_status(304);
});

httptest!(not_modified_keeps_connection_usable, |model| {
    let site = site();
    let srv = site.serve(model);
    let tag = etag(&srv, "/a.txt");
    let mut c = srv.connect();
    let mut all = req("GET", "/a.txt", &[("If-None-Match", &tag)]);
    all.push_str(&req("GET", "/b.txt", &[]));
    all.push_str(&req("GET", "/a.txt", &[("If-Modified-Since", LM)]));
    all.push_str(&req("GET", "/a.txt", &[]));
    c.send(all);
    let rs = c.read_responses(&["GET", "GET", "GET", "GET"]);
    assert_304(&rs[0], &tag);
    rs[1].assert_ok(200, "other");
    assert_304(&rs[2], &tag);
    rs[3].assert_ok(200, "hello");
});

httptest!(if_modified_since, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let tag = etag(&srv, "/a.txt");
    assert_304(&srv.get_with("/a.txt", &[("If-Modified-Since", LM)]), &tag);
    assert_304(
        &srv.get_with("/a.txt", &[("If-Modified-Since", AFTER)]),
        &tag,
    );
    srv.get_with("/a.txt", &[("If-Modified-Since", BEFORE)])
        .assert_ok(200, "hello");
    // An invalid date is ignored.
    srv.get_with("/a.txt", &[("If-Modified-Since", "yesterday")])
        .assert_ok(200, "hello");
    // The obsolete formats are dates too (RFC 9110 section 5.6.7).
    assert_304(
        &srv.get_with(
            "/a.txt",
            &[("If-Modified-Since", "Wednesday, 01-Jan-20 00:00:00 GMT")],
        ),
        &tag,
    );
    assert_304(
        &srv.get_with(
            "/a.txt",
            &[("If-Modified-Since", "Wed Jan  1 00:00:00 2020")],
        ),
        &tag,
    );
});

httptest!(if_none_match_takes_precedence, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let tag = etag(&srv, "/a.txt");
    // The tag does not match, the date says not modified: full response.
    srv.get_with(
        "/a.txt",
        &[("If-None-Match", "\"nope\""), ("If-Modified-Since", LM)],
    )
    .assert_ok(200, "hello");
    // The tag matches, the date says modified: 304.
    assert_304(
        &srv.get_with(
            "/a.txt",
            &[("If-None-Match", &tag), ("If-Modified-Since", BEFORE)],
        ),
        &tag,
    );
});

httptest!(if_match, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let tag = etag(&srv, "/a.txt");
    let r = srv.get_with("/a.txt", &[("If-Match", "\"nope\"")]);
    r.assert_status(412).assert_common(false);
    srv.get_with("/a.txt", &[("If-Match", &tag)])
        .assert_ok(200, "hello");
    srv.get_with("/a.txt", &[("If-Match", "*")])
        .assert_ok(200, "hello");
    let list = format!("\"nope\", {tag}");
    srv.get_with("/a.txt", &[("If-Match", &list)])
        .assert_ok(200, "hello");
    // If-Match uses the strong comparison: a weak tag never matches.
    let weak = format!("W/{tag}");
    srv.get_with("/a.txt", &[("If-Match", &weak)])
        .assert_status(412);
});

httptest!(if_unmodified_since, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.get_with("/a.txt", &[("If-Unmodified-Since", BEFORE)]);
    r.assert_status(412).assert_common(false);
    srv.get_with("/a.txt", &[("If-Unmodified-Since", LM)])
        .assert_ok(200, "hello");
    srv.get_with("/a.txt", &[("If-Unmodified-Since", AFTER)])
        .assert_ok(200, "hello");
    // If-Match, when present, wins over If-Unmodified-Since.
    let tag = etag(&srv, "/a.txt");
    srv.get_with(
        "/a.txt",
        &[("If-Match", &tag), ("If-Unmodified-Since", BEFORE)],
    )
    .assert_ok(200, "hello");
});

httptest!(etag_follows_content, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let old = etag(&srv, "/a.txt");
    site.file("a.txt", "hello, changed");
    let new = wait_for(Duration::from_secs(2), || {
        let r = srv.get("/a.txt");
        (r.body == b"hello, changed").then(|| r.expect_header("etag").to_string())
    })
    .expect("new content not served within 2 s");
    assert_ne!(old, new);
    // The old tag no longer matches; the new one does.
    srv.get_with("/a.txt", &[("If-None-Match", &old)])
        .assert_ok(200, "hello, changed");
    assert_304(&srv.get_with("/a.txt", &[("If-None-Match", &new)]), &new);
});
