//! The module API used from outside the server crate, as docs/modules.md shows it: a
//! module written here, registered, configured by a `[[module]]` table and served by the
//! real server on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastpath_server::config::Config;
use fastpath_server::module::{
    Configured, Decision, Exchange, Hooks, LogRecord, Module, Order, Response, Settings,
};

/// Answers its `path` with its `reply`, and counts what the worker logged.
struct Echo;

struct EchoConfig {
    path: String,
    reply: String,
}

struct EchoHooks {
    path: String,
    reply: String,
    answered: u64,
    logged: u64,
}

impl Module for Echo {
    fn name(&self) -> &'static str {
        "echo_reply"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let path = settings.string("path").ok_or("`echo_reply` needs `path`")?;
        let reply = settings
            .string("reply")
            .unwrap_or_else(|| "echo".to_owned());
        if !path.starts_with('/') {
            settings.error("path", "`path` must start with /");
        }
        Ok(Arc::new(EchoConfig { path, reply }))
    }
}

impl Configured for EchoConfig {
    fn order(&self) -> Order {
        Order::Last
    }

    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(EchoHooks {
            path: self.path.clone(),
            reply: self.reply.clone(),
            answered: 0,
            logged: 0,
        })
    }
}

impl Hooks for EchoHooks {
    fn handler(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        if exchange.path() != self.path.as_bytes() {
            return Decision::Decline;
        }
        self.answered += 1;
        let body = format!(
            "{} {} answered={} logged={}\n",
            self.reply,
            exchange.query().unwrap_or(""),
            self.answered,
            self.logged
        );
        Decision::Answer(
            Response::new(200)
                .field("X-Module", "echo_reply")
                .body("text/plain", body.into_bytes()),
        )
    }

    fn log(&mut self, _record: &LogRecord<'_>) {
        self.logged += 1;
    }
}

fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn a_module_from_outside_the_server_is_configured_and_answers() {
    fastpath_server::module::register(Arc::new(Echo));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file.txt"), "a file\n").unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\nworkers = 1\nmodel = \"epoll\"\nrun_as_root = true\n\
         [log]\naccess = \"off\"\n\
         [[module]]\nname = \"echo_reply\"\npath = \"/echo\"\nreply = \"hello\"\n"
    );
    let config = Config::from_toml(&text, dir.path()).expect("the configuration is good");
    // Its own keys are its own to check, and reported where they are.
    let bad = Config::from_toml(
        "[[module]]\nname = \"echo_reply\"\npath = \"echo\"\nreplay = \"x\"\n",
        dir.path(),
    )
    .expect_err("a bad path and an unknown key");
    let said: Vec<String> = bad.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "3:8: [[module]] \"echo_reply\": `path` must start with /",
            "4:1: [[module]] \"echo_reply\": unknown key `replay` in [[module]] \"echo_reply\"; \
             its keys: path, reply"
        ]
    );

    static STOP: AtomicBool = AtomicBool::new(false);
    let server = std::thread::spawn(move || fastpath_server::serve(&config, &STOP));
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = get(port, "/echo?x=1");
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.contains("\r\nX-Module: echo_reply\r\n"), "{first}");
    assert!(
        first.contains("\r\nContent-Type: text/plain\r\n"),
        "{first}"
    );
    assert!(
        first.ends_with("\r\n\r\nhello x=1 answered=1 logged=0\n"),
        "{first}"
    );
    // The log hook saw the first request (and the connection checks before it).
    let second = get(port, "/echo");
    assert!(second.contains("hello  answered=2 logged="), "{second}");
    assert!(!second.ends_with("logged=0\n"), "{second}");
    // What the module declines goes on to the static files.
    let file = get(port, "/file.txt");
    assert!(
        file.starts_with("HTTP/1.1 200 OK\r\n") && file.ends_with("a file\n"),
        "{file}"
    );
    STOP.store(true, Ordering::SeqCst);
    server.join().unwrap().expect("the server stopped cleanly");
}
