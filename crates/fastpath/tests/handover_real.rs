//! Hand-over to real, unmodified backends: the demo's WSGI application under gunicorn.
//! CI installs gunicorn (`.ci/run`); elsewhere a missing gunicorn skips these tests with a
//! message, but under CI (the `CI` variable set) it fails them.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::util::*;

/// A gunicorn serving examples/backend/app.py, stopped when dropped.
struct Gunicorn {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Gunicorn {
    fn drop(&mut self) {
        stop_group(&mut self.child);
    }
}

/// Stops a server that leads its own process group: SIGTERM lets the parent stop its
/// workers; then the whole group goes, so no worker is left holding the port.
fn stop_group(child: &mut Child) {
    let pid = child.id() as libc::pid_t;
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let stopped = wait_for(Duration::from_secs(5), || {
        child.try_wait().ok().flatten().map(|_| ())
    });
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    if stopped.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn gunicorn() -> Option<Gunicorn> {
    if !python_has("gunicorn") {
        skip(
            "gunicorn backend",
            Missing::Installable,
            "gunicorn is not installed (python3 -m pip install gunicorn)",
        );
        return None;
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/backend");
    let child = Command::new("python3")
        .args(["-m", "gunicorn", "--chdir"])
        .arg(&app_dir)
        .args([
            "--bind",
            &addr.to_string(),
            "--workers",
            "2",
            "--log-level",
            "warning",
        ])
        .arg("app:application")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start gunicorn");
    let backend = Gunicorn { child, addr };
    wait_for(Duration::from_secs(15), || TcpStream::connect(addr).ok())
        .expect("gunicorn did not start listening");
    Some(backend)
}

fn config(addr: SocketAddr) -> String {
    format!(
        "root = \"root\"\n[[backend]]\nname = \"app\"\naddresses = \"{addr}\"\n[[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n"
    )
}

httptest!(gunicorn_serves_the_dynamic_pages, |model| {
    let Some(backend) = gunicorn() else { return };
    let site = Site::new();
    site.file("index.html", "static\n");
    let srv = site.serve_config(model, &config(backend.addr));
    let r = srv.get("/app/hello");
    r.assert_status(200);
    assert!(r.text().contains("Hello from the backend"), "{r}");
    assert!(
        r.text()
            .contains("Client as seen by the backend: 127.0.0.1"),
        "{r}"
    );
    // A body, the query and the forwarding fields arrive as a backend expects them.
    let mut conn = srv.connect();
    let r = conn.exchange(
        "POST /app/echo?a=1 HTTP/1.1\r\nHost: demo\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
    );
    r.assert_status(200);
    let text = r.text();
    assert!(text.contains("\"method\": \"POST\""), "{text}");
    assert!(text.contains("\"query\": \"a=1\""), "{text}");
    assert!(text.contains("\"body\": \"hello\""), "{text}");
    assert!(
        text.contains("\"x-forwarded-for\": \"127.0.0.1\""),
        "{text}"
    );
    assert!(text.contains("\"host\": \"demo\""), "{text}");
    // The same connection goes on with a static request.
    conn.exchange("GET /index.html HTTP/1.1\r\nHost: demo\r\n\r\n")
        .assert_ok(200, "static\n");
    // A streamed body without a length arrives whole.
    let r = srv.get("/app/big?n=300000");
    r.assert_status(200);
    assert_eq!(r.body.len(), 300_000);
    // Error statuses are relayed as they are.
    srv.get("/app/status?code=503").assert_status(503);
});

httptest!(
    gunicorns_cacheable_page_is_fetched_once_by_all_workers,
    |model| {
        // The case: the default configuration with two workers, curl-like clients on a
        // new connection each (HTTP/1.0 or `Connection: close`), a page gunicorn marks
        // `public, max-age=60` and stamps with the time it was made: every client gets the
        // one version, made once. A prefork child keeps its own cache: only what each answer is
        // is checked there.
        let Some(backend) = gunicorn() else { return };
        let site = Site::new();
        site.file("index.html", "static\n");
        let srv =
            Arc::new(site.serve_config(model, &format!("workers = 2\n{}", config(backend.addr))));
        let ask = |srv: &Server, path: &str, i: usize| {
            let raw = if i.is_multiple_of(2) {
                format!("GET {path} HTTP/1.0\r\nHost: demo\r\n\r\n")
            } else {
                format!("GET {path} HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
            };
            let r = srv.connect().exchange(raw);
            r.assert_status(200);
            assert!(r.text().starts_with("cached at "), "{r}");
            r.text()
        };
        let mut made: Vec<String> = (0..30).map(|i| ask(&srv, "/app/cached", i)).collect();
        made.dedup();
        if model != "prefork" {
            assert_eq!(made.len(), 1, "versions seen: {made:?}");
        }
        // 20 clients at once ask for a page gunicorn takes 300 ms to make: one fetch.
        let barrier = Arc::new(std::sync::Barrier::new(20));
        let threads: Vec<_> = (0..20)
            .map(|i| {
                let (srv, barrier) = (srv.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    ask(&srv, "/app/cached?ms=300", i)
                })
            })
            .collect();
        let mut made: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        made.sort();
        made.dedup();
        if model != "prefork" {
            assert_eq!(made.len(), 1, "versions seen: {made:?}");
        }
    }
);

/// A configuration handing `/app/` to gunicorn with both kinds of buffering on or off.
fn buffering_config(addr: SocketAddr, buffering: bool) -> String {
    format!(
        "root = \"root\"\n[[backend]]\nname = \"app\"\naddresses = \"{addr}\"\nresponse_timeout = \"30s\"\nrequest_buffering = {buffering}\nresponse_buffering = {buffering}\n[[route]]\nbackend = \"app\"\nprefix = \"/app/\"\n"
    )
}

/// How long a normal client waits for `/app/hello` while slow clients run.
const PROMPT: Duration = Duration::from_secs(10);
/// How long the normal client is shown to wait in vain when the backend is held.
const HELD: Duration = Duration::from_secs(3);

/// Asks for `/app/hello` and says whether the answer came within `patience`, checking it
/// is the page when it did.
fn answered_within(srv: &Server, patience: Duration) -> bool {
    let mut conn = srv.connect();
    conn.stream().set_read_timeout(Some(patience)).unwrap();
    conn.send("GET /app/hello HTTP/1.1\r\nHost: demo\r\n\r\n");
    match conn.try_read_response("GET") {
        Ok(Some(r)) => {
            r.assert_status(200);
            assert!(r.text().contains("Hello from the backend"), "{r}");
            true
        }
        _ => false,
    }
}

/// Four clients send a POST body at a byte a second (the attack on gunicorn's two
/// workers) while a normal client asks for a page: buffered, the page comes at once, as the
/// bodies never reach gunicorn before they are whole; unbuffered, both workers wait on a body
/// and the page does not come.
fn slow_bodies(model: &'static str, buffering: bool) {
    let Some(backend) = gunicorn() else { return };
    let site = Site::new();
    let srv = site.serve_config(model, &buffering_config(backend.addr, buffering));
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow: Vec<Conn> = (0..4).map(|_| srv.connect()).collect();
    for conn in &mut slow {
        conn.send("POST /app/echo HTTP/1.1\r\nHost: demo\r\nContent-Length: 100\r\n\r\nx");
    }
    let trickle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(1));
                for conn in &mut slow {
                    let _ = conn.try_send("x");
                }
            }
        })
    };
    // Let the slow requests reach wherever they go first.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let answered = answered_within(&srv, if buffering { PROMPT } else { HELD });
    stop.store(true, Ordering::SeqCst);
    trickle.join().unwrap();
    if buffering {
        assert!(
            answered,
            "{model}: slow bodies held gunicorn despite buffering"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{model}: slow answer"
        );
    } else {
        assert!(
            !answered,
            "{model}: unbuffered, yet slow bodies did not hold gunicorn"
        );
    }
    let left = wait_for(Duration::from_secs(5), || {
        (temporary_files(srv.pid()) == 0).then_some(())
    });
    assert!(left.is_some(), "{model}: a temporary file is left open");
}

/// Four clients ask for a large response and read none of it while a normal client asks for
/// a page: buffered, gunicorn's answers go to temporary files and its workers are free;
/// unbuffered, both workers wait on a client.
fn slow_readers(model: &'static str, buffering: bool) {
    let Some(backend) = gunicorn() else { return };
    let site = Site::new();
    let srv = site.serve_config(model, &buffering_config(backend.addr, buffering));
    // More than every socket buffer on the way holds (about 14 MiB on loopback with Linux's
    // default limits, a client that reads nothing keeping its receive window small).
    let n = 32 << 20;
    let mut slow: Vec<Conn> = (0..4).map(|_| srv.connect()).collect();
    for conn in &mut slow {
        conn.send(format!("GET /app/big?n={n} HTTP/1.1\r\nHost: demo\r\n\r\n"));
    }
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let answered = answered_within(&srv, if buffering { PROMPT } else { HELD });
    if buffering {
        assert!(
            answered,
            "{model}: slow readers held gunicorn despite buffering"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{model}: slow answer"
        );
        // The slow clients still get every byte.
        let r = slow[0].read_response();
        assert_eq!(r.body.len(), n);
    } else {
        assert!(
            !answered,
            "{model}: unbuffered, yet slow readers did not hold gunicorn"
        );
    }
    drop(slow);
    let left = wait_for(Duration::from_secs(5), || {
        (temporary_files(srv.pid()) == 0).then_some(())
    });
    assert!(left.is_some(), "{model}: a temporary file is left open");
}

httptest!(
    slow_bodies_leave_gunicorn_answering_when_buffered,
    |model| {
        slow_bodies(model, true);
    }
);

httptest!(slow_bodies_hold_gunicorn_when_unbuffered, |model| {
    slow_bodies(model, false);
});

httptest!(
    slow_readers_leave_gunicorn_answering_when_buffered,
    |model| {
        slow_readers(model, true);
    }
);

httptest!(slow_readers_hold_gunicorn_when_unbuffered, |model| {
    slow_readers(model, false);
});

/// Apache httpd (prefork) with mod_php, on a configuration of its own in a temporary
/// directory, stopped when dropped.
struct Apache {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Apache {
    fn drop(&mut self) {
        stop_group(&mut self.child);
    }
}

const APACHE_MODULES: &str = "/usr/lib/apache2/modules";

fn apache_with_php() -> Option<Apache> {
    // Debian names the module after the PHP version (libphp8.2.so).
    let php_module = std::fs::read_dir(APACHE_MODULES).ok().and_then(|entries| {
        entries.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libphp"))
        })
    });
    let have = PathBuf::from("/usr/sbin/apache2").exists() && php_module.is_some();
    if !have {
        skip(
            "apache2 backend",
            Missing::Installable,
            "apache2 and libapache2-mod-php are not installed",
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let docroot = dir.path().join("htdocs");
    std::fs::create_dir(&docroot).unwrap();
    // Apache's children drop root: they must be able to read the scripts.
    use std::os::unix::fs::PermissionsExt;
    for path in [dir.path(), docroot.as_path()] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        docroot.join("info.php"),
        "<?php\nheader('Content-Type: text/plain');\necho 'php ', PHP_VERSION, \"\\n\";\necho 'method ', $_SERVER['REQUEST_METHOD'], \"\\n\";\necho 'uri ', $_SERVER['REQUEST_URI'], \"\\n\";\necho 'xff ', $_SERVER['HTTP_X_FORWARDED_FOR'] ?? '-', \"\\n\";\necho 'body ', file_get_contents('php://input'), \"\\n\";\n",
    )
    .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let base = dir.path().display();
    let php = php_module.expect("checked above").display().to_string();
    let config = format!(
        "ServerRoot {base}\nDefaultRuntimeDir {base}\nPidFile {base}/httpd.pid\nErrorLog {base}/error.log\n\
         LogLevel warn\nListen {addr}\nServerName localhost\n\
         LoadModule mpm_prefork_module {APACHE_MODULES}/mod_mpm_prefork.so\n\
         LoadModule authz_core_module {APACHE_MODULES}/mod_authz_core.so\n\
         LoadModule php_module {php}\n\
         User nobody\nGroup nogroup\nStartServers 2\nMinSpareServers 1\nMaxSpareServers 4\n\
         DocumentRoot {base}/htdocs\n<Directory {base}/htdocs>\nRequire all granted\n</Directory>\n\
         <FilesMatch \\.php$>\nSetHandler application/x-httpd-php\n</FilesMatch>\n"
    );
    let conf = dir.path().join("httpd.conf");
    std::fs::write(&conf, config).unwrap();
    let child = Command::new("/usr/sbin/apache2")
        .arg("-f")
        .arg(&conf)
        .arg("-DFOREGROUND")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start apache2");
    let apache = Apache {
        child,
        addr,
        _dir: dir,
    };
    wait_for(Duration::from_secs(15), || TcpStream::connect(addr).ok())
        .expect("apache2 did not start listening");
    Some(apache)
}

/// A site whose `.php` files go to Apache at `addr`.
fn php_config(addr: SocketAddr) -> String {
    format!(
        "root = \"root\"\n[[backend]]\nname = \"php\"\naddresses = \"{addr}\"\n[[route]]\nbackend = \"php\"\nextensions = [\"php\"]\n"
    )
}

httptest!(apache_runs_the_php_scripts, |model| {
    let Some(apache) = apache_with_php() else {
        return;
    };
    let site = Site::new();
    site.file("index.html", "static\n");
    let srv = site.serve_config(model, &php_config(apache.addr));
    let r = srv.get("/info.php?x=1");
    r.assert_status(200);
    let text = r.text();
    assert!(text.starts_with("php 8."), "{text}");
    assert!(text.contains("method GET\n"), "{text}");
    assert!(text.contains("uri /info.php?x=1\n"), "{text}");
    assert!(text.contains("xff 127.0.0.1\n"), "{text}");
    let mut conn = srv.connect();
    let r = conn.exchange(
        "POST /info.php HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nping",
    );
    assert!(
        r.text().contains("method POST\nuri /info.php\n"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("body ping\n"), "{}", r.text());
    conn.exchange("GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .assert_ok(200, "static\n");
});

httptest!(
    gunicorn_takes_a_hundred_streams_of_one_connection,
    |model| {
        // HTTP/2 in front of an HTTP/1.1 backend: a hundred POSTs of 20,000 bytes each on one
        // client connection, echoed whole, and gunicorn's chunked answers unframed into DATA.
        let Some(backend) = gunicorn() else { return };
        let site = Site::new();
        site.file("index.html", "static\n");
        let srv = site.serve_config(model, &config(backend.addr));
        let Some(report) = crate::h2::peer(&srv, false, &["streams", "100", "/app/echo", "20000"])
        else {
            return;
        };
        let echo = &report["paths"]["/app/echo"];
        assert_eq!(echo["statuses"]["200"], 100, "{report}");
        assert_eq!(echo["echoed"], 100, "{report}");
        let paths = "/app/big?n=300000,/app/hello,/index.html";
        let report = crate::h2::peer(&srv, false, &["streams", "30", paths]).unwrap();
        assert_eq!(report["completed"], 30, "{report}");
        let big = &report["paths"]["/app/big?n=300000"];
        assert_eq!(big["lengths"], serde_json::json!([300_000]), "{report}");
        assert_eq!(
            report["paths"]["/index.html"]["lengths"],
            serde_json::json!([7]),
            "{report}"
        );
    }
);

httptest!(apache_takes_a_hundred_streams_of_one_connection, |model| {
    let Some(apache) = apache_with_php() else {
        return;
    };
    let site = Site::new();
    site.file("index.html", "static\n");
    let srv = site.serve_config(model, &php_config(apache.addr));
    let Some(report) = crate::h2::peer(&srv, false, &["streams", "100", "/info.php", "20000"])
    else {
        return;
    };
    let info = &report["paths"]["/info.php"];
    assert_eq!(info["statuses"]["200"], 100, "{report}");
    assert_eq!(info["echoed"], 100, "{report}");
});
