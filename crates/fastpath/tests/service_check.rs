//! `fastpath check --service echo|forward FILE`: a service's configuration read as the service
//! reads it, the same errors at the same places, and what it gets here (the model, the kernel
//! path's outcome) in the words of the service's start-up log line.

use std::path::Path;
use std::process::{Command, Output};

use crate::check::run;
use crate::kernel_path::bpf_allowed;
use crate::util::*;

fn check(service: &str, path: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["check", "--service", service]).arg(path);
    run(cmd)
}

/// `fastpath check FILE`: the file read as a server's configuration.
fn check_server(path: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("check").arg(path);
    run(cmd)
}

/// Starts `service` on the configuration at `path` (as root if run so) and returns how it
/// ended: the tests here only start what the service refuses.
fn start_refused(service: &str, path: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args([
        service,
        "--run-as-root",
        "--listen",
        "127.0.0.1:0",
        "--config",
    ])
    .arg(path);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    out
}

fn show(out: &Output) -> String {
    format!(
        "status: {}\n---- stdout ----\n{}\n---- stderr ----\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the check passed and printed `FILE: note: {note}`.
fn assert_note(out: &Output, path: &Path, note: &str) {
    assert!(out.status.success(), "{}", show(out));
    let line = format!("{}: note: {note}", path.display());
    assert!(stdout(out).contains(&line), "no `{line}`\n{}", show(out));
    let ok = format!("{}: configuration ok", path.display());
    assert!(stdout(out).contains(&ok), "{}", show(out));
}

/// Asserts the check failed with exit status 1 and the one error line `line`.
fn assert_error(out: &Output, line: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", show(out));
    assert!(
        stderr(out).lines().any(|l| l == line),
        "no `{line}`\n{}",
        show(out)
    );
    assert!(!stdout(out).contains("configuration ok"), "{}", show(out));
}

#[test]
fn service_check_echo_kernel_path_off() {
    let site = Site::new();
    let path =
        site.config("model = \"epoll\"\nworkers = 3\nkernel_path = \"off\"\nrun_as_root = true\n");
    let out = check("echo", &path);
    assert_note(&out, &path, "model: epoll (3 workers)");
    assert_note(&out, &path, "kernel path: off (kernel_path = \"off\")");
}

#[test]
fn service_check_echo_kernel_path_on() {
    if !bpf_allowed("service_check_echo_kernel_path_on") {
        return;
    }
    let site = Site::new();
    let path = site.config("kernel_path = \"on\"\nkernel_sockets = 128\nrun_as_root = true\n");
    let out = check("echo", &path);
    assert_note(
        &out,
        &path,
        "kernel path: on for every connection (echo: sk_skb stream verdict redirecting each \
         socket to itself, sockhash of 128 sockets; kernel_path = \"on\")",
    );
}

#[test]
fn service_check_echo_auto_with_plain() {
    let site = Site::new();
    let path = site.config("kernel_path = \"auto\"\nplain = true\nrun_as_root = true\n");
    let out = check("echo", &path);
    assert_note(
        &out,
        &path,
        "kernel path: off (kernel_path = \"auto\": plain echo announces no buffer size, so \
         nothing tells where it would win)",
    );
}

#[test]
fn service_check_says_what_the_echo_logs_at_start() {
    // auto without plain: on or off as a probe of both paths finds if BPF can be had, off
    // with the reason if not; either way the check and the start say the same (the probe's
    // figures aside: each run measures anew).
    let site = Site::new();
    let text = "model = \"epoll\"\nworkers = 3\nkernel_path = \"auto\"\nrun_as_root = true\n";
    let path = site.config(text);
    let out = check("echo", &path);
    assert_note(&out, &path, "model: epoll (3 workers)");
    let prefix = format!("{}: note: kernel path: ", path.display());
    let note = stdout(&out)
        .lines()
        .find_map(|l| {
            l.strip_prefix(&prefix)
                .map(|rest| format!("kernel path: {rest}"))
        })
        .unwrap_or_else(|| panic!("no kernel path note\n{}", show(&out)));
    let note = match note.find(" 512 B ") {
        Some(figures) => note[..figures].to_string(),
        None => note,
    };
    let srv = site
        .server("epoll")
        .service("echo")
        .arg("--config")
        .arg(path.to_str().unwrap())
        .start();
    assert!(
        srv.wait_stderr(IO_TIMEOUT, &note),
        "the start did not log `{note}`:\n{}",
        srv.stderr()
    );
    assert!(
        srv.wait_stderr(IO_TIMEOUT, "(epoll model, 3 workers)"),
        "{}",
        srv.stderr()
    );
}

#[test]
fn service_check_kernel_path_on_without_privileges_fails() {
    // capsh drops the capabilities from the bounding set: `on` fails as the start would,
    // saying why; `auto` passes, off with the reason.
    let test = "service_check_kernel_path_on_without_privileges_fails";
    if !bpf_allowed(test) {
        return;
    }
    let capsh = "/usr/sbin/capsh";
    if !Path::new(capsh).exists() {
        skip(
            test,
            Missing::Environment,
            "capsh (libcap2-bin) is not installed",
        );
        return;
    }
    let site = Site::new();
    let without_caps = |path: &Path| {
        let mut cmd = Command::new(capsh);
        cmd.args([
            "--drop=cap_bpf,cap_sys_admin,cap_net_admin,cap_perfmon",
            "--",
            "-c",
        ])
        .arg(format!(
            "exec {BIN} check --service echo {}",
            path.display()
        ));
        run(cmd)
    };
    let on = site.write("on.toml", "kernel_path = \"on\"\nrun_as_root = true\n");
    let out = without_caps(&on);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let line = format!(
        "{}: kernel path: cannot be had: no CAP_BPF/CAP_NET_ADMIN",
        on.display()
    );
    assert!(stderr(&out).starts_with(&line), "{}", show(&out));
    let auto = site.write("auto.toml", "kernel_path = \"auto\"\nrun_as_root = true\n");
    let out = without_caps(&auto);
    assert_note(
        &out,
        &auto,
        "kernel path: off: no CAP_BPF/CAP_NET_ADMIN to load BPF programs",
    );
}

#[test]
fn service_check_forward_kernel_path_on_is_refused_saying_why() {
    // The forwarder's kernel path is withdrawn (docs/framework.md): `on` fails in the check and
    // at the start with the same reason, whatever the model or the privileges.
    let site = Site::new();
    let path = site.config(
        "to = [\"127.0.0.1:9201\"]\nmodel = \"epoll\"\nkernel_path = \"on\"\nrun_as_root = true\n",
    );
    let why = "kernel path: cannot be had: the forwarder's kernel path is withdrawn: its BPF \
               stream parser drove this kernel generation (6.14 and later) into a BUG under \
               load";
    let out = check("forward", &path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stderr(&out).starts_with(&format!("{}: {why}", path.display())),
        "{}",
        show(&out)
    );
    let started = start_refused("forward", &path);
    assert!(stderr(&started).contains(why), "{}", show(&started));
}

#[test]
fn service_check_forward_settings_the_service_refuses() {
    let site = Site::new();
    let path = site.config("kernel_path = \"off\"\nrun_as_root = true\n");
    assert_error(
        &check("forward", &path),
        &format!(
            "{}: forward: no destinations: give --to ADDR:PORT,ADDR:PORT,... (in key order)",
            path.display()
        ),
    );
    // auto: user space, and the check says why.
    let path = site.config("to = \"127.0.0.1:9201\"\nmodel = \"percore\"\nrun_as_root = true\n");
    let out = check("forward", &path);
    assert_note(&out, &path, "model: percore (");
    assert_note(
        &out,
        &path,
        "kernel path: off (the forwarder's kernel path is withdrawn",
    );
    // The echo's kernel key means nothing to the forwarder.
    let path = site.config("to = \"127.0.0.1:9201\"\nkernel_sockets = 10\nrun_as_root = true\n");
    let out = check("forward", &path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(stderr(&out).contains("kernel_sockets"), "{}", show(&out));
}

#[test]
fn service_check_bad_key_and_bad_values_at_their_place() {
    let site = Site::new();
    let path = site.config("listen = \"127.0.0.1:9000\"\nbogus = 1\n");
    let unknown = format!(
        "{}:2:1: unknown key `bogus` (expected one of listen, model, workers, max_connections, \
         idle_timeout, run_as_root, tls_certificate, tls_key, plain, kernel_path, kernel_sockets)",
        path.display()
    );
    assert_error(&check("echo", &path), &unknown);
    // The start reads the file with the same parser: the same line.
    let started = start_refused("echo", &path);
    assert!(stderr(&started).contains(&unknown), "{}", show(&started));

    let cases: &[(&str, &str, &str)] = &[
        (
            "echo",
            "run_as_root = true\nworkers = \"two\"\n",
            "2:11: `workers` must be a whole number",
        ),
        (
            "echo",
            "kernel_path = \"sometimes\"\n",
            "1:15: unknown kernel path `sometimes` (expected auto, on or off)",
        ),
        (
            "echo",
            "kernel_sockets = 0\n",
            "1:18: `kernel_sockets` must be a whole number from 1",
        ),
        (
            "echo",
            "model = \"fast\"\n",
            "1:9: unknown model `fast` (expected auto or one of epoll, uring, percore, threads, \
             prefork)",
        ),
        (
            "forward",
            "to = [\"127.0.0.1:9201\", \"nowhere\"]\n",
            "1:25: `to`: `nowhere` is not an ADDR:PORT",
        ),
        (
            "forward",
            "to = \"127.0.0.1:9201\"\ntransport = \"carrier pigeon\"\n",
            "2:13: unknown transport `carrier pigeon` (expected framed or unframed)",
        ),
        (
            "forward",
            "to = \"127.0.0.1:9201\"\nmax_message = \"huge\"\n",
            "2:15: `huge` is not a size (e.g. 64k, 16MiB)",
        ),
        (
            "echo",
            "model = \n",
            "1:9: not TOML: string values must be quoted, expected literal string",
        ),
    ];
    for (service, text, error) in cases {
        let path = site.config(text);
        assert_error(
            &check(service, &path),
            &format!("{}:{error}", path.display()),
        );
    }
}

#[test]
fn service_check_unknown_service_is_a_usage_error() {
    let site = Site::new();
    let path = site.config("kernel_path = \"off\"\n");
    let out = check("bogus", &path);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        stderr(&out).contains("invalid value 'bogus' for '--service <SERVICE>'"),
        "{}",
        show(&out)
    );
    assert!(
        stderr(&out).contains("[possible values: echo, forward]"),
        "{}",
        show(&out)
    );
}

#[test]
fn service_check_without_service_checks_a_server_configuration() {
    let site = Site::new();
    // A service's key is not a server's.
    let path = site.config("kernel_sockets = 64\n");
    let out = check_server(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{}:1:1: unknown key `kernel_sockets`",
            path.display()
        )),
        "{}",
        show(&out)
    );
    // And the file names a server's.
    let path = site.config("model = \"epoll\"\n");
    let out = check_server(&path);
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn service_check_notes_a_start_as_root_without_run_as_root() {
    let site = Site::new();
    let path = site.config("kernel_path = \"off\"\n");
    let out = check("echo", &path);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let note = "the service refuses to run without `run_as_root = true`";
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(stdout(&out).contains(note), root, "{}", show(&out));
}

/// A service's `model = "auto"` is the loop a start-up probe measured cheapest per message
/// here, and the check says which with the figures (epoll alone where io_uring cannot run).
#[test]
fn service_check_says_what_auto_measured() {
    let site = Site::new();
    let path = site
        .config("workers = 2\nkernel_path = \"off\"\nrun_as_root = true\nto = [\"127.0.0.1:9\"]\n");
    let out = check("forward", &path);
    assert!(out.status.success(), "{}", show(&out));
    let said = stdout(&out);
    let note = said
        .lines()
        .find(|l| l.contains("note: model: "))
        .unwrap_or_else(|| panic!("{}", show(&out)));
    if note.contains("io_uring cannot run here") {
        assert!(note.contains("model: epoll (2 workers;"), "{note}");
        return;
    }
    assert!(
        note.contains("model: epoll (2 workers; model = \"auto\": the least CPU per message")
            || note
                .contains("model: uring (2 workers; model = \"auto\": the least CPU per message"),
        "{note}"
    );
    assert!(
        note.contains("for 64 B echoed and 1024 B echoed: epoll ") && note.contains("; uring "),
        "{note}"
    );
}
