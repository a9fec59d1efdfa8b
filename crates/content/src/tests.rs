//! Behavioural tests of [`Site::serve`] against real temporary directories.

use std::fs;
use std::os::unix::fs::{symlink, FileExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

use crate::{Body, Part, Reply, Site, SiteOptions, Source, StaticRequest, MAX_MULTIPART_RANGES};

// ---------------------------------------------------------------- helpers

fn opts() -> SiteOptions {
    SiteOptions::default()
}

fn precompressed() -> SiteOptions {
    SiteOptions {
        precompressed: true,
        ..SiteOptions::default()
    }
}

/// The document root lives in `outer/root` so tests can place files just
/// outside it (`outer/secret`).
struct Fixture {
    outer: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let outer = tempfile::tempdir().unwrap();
        fs::create_dir(outer.path().join("root")).unwrap();
        fs::write(outer.path().join("secret"), "top secret").unwrap();
        Fixture { outer }
    }
    fn root(&self) -> std::path::PathBuf {
        self.outer.path().join("root")
    }
    fn write(&self, rel: &str, data: impl AsRef<[u8]>) -> std::path::PathBuf {
        let p = self.root().join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&p, data).unwrap();
        p
    }
    fn mkdir(&self, rel: &str) {
        fs::create_dir_all(self.root().join(rel)).unwrap();
    }
    fn site(&self, options: SiteOptions) -> Site {
        Site::open(&self.root(), options).unwrap()
    }
    /// The kernel-resolved site and the realpath fallback: security rules
    /// must hold for both.
    fn both(&self, options: SiteOptions) -> [Site; 2] {
        let a = Site::open(&self.root(), options.clone()).unwrap();
        let b = Site::open_fallback(&self.root(), options).unwrap();
        assert!(!b.uses_openat2());
        [a, b]
    }
}

fn get(path: &'static str) -> StaticRequest<'static> {
    StaticRequest {
        path: path.as_bytes(),
        raw_path: path,
        ..StaticRequest::default()
    }
}

fn with_range(path: &'static str, range: &'static str) -> StaticRequest<'static> {
    StaticRequest {
        range: Some(range.as_bytes()),
        ..get(path)
    }
}

fn set_mtime(path: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

/// The bytes a GET would send, assembled from the body description.
fn body(reply: &Reply) -> Vec<u8> {
    let slice = |file: &fs::File, offset: u64, len: u64| {
        let mut buf = vec![0; usize::try_from(len).unwrap()];
        file.read_exact_at(&mut buf, offset).unwrap();
        buf
    };
    match &reply.body {
        Body::None => Vec::new(),
        Body::File { file, offset, len } => slice(file, *offset, *len),
        Body::Memory { data, offset, len } => data[*offset..*offset + *len].to_vec(),
        Body::Parts { source, parts } => parts
            .iter()
            .flat_map(|p| match (p, source) {
                (Part::Bytes(b), _) => b.clone(),
                (Part::File { offset, len }, Source::File(file)) => slice(file, *offset, *len),
                (Part::File { offset, len }, Source::Memory(data)) => {
                    data[*offset as usize..(*offset + *len) as usize].to_vec()
                }
            })
            .collect(),
    }
}

/// Asserts status, and for bodies that the content length is exact.
fn check(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(body(reply).len() as u64, reply.content_length, "{reply:?}");
    if matches!(reply.body, Body::None) {
        assert_eq!(reply.content_length, 0);
    }
}

fn numbers(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

// ---------------------------------------------------------------- basics

#[test]
fn serves_a_regular_file() {
    let fx = Fixture::new();
    let p = fx.write("a/hello.txt", "hello world");
    set_mtime(&p, at(1_700_000_000));
    for site in fx.both(opts()) {
        let r = site.serve(&get("/a/hello.txt"));
        check(&r, 200);
        assert_eq!(body(&r), b"hello world");
        assert_eq!(r.content_type.as_deref(), Some("text/plain; charset=utf-8"));
        assert_eq!(r.content_encoding, None);
        assert!(!r.vary_accept_encoding);
        assert!(r.accept_ranges);
        assert_eq!(r.last_modified, Some(at(1_700_000_000)));
        let meta = fs::metadata(&p).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            r.etag.as_deref(),
            Some(format!("\"{:x}.0-b-{:x}\"", 1_700_000_000, meta.ino()).as_str())
        );
        assert!(r.location.is_none() && r.content_range.is_none());
    }
}

#[test]
fn head_is_get_without_ranges() {
    let fx = Fixture::new();
    fx.write("f.bin", numbers(100));
    let site = fx.site(opts());
    let get_reply = site.serve(&get("/f.bin"));
    let head = StaticRequest {
        head: true,
        range: Some(b"bytes=0-9"),
        ..get("/f.bin")
    };
    let r = site.serve(&head);
    check(&r, 200);
    assert_eq!(r.content_length, 100);
    assert_eq!(r.etag, get_reply.etag);
    assert_eq!(r.content_type, get_reply.content_type);
    assert!(r.content_range.is_none());
}

#[test]
fn missing_paths_are_404() {
    let fx = Fixture::new();
    fx.write("file.txt", "x");
    for site in fx.both(opts()) {
        for p in ["/nope", "/nope/", "/file.txt/", "/file.txt/x", "/a/b/c"] {
            let r = site.serve(&StaticRequest {
                path: p.as_bytes(),
                raw_path: p,
                ..StaticRequest::default()
            });
            check(&r, 404);
            assert!(r.etag.is_none());
        }
        let long = format!("/{}", "x".repeat(300));
        let r = site.serve(&StaticRequest {
            path: long.as_bytes(),
            raw_path: &long,
            ..StaticRequest::default()
        });
        check(&r, 404);
        let longer = "/abc".repeat(2000);
        let r = site.serve(&StaticRequest {
            path: longer.as_bytes(),
            raw_path: &longer,
            ..StaticRequest::default()
        });
        check(&r, 404);
    }
}

#[test]
fn malformed_paths_do_not_panic() {
    let fx = Fixture::new();
    fx.write("index.html", "i");
    let site = fx.site(opts());
    for p in [&b""[..], b"x", b"/\0", b"/a\0b", b"\xff\xfe", b"/\xff.txt"] {
        let r = site.serve(&StaticRequest {
            path: p,
            raw_path: "",
            ..StaticRequest::default()
        });
        check(&r, 404);
    }
}

#[test]
fn open_rejects_bad_roots() {
    let fx = Fixture::new();
    assert!(Site::open(&fx.root().join("missing"), opts()).is_err());
    let f = fx.write("plain", "x");
    assert!(Site::open(&f, opts()).is_err());
}

/// Asks the kernel directly, not through `Site`, to resolve a path beneath `dir` with
/// openat2(2) and RESOLVE_BENEATH, which the site relies on: kernels before 5.6 answer ENOSYS,
/// a seccomp filter that forbids the call ENOSYS or EPERM.
fn probe_openat2(dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let dir = fs::File::open(dir).unwrap();
    // struct open_how: flags, mode, resolve (RESOLVE_BENEATH).
    let how: [u64; 3] = [
        (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        0,
        0x08,
    ];
    // SAFETY: a NUL-terminated path and an open_how of the size passed, both only read.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c".".as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the call just returned, closed once.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

#[test]
fn openat2_is_used_exactly_where_the_kernel_has_it() {
    // Either way the rules hold (the tests above run both ways); this checks that the site
    // takes the kernel's resolution when there is one and does not claim it when there is not.
    let fx = Fixture::new();
    let site = fx.site(opts());
    let kernel = probe_openat2(&fx.root());
    assert_eq!(
        site.uses_openat2(),
        kernel.is_ok(),
        "the site's detection disagrees with the kernel ({kernel:?})"
    );
}

#[test]
fn length_and_validators_describe_the_open_descriptor() {
    let fx = Fixture::new();
    let p = fx.write("f.txt", "old contents");
    let site = fx.site(opts());
    let r = site.serve(&get("/f.txt"));
    // Replace the file by rename after the reply was built.
    let tmp = fx.write("f.tmp", "new, longer contents");
    fs::rename(tmp, &p).unwrap();
    check(&r, 200);
    assert_eq!(body(&r), b"old contents");
    let r2 = site.serve(&get("/f.txt"));
    assert_eq!(body(&r2), b"new, longer contents");
    assert_ne!(r.etag, r2.etag);
}

// ---------------------------------------------------------------- symlinks, special files

#[test]
fn symlinks_inside_root_are_served() {
    let fx = Fixture::new();
    fx.write("real/data.txt", "data");
    symlink("real/data.txt", fx.root().join("link.txt")).unwrap();
    fx.mkdir("sub");
    symlink("../real/data.txt", fx.root().join("sub/up.txt")).unwrap();
    symlink("real", fx.root().join("dirlink")).unwrap();
    for site in fx.both(opts()) {
        for p in ["/link.txt", "/dirlink/data.txt", "/sub/up.txt"] {
            let r = site.serve(&StaticRequest {
                path: p.as_bytes(),
                raw_path: p,
                ..StaticRequest::default()
            });
            check(&r, 200);
            assert_eq!(body(&r), b"data");
        }
        let r = site.serve(&get("/dirlink"));
        check(&r, 301);
        assert_eq!(r.location.as_deref(), Some("/dirlink/"));
    }
}

#[test]
fn symlinks_leaving_root_are_403() {
    let fx = Fixture::new();
    let secret = fx.outer.path().join("secret");
    symlink(&secret, fx.root().join("abs")).unwrap();
    symlink("../secret", fx.root().join("rel")).unwrap();
    symlink("..", fx.root().join("up")).unwrap();
    symlink("/", fx.root().join("slash")).unwrap();
    symlink("/proc/self/root/etc/hostname", fx.root().join("magic")).unwrap();
    symlink("loop", fx.root().join("loop")).unwrap();
    for site in fx.both(opts()) {
        for p in [
            "/abs",
            "/rel",
            "/up/secret",
            "/slash/etc/hostname",
            "/magic",
            "/loop",
        ] {
            let r = site.serve(&StaticRequest {
                path: p.as_bytes(),
                raw_path: p,
                ..StaticRequest::default()
            });
            check(&r, 403);
            assert!(r.etag.is_none(), "{p}");
        }
    }
}

#[test]
fn absolute_symlinks_into_the_root() {
    // RESOLVE_BENEATH refuses absolute symlinks even when they point back
    // inside the root; those are checked on their canonical path instead.
    let fx = Fixture::new();
    fx.write("data.txt", "data");
    symlink(fx.root().join("data.txt"), fx.root().join("abs.txt")).unwrap();
    symlink("/etc/passwd", fx.root().join("abs-out.txt")).unwrap();
    for site in fx.both(opts()) {
        check(&site.serve(&get("/abs.txt")), 200);
        check(&site.serve(&get("/abs-out.txt")), 403);
    }
}

#[test]
fn fifo_is_403_and_does_not_block() {
    let fx = Fixture::new();
    let fifo = std::ffi::CString::new(fx.root().join("pipe").into_os_string().into_encoded_bytes())
        .unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    for site in fx.both(opts()) {
        check(&site.serve(&get("/pipe")), 403);
    }
}

#[test]
fn socket_is_403() {
    let fx = Fixture::new();
    let _listener = std::os::unix::net::UnixListener::bind(fx.root().join("sock")).unwrap();
    for site in fx.both(opts()) {
        check(&site.serve(&get("/sock")), 403);
    }
}

#[test]
fn unreadable_file_is_403() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let p = fx.write("locked.txt", "x");
    fs::set_permissions(&p, fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads any file through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: they are dropped
    // for a thread of the test's own (capabilities are a thread's), which then serves.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            drop_file_permission_overrides();
            for site in fx.both(opts()) {
                check(&site.serve(&get("/locked.txt")), 403);
            }
        });
    });
}

/// Takes CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH out of the calling thread's effective
/// capabilities, so that file permissions hold for it even as root (nothing to do for
/// another user, who has neither).
fn drop_file_permission_overrides() {
    // The kernel's capability ABI (linux/capability.h, version 3: two 32-bit words).
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_DAC_OVERRIDE: u32 = 1;
    const CAP_DAC_READ_SEARCH: u32 = 2;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget and capset with the version-3 header and two data words, as the
    // kernel's ABI asks; pid 0 is the calling thread.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
            0,
            "capget"
        );
        data[0].effective &= !(1 << CAP_DAC_OVERRIDE | 1 << CAP_DAC_READ_SEARCH);
        assert_eq!(
            libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
            0,
            "capset"
        );
    }
}

// ---------------------------------------------------------------- dotfiles

#[test]
fn dotfiles_are_hidden_unless_enabled() {
    let fx = Fixture::new();
    fx.write(".env", "SECRET=1");
    fx.write("a/.git/config", "[core]");
    fx.write(".well-known/security.txt", "Contact: x");
    fx.write(".well-known/.hidden", "h");
    fx.write("a/.well-known/x", "x");
    let site = fx.site(opts());
    for p in [
        "/.env",
        "/a/.git/config",
        "/.well-known/.hidden",
        "/a/.well-known/x",
        "/.env/",
    ] {
        let r = site.serve(&StaticRequest {
            path: p.as_bytes(),
            raw_path: p,
            ..StaticRequest::default()
        });
        check(&r, 404);
    }
    let r = site.serve(&get("/.well-known/security.txt"));
    check(&r, 200);
    assert_eq!(body(&r), b"Contact: x");

    let site = fx.site(SiteOptions {
        dotfiles: true,
        ..opts()
    });
    for p in [
        "/.env",
        "/a/.git/config",
        "/.well-known/.hidden",
        "/a/.well-known/x",
    ] {
        let r = site.serve(&StaticRequest {
            path: p.as_bytes(),
            raw_path: p,
            ..StaticRequest::default()
        });
        check(&r, 200);
    }
    // ".env" has no extension: it is a hidden name, not a type.
    let r = site.serve(&get("/.env"));
    assert_eq!(r.content_type.as_deref(), Some("application/octet-stream"));
}

// ---------------------------------------------------------------- directories

#[test]
fn directory_without_slash_redirects() {
    let fx = Fixture::new();
    fx.mkdir("docs");
    fx.mkdir("my dir");
    let site = fx.site(opts());
    let r = site.serve(&get("/docs"));
    check(&r, 301);
    assert_eq!(r.location.as_deref(), Some("/docs/"));
    assert!(r.etag.is_none() && r.content_type.is_none());

    let r = site.serve(&StaticRequest {
        query: Some("a=1&b=%20"),
        ..get("/docs")
    });
    assert_eq!(r.location.as_deref(), Some("/docs/?a=1&b=%20"));

    let r = site.serve(&StaticRequest {
        path: b"/my dir",
        raw_path: "/my%20dir",
        ..StaticRequest::default()
    });
    check(&r, 301);
    assert_eq!(r.location.as_deref(), Some("/my%20dir/"));
}

#[test]
fn redirect_location_cannot_point_off_site() {
    let fx = Fixture::new();
    fx.mkdir("evil.example");
    let site = fx.site(opts());
    for raw in ["//evil.example", "///evil.example"] {
        let r = site.serve(&StaticRequest {
            path: b"/evil.example",
            raw_path: raw,
            ..StaticRequest::default()
        });
        assert_eq!(r.location.as_deref(), Some("/evil.example/"));
    }
    let r = site.serve(&StaticRequest {
        path: b"/evil.example",
        raw_path: "/\\evil.example",
        query: Some("x=\r\n\u{e9}"),
        ..StaticRequest::default()
    });
    assert_eq!(
        r.location.as_deref(),
        Some("/%5Cevil.example/?x=%0D%0A%C3%A9")
    );
}

#[test]
fn index_files_in_order() {
    let fx = Fixture::new();
    fx.write("index.html", "root index");
    fx.write("d/default.txt", "default");
    fx.mkdir("d/index.htm"); // a directory named like an index: skipped
    fx.write("e/index.html", "e html");
    fx.write("e/default.txt", "e txt");
    fx.mkdir("empty");
    let options = SiteOptions {
        index: vec![
            "index.htm".into(),
            "index.html".into(),
            "default.txt".into(),
        ],
        ..opts()
    };
    for site in fx.both(options.clone()) {
        let r = site.serve(&get("/"));
        check(&r, 200);
        assert_eq!(body(&r), b"root index");
        assert_eq!(r.content_type.as_deref(), Some("text/html; charset=utf-8"));

        let r = site.serve(&get("/d/"));
        check(&r, 200);
        assert_eq!(body(&r), b"default");
        assert_eq!(r.content_type.as_deref(), Some("text/plain; charset=utf-8"));

        let r = site.serve(&get("/e/"));
        assert_eq!(body(&r), b"e html");

        check(&site.serve(&get("/empty/")), 403);
    }
    // No index names at all: every directory is 403.
    let site = fx.site(SiteOptions {
        index: vec![],
        ..opts()
    });
    check(&site.serve(&get("/")), 403);
}

#[test]
fn index_symlink_outside_root_is_skipped() {
    let fx = Fixture::new();
    fx.mkdir("d");
    symlink("../../secret", fx.root().join("d/index.html")).unwrap();
    for site in fx.both(opts()) {
        check(&site.serve(&get("/d/")), 403);
    }
}

#[test]
fn index_is_served_with_ranges_and_preconditions() {
    let fx = Fixture::new();
    fx.write("d/index.html", "0123456789");
    let site = fx.site(opts());
    let r = site.serve(&with_range("/d/", "bytes=2-4"));
    check(&r, 206);
    assert_eq!(body(&r), b"234");
    let etag = r.etag.clone().unwrap();
    let r = site.serve(&StaticRequest {
        if_none_match: Some(etag.as_bytes()),
        ..get("/d/")
    });
    check(&r, 304);
}

// ---------------------------------------------------------------- content types

#[test]
fn content_types() {
    let fx = Fixture::new();
    let cases = [
        ("a.html", "text/html; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("a.js", "text/javascript; charset=utf-8"),
        ("a.mjs", "application/javascript; charset=utf-8"),
        ("a.json", "application/json; charset=utf-8"),
        ("a.xml", "text/xml; charset=utf-8"),
        ("a.svg", "image/svg+xml; charset=utf-8"),
        ("a.png", "image/png"),
        ("a.wasm", "application/wasm"),
        ("A.PNG", "image/png"),
        ("a.tar.gz", "application/gzip"),
        ("a.unknownext", "application/octet-stream"),
        ("Makefile", "application/octet-stream"),
        ("a.", "application/octet-stream"),
    ];
    for (name, _) in cases {
        fx.write(name, "x");
    }
    let site = fx.site(opts());
    for (name, ty) in cases {
        let path = format!("/{name}");
        let r = site.serve(&StaticRequest {
            path: path.as_bytes(),
            raw_path: &path,
            ..StaticRequest::default()
        });
        check(&r, 200);
        assert_eq!(r.content_type.as_deref(), Some(ty), "{name}");
        assert_eq!(r.content_encoding, None);
    }
}

// ---------------------------------------------------------------- empty files

#[test]
fn empty_file() {
    let fx = Fixture::new();
    fx.write("empty.txt", "");
    let site = fx.site(opts());
    let r = site.serve(&get("/empty.txt"));
    check(&r, 200);
    assert_eq!(r.content_length, 0);
    assert!(matches!(r.body, Body::File { len: 0, .. }));
    for range in ["bytes=0-0", "bytes=-5", "bytes=0-"] {
        let r = site.serve(&with_range("/empty.txt", range));
        check(&r, 416);
        assert_eq!(r.content_range.as_deref(), Some("bytes */0"));
    }
    // A malformed Range is ignored, even on an empty file.
    check(&site.serve(&with_range("/empty.txt", "bytes=oops")), 200);
}

// ---------------------------------------------------------------- validators

#[test]
fn last_modified_is_clamped_and_bounded() {
    let fx = Fixture::new();
    let future = fx.write("future.txt", "f");
    set_mtime(
        &future,
        SystemTime::now() + Duration::from_secs(86_400 * 365),
    );
    let past = fx.write("past.txt", "p");
    set_mtime(&past, UNIX_EPOCH - Duration::from_secs(86_400));
    let frac = fx.write("frac.txt", "n");
    set_mtime(&frac, at(1_600_000_000) + Duration::from_millis(750));
    let site = fx.site(opts());

    let r = site.serve(&get("/future.txt"));
    check(&r, 200);
    assert!(r.last_modified.unwrap() <= SystemTime::now());

    let r = site.serve(&get("/past.txt"));
    check(&r, 200);
    assert_eq!(r.last_modified, None);
    assert!(r.etag.is_some());
    // No date to compare with: date preconditions are ignored.
    let r = site.serve(&StaticRequest {
        if_modified_since: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
        if_unmodified_since: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"),
        ..get("/past.txt")
    });
    check(&r, 200);

    let r = site.serve(&get("/frac.txt"));
    assert_eq!(r.last_modified, Some(at(1_600_000_000)));
    assert!(r
        .etag
        .unwrap()
        .starts_with(&format!("\"{:x}.{:x}-", 1_600_000_000, 750_000_000)));
}

// ---------------------------------------------------------------- preconditions

struct Pre {
    fx: Fixture,
    site: Site,
    etag: String,
}

const MTIME: u64 = 1_700_000_000;

fn pre() -> Pre {
    let fx = Fixture::new();
    let p = fx.write("doc.txt", numbers(50));
    set_mtime(&p, at(MTIME));
    let site = fx.site(opts());
    let etag = site.serve(&get("/doc.txt")).etag.unwrap();
    Pre { fx, site, etag }
}

fn assert_validators(r: &Reply, etag: &str) {
    assert_eq!(r.etag.as_deref(), Some(etag));
    assert_eq!(r.last_modified, Some(at(MTIME)));
    assert!(matches!(r.body, Body::None));
    assert!(r.content_type.is_none());
}

#[test]
fn if_match() {
    let Pre {
        fx: _fx,
        site,
        etag,
    } = pre();
    let weak = format!("W/{etag}");
    let list = format!("\"nope\", {etag}");
    let cases: [(&[u8], u16); 5] = [
        (etag.as_bytes(), 200),
        (list.as_bytes(), 200),
        (b"*", 200),
        (b"\"nope\"", 412),
        (weak.as_bytes(), 412), // strong comparison
    ];
    for (v, status) in cases {
        let r = site.serve(&StaticRequest {
            if_match: Some(v),
            ..get("/doc.txt")
        });
        check(&r, status);
        if status == 412 {
            assert_validators(&r, &etag);
        }
    }
}

#[test]
fn if_unmodified_since() {
    let Pre {
        fx: _fx,
        site,
        etag,
    } = pre();
    let before = http_date(at(MTIME - 1));
    let same = http_date(at(MTIME));
    let after = http_date(at(MTIME + 1));
    let cases: [(&[u8], u16); 4] = [
        (before.as_bytes(), 412),
        (same.as_bytes(), 200),
        (after.as_bytes(), 200),
        (b"not a date", 200),
    ];
    for (v, status) in cases {
        let r = site.serve(&StaticRequest {
            if_unmodified_since: Some(v),
            ..get("/doc.txt")
        });
        check(&r, status);
        if status == 412 {
            assert_validators(&r, &etag);
        }
    }
    // If-Match present: If-Unmodified-Since is not evaluated.
    let r = site.serve(&StaticRequest {
        if_match: Some(etag.as_bytes()),
        if_unmodified_since: Some(before.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 200);
}

#[test]
fn if_none_match() {
    let Pre {
        fx: _fx,
        site,
        etag,
    } = pre();
    let weak = format!("W/{etag}");
    let list = format!("\"a\",{etag} , \"b\"");
    let cases: [(&[u8], u16); 5] = [
        (etag.as_bytes(), 304),
        (weak.as_bytes(), 304), // weak comparison
        (list.as_bytes(), 304),
        (b"*", 304),
        (b"\"other\"", 200),
    ];
    for head in [false, true] {
        for (v, status) in cases {
            let r = site.serve(&StaticRequest {
                head,
                if_none_match: Some(v),
                ..get("/doc.txt")
            });
            check(&r, status);
            if status == 304 {
                assert_validators(&r, &etag);
            }
        }
    }
}

#[test]
fn if_modified_since() {
    let Pre { fx, site, etag } = pre();
    let before = http_date(at(MTIME - 1));
    let same = http_date(at(MTIME));
    let after = http_date(at(MTIME + 100));
    let cases: [(&[u8], u16); 5] = [
        (before.as_bytes(), 200),
        (same.as_bytes(), 304),
        (after.as_bytes(), 304),
        (b"garbage", 200),
        (b"Sunday, 06-Nov-94 08:49:37 GMT", 200),
    ];
    for (v, status) in cases {
        let r = site.serve(&StaticRequest {
            if_modified_since: Some(v),
            ..get("/doc.txt")
        });
        check(&r, status);
        if status == 304 {
            assert_validators(&r, &etag);
        }
    }
    // Compared at whole seconds: sub-second mtime equals its own date.
    set_mtime(
        &fx.root().join("doc.txt"),
        at(MTIME) + Duration::from_millis(999),
    );
    let r = site.serve(&StaticRequest {
        if_modified_since: Some(same.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 304);
}

#[test]
fn precondition_order() {
    let Pre {
        fx: _fx,
        site,
        etag,
    } = pre();
    let old = http_date(at(MTIME - 10));
    let new = http_date(at(MTIME + 10));
    // If-Match failure wins over a matching If-None-Match.
    let r = site.serve(&StaticRequest {
        if_match: Some(b"\"x\""),
        if_none_match: Some(etag.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 412);
    // If-Unmodified-Since failure wins over If-Modified-Since.
    let r = site.serve(&StaticRequest {
        if_unmodified_since: Some(old.as_bytes()),
        if_modified_since: Some(new.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 412);
    // If-None-Match present (not matching): If-Modified-Since is ignored.
    let r = site.serve(&StaticRequest {
        if_none_match: Some(b"\"x\""),
        if_modified_since: Some(new.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 200);
    // Matching If-None-Match beats an old If-Modified-Since.
    let r = site.serve(&StaticRequest {
        if_none_match: Some(etag.as_bytes()),
        if_modified_since: Some(old.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 304);
    // Passing If-Match, then If-None-Match decides.
    let r = site.serve(&StaticRequest {
        if_match: Some(etag.as_bytes()),
        if_none_match: Some(etag.as_bytes()),
        ..get("/doc.txt")
    });
    check(&r, 304);
    // Conditionals are evaluated before Range.
    let r = site.serve(&StaticRequest {
        if_none_match: Some(etag.as_bytes()),
        range: Some(b"bytes=0-1"),
        ..get("/doc.txt")
    });
    check(&r, 304);
    let r = site.serve(&StaticRequest {
        if_match: Some(b"\"x\""),
        range: Some(b"bytes=0-1"),
        ..get("/doc.txt")
    });
    check(&r, 412);
    assert!(r.content_range.is_none());
}

// ---------------------------------------------------------------- ranges

#[test]
fn single_ranges() {
    let fx = Fixture::new();
    let data = numbers(1000);
    fx.write("f.bin", &data);
    let site = fx.site(opts());
    let cases = [
        ("bytes=0-0", 0, 0),
        ("bytes=2-5", 2, 5),
        ("bytes=990-", 990, 999),
        ("bytes=-10", 990, 999),
        ("bytes=900-5000", 900, 999),
        ("bytes=-5000", 0, 999),
        // Overlapping / nearby ranges coalesce into one part.
        ("bytes=10-19,0-9", 0, 19),
        ("bytes=0-9,50-59", 0, 59),
        ("bytes=0-99,10-20,50-60", 0, 99),
    ];
    for (range, a, b) in cases {
        let r = site.serve(&with_range("/f.bin", range));
        check(&r, 206);
        assert_eq!(
            r.content_range,
            Some(format!("bytes {a}-{b}/1000")),
            "{range}"
        );
        assert_eq!(body(&r), &data[a..=b], "{range}");
        assert_eq!(r.content_type.as_deref(), Some("application/octet-stream"));
        assert!(r.accept_ranges);
        assert!(r.etag.is_some() && r.last_modified.is_some());
    }
}

#[test]
fn unsatisfiable_and_ignored_ranges() {
    let fx = Fixture::new();
    fx.write("f.bin", numbers(100));
    let site = fx.site(opts());
    for range in [
        "bytes=100-",
        "bytes=200-300",
        "bytes=-0",
        "bytes=100-100,500-",
    ] {
        let r = site.serve(&with_range("/f.bin", range));
        check(&r, 416);
        assert_eq!(r.content_range.as_deref(), Some("bytes */100"), "{range}");
        assert!(matches!(r.body, Body::None));
        assert!(r.etag.is_some());
    }
    for range in ["bytes=5-1", "lines=1-2", "bytes=abc", "", "bytes=1-2,x"] {
        let r = site.serve(&with_range("/f.bin", range));
        check(&r, 200);
        assert_eq!(r.content_length, 100, "{range}");
    }
}

#[test]
fn multipart_ranges_are_byte_exact() {
    let fx = Fixture::new();
    let data = numbers(1000);
    fx.write("f.txt", &data);
    let site = fx.site(opts());
    // Out of order and overlapping: sorted and merged to 0-20 and 500-509.
    let r = site.serve(&with_range("/f.txt", "bytes=500-509, 0-9, 5-20"));
    check(&r, 206);
    let ct = r.content_type.as_deref().unwrap();
    let b = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
    assert_eq!(b, crate::ranges::boundary(r.etag.as_deref().unwrap()));
    assert!(r.content_range.is_none());
    let mut expected = Vec::new();
    for (a, z) in [(0usize, 20usize), (500, 509)] {
        expected.extend_from_slice(
            format!(
                "\r\n--{b}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Range: bytes {a}-{z}/1000\r\n\r\n"
            )
            .as_bytes(),
        );
        expected.extend_from_slice(&data[a..=z]);
    }
    expected.extend_from_slice(format!("\r\n--{b}--\r\n").as_bytes());
    assert_eq!(body(&r), expected);
    assert_eq!(r.content_length, expected.len() as u64);
    assert!(matches!(&r.body, Body::Parts { parts, .. } if parts.len() == 5));
}

#[test]
fn too_many_ranges_are_ignored() {
    let fx = Fixture::new();
    fx.write("f.bin", numbers(10_000));
    let site = fx.site(opts());
    let spec = |n: usize| {
        let v: Vec<String> = (0..n)
            .map(|i| format!("{}-{}", i * 200, i * 200 + 1))
            .collect();
        format!("bytes={}", v.join(","))
    };
    let at_limit = spec(MAX_MULTIPART_RANGES);
    let r = site.serve(&StaticRequest {
        range: Some(at_limit.as_bytes()),
        ..get("/f.bin")
    });
    check(&r, 206);
    assert!(
        matches!(&r.body, Body::Parts { parts, .. } if parts.len() == 2 * MAX_MULTIPART_RANGES + 1)
    );
    let over = spec(MAX_MULTIPART_RANGES + 1);
    let r = site.serve(&StaticRequest {
        range: Some(over.as_bytes()),
        ..get("/f.bin")
    });
    check(&r, 200);
    assert_eq!(r.content_length, 10_000);
    // Many ranges that merge down to one are fine (64 stays under the
    // spec-count limit fastpath-http's parser applies).
    let dense: Vec<String> = (0..64).map(|i| format!("{i}-{i}")).collect();
    let dense = format!("bytes={}", dense.join(","));
    let r = site.serve(&StaticRequest {
        range: Some(dense.as_bytes()),
        ..get("/f.bin")
    });
    check(&r, 206);
    assert_eq!(r.content_range.as_deref(), Some("bytes 0-63/10000"));
}

#[test]
fn if_range() {
    let Pre {
        fx: _fx,
        site,
        etag,
    } = pre();
    let weak = format!("W/{etag}");
    let same = http_date(at(MTIME));
    let other = http_date(at(MTIME - 1));
    let cases: [(&[u8], u16); 6] = [
        (etag.as_bytes(), 206),
        (b"\"stale\"", 200),
        (weak.as_bytes(), 200), // weak tags never match If-Range
        (same.as_bytes(), 206),
        (other.as_bytes(), 200), // not an exact match
        (b"nonsense", 200),
    ];
    for (v, status) in cases {
        let r = site.serve(&StaticRequest {
            if_range: Some(v),
            range: Some(b"bytes=0-4"),
            ..get("/doc.txt")
        });
        check(&r, status);
        if status == 206 {
            assert_eq!(body(&r), numbers(5));
        } else {
            assert_eq!(r.content_length, 50);
        }
    }
    // If-Range without Range changes nothing.
    let r = site.serve(&StaticRequest {
        if_range: Some(b"\"stale\""),
        ..get("/doc.txt")
    });
    check(&r, 200);
}

// ---------------------------------------------------------------- precompressed

fn compressed_fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write("app.js", "identity identity identity");
    fx.write("app.js.br", "BROTLI");
    fx.write("app.js.gz", "GZIP-DATA");
    fx.write("only-gz.css", "css css css");
    fx.write("only-gz.css.gz", "GZ");
    fx.write("plain.txt", "plain");
    fx.write("d/index.html", "<html>");
    fx.write("d/index.html.gz", "GZHTML");
    fx.write("dirvariant.txt", "dv");
    fx.mkdir("dirvariant.txt.br");
    fx.write("escape.txt", "e");
    symlink("../secret", fx.root().join("escape.txt.gz")).unwrap();
    fx
}

fn ae(path: &'static str, accept: &'static str) -> StaticRequest<'static> {
    StaticRequest {
        accept_encoding: Some(accept.as_bytes()),
        ..get(path)
    }
}

#[test]
fn precompressed_selection() {
    let fx = compressed_fixture();
    for site in fx.both(precompressed()) {
        let js = "text/javascript; charset=utf-8";
        let cases: [(&str, Option<&str>, &[u8]); 7] = [
            ("gzip, deflate, br", Some("br"), b"BROTLI"),
            ("gzip", Some("gzip"), b"GZIP-DATA"),
            ("br;q=0.5, gzip", Some("gzip"), b"GZIP-DATA"),
            ("br;q=0.8, gzip;q=0.8", Some("br"), b"BROTLI"),
            ("br;q=0, gzip;q=0", None, b"identity identity identity"),
            ("identity", None, b"identity identity identity"),
            ("*", Some("br"), b"BROTLI"),
        ];
        for (accept, coding, bytes) in cases {
            let r = site.serve(&ae("/app.js", accept));
            check(&r, 200);
            assert_eq!(r.content_encoding, coding, "{accept}");
            assert_eq!(body(&r), bytes, "{accept}");
            assert_eq!(r.content_type.as_deref(), Some(js));
            assert!(r.vary_accept_encoding);
        }
        // No Accept-Encoding: identity, but Vary still.
        let r = site.serve(&get("/app.js"));
        assert_eq!(r.content_encoding, None);
        assert!(r.vary_accept_encoding);

        // Distinct validators per variant.
        let id = site.serve(&get("/app.js")).etag.unwrap();
        let br = site.serve(&ae("/app.js", "br")).etag.unwrap();
        let gz = site.serve(&ae("/app.js", "gzip")).etag.unwrap();
        assert!(br.ends_with("-br\"") && gz.ends_with("-gz\""));
        assert!(id != br && id != gz && br != gz);

        // Only a .gz sibling: br-only clients get identity (with Vary).
        let r = site.serve(&ae("/only-gz.css", "br"));
        assert_eq!((r.content_encoding, r.vary_accept_encoding), (None, true));
        assert_eq!(body(&r), b"css css css");
        let r = site.serve(&ae("/only-gz.css", "br, gzip"));
        assert_eq!(r.content_encoding, Some("gzip"));
        assert_eq!(r.content_type.as_deref(), Some("text/css; charset=utf-8"));
        assert_eq!(body(&r), b"GZ");
        assert_eq!(r.content_length, 2);

        // No siblings: no Vary.
        let r = site.serve(&ae("/plain.txt", "br, gzip"));
        assert_eq!((r.content_encoding, r.vary_accept_encoding), (None, false));

        // Variants that are not regular files beneath the root do not count.
        for p in ["/dirvariant.txt", "/escape.txt"] {
            let r = site.serve(&StaticRequest {
                accept_encoding: Some(b"br, gzip"),
                path: p.as_bytes(),
                raw_path: p,
                ..StaticRequest::default()
            });
            check(&r, 200);
            assert_eq!(
                (r.content_encoding, r.vary_accept_encoding),
                (None, false),
                "{p}"
            );
        }

        // Index files get variants too, typed as the original.
        let r = site.serve(&ae("/d/", "gzip"));
        check(&r, 200);
        assert_eq!(r.content_encoding, Some("gzip"));
        assert_eq!(r.content_type.as_deref(), Some("text/html; charset=utf-8"));
        assert_eq!(body(&r), b"GZHTML");
    }
}

#[test]
fn compressed_files_requested_directly() {
    let fx = compressed_fixture();
    let site = fx.site(precompressed());
    let r = site.serve(&ae("/app.js.gz", "gzip, br"));
    check(&r, 200);
    assert_eq!(r.content_type.as_deref(), Some("application/gzip"));
    assert_eq!(r.content_encoding, None);
    assert!(!r.vary_accept_encoding);
    assert_eq!(body(&r), b"GZIP-DATA");
    let r = site.serve(&ae("/app.js.br", "gzip, br"));
    assert_eq!(r.content_encoding, None);
    assert_eq!(body(&r), b"BROTLI");
}

#[test]
fn precompressed_disabled() {
    let fx = compressed_fixture();
    let site = fx.site(opts());
    let r = site.serve(&ae("/app.js", "gzip, br"));
    check(&r, 200);
    assert_eq!((r.content_encoding, r.vary_accept_encoding), (None, false));
    assert_eq!(body(&r), b"identity identity identity");
}

#[test]
fn precompressed_vary_on_every_status() {
    let fx = compressed_fixture();
    let site = fx.site(precompressed());
    let br_etag = site.serve(&ae("/app.js", "br")).etag.unwrap();
    let id_etag = site.serve(&get("/app.js")).etag.unwrap();

    // 304 for the variant the client would get.
    let r = site.serve(&StaticRequest {
        if_none_match: Some(br_etag.as_bytes()),
        ..ae("/app.js", "br")
    });
    check(&r, 304);
    assert!(r.vary_accept_encoding);
    assert_eq!(r.etag.as_deref(), Some(br_etag.as_str()));
    // The identity tag does not validate the br variant.
    let r = site.serve(&StaticRequest {
        if_none_match: Some(id_etag.as_bytes()),
        ..ae("/app.js", "br")
    });
    check(&r, 200);
    assert_eq!(r.content_encoding, Some("br"));

    let r = site.serve(&StaticRequest {
        if_match: Some(b"\"x\""),
        ..ae("/app.js", "br")
    });
    check(&r, 412);
    assert!(r.vary_accept_encoding);

    // Ranges apply to the encoded bytes.
    let r = site.serve(&StaticRequest {
        range: Some(b"bytes=1-3"),
        ..ae("/app.js", "br")
    });
    check(&r, 206);
    assert!(r.vary_accept_encoding);
    assert_eq!(r.content_encoding, Some("br"));
    assert_eq!(r.content_range.as_deref(), Some("bytes 1-3/6"));
    assert_eq!(body(&r), b"ROT");

    let r = site.serve(&StaticRequest {
        range: Some(b"bytes=100-"),
        ..ae("/app.js", "br")
    });
    check(&r, 416);
    assert!(r.vary_accept_encoding);
    assert_eq!(r.content_range.as_deref(), Some("bytes */6"));

    // Multipart of an encoded variant is not offered: whole variant instead.
    let r = site.serve(&StaticRequest {
        range: Some(b"bytes=0-0,200-300"),
        ..ae("/app.js", "identity")
    });
    check(&r, 206); // identity: 0-0 only (200- is unsatisfiable, dropped)
    let data = numbers(500);
    fx.write("big.bin", &data);
    fx.write("big.bin.gz", &data);
    let r = site.serve(&StaticRequest {
        range: Some(b"bytes=0-0,300-300"),
        ..ae("/big.bin", "gzip")
    });
    check(&r, 200);
    assert_eq!(r.content_encoding, Some("gzip"));
    assert_eq!(r.content_length, 500);
    let r = site.serve(&StaticRequest {
        range: Some(b"bytes=0-0,300-300"),
        ..get("/big.bin")
    });
    check(&r, 206);
    assert!(matches!(r.body, Body::Parts { .. }));
}

// ---------------------------------------------------------------- robustness

#[test]
fn arbitrary_header_values_do_not_panic() {
    let fx = Fixture::new();
    fx.write("f.txt", numbers(300));
    fx.write("f.txt.gz", numbers(30));
    fx.write("empty", "");
    let site = fx.site(precompressed());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet = b"bytes=-,0123456789 \t\"W/*;q.\xffgzipbr";
    let fixed: [&[u8]; 8] = [
        b"bytes=18446744073709551615-18446744073709551615",
        b"bytes=-18446744073709551615",
        b"bytes=0-18446744073709551616",
        b"W/",
        b"\"",
        b"br;q=1e9, gzip;q=NaN",
        b"Mon, 01 Jan 10000 00:00:00 GMT",
        b"",
    ];
    // Every other request may be compressed on the fly (any type, any length).
    let mut policy = fastpath_modules::compress::Policy::default();
    policy.types = vec!["*/*".parse().unwrap()];
    policy.min_length = 0;
    for i in 0..3000u32 {
        let mut v = || -> Vec<u8> {
            if next() % 4 == 0 {
                return fixed[(next() % fixed.len() as u64) as usize].to_vec();
            }
            let n = (next() % 24) as usize;
            (0..n)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect()
        };
        let (a, b, c, d, e, f, g) = (v(), v(), v(), v(), v(), v(), v());
        fn pick(x: &[u8], i: u32, bit: u32) -> Option<&[u8]> {
            ((i >> bit) & 1 == 1).then_some(x)
        }
        let path: &'static str = if i % 3 == 0 { "/empty" } else { "/f.txt" };
        let r = site.serve(&StaticRequest {
            head: i % 7 == 0,
            path: path.as_bytes(),
            raw_path: path,
            query: None,
            if_match: pick(&a, i, 0),
            if_none_match: pick(&b, i, 1),
            if_modified_since: pick(&c, i, 2),
            if_unmodified_since: pick(&d, i, 3),
            if_range: pick(&e, i, 4),
            range: Some(f.as_slice()),
            accept_encoding: Some(g.as_slice()),
            compress: (i % 2 == 0).then_some(&policy),
        });
        check(&r, r.status);
        assert!(matches!(r.status, 200 | 206 | 304 | 412 | 416), "{r:?}");
    }
}
