//! Range requests (RFC 9110 section 14).

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("digits.txt", "0123456789");
    site
}

#[track_caller]
fn assert_206(r: &Response, content_range: &str, body: &str) {
    r.assert_ok(206, body).assert_common(false);
    r.assert_header("content-range", content_range);
    r.assert_header("content-length", &body.len().to_string());
    r.assert_header("content-type", "text/plain; charset=utf-8");
}

fn range(srv: &Server, spec: &str) -> Response {
    srv.get_with("/digits.txt", &[("Range", spec)])
}

/// One part of a multipart/byteranges body: its fields and its bytes.
struct Part {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Part {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Splits a multipart/byteranges response into its parts.
fn multipart(r: &Response) -> Vec<Part> {
    let ct = r.expect_header("content-type");
    let (kind, params) = ct.split_once(';').unwrap_or((ct, ""));
    assert_eq!(kind.trim(), "multipart/byteranges", "{r}");
    let boundary = params
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .unwrap_or_else(|| panic!("no boundary in {ct:?}"))
        .trim_matches('"')
        .to_string();
    let delim = format!("--{boundary}").into_bytes();
    let body = &r.body;
    let find = |from: usize, needle: &[u8]| {
        body[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| i + from)
    };
    let mut at = find(0, &delim).unwrap_or_else(|| panic!("no first boundary:\n{r}"));
    let mut parts = Vec::new();
    loop {
        at += delim.len();
        if body[at..].starts_with(b"--") {
            break;
        }
        assert!(
            body[at..].starts_with(b"\r\n"),
            "boundary not followed by CRLF:\n{r}"
        );
        at += 2;
        let head_end = find(at, b"\r\n\r\n").unwrap_or_else(|| panic!("part without head:\n{r}"));
        let headers = String::from_utf8_lossy(&body[at..head_end])
            .split("\r\n")
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').expect("part field");
                (n.to_string(), v.trim().to_string())
            })
            .collect();
        let data_start = head_end + 4;
        let mut next = delim.clone();
        next.splice(0..0, b"\r\n".iter().copied());
        let data_end = find(data_start, &next).unwrap_or_else(|| panic!("unterminated part:\n{r}"));
        parts.push(Part {
            headers,
            body: body[data_start..data_end].to_vec(),
        });
        at = data_end + 2;
    }
    parts
}

httptest!(range_single, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    assert_206(&range(&srv, "bytes=0-4"), "bytes 0-4/10", "01234");
    assert_206(&range(&srv, "bytes=3-3"), "bytes 3-3/10", "3");
    assert_206(&range(&srv, "bytes=0-9"), "bytes 0-9/10", "0123456789");
});

httptest!(range_suffix_and_open, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    assert_206(&range(&srv, "bytes=-3"), "bytes 7-9/10", "789");
    assert_206(&range(&srv, "bytes=5-"), "bytes 5-9/10", "56789");
    assert_206(&range(&srv, "bytes=9-"), "bytes 9-9/10", "9");
    // A suffix longer than the file is the whole file.
    assert_206(&range(&srv, "bytes=-50"), "bytes 0-9/10", "0123456789");
    // An end past the file is clamped.
    assert_206(&range(&srv, "bytes=8-100"), "bytes 8-9/10", "89");
});

httptest!(range_unsatisfiable, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    for spec in ["bytes=10-", "bytes=20-30", "bytes=10-10"] {
        let r = range(&srv, spec);
        r.assert_status(416).assert_common(false);
        r.assert_header("content-range", "bytes */10");
    }
});

httptest!(range_ignored_when_invalid, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    for spec in [
        "items=0-4",
        "bytes=abc",
        "bytes=4-2",
        "bytes=",
        "bytes 0-4",
        "bytes=--1",
    ] {
        let r = range(&srv, spec);
        assert_eq!(r.status, 200, "Range: {spec}; response:\n{r}");
        r.assert_ok(200, "0123456789").assert_common(false);
        r.assert_no_header("content-range");
    }
});

httptest!(range_accept_ranges_advertised, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    srv.get("/digits.txt")
        .assert_header("accept-ranges", "bytes");
    range(&srv, "bytes=0-0").assert_header("accept-ranges", "bytes");
});

httptest!(if_range, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let tag = srv.get("/digits.txt").expect_header("etag").to_string();
    let r = srv.get_with("/digits.txt", &[("Range", "bytes=0-4"), ("If-Range", &tag)]);
    assert_206(&r, "bytes 0-4/10", "01234");
    let r = srv.get_with(
        "/digits.txt",
        &[("Range", "bytes=0-4"), ("If-Range", "\"an-old-etag\"")],
    );
    r.assert_ok(200, "0123456789");
    r.assert_no_header("content-range");
    // A weak validator never matches If-Range.
    let weak = format!("W/{tag}");
    srv.get_with(
        "/digits.txt",
        &[("Range", "bytes=0-4"), ("If-Range", &weak)],
    )
    .assert_ok(200, "0123456789");
});

httptest!(range_multipart, h2, |model| {
    let site = site();
    // Far-apart ranges, so that no server would rather send the gaps.
    let data: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
    site.file("letters.txt", &data);
    let srv = site.serve(model);
    let r = srv.get_with("/letters.txt", &[("Range", "bytes=0-9,500-509,-10")]);
    r.assert_status(206).assert_common(false);
    r.assert_no_header("content-range");
    let parts = multipart(&r);
    assert_eq!(parts.len(), 3, "{r}");
    let want = [
        ("bytes 0-9/1000", &data[0..10]),
        ("bytes 500-509/1000", &data[500..510]),
        ("bytes 990-999/1000", &data[990..1000]),
    ];
    for (part, (cr, body)) in parts.iter().zip(want) {
        assert_eq!(part.header("content-range"), Some(cr), "{r}");
        assert_eq!(
            part.header("content-type"),
            Some("text/plain; charset=utf-8"),
            "{r}"
        );
        assert_eq!(part.body, body, "{r}");
    }
});

httptest!(range_merges_overlapping_and_adjacent, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    assert_206(&range(&srv, "bytes=0-1,2-3"), "bytes 0-3/10", "0123");
    assert_206(&range(&srv, "bytes=0-5,3-7"), "bytes 0-7/10", "01234567");
    assert_206(&range(&srv, "bytes=6-,-2"), "bytes 6-9/10", "6789");
    // Unsatisfiable ones among satisfiable ones are dropped.
    assert_206(&range(&srv, "bytes=2-4,50-60"), "bytes 2-4/10", "234");
});

httptest!(head_ignores_range, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.head_with("/digits.txt", &[("Range", "bytes=0-4")]);
    r.assert_status(200).assert_common(true);
    r.assert_header("content-length", "10");
    r.assert_no_header("content-range");
});

httptest!(range_in_large_file, h2, |model| {
    let site = site();
    let data = noise(2 * 1024 * 1024, 3);
    site.file("big.bin", &data);
    let srv = site.serve(model);
    let r = srv.get_with("/big.bin", &[("Range", "bytes=1000000-1000099")]);
    r.assert_status(206);
    r.assert_header("content-range", "bytes 1000000-1000099/2097152");
    assert_eq!(r.body, &data[1_000_000..1_000_100]);
    let r = srv.get_with("/big.bin", &[("Range", "bytes=1048576-")]);
    r.assert_status(206);
    r.assert_header("content-range", "bytes 1048576-2097151/2097152");
    assert!(r.body == data[1_048_576..], "second half differs");
});
