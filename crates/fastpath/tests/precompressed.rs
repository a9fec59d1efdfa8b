//! Precompressed variants: `X.gz` and `X.br` served for `X` by Accept-Encoding.
//!
//! The server never decodes them, so the tests give each variant distinct
//! bytes and check which one came back.

use crate::util::*;

const JS: &str = "console.log('identity');\n";
const GZ: &[u8] = b"\x1f\x8b gzip variant bytes";
const BR: &[u8] = b"brotli variant bytes";
const CSS: &str = "body { color: black }\n";
const CSS_GZ: &[u8] = b"\x1f\x8b css gzip bytes";

fn site() -> Site {
    let site = Site::new();
    site.file("app.js", JS);
    site.file("app.js.gz", GZ);
    site.file("app.js.br", BR);
    site.file("style.css", CSS);
    site.file("style.css.gz", CSS_GZ);
    site.file("plain.txt", "no variants");
    site
}

fn get(srv: &Server, path: &str, ae: Option<&str>) -> Response {
    match ae {
        Some(ae) => srv.get_with(path, &[("Accept-Encoding", ae)]),
        None => srv.get(path),
    }
}

/// Asserts a response carries the given variant of app.js.
#[track_caller]
fn assert_variant(r: &Response, encoding: Option<&str>, body: &[u8], ct: &str) {
    r.assert_ok(200, body).assert_common(false);
    r.assert_header("content-type", ct);
    r.assert_header("vary", "Accept-Encoding");
    match encoding {
        Some(e) => r.assert_header("content-encoding", e),
        None => r.assert_no_header("content-encoding"),
    };
}

const JS_CT: &str = "text/javascript; charset=utf-8";
const CSS_CT: &str = "text/css; charset=utf-8";

httptest!(gzip_variant, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    assert_variant(&get(&srv, "/app.js", Some("gzip")), Some("gzip"), GZ, JS_CT);
    assert_variant(&get(&srv, "/app.js", Some("GZIP")), Some("gzip"), GZ, JS_CT);
    assert_variant(
        &get(&srv, "/style.css", Some("gzip")),
        Some("gzip"),
        CSS_GZ,
        CSS_CT,
    );
    assert_variant(
        &get(&srv, "/style.css", Some("gzip, deflate, br")),
        Some("gzip"),
        CSS_GZ,
        CSS_CT,
    );
});

httptest!(brotli_variant_preferred, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    assert_variant(&get(&srv, "/app.js", Some("br")), Some("br"), BR, JS_CT);
    assert_variant(
        &get(&srv, "/app.js", Some("gzip, br")),
        Some("br"),
        BR,
        JS_CT,
    );
    assert_variant(
        &get(&srv, "/app.js", Some("br, gzip")),
        Some("br"),
        BR,
        JS_CT,
    );
    assert_variant(
        &get(&srv, "/app.js", Some("gzip, deflate, br, zstd")),
        Some("br"),
        BR,
        JS_CT,
    );
    // The client's weights win over the server's preference.
    assert_variant(
        &get(&srv, "/app.js", Some("br;q=0.5, gzip")),
        Some("gzip"),
        GZ,
        JS_CT,
    );
    assert_variant(
        &get(&srv, "/app.js", Some("br;q=0, gzip;q=0.1")),
        Some("gzip"),
        GZ,
        JS_CT,
    );
});

httptest!(identity_when_not_accepted, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let js = JS.as_bytes();
    assert_variant(&get(&srv, "/app.js", None), None, js, JS_CT);
    assert_variant(&get(&srv, "/app.js", Some("identity")), None, js, JS_CT);
    assert_variant(&get(&srv, "/app.js", Some("deflate")), None, js, JS_CT);
    assert_variant(&get(&srv, "/app.js", Some("gzip;q=0")), None, js, JS_CT);
    assert_variant(&get(&srv, "/app.js", Some("")), None, js, JS_CT);
    // Only a .gz next to style.css: br alone gets the identity.
    assert_variant(
        &get(&srv, "/style.css", Some("br")),
        None,
        CSS.as_bytes(),
        CSS_CT,
    );
});

httptest!(no_vary_without_variants, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = get(&srv, "/plain.txt", Some("gzip, br"));
    r.assert_ok(200, "no variants");
    r.assert_no_header("content-encoding");
});

httptest!(variants_have_own_etags, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let id = get(&srv, "/app.js", None);
    let gz = get(&srv, "/app.js", Some("gzip"));
    let br = get(&srv, "/app.js", Some("br"));
    let tags = [
        id.expect_header("etag"),
        gz.expect_header("etag"),
        br.expect_header("etag"),
    ];
    assert_ne!(tags[0], tags[1]);
    assert_ne!(tags[0], tags[2]);
    assert_ne!(tags[1], tags[2]);
    // Conditional requests compare against the variant that would be sent.
    let tag = tags[1].to_string();
    let r = srv.get_with(
        "/app.js",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &tag)],
    );
    r.assert_status(304);
    r.assert_header("etag", &tag);
    r.assert_header("vary", "Accept-Encoding");
    srv.get_with("/app.js", &[("If-None-Match", &tag)])
        .assert_ok(200, JS);
});

httptest!(head_of_variant, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.head_with("/app.js", &[("Accept-Encoding", "gzip")]);
    r.assert_status(200).assert_common(true);
    r.assert_header("content-length", &GZ.len().to_string());
    r.assert_header("content-encoding", "gzip");
    r.assert_header("vary", "Accept-Encoding");
});

httptest!(range_of_variant, h2, |model| {
    let site = site();
    let srv = site.serve(model);
    // A range applies to the representation selected, here the gzip bytes.
    let r = srv.get_with(
        "/app.js",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-1")],
    );
    r.assert_ok(206, &GZ[..2]);
    r.assert_header("content-range", &format!("bytes 0-1/{}", GZ.len()));
    r.assert_header("content-encoding", "gzip");
});

httptest!(precompressed_off, h2, |model| {
    let site = site();
    let srv = site.serve_config(model, "root = \"root\"\nprecompressed = false\n");
    let r = get(&srv, "/app.js", Some("gzip, br"));
    r.assert_ok(200, JS);
    r.assert_no_header("content-encoding");
    // The variant files are still plain files.
    srv.get("/app.js.gz").assert_ok(200, GZ);
});
