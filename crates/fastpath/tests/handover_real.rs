//! Hand-over to real, unmodified backends: the demo's WSGI application under gunicorn.
//! CI installs gunicorn (`.ci/run`); elsewhere a missing gunicorn skips these tests with a
//! message, but under CI (the `CI` variable set) it fails them.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::*;

/// A gunicorn serving examples/backend/app.py, stopped when dropped.
struct Gunicorn {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Gunicorn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gunicorn() -> Option<Gunicorn> {
    let have = Command::new("python3")
        .args(["-c", "import gunicorn"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "gunicorn is not installed, and CI must run these tests"
        );
        eprintln!("skipped: gunicorn is not installed (python3 -m pip install gunicorn)");
        return None;
    }
    // A free port: bound, noted, released, then given to gunicorn.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
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
