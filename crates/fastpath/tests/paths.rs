//! Mapping request paths to files: decoding, traversal, symlinks, dotfiles,
//! directories and special files.

use crate::util::*;

fn site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    site.file("with space.txt", "spaced");
    site.file("%41.txt", "literal percent");
    site.file("sub/b.txt", "bee");
    site.file("sub/index.html", "<p>sub index</p>");
    site.file("sub/deeper/c.txt", "sea");
    site.mkdir("empty");
    site.write("outside/secret.txt", "outside the root");
    site
}

/// GETs each path and asserts its status.
#[track_caller]
fn statuses(srv: &Server, cases: &[(&str, u16)]) {
    for &(path, status) in cases {
        let r = srv.get(path);
        assert_eq!(r.status, status, "GET {path}; response:\n{r}");
        r.assert_common(false);
    }
}

httptest!(percent_decoding, |model| {
    let site = site();
    let srv = site.serve(model);
    srv.get("/with%20space.txt").assert_ok(200, "spaced");
    srv.get("/%61.txt").assert_ok(200, "hello");
    srv.get("/%61%2E%74%78%74").assert_ok(200, "hello");
    srv.get("/s%75b/b.txt").assert_ok(200, "bee");
    // Decoded once only: %2541 is the literal name "%41.txt".
    srv.get("/%2541.txt").assert_ok(200, "literal percent");
});

httptest!(dot_segments_inside_root, |model| {
    let site = site();
    let srv = site.serve(model);
    srv.get("/sub/../a.txt").assert_ok(200, "hello");
    srv.get("/./a.txt").assert_ok(200, "hello");
    srv.get("/sub/deeper/../b.txt").assert_ok(200, "bee");
    srv.get("/sub/./deeper/c.txt").assert_ok(200, "sea");
});

httptest!(traversal_above_root, |model| {
    let site = site();
    let srv = site.serve(model);
    statuses(
        &srv,
        &[
            ("/../outside/secret.txt", 400),
            ("/..", 400),
            ("/sub/../../outside/secret.txt", 400),
            ("/sub/deeper/../../../etc/passwd", 400),
            ("/../../../../../../etc/passwd", 400),
        ],
    );
});

httptest!(encoded_traversal, |model| {
    let site = site();
    let srv = site.serve(model);
    statuses(
        &srv,
        &[
            ("/%2e%2e/outside/secret.txt", 400),
            ("/%2E%2E/%2E%2E/etc/passwd", 400),
            ("/.%2e/outside/secret.txt", 400),
            ("/sub/%2e%2e/%2e%2e/outside/secret.txt", 400),
            // %2f is a separator once decoded.
            ("/..%2f..%2fetc/passwd", 400),
            ("/sub%2f..%2f..%2foutside/secret.txt", 400),
            // Backslashes are never accepted.
            ("/..%5c..%5cetc/passwd", 400),
            ("/sub%5cb.txt", 400),
            // NUL.
            ("/a.txt%00", 400),
            ("/a.txt%00.html", 400),
            // Broken escapes.
            ("/a%zz.txt", 400),
            ("/a.txt%2", 400),
            ("/a.txt%", 400),
            ("/%g1.txt", 400),
        ],
    );
    // %2f inside the root is a plain separator.
    srv.get("/sub%2fb.txt").assert_ok(200, "bee");
});

httptest!(double_encoding_is_literal, |model| {
    let site = site();
    let srv = site.serve(model);
    statuses(
        &srv,
        &[
            ("/%252e%252e/%252e%252e/etc/passwd", 404),
            ("/%252e%252e%252foutside%252fsecret.txt", 404),
            ("/..%252f..%252fetc/passwd", 404),
        ],
    );
});

httptest!(symlinks, |model| {
    let site = site();
    site.symlink("sub/b.txt", "inside-rel.txt");
    site.symlink("sub", "sublink");
    site.symlink(site.base().join("outside/secret.txt"), "out-abs.txt");
    site.symlink("../outside/secret.txt", "out-rel.txt");
    site.symlink(site.base().join("outside"), "outdir");
    site.symlink("/etc/passwd", "passwd");
    site.symlink("/dev/null", "null");
    site.symlink("nowhere", "dangling.txt");
    let srv = site.serve(model);
    srv.get("/inside-rel.txt").assert_ok(200, "bee");
    srv.get("/sublink/b.txt").assert_ok(200, "bee");
    statuses(
        &srv,
        &[
            ("/out-abs.txt", 403),
            ("/out-rel.txt", 403),
            ("/outdir/secret.txt", 403),
            ("/passwd", 403),
            ("/null", 403),
            ("/dangling.txt", 404),
        ],
    );
});

httptest!(absolute_symlink_inside_root, |model| {
    let site = site();
    // An absolute target that lies inside the root is inside the root.
    site.symlink(site.root().join("a.txt"), "inside-abs.txt");
    site.symlink(site.root().join("sub"), "subdir-abs");
    let srv = site.serve(model);
    srv.get("/inside-abs.txt").assert_ok(200, "hello");
    srv.get("/subdir-abs/b.txt").assert_ok(200, "bee");
});

httptest!(dotfiles_hidden_by_default, |model| {
    let site = site();
    site.file(".secret", "s");
    site.file(".git/config", "[core]");
    site.file("sub/.hidden", "h");
    site.file(".well-known/security.txt", "Contact: mailto:a@example.com");
    let srv = site.serve(model);
    statuses(
        &srv,
        &[
            ("/.secret", 404),
            ("/.git/config", 404),
            ("/.git/", 404),
            ("/.git", 404),
            ("/sub/.hidden", 404),
            ("/%2esecret", 404),
            ("/%2Egit/config", 404),
        ],
    );
    srv.get("/.well-known/security.txt")
        .assert_ok(200, "Contact: mailto:a@example.com");
});

httptest!(dotfiles_served_when_enabled, |model| {
    let site = site();
    site.file(".secret", "s");
    site.file(".git/config", "[core]");
    let srv = site.serve_config(model, "root = \"root\"\ndotfiles = true\n");
    srv.get("/.secret").assert_ok(200, "s");
    srv.get("/.git/config").assert_ok(200, "[core]");
    // Still no way out of the root.
    srv.get("/.%2e/outside/secret.txt").assert_status(400);
});

httptest!(directories, |model| {
    let site = site();
    let srv = site.serve(model);
    let r = srv.get("/sub");
    r.assert_status(301).assert_common(false);
    r.assert_header("location", "/sub/");
    let r = srv.get("/sub?x=1&y=2");
    r.assert_status(301);
    r.assert_header("location", "/sub/?x=1&y=2");
    let r = srv.get("/sub/deeper");
    r.assert_status(301);
    r.assert_header("location", "/sub/deeper/");
    let r = srv.get("/sub/");
    r.assert_ok(200, "<p>sub index</p>");
    r.assert_header("content-type", "text/html; charset=utf-8");
    // No index: forbidden, never a listing.
    srv.get("/empty/").assert_status(403);
    srv.get("/sub/deeper/").assert_status(403);
    let r = srv.get("/empty");
    r.assert_status(301);
    r.assert_header("location", "/empty/");
    // A file asked for as a directory.
    srv.get("/a.txt/").assert_status(404);
});

httptest!(root_index, |model| {
    let site = site();
    site.file("index.html", "<h1>home</h1>");
    let srv = site.serve(model);
    let r = srv.get("/");
    r.assert_ok(200, "<h1>home</h1>");
    r.assert_header("content-type", "text/html; charset=utf-8");
    srv.get("/index.html").assert_ok(200, "<h1>home</h1>");
});

httptest!(configured_index_list, |model| {
    let site = site();
    site.file("default.htm", "second choice");
    site.file("sub/start.html", "first choice");
    site.file("sub/default.htm", "not this");
    let srv = site.serve_config(
        model,
        "root = \"root\"\nindex = [\"start.html\", \"default.htm\"]\n",
    );
    srv.get("/").assert_ok(200, "second choice");
    srv.get("/sub/").assert_ok(200, "first choice");
    // index.html is no longer an index name.
    srv.get("/empty/").assert_status(403);
});

httptest!(fifo_is_forbidden, |model| {
    let site = site();
    site.mkfifo("pipe");
    site.mkfifo("sub/pipe.txt");
    let srv = site.serve(model);
    // Forbidden at once, without blocking on the pipe.
    let start = std::time::Instant::now();
    srv.get("/pipe").assert_status(403);
    srv.get("/sub/pipe.txt").assert_status(403);
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    // The server still serves.
    srv.get("/a.txt").assert_ok(200, "hello");
});

httptest!(device_is_forbidden, |model| {
    let site = site();
    // A character device like /dev/zero (1, 5), where creating one is allowed.
    let path = site.root().join("zero");
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 5)) };
    if rc != 0 {
        skip(
            "device_is_forbidden",
            Missing::Environment,
            &format!(
                "cannot create a device node here: {}",
                std::io::Error::last_os_error()
            ),
        );
        return;
    }
    let srv = site.serve(model);
    srv.get("/zero").assert_status(403);
    srv.get("/a.txt").assert_ok(200, "hello");
});
