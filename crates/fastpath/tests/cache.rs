//! The content cache: changes to files are served once they have settled, and no
//! response ever mixes two versions of a file or disagrees with its Content-Length.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::util::*;

/// Polls until `path` answers with `status` and `body`, failing after 5 s.
fn eventually(srv: &Server, path: &str, status: u16, body: &[u8]) {
    let got = wait_for(Duration::from_secs(5), || {
        let r = srv.get(path);
        (r.status == status && r.body == body).then_some(())
    });
    assert!(
        got.is_some(),
        "{path} never became {status} {:?}; last: {}",
        String::from_utf8_lossy(body),
        srv.get(path)
    );
}

httptest!(changes_are_served_once_settled, |model| {
    let site = Site::new();
    site.file("page.txt", "first");
    site.file("big.bin", vec![b'a'; 200_000]);
    let srv = site.serve(model);
    srv.get("/page.txt").assert_ok(200, "first");
    srv.get("/big.bin").assert_ok(200, vec![b'a'; 200_000]);
    // Rewritten in place, replaced by rename, deleted, created again.
    site.file("page.txt", "second");
    eventually(&srv, "/page.txt", 200, b"second");
    site.file("page.tmp", "third");
    std::fs::rename(site.root().join("page.tmp"), site.root().join("page.txt")).unwrap();
    eventually(&srv, "/page.txt", 200, b"third");
    std::fs::remove_file(site.root().join("page.txt")).unwrap();
    let gone = wait_for(Duration::from_secs(5), || {
        (srv.get("/page.txt").status == 404).then_some(())
    });
    assert!(gone.is_some(), "a deleted file is still served");
    site.file("page.txt", "fourth");
    eventually(&srv, "/page.txt", 200, b"fourth");
    // A large file (sent from its descriptor, not memory) follows too.
    site.file("big.tmp", vec![b'b'; 150_000]);
    std::fs::rename(site.root().join("big.tmp"), site.root().join("big.bin")).unwrap();
    eventually(&srv, "/big.bin", 200, &vec![b'b'; 150_000]);
    // A precompressed sibling that appears is used from then on.
    site.file("app.js", "plain");
    srv.get("/app.js").assert_ok(200, "plain");
    site.file("app.js.gz", "zipped");
    let gz = wait_for(Duration::from_secs(5), || {
        let r = srv.get_with("/app.js", &[("Accept-Encoding", "gzip")]);
        (r.header("Content-Encoding") == Some("gzip")).then_some(r)
    })
    .expect("the new .gz sibling was never served");
    assert_eq!(gz.body, b"zipped");
    assert_eq!(gz.header("Vary"), Some("Accept-Encoding"));
});

httptest!(a_change_reaches_every_worker_at_once, |model| {
    // Four workers, eight keep-alive connections spread over them, all with the file
    // cached. Once any connection has been sent the new version, none is ever sent the
    // old one again (the workers share one cache and one watch; prefork's children one
    // change counter), and every one gets the new version within the watch's delay.
    let site = Site::new();
    site.file("v.txt", "old version");
    let srv = site.serve_config(
        model,
        "root = \"root\"\nworkers = 4\n[log]\naccess = \"off\"\n",
    );
    let mut conns: Vec<Conn> = (0..8).map(|_| Conn::open(srv.addr())).collect();
    let get = "GET /v.txt HTTP/1.1\r\nHost: t\r\n\r\n";
    for _ in 0..3 {
        for conn in &mut conns {
            conn.exchange(get).assert_ok(200, "old version");
        }
    }
    site.file("v.tmp", "new version!");
    std::fs::rename(site.root().join("v.tmp"), site.root().join("v.txt")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen_new = false;
    let mut updated = [false; 8];
    while updated.iter().any(|u| !u) {
        assert!(
            Instant::now() < deadline,
            "connections {:?} still get the old version",
            updated
                .iter()
                .enumerate()
                .filter(|(_, u)| !**u)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        );
        for (i, conn) in conns.iter_mut().enumerate() {
            let r = conn.exchange(get);
            assert_eq!(r.status, 200, "{r}");
            match &r.body[..] {
                b"new version!" => {
                    seen_new = true;
                    updated[i] = true;
                }
                b"old version" => assert!(
                    !seen_new,
                    "connection {i} got the old version after another got the new one"
                ),
                other => panic!(
                    "a body that is no version: {:?}",
                    String::from_utf8_lossy(other)
                ),
            }
        }
    }
});

httptest!(replacing_files_under_load_never_tears_a_response, |model| {
    never_torn(model, "");
});

httptest!(
    replacing_files_never_tears_a_response_copied_or_sent_with_sendfile,
    |model| {
        // Every version from memory (copied into the socket), then every version from a
        // kept descriptor (sendfile); the default splits them at copy_below.
        never_torn(model, "max_file_size = \"1MiB\"\ncopy_below = \"1MiB\"\n");
        never_torn(model, "copy_below = \"0\"\n");
    }
);

/// Readers on four connections check every response of a file replaced as fast as possible
/// (with `cache` as the `[cache]` table) against the versions it had: none may mix two.
fn never_torn(model: Model, cache: &str) {
    // Versions of different lengths, small (kept in memory) and large (sent with
    // sendfile), each made of one repeated byte so a mix is easy to see.
    let versions: Vec<Vec<u8>> = vec![
        vec![b'a'; 1_000],
        vec![b'b'; 3_000],
        vec![b'c'; 90_000],
        vec![b'd'; 300_000],
        vec![b'e'; 10],
        vec![b'f'; 20_000],
    ];
    // In memory: the readers' 5 s timeout is for the server, not for a loaded disk.
    let site = Site::in_memory();
    site.file("f.bin", &versions[0]);
    let srv = site
        .server(model)
        .config(&format!(
            "root = \"root\"\n[log]\naccess = \"off\"\n[cache]\n{cache}"
        ))
        .start();
    let addr = srv.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (stop, checked, versions) = (stop.clone(), checked.clone(), versions.clone());
        readers.push(std::thread::spawn(move || {
            let mut conn = Conn::open(addr);
            while !stop.load(Ordering::Relaxed) {
                let r = conn.exchange("GET /f.bin HTTP/1.1\r\nHost: t\r\n\r\n");
                assert_eq!(r.status, 200, "{r}");
                let length: usize = r.expect_header("Content-Length").parse().unwrap();
                assert_eq!(r.body.len(), length);
                assert!(
                    versions.contains(&r.body),
                    "a body of {} bytes that is no version of the file (starts {:?})",
                    r.body.len(),
                    String::from_utf8_lossy(&r.body[..r.body.len().min(20)])
                );
                checked.fetch_add(1, Ordering::Relaxed);
                // The server ends a connection after max_requests_per_connection.
                if r.header("Connection") == Some("close") {
                    conn = Conn::open(addr);
                }
            }
        }));
    }
    // Replace the file atomically (write beside it, rename over it) as fast as possible,
    // until enough replacements and checked responses have overlapped (bounded in time so a
    // very slow machine fails clearly instead of hanging).
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut replaced = 0usize;
    while (replaced < 200 || checked.load(Ordering::Relaxed) < 200) && Instant::now() < give_up {
        let version = &versions[replaced % versions.len()];
        site.file("f.tmp", version);
        std::fs::rename(site.root().join("f.tmp"), site.root().join("f.bin")).unwrap();
        replaced += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader
            .join()
            .expect("a reader saw a torn or wrong response");
    }
    assert!(replaced >= 200, "only {replaced} replacements");
    assert!(checked.load(Ordering::Relaxed) >= 200);
    // Once settled, the last version is what everyone gets.
    let last = &versions[(replaced - 1) % versions.len()];
    eventually(&srv, "/f.bin", 200, last);
}

httptest!(
    files_on_both_sides_of_copy_below_are_served_byte_for_byte,
    |model| {
        // copy_below = 16 KiB: files below it are copied from memory, the others go with
        // sendfile from a kept descriptor, and max_file_size (64 KiB) bounds the memory. Each
        // file is distinct bytes, so a misplaced or repeated chunk shows.
        let sizes = [1, 4095, 16383, 16384, 16385, 65535, 65536, 65537, 200_000];
        let body = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
                .collect()
        };
        let site = Site::new();
        for n in sizes {
            site.file(&format!("f{n}"), body(n));
        }
        let srv = site
            .server(model)
            .config("root = \"root\"\n[log]\naccess = \"off\"\n[cache]\ncopy_below = \"16KiB\"\n")
            .start();
        // Twice on one connection: the first answer resolves and caches, the second is a hit.
        let mut conn = Conn::open(srv.addr());
        for round in 0..2 {
            for n in sizes {
                let want = body(n);
                let r = conn.exchange(format!("GET /f{n} HTTP/1.1\r\nHost: t\r\n\r\n"));
                assert_eq!(r.status, 200, "round {round}, {n} B: {r}");
                assert_eq!(r.expect_header("Content-Length"), n.to_string());
                assert!(r.body == want, "round {round}: {n} B file served wrong");
                // A range across the middle, from memory or from the descriptor alike.
                let (from, to) = (n / 3, n - n / 3);
                if to > from {
                    let r = conn.exchange(format!(
                        "GET /f{n} HTTP/1.1\r\nHost: t\r\nRange: bytes={from}-{}\r\n\r\n",
                        to - 1
                    ));
                    assert_eq!(r.status, 206, "round {round}, {n} B: {r}");
                    assert!(
                        r.body == want[from..to],
                        "round {round}: range of {n} B wrong"
                    );
                }
                let r = conn.exchange(format!("HEAD /f{n} HTTP/1.1\r\nHost: t\r\n\r\n"));
                assert_eq!(r.expect_header("Content-Length"), n.to_string());
            }
        }
    }
);

httptest!(
    a_file_that_shrinks_while_sent_ends_the_connection,
    |model| {
        let size = 8 * 1024 * 1024;
        let site = Site::new();
        site.file("shrinks.bin", vec![b'z'; size]);
        let srv = site.serve(model);
        let mut conn = Conn::open(srv.addr());
        conn.send("GET /shrinks.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        // Read a little, so the server is stuck mid-body on a full socket buffer.
        let mut first = vec![0u8; 4096];
        let mut stream = conn.stream().try_clone().unwrap();
        stream.read_exact(&mut first).unwrap();
        let text = String::from_utf8_lossy(&first);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains(&format!("Content-Length: {size}")), "{text}");
        // Truncate it in place.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(site.root().join("shrinks.bin"))
            .unwrap();
        file.set_len(1000).unwrap();
        // The server must end the connection (not hang it) before the promised length.
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut total = first.len();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => total += n,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("after {total} bytes: {e} (the connection hung)"),
            }
        }
        assert!(
            total < size,
            "got all {total} bytes of a file truncated to 1000"
        );
    }
);
