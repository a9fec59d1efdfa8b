use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fastpath_drivers::{ListenAddr, ModelKind, UpstreamAddr};
use fastpath_handover::{BackendConfig, HandoverMethod, RouteRule};

use super::check::edit_distance;
use super::check::{Kind, TableSpec};
use super::keys;
use super::{Config, ConfigError, HandoverConfig, HostConfig, LogTarget, Model};

/// A temporary config directory containing a `site/` directory and a
/// regular file `file.txt`.
fn base() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("site")).unwrap();
    fs::write(dir.path().join("file.txt"), "x").unwrap();
    dir
}

fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    let dir = base();
    Config::from_toml(text, dir.path())
}

fn ok(text: &str) -> Config {
    match parse(text) {
        Ok(c) => c,
        Err(errors) => panic!("unexpected errors: {errors:#?}"),
    }
}

/// All errors as `line:column: message`.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors in:\n{text}"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// The single error of `text`, as (line, column, message).
fn one_error(text: &str) -> (usize, usize, String) {
    let errors = parse(text).expect_err("expected an error");
    assert_eq!(errors.len(), 1, "expected exactly one error: {errors:#?}");
    let e = &errors[0];
    (e.line, e.column, e.message.clone())
}

fn assert_error(text: &str, line: usize, column: usize, needle: &str) {
    let (l, c, message) = one_error(text);
    assert_eq!((l, c), (line, column), "position of: {message}");
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fastpath.toml")
}

#[test]
fn defaults() {
    let c = Config::default();
    assert_eq!(
        c.listen,
        vec!["127.0.0.1:8080".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(c.workers, 0);
    assert_eq!(c.model, Model::Auto);
    assert_eq!(c.limits.max_connections, 10_000);
    assert_eq!(c.limits.max_request_line, 8192);
    assert_eq!(c.limits.max_header_bytes, 16384);
    assert_eq!(c.limits.max_headers, 100);
    assert_eq!(c.limits.max_discard_body, 1 << 20);
    assert_eq!(c.limits.max_requests_per_connection, 10_000);
    assert_eq!(c.timeouts.header, Duration::from_secs(10));
    assert_eq!(c.timeouts.keepalive, Duration::from_secs(75));
    assert_eq!(c.timeouts.send, Duration::from_secs(60));
    assert_eq!(c.timeouts.linger, Duration::from_secs(2));
    assert_eq!(c.log.access, LogTarget::Stdout);
    assert_eq!(c.log.error, LogTarget::Stderr);
    assert_eq!(c.log.level, "info");
    assert_eq!(c.default_host.names, Vec::<String>::new());
    assert_eq!(c.default_host.root, PathBuf::from("."));
    assert_eq!(c.default_host.index, vec!["index.html"]);
    assert!(!c.default_host.dotfiles);
    assert!(c.default_host.precompressed);
    assert!(!c.default_host.is_default);
    assert!(c.hosts.is_empty());
}

#[test]
fn empty_file_gives_defaults_rooted_at_base_dir() {
    let dir = base();
    let c = Config::from_toml("# nothing\n", dir.path()).unwrap();
    let expected = Config {
        default_host: HostConfig {
            root: dir.path().to_path_buf(),
            ..HostConfig::default()
        },
        ..Config::default()
    };
    assert_eq!(c, expected);
}

#[test]
fn full_file_with_every_key() {
    let dir = base();
    fs::create_dir(dir.path().join("other")).unwrap();
    let text = r#"
listen = ["0.0.0.0:80", "[::1]:8443"]
workers = 4
model = "epoll"
root = "site"
index = ["index.html", "index.htm"]
dotfiles = true
precompressed = false

[limits]
max_connections = 500
max_request_line = "4k"
max_header_bytes = 32768
max_headers = 50
max_discard_body = "2MiB"
max_requests_per_connection = 7

[timeouts]
header = "500ms"
keepalive = 30
send = "2m"
linger = "1h"

[log]
access = "logs/access.log"
error = "stdout"
level = "debug"

[[host]]
names = ["Example.COM", "*.example.com"]
root = "other"
index = ["default.html"]
dotfiles = false
precompressed = true
default = true

[[host]]
names = "static.test"
"#;
    let c = Config::from_toml(text, dir.path()).unwrap();
    assert_eq!(
        c.listen,
        vec![
            "0.0.0.0:80".parse::<SocketAddr>().unwrap(),
            "[::1]:8443".parse().unwrap()
        ]
    );
    assert_eq!(c.workers, 4);
    assert_eq!(c.model, Model::Named(ModelKind::Epoll));
    assert_eq!(c.limits.max_connections, 500);
    assert_eq!(c.limits.max_request_line, 4096);
    assert_eq!(c.limits.max_header_bytes, 32768);
    assert_eq!(c.limits.max_headers, 50);
    assert_eq!(c.limits.max_discard_body, 2 << 20);
    assert_eq!(c.limits.max_requests_per_connection, 7);
    assert_eq!(c.timeouts.header, Duration::from_millis(500));
    assert_eq!(c.timeouts.keepalive, Duration::from_secs(30));
    assert_eq!(c.timeouts.send, Duration::from_secs(120));
    assert_eq!(c.timeouts.linger, Duration::from_secs(3600));
    assert_eq!(
        c.log.access,
        LogTarget::File(dir.path().join("logs/access.log"))
    );
    assert_eq!(c.log.error, LogTarget::Stdout);
    assert_eq!(c.log.level, "debug");

    let top = HostConfig {
        names: vec![],
        root: dir.path().join("site"),
        index: vec!["index.html".into(), "index.htm".into()],
        dotfiles: true,
        precompressed: false,
        is_default: false,
        tls_certificate: None,
        tls_key: None,
        hsts: None,
        tls_auto: false,
    };
    assert_eq!(c.default_host, top);
    assert_eq!(
        c.hosts,
        vec![
            HostConfig {
                names: vec!["example.com".into(), "*.example.com".into()],
                root: dir.path().join("other"),
                index: vec!["default.html".into()],
                dotfiles: false,
                precompressed: true,
                is_default: true,
                tls_certificate: None,
                tls_key: None,
                hsts: None,
                tls_auto: false,
            },
            // Everything but the names inherited from the top level.
            HostConfig {
                names: vec!["static.test".into()],
                ..top.clone()
            },
        ]
    );
    assert_eq!(c.fallback_host(), &c.hosts[0]);
}

#[test]
fn example_file_loads() {
    let c = Config::load(&example_path()).unwrap_or_else(|e| panic!("{e:#?}"));
    let site = example_path().parent().unwrap().join("site");
    assert_eq!(
        fs::canonicalize(&c.default_host.root).unwrap(),
        fs::canonicalize(site).unwrap()
    );
    assert_eq!(c.hosts.len(), 2);
    assert!(c.hosts[1].is_default);
    assert_eq!(c.hosts[1].names, vec!["*.example.com"]);
    // The example documents the defaults for everything else.
    assert_eq!(c.limits, Config::default().limits);
    assert_eq!(c.timeouts, Config::default().timeouts);
    assert_eq!(c.log, Config::default().log);
}

#[test]
fn example_file_uses_every_key() {
    let text = fs::read_to_string(example_path()).unwrap();
    let keys = [
        "listen",
        "workers",
        "model",
        "root",
        "index",
        "dotfiles",
        "precompressed",
        "run_as_root",
        "[limits]",
        "max_connections",
        "max_request_line",
        "max_header_bytes",
        "max_headers",
        "max_discard_body",
        "max_requests_per_connection",
        "[timeouts]",
        "header",
        "keepalive",
        "send",
        "linger",
        "[log]",
        "access",
        "error",
        "level",
        "[[host]]",
        "names",
        "default",
    ];
    for key in keys {
        let used = text
            .lines()
            .any(|l| l.trim_start().starts_with(key) && !l.trim_start().starts_with('#'));
        assert!(used, "example does not set {key}");
    }
}

#[test]
fn load_reports_unreadable_file_at_0_0() {
    let dir = base();
    let errors = Config::load(&dir.path().join("missing.toml")).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].line, errors[0].column), (0, 0));
    assert!(errors[0].message.contains("cannot read"), "{}", errors[0]);
}

#[test]
fn load_reports_the_first_byte_that_is_not_utf8_at_its_line_and_column() {
    let dir = base();
    let path = dir.path().join("latin1.toml");
    // "café" in Latin-1 on line 3, after a character of two bytes in UTF-8 on the same line.
    fs::write(&path, b"workers = 2\n\n# \xc3\xa9t\xc3\xa9, caf\xe9\n").unwrap();
    let errors = Config::load(&path).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].line, errors[0].column), (3, 11), "{}", errors[0]);
    assert!(errors[0].message.contains("0xe9"), "{}", errors[0]);

    fs::write(&path, b"workers = 2\n# \xe2\x82").unwrap();
    let errors = Config::load(&path).unwrap_err();
    assert_eq!((errors[0].line, errors[0].column), (2, 3), "{}", errors[0]);
    assert!(
        errors[0].message.contains("ends in the middle"),
        "{}",
        errors[0]
    );
}

#[test]
fn load_resolves_relative_to_the_file() {
    let dir = base();
    let path = dir.path().join("fastpath.toml");
    fs::write(&path, "root = \"site\"\n[log]\naccess = \"a.log\"\n").unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(c.default_host.root, dir.path().join("site"));
    assert_eq!(c.log.access, LogTarget::File(dir.path().join("a.log")));
}

#[test]
fn relative_root_resolution() {
    let dir = base();
    fs::create_dir_all(dir.path().join("site/sub")).unwrap();
    let root = |text: &str| Config::from_toml(text, dir.path()).unwrap();
    assert_eq!(root("root = \".\"").default_host.root, dir.path());
    assert_eq!(
        root("root = \"site\"").default_host.root,
        dir.path().join("site")
    );
    assert_eq!(
        root("root = \"./site/\"").default_host.root,
        dir.path().join("site")
    );
    assert_eq!(
        root("root = \"site/./sub\"").default_host.root,
        dir.path().join("site/sub")
    );
    // Absolute roots are kept.
    let abs = dir.path().join("site");
    let c = root(&format!("root = {:?}", abs.to_str().unwrap()));
    assert_eq!(c.default_host.root, abs);
    // [[host]] roots resolve the same way, and default to the top-level one.
    let c = root("root = \"site\"\n[[host]]\nnames = [\"a\"]\n[[host]]\nnames = [\"b\"]\nroot = \"site/sub\"\n");
    assert_eq!(c.hosts[0].root, dir.path().join("site"));
    assert_eq!(c.hosts[1].root, dir.path().join("site/sub"));
}

#[test]
fn host_inherits_top_level_values_in_any_key_order() {
    // An inline host array written before the top-level keys it inherits.
    let c = ok(r#"
host = [{ names = ["a.test"] }, { names = ["b.test"], dotfiles = false, index = [] }]
precompressed = false
dotfiles = true
index = ["home.html"]
root = "site"
"#);
    let a = &c.hosts[0];
    assert_eq!(a.index, vec!["home.html"]);
    assert!(a.dotfiles);
    assert!(!a.precompressed);
    assert_eq!(a.root, c.default_host.root);
    let b = &c.hosts[1];
    assert!(b.index.is_empty());
    assert!(!b.dotfiles);
    assert!(!b.precompressed);
}

#[test]
fn listen_takes_unix_socket_paths_and_their_mode() {
    let c = ok("listen = [\"127.0.0.1:80\", \"unix:/run/fastpath.sock\"]\nunix_mode = \"0660\"");
    assert_eq!(
        c.listen,
        vec![
            ListenAddr::Tcp("127.0.0.1:80".parse().unwrap()),
            ListenAddr::Unix("/run/fastpath.sock".into())
        ]
    );
    assert_eq!(c.unix_mode, Some(0o660));
    assert_error(
        "listen = [\"unix:\"]",
        1,
        11,
        "`listen` address \"unix:\": `unix:` needs the socket's path",
    );
    assert_error(
        "listen = [\"unix:/a\", \"unix:/a\"]",
        1,
        22,
        "`listen` address \"unix:/a\" is listed twice",
    );
    assert_error(
        "unix_mode = \"0999\"",
        1,
        13,
        "`unix_mode` \"0999\" is not a file mode in octal",
    );
}

#[test]
fn listen_tables_give_each_listener_its_options() {
    let c = ok(r#"
unix_mode = "0640"
[[listen]]
address = "127.0.0.1:80"
[[listen]]
address = "unix:/run/a.sock"
unix_mode = "0600"
[[listen]]
address = "unix:/run/b.sock"
"#);
    assert_eq!(
        c.listen,
        vec![
            ListenAddr::Tcp("127.0.0.1:80".parse().unwrap()),
            ListenAddr::Unix("/run/a.sock".into()),
            ListenAddr::Unix("/run/b.sock".into()),
        ]
    );
    let mode = |addr: &ListenAddr| c.listen_options(addr).unix_mode();
    assert_eq!(mode(&c.listen[0]), None, "not for TCP");
    assert_eq!(mode(&c.listen[1]), Some(0o600));
    assert_eq!(mode(&c.listen[2]), Some(0o640));
    let c = ok("listen = [{ address = \"unix:/run/c.sock\", unix_mode = \"0660\" }]");
    assert_eq!(mode_of(&c, "/run/c.sock"), Some(0o660));
    assert_error(
        "[[listen]]\nunix_mode = \"0600\"",
        1,
        1,
        "[[listen]] needs `address`, IP:PORT or unix:PATH",
    );
    assert_error(
        "[[listen]]\naddress = \"127.0.0.1:80\"\nunix_mode = \"0600\"",
        2,
        11,
        "[[listen]] \"127.0.0.1:80\" is a TCP address: `unix_mode` is for unix:PATH",
    );
    assert_error(
        "[[listen]]\naddress = \"localhost:80\"",
        2,
        11,
        "`listen` address \"localhost:80\" is not IP:PORT or unix:PATH",
    );
    assert_error(
        "[[listen]]\naddress = \"127.0.0.1:80\"\ndefer = true",
        3,
        1,
        "unknown key `defer` in [[listen]]",
    );
}

fn mode_of(c: &Config, path: &str) -> Option<u32> {
    c.listen_options(&ListenAddr::Unix(path.into())).unix_mode()
}

#[test]
fn listen_accepts_a_single_string() {
    let c = ok("listen = \"[::]:443\"");
    assert_eq!(c.listen, vec!["[::]:443".parse::<SocketAddr>().unwrap()]);
}

#[test]
fn durations_and_sizes() {
    let c = ok(r#"
[limits]
max_request_line = "64"
max_header_bytes = "1K"
max_discard_body = "1g"
[timeouts]
header = "2s"
keepalive = "10"
send = "1ms"
linger = 3
"#);
    assert_eq!(c.limits.max_request_line, 64);
    assert_eq!(c.limits.max_header_bytes, 1024);
    assert_eq!(c.limits.max_discard_body, 1 << 30);
    assert_eq!(c.timeouts.header, Duration::from_secs(2));
    assert_eq!(c.timeouts.keepalive, Duration::from_secs(10));
    assert_eq!(c.timeouts.send, Duration::from_millis(1));
    assert_eq!(c.timeouts.linger, Duration::from_secs(3));
    let c = ok("[limits]\nmax_discard_body = 0\nmax_header_bytes = \"16kib\"");
    assert_eq!(c.limits.max_discard_body, 0);
    assert_eq!(c.limits.max_header_bytes, 16384);
}

// ---- one test per error kind, with exact positions ----

#[test]
fn syntax_error_stops_with_position() {
    // Also has a semantic error, which is not reported: syntax comes first.
    let errors = parse("workers = \"x\"\nmodel = \"epoll\nroot = 1\n").unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!((errors[0].line, errors[0].column), (2, 15));
    assert!(
        errors[0].message.starts_with("TOML syntax error"),
        "{}",
        errors[0]
    );
}

#[test]
fn duplicate_key_is_a_syntax_error_naming_the_key() {
    assert_error(
        "workers = 1\nworkers = 2\n",
        2,
        1,
        "duplicate key `workers`",
    );
}

#[test]
fn unknown_top_level_key() {
    let (l, c, m) = one_error("workers = 1\nwrokers = 2\n");
    assert_eq!((l, c), (2, 1));
    assert!(m.contains("unknown key `wrokers` at the top level"), "{m}");
    assert!(m.contains("did you mean `workers`?"), "{m}");
    assert!(
        m.contains("allowed keys: listen, workers, model, prefork, threads, percore, root"),
        "{m}"
    );
}

#[test]
fn unknown_key_in_section() {
    let (l, c, m) = one_error("[limits]\nmax_connections = 5\n  bogus = 1\n");
    assert_eq!((l, c), (3, 3));
    assert!(m.contains("unknown key `bogus` in [limits]"), "{m}");
    assert!(!m.contains("did you mean"), "{m}");
    assert!(m.contains("max_requests_per_connection"), "{m}");
    assert_error("[log]\nlevl = \"info\"", 2, 1, "did you mean `level`?");
    assert_error(
        "[timeouts]\nidle = 5",
        2,
        1,
        "allowed keys: header, keepalive, send, linger",
    );
    assert_error(
        "[[host]]\nnames = [\"a\"]\nalias = 1",
        3,
        1,
        "unknown key `alias` in [[host]]",
    );
    // Unknown table headers and dotted keys point at the key.
    assert_error(
        "[server]\nx = 1",
        1,
        2,
        "unknown key `server` at the top level",
    );
    assert_error(
        "timeouts.idle = 1",
        1,
        10,
        "unknown key `idle` in [timeouts]",
    );
}

#[test]
fn wrong_types() {
    assert_error(
        "workers = \"4\"",
        1,
        11,
        "`workers` must be an integer, found a string",
    );
    assert_error(
        "model = 1",
        1,
        9,
        "`model` must be a string, found an integer",
    );
    assert_error("dotfiles = \"yes\"", 1, 12, "`dotfiles` must be a boolean");
    assert_error(
        "listen = 8080",
        1,
        10,
        "`listen` must be a string or an array of strings, found an integer",
    );
    assert_error(
        "listen = [\"127.0.0.1:80\", 81]",
        1,
        27,
        "`listen` entries must be strings, found an integer",
    );
    assert_error(
        "limits = 5",
        1,
        10,
        "`limits` must be a table, found an integer",
    );
    assert_error("[timeouts]\nsend = 1.5", 2, 8, "`send` must be a duration");
    assert_error(
        "[limits]\nmax_headers = \"10\"",
        2,
        15,
        "`max_headers` must be an integer, found a string",
    );
    assert_error(
        "[limits]\nmax_header_bytes = true",
        2,
        20,
        "`max_header_bytes` must be a size",
    );
    assert_error(
        "[host]\nnames = [\"a\"]",
        1,
        1,
        "`host` must be an array of tables",
    );
    assert_error(
        "host = [1]",
        1,
        9,
        "`host` entries must be tables, found an integer",
    );
    assert_error(
        "[log]\nlevel = 3",
        2,
        9,
        "`level` must be a string, found an integer",
    );
    assert_error(
        "index = [\"a\", {x = 1}]",
        1,
        15,
        "`index` entries must be strings, found a table",
    );
}

#[test]
fn out_of_range_values() {
    assert_error(
        "workers = -1",
        1,
        11,
        "`workers` must not be negative, found -1",
    );
    assert_error("workers = 100000", 1, 11, "`workers` must be at most 4096");
    assert_error(
        "[limits]\nmax_connections = 0",
        2,
        19,
        "`max_connections` must be at least 1, found 0",
    );
    assert_error(
        "[limits]\nmax_request_line = 63",
        2,
        20,
        "`max_request_line` must be at least 64 bytes, found 63 bytes",
    );
    assert_error(
        "[limits]\nmax_header_bytes = \"255\"",
        2,
        20,
        "at least 256 bytes",
    );
    assert_error("[limits]\nmax_headers = 0", 2, 15, "at least 1");
    assert_error(
        "[limits]\nmax_requests_per_connection = 0",
        2,
        31,
        "at least 1",
    );
    assert_error(
        "[limits]\nmax_discard_body = -5",
        2,
        20,
        "`max_discard_body` must not be negative, found -5",
    );
    assert_error(
        "[timeouts]\nheader = -1",
        2,
        10,
        "`header` must not be negative",
    );
    assert_error(
        "[timeouts]\nlinger = \"200h\"",
        2,
        10,
        "`linger` must be at most 7 days",
    );
}

#[test]
fn bad_addresses() {
    assert_error(
        "listen = [\"127.0.0.1:80\", \"localhost:80\"]",
        1,
        27,
        "`listen` address \"localhost:80\" is not IP:PORT",
    );
    assert_error("listen = \"::1:80\"", 1, 10, "is not IP:PORT");
    assert_error("listen = \"127.0.0.1\"", 1, 10, "is not IP:PORT");
    assert_error("listen = []", 1, 10, "`listen` must not be empty");
    assert_error(
        "listen = [\"1.2.3.4:5\",\n  \"1.2.3.4:5\"]",
        2,
        3,
        "listed twice",
    );
}

#[test]
fn unknown_model_lists_valid_names() {
    assert_error(
        "\nmodel = \"io_uring\"",
        2,
        9,
        "unknown model `io_uring`; valid models are: auto, epoll, uring",
    );
}

#[test]
fn bad_durations() {
    for bad in [
        "\"10x\"", "\"s\"", "\"1.5s\"", "\"-1s\"", "\"10 s\"", "\"1S\"", "\"\"",
    ] {
        assert_error(
            &format!("[timeouts]\nkeepalive = {bad}"),
            2,
            13,
            "has a bad duration",
        );
    }
    assert_error(
        "[timeouts]\nheader = 0",
        2,
        10,
        "`header` must be longer than zero",
    );
    assert_error(
        "[timeouts]\nheader = \"0ms\"",
        2,
        10,
        "must be longer than zero",
    );
    assert_error(
        "[timeouts]\nheader = \"99999999999999999999h\"",
        2,
        10,
        "has a bad duration",
    );
}

#[test]
fn bad_sizes() {
    for bad in [
        "\"16q\"",
        "\"k\"",
        "\"1.5k\"",
        "\"-1k\"",
        "\"16 k\"",
        "\"\"",
        "\"99999999999g\"",
    ] {
        assert_error(
            &format!("[limits]\nmax_discard_body = {bad}"),
            2,
            20,
            "has a bad size",
        );
    }
}

#[test]
fn root_must_be_an_existing_directory() {
    assert_error("\nroot = \"nope\"", 2, 8, "`root` \"nope\"");
    assert_error("root = \"file.txt\"", 1, 8, "not a directory");
    assert_error("root = \"\"", 1, 8, "`root` must not be empty");
    assert_error(
        "[[host]]\nnames = [\"a\"]\nroot = \"nope\"",
        3,
        8,
        "`root` \"nope\"",
    );
}

#[test]
fn host_name_rules() {
    assert_error("[[host]]\nroot = \"site\"", 1, 1, "[[host]] needs `names`");
    assert_error("[[host]]\nnames = []", 2, 9, "`names` must not be empty");
    assert_error(
        "[[host]]\nnames = [\"a.com\", \"b.*.com\"]",
        2,
        19,
        "must have the form \"*.domain\"",
    );
    for bad in ["\"*\"", "\"*.\"", "\"a*.com\"", "\"*.*.com\"", "\"**.com\""] {
        assert_error(&format!("[[host]]\nnames = [{bad}]"), 2, 10, "\"*.domain\"");
    }
    assert_error(
        "[[host]]\nnames = \"a.com:80\"",
        2,
        9,
        "must not include a port",
    );
    assert_error(
        "[[host]]\nnames = \"[::1]:80\"",
        2,
        9,
        "must not include a port",
    );
    assert_error(
        "[[host]]\nnames = \"a..com\"",
        2,
        9,
        "not a valid domain name",
    );
    assert_error(
        "[[host]]\nnames = \"a com\"",
        2,
        9,
        "not a valid domain name",
    );
    assert_error("[[host]]\nnames = \"\"", 2, 9, "must not be empty");
    assert_error(
        "[[host]]\nnames = \"[zz]\"",
        2,
        9,
        "not a valid IPv6 literal",
    );
    let c = ok("[[host]]\nnames = [\"[::1]\", \"127.0.0.1\", \"A_b-C.Example\"]");
    assert_eq!(
        c.hosts[0].names,
        vec!["[::1]", "127.0.0.1", "a_b-c.example"]
    );
}

#[test]
fn duplicate_host_names_across_hosts() {
    // Case-insensitive, since names are lower-cased.
    let text = "[[host]]\nnames = [\"a.com\"]\n\n[[host]]\nnames = [\"b.com\", \"A.com\"]\n";
    assert_error(text, 5, 19, "host name `a.com` is already used at 2:10");
}

#[test]
fn at_most_one_default_host() {
    let text = "[[host]]\nnames = [\"a\"]\ndefault = true\n[[host]]\nnames = [\"b\"]\ndefault = false\n[[host]]\nnames = [\"c\"]\ndefault = true\n";
    assert_error(text, 9, 1, "another one already has it at 3:1");
    assert_error(
        "[[host]]\nnames = [\"a\"]\ndefault = 1",
        3,
        11,
        "`default` must be a boolean",
    );
}

#[test]
fn log_rules() {
    assert_error("[log]\nerror = \"off\"", 2, 9, "`error` cannot be \"off\"");
    assert_error("[log]\naccess = \"\"", 2, 10, "`access` must not be empty");
    assert_error(
        "[log]\nlevel = \"verbose\"",
        2,
        9,
        "`level` must be one of error, warn, info, debug, trace",
    );
    let c = ok("[log]\naccess = \"off\"\nerror = \"/var/log/fp.err\"\nlevel = \"trace\"");
    assert_eq!(c.log.access, LogTarget::Off);
    assert_eq!(
        c.log.error,
        LogTarget::File(PathBuf::from("/var/log/fp.err"))
    );
    assert_eq!(c.log.level, "trace");
}

#[test]
fn index_entries_are_plain_file_names() {
    assert_error(
        "index = [\"ok.html\", \"a/b.html\"]",
        1,
        21,
        "plain file name",
    );
    assert_error("index = \"..\"", 1, 9, "plain file name");
    let c = ok("index = \"home.htm\"");
    assert_eq!(c.default_host.index, vec!["home.htm"]);
}

#[test]
fn several_errors_all_reported_in_order() {
    let text = r#"workers = "many"
model = "fibers"
colour = "blue"

[limits]
max_connections = 0
max_header_bytes = "lots"

[timeouts]
header = 0

[log]
error = "off"

[[host]]
names = ["a.com"]
default = true

[[host]]
names = ["a.com", "x.*"]
root = "missing"
default = true
"#;
    let got = errors(text);
    let positions: Vec<&str> = got.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        positions,
        ["1:11", "2:9", "3:1", "6:19", "7:20", "10:10", "13:9", "20:10", "20:19", "21:8", "22:1"],
        "{got:#?}"
    );
}

#[test]
fn columns_count_characters_and_handle_crlf() {
    // "é" is two bytes but one column.
    assert_error(
        "# é\r\n[log]\r\nlevel = \"é\"\r\n",
        3,
        9,
        "`level` must be one of",
    );
    assert_error("index = [\"é\", \"é/x\"]", 1, 15, "plain file name");
}

#[test]
fn user_and_group_are_looked_up() {
    let c = ok("user = \"root\"\n");
    let user = c.user.unwrap();
    assert_eq!(
        (user.name.as_deref(), user.uid, user.gid),
        (Some("root"), 0, Some(0))
    );
    assert_eq!(c.group, None);
    let c = ok("user = \"0\"\ngroup = \"root\"\nrun_as_root = true\n");
    assert_eq!(c.user.unwrap().name.as_deref(), Some("root"));
    assert_eq!((c.group, c.run_as_root), (Some(0), true));
    // A numeric id the system does not know is taken as it is, with a group.
    let c = ok("user = \"4000000\"\ngroup = \"4000001\"\n");
    assert_eq!(c.user.unwrap().uid, 4_000_000);
    assert_eq!(c.group, Some(4_000_001));
}

#[test]
fn unknown_users_and_groups_are_errors_at_their_values() {
    assert_error(
        "workers = 1\nuser = \"no-such-user-here\"\n",
        2,
        8,
        "unknown user \"no-such-user-here\"",
    );
    assert_error(
        "user = \"root\"\ngroup = \"no-such-group\"\n",
        2,
        9,
        "unknown group \"no-such-group\"",
    );
    assert_error("user = \"\"\n", 1, 8, "`user` must not be empty");
    assert_error("group = \"root\"\n", 1, 1, "`group` needs `user`");
    assert_error(
        "user = \"4000000\"\n",
        1,
        8,
        "no primary group: set `group`",
    );
    assert_error(
        "run_as_root = 1\n",
        1,
        15,
        "`run_as_root` must be a boolean",
    );
}

#[test]
fn error_display_is_line_colon_column() {
    let e = ConfigError {
        line: 3,
        column: 7,
        message: "oops".into(),
    };
    assert_eq!(e.to_string(), "3:7: oops");
}

#[test]
fn model_names_round_trip() {
    for m in Model::all() {
        assert_eq!(m.name().parse::<Model>(), Ok(m));
        assert_eq!(m.to_string(), m.name());
    }
    let e = "fibers".parse::<Model>().unwrap_err();
    assert!(e.contains("auto, epoll"), "{e}");
}

#[test]
fn set_root_moves_inheriting_hosts() {
    let dir = base();
    fs::create_dir(dir.path().join("other")).unwrap();
    let text =
        "root = \"site\"\n[[host]]\nnames = [\"a\"]\n[[host]]\nnames = [\"b\"]\nroot = \"other\"";
    let mut c = Config::from_toml(text, dir.path()).unwrap();
    let new_root = dir.path().join("other");
    c.set_root(&new_root).unwrap();
    assert_eq!(c.default_host.root, new_root);
    assert_eq!(c.hosts[0].root, new_root);
    assert_eq!(c.hosts[1].root, new_root);

    let site = dir.path().join("site");
    c.set_root(&site).unwrap();
    assert_eq!(c.hosts[0].root, site);
    assert!(c.set_root(&dir.path().join("file.txt")).is_err());
    assert!(c.set_root(&dir.path().join("missing")).is_err());
    assert_eq!(c.default_host.root, site);
}

#[test]
fn fallback_host_is_top_level_without_default() {
    let c = ok("[[host]]\nnames = [\"a\"]");
    assert_eq!(c.fallback_host(), &c.default_host);
}

#[test]
fn suggestion_distance() {
    assert_eq!(edit_distance("wrokers", "workers"), 2);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("same", "same"), 0);
}

// ------------------------------------------------------------ hand-over

/// A backend named `app` on 127.0.0.1:9000, in lines 1 to 3.
const APP: &str = "[[backend]]\nname = \"app\"\naddresses = \"127.0.0.1:9000\"\n";

fn tcp(s: &str) -> UpstreamAddr {
    UpstreamAddr::Tcp(s.parse().unwrap())
}

#[test]
fn handover_defaults() {
    let c = Config::default();
    assert!(c.backends.is_empty());
    assert!(c.routes.is_empty());
    assert_eq!(c.handover.cache_memory, 32 << 20);
    assert_eq!(c.handover.cache_max_response, 1 << 20);

    let c = ok(&format!(
        "{APP}[[route]]\nbackend = \"app\"\nprefix = \"/\""
    ));
    assert_eq!(
        c.backends,
        vec![BackendConfig::new("app", vec![tcp("127.0.0.1:9000")])]
    );
    let b = &c.backends[0];
    assert_eq!(b.max_connections, 256);
    assert_eq!(b.connect_timeout, Duration::from_secs(2));
    assert_eq!(b.response_timeout, Duration::from_secs(30));
    assert_eq!(b.idle_timeout, Duration::from_secs(60));
    assert_eq!(b.fail_timeout, Duration::from_secs(10));
    assert!(b.forwarded);
    assert!(b.cache);
    assert_eq!(b.public_url, None);
    assert_eq!(
        c.routes,
        vec![RouteRule {
            prefix: Some("/".into()),
            ..RouteRule::default()
        }]
    );
    assert_eq!(c.routes[0].method, HandoverMethod::Proxy);
}

#[test]
fn full_handover_file() {
    let dir = base();
    let text = r#"
[handover]
cache_memory = "8m"
cache_max_response = 65536
kernel_path = "on"
kernel_bridges = 100
kernel_hold = "1m"

[[route]]
backend = "php"
extensions = ["php", "CGI"]
hosts = ["Example.com", "*.example.com"]

[[backend]]
name = "php"
addresses = ["127.0.0.1:9000", "[::1]:9001", "unix:/run/php.sock", "unix:sock/app.sock"]
max_connections = 64
connect_timeout = "500ms"
response_timeout = "2m"
idle_timeout = 5
fail_timeout = "1m"
forwarded = false
public_url = "https://app.example.com:8443/"
cache = false
request_buffering = false
request_buffer_memory = "8k"
max_body_size = 0
body_timeout = "5s"
response_buffering = false
response_buffer_memory = "1m"
max_temp_file_size = "10m"
temp_dir = "site"

[[backend]]
name = "ws_2"
addresses = "127.0.0.1:9100"

[[route]]
backend = "ws_2"
method = "bridge"
prefix = "/ws/"

[[route]]
backend = "php"
method = "redirect"
prefix = "/admin"
query = true
unsafe_methods = true

[[route]]
backend = "php"
fallback = true
unsafe_methods = false
"#;
    let c = Config::from_toml(text, dir.path()).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(
        c.handover,
        HandoverConfig {
            cache_memory: 8 << 20,
            cache_max_response: 65536,
            kernel_path: fastpath_kernel::Mode::On,
            kernel_bridges: 100,
            kernel_hold: 1 << 20,
        }
    );
    assert_eq!(
        c.backends,
        vec![
            BackendConfig {
                name: "php".into(),
                addresses: vec![
                    tcp("127.0.0.1:9000"),
                    tcp("[::1]:9001"),
                    UpstreamAddr::Unix("/run/php.sock".into()),
                    UpstreamAddr::Unix(dir.path().join("sock/app.sock")),
                ],
                max_connections: 64,
                connect_timeout: Duration::from_millis(500),
                response_timeout: Duration::from_secs(120),
                idle_timeout: Duration::from_secs(5),
                fail_timeout: Duration::from_secs(60),
                forwarded: false,
                public_url: Some("https://app.example.com:8443/".into()),
                cache: false,
                request_buffering: false,
                request_buffer_memory: 8 << 10,
                max_body_size: 0,
                body_timeout: Duration::from_secs(5),
                response_buffering: false,
                response_buffer_memory: 1 << 20,
                max_temp_file_size: 10 << 20,
                temp_dir: dir.path().join("site"),
            },
            BackendConfig::new("ws_2", vec![tcp("127.0.0.1:9100")]),
        ]
    );
    assert_eq!(
        c.routes,
        vec![
            RouteRule {
                backend: 0,
                extensions: vec!["php".into(), "cgi".into()],
                hosts: vec!["example.com".into(), "*.example.com".into()],
                ..RouteRule::default()
            },
            RouteRule {
                backend: 1,
                method: HandoverMethod::Bridge,
                prefix: Some("/ws/".into()),
                ..RouteRule::default()
            },
            RouteRule {
                backend: 0,
                method: HandoverMethod::Redirect,
                prefix: Some("/admin".into()),
                query: true,
                unsafe_methods: true,
                ..RouteRule::default()
            },
            RouteRule {
                backend: 0,
                fallback: true,
                ..RouteRule::default()
            },
        ]
    );
}

#[test]
fn inline_backend_and_route_arrays() {
    let c = ok(
        "backend = [{ name = \"a\", addresses = [\"127.0.0.1:1\"] }]\n\
         route = [{ backend = \"a\", query = true }]",
    );
    assert_eq!(c.backends[0].name, "a");
    assert!(c.routes[0].query);
}

#[test]
fn backend_errors() {
    let cases: &[(&str, usize, usize, &str)] = &[
        (
            "[[backend]]\naddresses = \"127.0.0.1:1\"",
            1,
            1,
            "[[backend]] needs `name`",
        ),
        (
            "[[backend]]\nname = \"a\"",
            1,
            1,
            "[[backend]] needs `addresses`",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = []",
            3,
            13,
            "`addresses` must not be empty",
        ),
        (
            "[[backend]]\nname = \"App\"\naddresses = \"127.0.0.1:1\"",
            2,
            8,
            "backend name \"App\" must be lower-case letters, digits, '-' and '_'",
        ),
        (
            "[[backend]]\nname = \"\"\naddresses = \"127.0.0.1:1\"",
            2,
            8,
            "backend name \"\" must be",
        ),
        (
            "[[backend]]\nname = 7\naddresses = \"127.0.0.1:1\"",
            2,
            8,
            "`name` must be a string, found an integer",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = [\"127.0.0.1:1\", \"localhost:80\"]",
            3,
            29,
            "`addresses`: backend address \"localhost:80\" is neither IP:PORT nor unix:PATH",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:0\"",
            3,
            13,
            "port 0",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"unix:\"",
            3,
            13,
            "no socket path",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = [\"127.0.0.1:1\", \"127.0.0.1:1\"]",
            3,
            29,
            "backend address \"127.0.0.1:1\" is listed twice",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\nmax_connections = 0",
            4,
            19,
            "`max_connections` must be at least 1",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\nconnect_timeout = \"2x\"",
            4,
            19,
            "`connect_timeout` has a bad duration",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\nfail_timeout = 0",
            4,
            16,
            "`fail_timeout` must be longer than zero",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\ncache = \"yes\"",
            4,
            9,
            "`cache` must be a boolean",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\npublic_url = \"127.0.0.1:9\"",
            4,
            14,
            "`public_url` \"127.0.0.1:9\" must start with http:// or https://",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\npublic_url = \"http:///x\"",
            4,
            14,
            "has no host",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\npublic_url = \"http://a/?x\"",
            4,
            14,
            "without '?' or '#'",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\npublic_url = \"http://a b\"",
            4,
            14,
            "must be visible ASCII",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\nweight = 2",
            4,
            1,
            "unknown key `weight` in [[backend]]; allowed keys: name, addresses, max_connections, \
             connect_timeout, response_timeout, idle_timeout, fail_timeout, forwarded, \
             public_url, cache",
        ),
        (
            "[[backend]]\nname = \"a\"\naddresses = \"127.0.0.1:1\"\nconect_timeout = 2",
            4,
            1,
            "did you mean `connect_timeout`?",
        ),
        (
            "[backend]\nname = \"a\"",
            1,
            1,
            "`backend` must be an array of tables (write each as [[backend]]), found a table",
        ),
        (
            "backend = [1]",
            1,
            12,
            "`backend` entries must be tables, found an integer",
        ),
    ];
    for &(text, line, column, needle) in cases {
        let (l, c, message) = one_error(text);
        assert_eq!((l, c), (line, column), "{text:?}: {message}");
        assert!(
            message.contains(needle),
            "{text:?}: {message:?} lacks {needle:?}"
        );
    }
}

#[test]
fn long_unix_paths_are_checked_after_resolution() {
    let dir = base();
    let name = "s".repeat(100);
    let text = format!("[[backend]]\nname = \"a\"\naddresses = \"unix:{name}\"");
    // Short enough on its own, too long once joined to the file's directory.
    let deep = dir.path().join("deeper/than/that");
    fs::create_dir_all(&deep).unwrap();
    let errors = Config::from_toml(&text, &deep).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!((errors[0].line, errors[0].column), (3, 13));
    assert!(
        errors[0].message.contains("at most 107 bytes"),
        "{errors:#?}"
    );
}

#[test]
fn duplicate_backend_names() {
    let text = format!("{APP}\n[[backend]]\nname = \"app\"\naddresses = \"127.0.0.1:2\"\n");
    assert_error(
        &text,
        6,
        8,
        "backend name `app` is already used by the [[backend]] at 1:1",
    );
}

#[test]
fn route_errors() {
    let alone = [
        (
            "[[route]]\nprefix = \"/\"",
            1,
            1,
            "[[route]] needs `backend`",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/\"",
            2,
            11,
            "no [[backend]] is named `app`: there is no [[backend]] table",
        ),
    ];
    for (text, line, column, needle) in alone {
        assert_error(text, line, column, needle);
    }
    // After APP, which takes lines 1 to 3.
    let cases: &[(&str, usize, usize, &str)] = &[
        (
            "[[route]]\nbackend = \"ap\"\nprefix = \"/\"",
            5,
            11,
            "no [[backend]] is named `ap`; backends: app",
        ),
        (
            "[[route]]\nbackend = \"app\"",
            4,
            1,
            "[[route]] has no condition, so it would send every request to the backend; \
             say fallback = true or prefix = \"/\" if that is meant",
        ),
        (
            "[[route]]\nbackend = \"app\"\nhosts = [\"a.test\"]\nquery = false\nfallback = false",
            4,
            1,
            "would send every request for its hosts to the backend",
        ),
        (
            "[[route]]\nbackend = \"app\"\nmethod = \"splice\"\nprefix = \"/\"",
            6,
            10,
            "unknown hand-over method `splice`; valid methods are: proxy, bridge, redirect",
        ),
        (
            "[[route]]\nbackend = \"app\"\nmethod = \"redirect\"\nprefix = \"/\"",
            6,
            10,
            "method \"redirect\" sends clients to the backend's `public_url`, \
             but [[backend]] `app` at 1:1 has none",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"app/\"",
            6,
            10,
            "`prefix` \"app/\" must start with '/'",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"//app/\"",
            6,
            10,
            "can never match: request paths are normalised",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/a/../b\"",
            6,
            10,
            "can never match",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/a/./\"",
            6,
            10,
            "can never match",
        ),
        (
            "[[route]]\nbackend = \"app\"\nextensions = [\"php\", \".cgi\"]",
            6,
            22,
            "`extensions` entry \".cgi\" must be written without the dot: \"cgi\"",
        ),
        (
            "[[route]]\nbackend = \"app\"\nextensions = [\"tar.gz\"]",
            6,
            15,
            "`extensions` entry \"tar.gz\" can never match",
        ),
        (
            "[[route]]\nbackend = \"app\"\nextensions = [\"\"]",
            6,
            15,
            "`extensions` entries must not be empty",
        ),
        (
            "[[route]]\nbackend = \"app\"\nextensions = []",
            6,
            14,
            "`extensions` must not be empty",
        ),
        (
            "[[route]]\nbackend = \"app\"\nquery = 1",
            6,
            9,
            "`query` must be a boolean",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/\"\nhosts = [\"a.test:80\"]",
            7,
            10,
            "must not include a port",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/\"\nhosts = []",
            7,
            9,
            "`hosts` must not be empty",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/\"\npath = \"/x\"",
            7,
            1,
            "unknown key `path` in [[route]]; allowed keys: backend, method, prefix, extensions, \
             unsafe_methods, query, fallback, hosts",
        ),
        (
            "[[route]]\nbackend = \"app\"\nprefix = \"/\"\nfalback = true",
            7,
            1,
            "did you mean `fallback`?",
        ),
    ];
    for &(route, line, column, needle) in cases {
        let text = format!("{APP}{route}");
        let (l, c, message) = one_error(&text);
        assert_eq!((l, c), (line, column), "{text:?}: {message}");
        assert!(
            message.contains(needle),
            "{text:?}: {message:?} lacks {needle:?}"
        );
    }
}

#[test]
fn route_before_its_backend() {
    let c = ok(&format!(
        "[[route]]\nbackend = \"app\"\nquery = true\n{APP}"
    ));
    assert_eq!(c.routes[0].backend, 0);
    assert_error(
        &format!("[[route]]\nbackend = \"app\"\nmethod = \"redirect\"\nquery = true\n{APP}"),
        3,
        10,
        "[[backend]] `app` at 5:1 has none",
    );
}

#[test]
fn each_condition_alone_is_enough() {
    for condition in [
        "prefix = \"/\"",
        "prefix = \"/app\"",
        "extensions = \"php\"",
        "unsafe_methods = true",
        "query = true",
        "fallback = true",
    ] {
        let c = ok(&format!("{APP}[[route]]\nbackend = \"app\"\n{condition}"));
        assert_eq!(c.routes.len(), 1, "{condition}");
    }
}

#[test]
fn one_mistake_is_reported_once() {
    // A bad public_url is not repeated by the redirect route, a malformed
    // backend name not by the route naming it, a bad condition not by the
    // no-condition check.
    let text = "[[backend]]\nname = \"A\"\naddresses = \"127.0.0.1:1\"\npublic_url = \"ftp://x\"\n\
                [[route]]\nbackend = \"A\"\nmethod = \"redirect\"\nprefix = \"x\"\n\
                [[route]]\nbackend = \"A\"\nquery = \"yes\"\n";
    let got = errors(text);
    let positions: Vec<&str> = got.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(positions, ["2:8", "4:14", "8:10", "11:9"], "{got:#?}");
}

#[test]
fn handover_section_errors() {
    assert_error(
        "[handover]\ncache_memory = \"lots\"",
        2,
        16,
        "`cache_memory` has a bad size",
    );
    assert_error(
        "[handover]\ncache_max_response = -1",
        2,
        22,
        "`cache_max_response` must not be negative",
    );
    assert_error(
        "[handover]\nmemory = 1",
        2,
        1,
        "unknown key `memory` in [handover]; allowed keys: cache_memory, cache_max_response, \
         kernel_path, kernel_bridges, kernel_hold",
    );
    assert_error(
        "[handover]\nkernel_path = \"yes\"",
        2,
        15,
        "unknown kernel path `yes` (expected auto, on or off)",
    );
    assert_error(
        "[handover]\nkernel_hold = \"1k\"",
        2,
        15,
        "`kernel_hold` must be at least 65536",
    );
    assert_error("handover = 1", 1, 12, "`handover` must be a table");
    let c = ok("[handover]\ncache_memory = 0");
    assert_eq!(c.handover.cache_memory, 0);
}

#[test]
fn example_file_has_backends_and_routes() {
    let c = Config::load(&example_path()).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(c.handover, HandoverConfig::default());
    assert!(!c.backends.is_empty());
    for b in &c.backends {
        for addr in &b.addresses {
            if let UpstreamAddr::Tcp(a) = addr {
                assert!(a.ip().is_loopback(), "{addr:?}");
            }
        }
    }
    let methods: Vec<HandoverMethod> = c.routes.iter().map(|r| r.method).collect();
    for m in HandoverMethod::ALL {
        assert!(methods.contains(m), "the example has no {m} route");
    }
    assert!(c.routes.iter().any(|r| r.fallback));

    let text = fs::read_to_string(example_path()).unwrap();
    let keys = [
        "[handover]",
        "cache_memory",
        "cache_max_response",
        "[[backend]]",
        "addresses",
        "connect_timeout",
        "response_timeout",
        "idle_timeout",
        "fail_timeout",
        "forwarded",
        "public_url",
        "cache =",
        "[[route]]",
        "backend",
        "method",
        "prefix",
        "extensions",
        "unsafe_methods",
        "query",
        "fallback",
        "hosts",
    ];
    for key in keys {
        let used = text
            .lines()
            .any(|l| l.trim_start().starts_with(key) && !l.trim_start().starts_with('#'));
        assert!(used, "example does not set {key}");
    }
}

#[test]
fn model_sections_fill_the_driver_settings() {
    let c = ok("model = \"prefork\"\n[prefork]\nstart = 2\nmin_spare = 1\nmax_spare = 3\nmax_children = 9\nmax_connections_per_child = 1000\n[threads]\nthreads = 12\nmax_active = 3\nstack_size = \"512k\"\n[percore]\nbusy_poll = \"50us\"\n");
    assert_eq!(c.model, Model::Named(ModelKind::Prefork));
    assert_eq!(
        c.prefork,
        fastpath_drivers::PreforkConfig {
            start: 2,
            min_spare: 1,
            max_spare: 3,
            max_children: 9,
            max_connections_per_child: 1000,
        }
    );
    assert_eq!(
        c.threads,
        fastpath_drivers::ThreadsConfig {
            threads: 12,
            max_active: 3,
            stack_size: 512 * 1024,
        }
    );
    assert_eq!(c.percore.busy_poll, Some(Duration::from_micros(50)));
    for name in ["percore", "threads", "prefork", "epoll", "uring", "auto"] {
        assert_eq!(ok(&format!("model = \"{name}\"\n")).model.name(), name);
    }
}

#[test]
fn model_sections_reject_inconsistent_pools() {
    let errs = errors("[prefork]\nmin_spare = 5\nmax_spare = 5\n");
    assert!(
        errs.iter()
            .any(|e| e.contains("`min_spare` (5) must be below `max_spare` (5)")),
        "{errs:?}"
    );
    let errs = errors("[prefork]\nstart = 20\nmax_children = 10\nmax_spare = 11\n");
    assert!(
        errs.iter()
            .any(|e| e.contains("must not exceed `max_children` (10)")),
        "{errs:?}"
    );
    let errs = errors("[threads]\nthreads = 0\nstack_size = 100\n");
    assert_eq!(errs.len(), 2, "{errs:?}");
}

// ------------------------------------------------------------ the key tables

/// A key as the docs show it: name, default, and whether it is a table.
type KeyDoc = (&'static str, &'static str, bool);

/// Every table of keys: where it is, and its keys.
fn every_table() -> Vec<(&'static str, Vec<KeyDoc>)> {
    fn keys<T>(spec: &TableSpec<T>) -> (&'static str, Vec<KeyDoc>) {
        let keys = spec.keys.iter().map(|k| {
            let table = matches!(k.kind, Kind::Table(_) | Kind::Tables(_));
            (k.name, k.default, table)
        });
        (spec.place, keys.collect())
    }
    vec![
        keys(&keys::TOP),
        keys(&keys::PREFORK),
        keys(&keys::THREADS),
        keys(&keys::PERCORE),
        keys(&keys::LIMITS),
        keys(&keys::TIMEOUTS),
        keys(&keys::CACHE),
        keys(&keys::LOG),
        keys(&keys::HOST),
        keys(&keys::HANDOVER),
        keys(&keys::BACKEND),
        keys(&keys::ROUTE),
        keys(&keys::METRICS),
        keys(&keys::LISTEN),
        keys(&keys::TLS),
        keys(&keys::HTTP2),
        keys(&keys::ACME),
        keys(&keys::MODULE),
    ]
}

/// What to write before a key of the table at `place` so that the file is
/// valid without it.
fn context(place: &str) -> String {
    match place {
        "at the top level" => String::new(),
        "in [[host]]" => "[[host]]\nnames = [\"a\"]\n".to_owned(),
        "in [[backend]]" => APP.to_owned(),
        "in [[route]]" => format!("{APP}[[route]]\nbackend = \"app\"\nprefix = \"/\"\n"),
        "in [[listen]]" => "[[listen]]\naddress = \"127.0.0.1:8080\"\n".to_owned(),
        "in [[module]]" => "[[module]]\nname = \"listing\"\n".to_owned(),
        _ => format!("{}\n", place.strip_prefix("in ").unwrap()),
    }
}

/// The lines of the section of docs/configuration.md about the table at
/// `place`: from its heading to the next heading.
fn docs_section<'d>(docs: &'d str, place: &str) -> Vec<&'d str> {
    let heading = match place {
        "at the top level" => "Top-level keys".to_owned(),
        _ => format!("`{}`", place.strip_prefix("in ").unwrap()),
    };
    let mut lines = docs
        .lines()
        .skip_while(|l| !(l.starts_with('#') && l.contains(&heading)));
    assert!(
        lines.next().is_some(),
        "docs/configuration.md has no heading with {heading}"
    );
    lines.take_while(|l| !l.starts_with('#')).collect()
}

#[test]
fn docs_list_every_key_with_its_default() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let docs = fs::read_to_string(path).unwrap();
    for (place, keys) in every_table() {
        let section = docs_section(&docs, place);
        for (name, default, table) in keys {
            if table {
                // Documented in a section of its own, which the loop visits too.
                continue;
            }
            let row = section
                .iter()
                .find(|l| l.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("docs/configuration.md: no row for `{name}` {place}"));
            let cell = row.split('|').nth(3).unwrap().trim();
            assert!(
                cell == default || cell.contains(&format!("`{default}`")),
                "docs/configuration.md: `{name}` {place} defaults to {cell:?}, \
                 the key table to {default:?}"
            );
        }
    }
}

#[test]
fn every_table_of_keys_is_listed() {
    let tables = every_table();
    let places: Vec<&str> = tables.iter().map(|(place, _)| *place).collect();
    // Tables are only found at the top level, which comes first.
    assert_eq!(tables[0].0, "at the top level");
    for (name, _, table) in &tables[0].1 {
        if *table {
            let listed = [format!("in [{name}]"), format!("in [[{name}]]")];
            assert!(
                listed.iter().any(|p| places.contains(&p.as_str())),
                "the table `{name}` is missing from every_table()"
            );
        }
    }
}

#[test]
fn writing_a_default_changes_nothing() {
    let dir = base();
    let parse = |text: &str| {
        Config::from_toml(text, dir.path()).unwrap_or_else(|e| panic!("{text}\n{e:#?}"))
    };
    for (place, keys) in every_table() {
        let context = context(place);
        let without = parse(&context);
        for (name, default, _) in keys {
            // Defaults in words ("none", "top-level `root`") have no value to write.
            if toml_edit::Document::parse(format!("v = {default}")).is_err() {
                continue;
            }
            let with = parse(&format!("{context}{name} = {default}\n"));
            assert_eq!(
                with, without,
                "`{name} = {default}` {place} is not the default"
            );
        }
    }
}

#[test]
fn metrics_listener() {
    assert_eq!(ok("").metrics.listen, None);
    let c = ok("[metrics]\nlisten = \"127.0.0.1:9145\"");
    assert_eq!(c.metrics.listen, Some("127.0.0.1:9145".parse().unwrap()));
    assert_error(
        "[metrics]\nlisten = \"localhost:9145\"",
        2,
        10,
        "[metrics] `listen` \"localhost:9145\" is not IP:PORT",
    );
    let (_, _, message) =
        one_error("listen = \"127.0.0.1:80\"\n[metrics]\nlisten = \"127.0.0.1:80\"");
    assert!(
        message.contains("also in the top-level `listen`"),
        "{message}"
    );
}

/// A directory with a site, certificates for `a.test` (good, expired) and a key of another.
fn tls_base() -> (tempfile::TempDir, fastpath_testkit::TestPki) {
    use fastpath_testkit::{KeyKind, TestPki};
    let dir = base();
    let pki = TestPki::new(dir.path());
    pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    pki.leaf("other", &["other.test"], KeyKind::Rsa2048);
    pki.leaf_valid(
        "old",
        &["a.test"],
        KeyKind::EcdsaP256,
        (1_000_000, 2_000_000),
    );
    (dir, pki)
}

fn tls_parse(dir: &Path, text: &str) -> Result<Config, Vec<ConfigError>> {
    Config::from_toml(text, dir)
}

#[test]
fn tls_listeners_and_certificates_are_read() {
    let (dir, _pki) = tls_base();
    let text = "listen = [{ address = \"127.0.0.1:8443\", tls = true }, { address = \"127.0.0.1:8080\" }]\n\
        tls_certificate = \"a.pem\"\ntls_key = \"a.key\"\n\
        [tls]\nprotocols = [\"TLSv1.3\"]\nunknown_name = \"refuse\"\n\
        [[host]]\nnames = [\"other.test\"]\ntls_certificate = \"other.pem\"\ntls_key = \"other.key\"\n";
    let c = tls_parse(dir.path(), text).unwrap();
    assert_eq!(c.tls.listen, [0]);
    assert!(c.listens_with_tls(0) && !c.listens_with_tls(1));
    assert_eq!(c.tls.versions, fastpath_tls::TlsVersions::Tls13Only);
    assert_eq!(c.tls.unknown_name, fastpath_tls::UnknownName::Refuse);
    let settings = c.tls_settings().unwrap();
    assert_eq!(settings.certificates.len(), 2);
    assert_eq!(settings.default_certificate, 0);
    assert_eq!(settings.certificates[1].names, ["other.test"]);
    assert_eq!(settings.certificates[0].chain, dir.path().join("a.pem"));
    // A [[host]] does not inherit the top-level certificate: the default covers it.
    let text = "tls_certificate = \"a.pem\"\ntls_key = \"a.key\"\n[[host]]\nnames = [\"b.test\"]\n";
    let c = tls_parse(dir.path(), text).unwrap();
    assert_eq!(c.hosts[0].tls_certificate, None);
    assert!(c.tls_settings().is_none(), "no TLS listener, no TLS");
}

#[test]
fn tls_mistakes_are_reported_where_they_are() {
    let (dir, _pki) = tls_base();
    let one = |text: &str| {
        let errors = tls_parse(dir.path(), text).expect_err("expected an error");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let e = &errors[0];
        (e.line, e.column, e.message.clone())
    };
    let (line, column, message) = one("tls_certificate = \"a.pem\"\n");
    assert_eq!((line, column), (1, 1));
    assert!(message.contains("needs `tls_key`"), "{message}");
    let (line, _, message) = one("\n[[host]]\nnames = [\"x.test\"]\ntls_key = \"a.key\"\n");
    assert_eq!(line, 4);
    assert!(message.contains("needs `tls_certificate`"), "{message}");
    let (line, column, message) = one("tls_certificate = \"a.pem\"\ntls_key = \"other.key\"\n");
    assert_eq!((line, column), (1, 19));
    assert!(
        message.contains("is not the one of the certificate"),
        "{message}"
    );
    let (_, _, message) = one("tls_certificate = \"missing.pem\"\ntls_key = \"a.key\"\n");
    assert!(
        message.contains("missing.pem") && message.contains("No such file"),
        "{message}"
    );
    let (_, _, message) = one("tls_certificate = \"file.txt\"\ntls_key = \"a.key\"\n");
    assert!(message.contains("no PEM certificate"), "{message}");
    let (_, _, message) = one("tls_certificate = \"old.pem\"\ntls_key = \"old.key\"\n");
    assert!(message.contains("has expired"), "{message}");
    let (line, _, message) = one("listen = [{ address = \"127.0.0.1:8443\", tls = true }]\n");
    assert_eq!(line, 1);
    assert!(message.contains("needs a certificate"), "{message}");
    let (_, _, message) = one("[tls]\nprotocols = [\"TLSv1.1\", \"TLSv1.3\"]\n");
    assert!(message.contains("older versions are broken"), "{message}");
    let (_, _, message) = one("[tls]\nunknown_name = \"drop\"\n");
    assert!(message.contains("\"default\" or \"refuse\""), "{message}");
}

#[test]
fn tls_ticket_keys_are_files_made_keys_or_none() {
    let (dir, _pki) = tls_base();
    std::fs::write(dir.path().join("ticket.key"), [1u8; 80]).unwrap();
    std::fs::write(dir.path().join("old.key"), [2u8; 48]).unwrap();
    std::fs::write(dir.path().join("short.key"), [3u8; 32]).unwrap();
    let c = tls_parse(dir.path(), "").unwrap();
    assert_eq!(
        c.tls.ticket_source(),
        fastpath_tls::TicketKeys::Rotating {
            every: Duration::from_secs(12 * 3600)
        }
    );
    let c = tls_parse(dir.path(), "[tls]\nticket_key_rotation = \"1h\"\n").unwrap();
    assert_eq!(
        c.tls.ticket_source(),
        fastpath_tls::TicketKeys::Rotating {
            every: Duration::from_secs(3600)
        }
    );
    let text = "[tls]\nticket_keys = [\"ticket.key\", \"old.key\"]\n";
    let c = tls_parse(dir.path(), text).unwrap();
    assert_eq!(
        c.tls.ticket_source(),
        fastpath_tls::TicketKeys::Files(vec![
            dir.path().join("ticket.key"),
            dir.path().join("old.key")
        ])
    );
    let c = tls_parse(dir.path(), &format!("{text}session_tickets = false\n")).unwrap();
    assert_eq!(c.tls.ticket_source(), fastpath_tls::TicketKeys::Off);

    let errors = tls_parse(
        dir.path(),
        "[tls]\nticket_keys = [\"old.key\", \"short.key\"]\n",
    )
    .unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!((errors[0].line, errors[0].column), (2, 27));
    assert!(
        errors[0].message.contains("48 or 80 random bytes"),
        "{}",
        errors[0].message
    );
    assert!(
        errors[0].message.contains("not 32"),
        "{}",
        errors[0].message
    );
    let errors = tls_parse(dir.path(), "[tls]\nticket_keys = [\"none.key\"]\n").unwrap_err();
    assert!(
        errors[0].message.contains("none.key: No such file"),
        "{}",
        errors[0].message
    );
}

#[test]
fn hsts_is_inherited_overridden_and_checked() {
    let (dir, _pki) = tls_base();
    let text = "hsts = true\n[[host]]\nnames = [\"a.test\"]\n\
        [[host]]\nnames = [\"b.test\"]\nhsts = false\n\
        [[host]]\nnames = [\"c.test\"]\nhsts = \" max-age=300 ; Preload;includesubdomains \"\n";
    let c = tls_parse(dir.path(), text).unwrap();
    assert_eq!(c.default_host.hsts.as_deref(), Some("max-age=63072000"));
    assert_eq!(c.hosts[0].hsts.as_deref(), Some("max-age=63072000"));
    assert_eq!(c.hosts[1].hsts, None);
    assert_eq!(
        c.hosts[2].hsts.as_deref(),
        Some("max-age=300; preload; includeSubDomains")
    );
    for (value, problem) in [
        ("includeSubDomains", "needs max-age"),
        ("max-age=ten", "whole number of seconds"),
        ("max-age=1; max-age=2", "given twice"),
        ("max-age=1; always", "`always` is not"),
        (
            "max-age=1\r\nX-Evil: 1",
            "\\r\\nX-Evil: 1\": `max-age` needs",
        ),
    ] {
        let errors = tls_parse(dir.path(), &format!("hsts = {value:?}\n")).unwrap_err();
        assert_eq!(errors.len(), 1, "{value}: {errors:#?}");
        assert!(
            errors[0].message.contains(problem),
            "{value}: {}",
            errors[0].message
        );
        assert_eq!((errors[0].line, errors[0].column), (1, 8));
    }
    let errors = tls_parse(dir.path(), "hsts = 5\n").unwrap_err();
    assert!(
        errors[0].message.contains("true, false or"),
        "{}",
        errors[0].message
    );
}

#[test]
fn tls_notes_name_uncovered_names() {
    let (dir, _pki) = tls_base();
    let text = "listen = [{ address = \"127.0.0.1:8443\", tls = true }]\n\
        [[host]]\nnames = [\"b.test\"]\ntls_certificate = \"a.pem\"\ntls_key = \"a.key\"\n";
    let c = tls_parse(dir.path(), text).unwrap();
    let notes = c.tls_notes();
    assert_eq!(notes.len(), 4, "{notes:?}");
    assert!(
        notes[0].contains("a.pem covers a.test, valid until "),
        "{notes:?}"
    );
    assert!(notes[1].contains("does not cover b.test"), "{notes:?}");
    assert!(
        notes[2].contains("ticket keys made at start") && notes[2].contains("every 43200 s"),
        "{notes:?}"
    );
    assert!(notes[3].contains("a change reloads"), "{notes:?}");
    // Keys from files, and none, are said as such.
    std::fs::write(dir.path().join("t.key"), [0u8; 80]).unwrap();
    let c = tls_parse(
        dir.path(),
        &format!("{text}[tls]\nticket_keys = [\"t.key\"]\n"),
    )
    .unwrap();
    assert!(
        c.tls_notes()[2].contains("t.key (1 file(s)"),
        "{:?}",
        c.tls_notes()
    );
    let c = tls_parse(
        dir.path(),
        &format!("{text}[tls]\nsession_tickets = false\n"),
    )
    .unwrap();
    assert!(
        c.tls_notes()[2].contains("no session tickets"),
        "{:?}",
        c.tls_notes()
    );
}

#[test]
fn proxy_protocol_listeners_name_their_balancers() {
    let c = ok("[[listen]]\naddress = \"127.0.0.1:8080\"\n\
        [[listen]]\naddress = \"127.0.0.1:8443\"\nproxy_protocol = true\n\
        proxy_from = [\"10.0.0.0/8\", \"::1\"]\n");
    assert_eq!(c.proxy_protocol_from(0), None);
    let from = c.proxy_protocol_from(1).unwrap();
    assert_eq!(from.len(), 2);
    assert!(from[0].contains("10.9.8.7".parse().unwrap()));
    assert_error(
        "[[listen]]\naddress = \"127.0.0.1:8443\"\nproxy_protocol = true\n",
        2,
        11,
        "has `proxy_protocol` but no `proxy_from`",
    );
    assert_error(
        "[[listen]]\naddress = \"127.0.0.1:8443\"\nproxy_from = [\"10.0.0.1\"]\n",
        2,
        11,
        "`proxy_from` needs `proxy_protocol = true`",
    );
    assert_error(
        "[[listen]]\naddress = \"127.0.0.1:8443\"\nproxy_protocol = true\nproxy_from = [\"10.0.0.0/40\"]\n",
        4,
        15,
        "the prefix length must be 0 to 32",
    );
}

#[test]
fn a_plain_listener_may_redirect_to_https() {
    let c = ok(
        "[[listen]]\naddress = \"127.0.0.1:8080\"\nredirect_to_https = 443\n\
        [[listen]]\naddress = \"127.0.0.1:8081\"\n",
    );
    assert_eq!(c.https_redirect_of(0), Some(443));
    assert_eq!(c.https_redirect_of(1), None);
    let (dir, _pki) = tls_base();
    let errors = Config::from_toml(
        "tls_certificate = \"a.pem\"\ntls_key = \"a.key\"\n\
         [[listen]]\naddress = \"127.0.0.1:8443\"\ntls = true\nredirect_to_https = 443\n",
        dir.path(),
    )
    .unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].message.contains("is for a plain listener"),
        "{errors:#?}"
    );
}

#[test]
fn a_module_table_is_configured_by_its_module() {
    let c = ok(concat!(
        "[[module]]\nname = \"access\"\nprefix = \"/admin/\"\nhosts = [\"Example.COM\"]\n",
        "rules = [\"allow 10.0.0.0/8\", \"deny all\"]\n",
        "[[module]]\nname = \"listing\"\nformat = \"json\"\norder = \"last\"\n",
    ));
    assert_eq!(c.modules.len(), 2);
    let access = &c.modules[0];
    assert_eq!(access.name, "access");
    assert_eq!(access.prefix, "/admin/");
    assert_eq!(access.hosts, ["example.com"]);
    // The module's own order, unless the table says.
    assert_eq!(access.order, crate::module::Order::First);
    assert_eq!(c.modules[1].order, crate::module::Order::Last);
    assert_eq!(c.modules[1].prefix, "/");
}

#[test]
fn an_unknown_module_is_named_with_the_nearest() {
    assert_error(
        "[[module]]\nname = \"acess\"\n",
        2,
        8,
        "unknown module \"acess\" (did you mean \"access\"?); the modules: access, basic_auth",
    );
}

#[test]
fn a_module_tells_its_errors_where_they_are() {
    assert_error(
        "[[module]]\nname = \"listing\"\nformt = \"json\"\n",
        3,
        1,
        "unknown key `formt` in [[module]] \"listing\"; its keys: format",
    );
    assert_error(
        "[[module]]\nname = \"access\"\nrules = [\"allow nowhere\"]\n",
        3,
        9,
        "[[module]] \"access\": rule \"allow nowhere\":",
    );
    assert_error(
        "[[module]]\nname = \"rewrite\"\nrules = [{ pattern = \"^/a/(.*)$\", to = \"/b/$2\" }]\n",
        3,
        22,
        "[[module]] \"rewrite\": rule \"^/a/(.*)$\":",
    );
    assert_error(
        "[[module]]\nname = \"rewrite\"\nrules = [{ pattern = \"^/a\", to = \"/b\", redirect = 303 }]\n",
        3,
        51,
        "`redirect` 303 is not one of 301, 302, 307, 308",
    );
    let missing = errors("[[module]]\nname = \"basic_auth\"\nuser_file = \"no-such-file\"\n");
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0].starts_with("3:13: [[module]] \"basic_auth\": ")
            && missing[0].contains("no-such-file"),
        "{missing:?}"
    );
    assert_error(
        "[[module]]\nname = \"access\"\n",
        1,
        1,
        "[[module]] \"access\": `access` needs `rules`",
    );
    assert_error(
        "[[module]]\nname = \"listing\"\norder = \"soon\"\n",
        3,
        9,
        "`order` \"soon\" is not one of",
    );
}

#[test]
fn acme_hosts_get_their_certificates_from_the_acme_table() {
    let c = ok(r#"
listen = [{ address = "127.0.0.1:8080" }, { address = "127.0.0.1:8443", tls = true }]
[acme]
directory = "https://ca.example.test/dir"
contact = ["admin@example.test", "mailto:ops@example.test"]
state_dir = "state"
ca_root = "ca.pem"
challenge = "tls-alpn-01"
[[host]]
names = ["a.example.test", "www.a.example.test"]
tls = "auto"
"#);
    assert!(c.hosts[0].tls_auto);
    assert!(!c.default_host.tls_auto);
    assert_eq!(
        c.acme.directory.as_deref(),
        Some("https://ca.example.test/dir")
    );
    assert_eq!(
        c.acme.contact,
        vec!["mailto:admin@example.test", "mailto:ops@example.test"]
    );
    assert!(c.acme.state_dir.ends_with("state") && c.acme.state_dir.is_absolute());
    assert_eq!(
        c.acme.account_key_path(),
        c.acme.state_dir.join("account.key")
    );
    assert!(c.acme.ca_root.as_ref().unwrap().ends_with("ca.pem"));
    assert_eq!(c.acme.challenge, fastpath_acme::ChallengeKind::TlsAlpn01);
    assert!(c.acme.agree_terms);
    let settings = c.tls_settings().unwrap();
    assert!(settings.certificates.is_empty());
    let dir = c.acme.state_dir.join("a.example.test");
    assert_eq!(
        settings.auto,
        vec![fastpath_tls::CertificateFiles {
            names: vec!["a.example.test".into(), "www.a.example.test".into()],
            chain: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }]
    );
    assert_eq!(
        settings.acme_challenges,
        Some(c.acme.state_dir.join("challenges"))
    );
    // The auto certificates' files are the ACME client's to replace: not watched for a
    // reload.
    assert!(c.tls_files().is_empty());
}

#[test]
fn acme_mistakes_are_errors_at_their_place() {
    let tls = "listen = [{ address = \"127.0.0.1:8443\", tls = true }]\n";
    let acme = "[acme]\ndirectory = \"https://ca.example.test/dir\"\n";
    // No directory.
    assert_error(
        &format!("{tls}[[host]]\nnames = [\"a.test\"]\ntls = \"auto\"\n"),
        4,
        7,
        "needs `[acme] directory`",
    );
    // No TLS listener.
    assert_error(
        &format!("{acme}[[host]]\nnames = [\"a.test\"]\ntls = \"auto\"\n"),
        5,
        7,
        "needs a `[[listen]]` with `tls = true`",
    );
    // A wildcard.
    assert_error(
        &format!("{tls}{acme}[[host]]\nnames = [\"*.a.test\"]\ntls = \"auto\"\n"),
        6,
        7,
        "wildcard",
    );
    let found = errors(&format!(
        "{tls}{acme}[[host]]\nnames = [\"a.test\"]\ntls = \"manual\"\n"
    ));
    assert!(
        found
            .iter()
            .any(|e| e.starts_with("6:7: ") && e.contains("is not \"auto\"")),
        "{found:?}"
    );
    assert_error(
        "[acme]\ndirectory = \"http://ca.example.test/dir\"\n",
        2,
        13,
        "must be an https:// URL",
    );
    assert_error(
        "[acme]\nchallenge = \"dns-01\"\n",
        2,
        13,
        "is not \"http-01\" or \"tls-alpn-01\"",
    );
    assert_error("[acme]\ncontact = \"a b\"\n", 2, 11, "is not an address");
}
