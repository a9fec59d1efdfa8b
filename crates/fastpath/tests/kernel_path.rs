//! `fastpath echo --kernel-path`: the in-kernel echo (a BPF sockmap program, crates/kernel)
//! passes the user-space echo's tests on every model, `off` keeps user space, and the
//! sockmap hazards: half-close, reset, sockets closing while in the map, many sockets, a
//! full map, a client that never reads, the idle timeout. Programs and maps are checked with
//! bpftool to be gone once fastpath has exited, by SIGTERM or SIGKILL.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::framework::{
    connect, echo, echo_plain_returns_bytes, echo_refuses_a_bad_size, echo_returns_every_buffer,
    pattern, push_until_stalled,
};
use crate::util::*;

const ON: &[&str] = &["--kernel-path", "on"];

/// Whether this process may load BPF sockmap programs (CAP_BPF or CAP_SYS_ADMIN, and
/// CAP_NET_ADMIN); skips `test` visibly if not. CI runs as root, which may.
pub(crate) fn bpf_allowed(test: &str) -> bool {
    if bpf_capable() {
        return true;
    }
    skip(
        test,
        Missing::Environment,
        "no CAP_BPF/CAP_NET_ADMIN to load BPF programs",
    );
    false
}

/// Whether this process (and the servers it starts) may load BPF sockmap programs.
pub(crate) fn bpf_capable() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |bit: u32| caps & (1 << bit) != 0;
    // CAP_NET_ADMIN 12, CAP_SYS_ADMIN 21, CAP_BPF 39.
    has(12) && (has(39) || has(21))
}

/// The bpftool binary, or a visible skip.
pub(crate) fn bpftool(test: &str) -> Option<&'static str> {
    for path in ["/usr/sbin/bpftool", "/usr/bin/bpftool", "/sbin/bpftool"] {
        if std::path::Path::new(path).exists() {
            return Some(path);
        }
    }
    skip(test, Missing::Installable, "bpftool is not installed");
    None
}

/// The BPF maps and programs the process `pid` holds open: ("map" | "prog", id).
pub(crate) fn bpf_objects(pid: u32) -> Vec<(&'static str, u32)> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return found;
    };
    for entry in dir.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            if let Some(id) = line.strip_prefix("map_id:") {
                found.push(("map", id.trim().parse().unwrap()));
            }
            if let Some(id) = line.strip_prefix("prog_id:") {
                found.push(("prog", id.trim().parse().unwrap()));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Whether bpftool still finds the object.
pub(crate) fn bpf_object_exists(bpftool: &str, (kind, id): (&str, u32)) -> bool {
    Command::new(bpftool)
        .args([kind, "show", "id", &id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// The id of the server's sockhash (the echo's map of sockets).
pub(crate) fn sockhash_id(pid: u32) -> u32 {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap();
    for entry in dir.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        // BPF_MAP_TYPE_SOCKHASH is 18.
        if text.lines().any(|l| l == "map_type:\t18") {
            let id = text
                .lines()
                .find_map(|l| l.strip_prefix("map_id:"))
                .unwrap();
            return id.trim().parse().unwrap();
        }
    }
    panic!("the server holds no sockhash");
}

/// How many sockets the map `id` holds (bpftool reads each back as its cookie).
pub(crate) fn sockets_in_map(bpftool: &str, id: u32) -> usize {
    let out = Command::new(bpftool)
        .args(["map", "dump", "id", &id.to_string(), "-j"])
        .output()
        .unwrap();
    assert!(out.status.success(), "bpftool map dump failed: {out:?}");
    let entries: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    entries.as_array().map_or(0, |a| a.len())
}

/// Waits until the map holds `n` sockets, or fails saying how many it holds.
fn expect_sockets(bpftool: &str, id: u32, n: usize) {
    let held = wait_for(Duration::from_secs(5), || {
        (sockets_in_map(bpftool, id) == n).then_some(())
    });
    assert!(
        held.is_some(),
        "the kernel path holds {} sockets, expected {n}",
        sockets_in_map(bpftool, id)
    );
}

/// A client that has sent its header and had one buffer of `size` echoed: by then the
/// server has handed it to the kernel.
fn started_client(addr: std::net::SocketAddr, size: usize, seed: usize) -> TcpStream {
    let mut client = connect(addr);
    client.write_all(&(size as u32).to_be_bytes()).unwrap();
    round_trip(&mut client, size, seed);
    client
}

fn round_trip(client: &mut TcpStream, size: usize, seed: usize) {
    let sent = pattern(seed, size);
    client.write_all(&sent).unwrap();
    let mut got = vec![0; size];
    client.read_exact(&mut got).unwrap();
    assert!(
        got == sent,
        "buffer {seed} of {size} bytes came back altered"
    );
}

// The user-space echo's tests, with the kernel path on.

httptest!(
    kernel_echo_returns_every_buffer_after_the_size_header,
    |model| {
        if bpf_allowed("kernel_echo_returns_every_buffer_after_the_size_header") {
            echo_returns_every_buffer(model, ON);
        }
    }
);

httptest!(kernel_echo_plain_returns_bytes_from_the_first, |model| {
    if bpf_allowed("kernel_echo_plain_returns_bytes_from_the_first") {
        echo_plain_returns_bytes(model, ON);
    }
});

httptest!(kernel_echo_refuses_an_impossible_buffer_size, |model| {
    if bpf_allowed("kernel_echo_refuses_an_impossible_buffer_size") {
        echo_refuses_a_bad_size(model, ON);
    }
});

httptest!(
    kernel_echo_to_a_client_that_never_reads_stays_bounded,
    |model| {
        // The kernel cannot stop reading a socket in its map (the receive window stays open),
        // so instead of stalling the client as user space does, it holds at most the output
        // limit for it, drops what comes after, and the server resets the client, saying why.
        // What the client pushes until the reset is not held anywhere.
        let test = "kernel_echo_to_a_client_that_never_reads_stays_bounded";
        if !bpf_allowed(test) {
            return;
        }
        let (_site, srv) = echo(model, &["--plain", "--kernel-path", "on"]);
        let client = connect(srv.addr());
        let pushed = push_until_stalled(
            &client,
            &[7u8; 64 * 1024],
            Duration::from_secs(5),
            Duration::from_secs(1),
        );
        let (ended, stalled, pushed) = (pushed.error, pushed.stalled, pushed.bytes);
        match ended {
            Some(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
                    "{e}"
                );
                assert!(
                    srv.wait_stderr(IO_TIMEOUT, "does not read its echo"),
                    "no log line saying why the client was reset"
                );
            }
            // The client's first bytes were there before the socket could be handed over
            // (TCP_DEFER_ACCEPT), and it never let a quiet moment come: user space echoes
            // it, and stalls it as it does without the kernel path.
            None => {
                assert!(
                    stalled,
                    "the server kept taking bytes from a client that reads none:\n{}",
                    srv.stderr()
                );
                assert!(pushed < 48 << 20, "{pushed} bytes taken before the stall");
            }
        }
    }
);

httptest!(
    kernel_echo_keeps_the_order_of_bytes_sent_across_the_hand_over,
    |model| {
        // The client streams its buffer in small pieces from the first byte on, so pieces
        // arrive while the server echoes the first ones, waits for them to leave and hands
        // the socket to the kernel: pieces user space took before the hand-over must come
        // back before those the kernel echoes itself.
        if !bpf_allowed("kernel_echo_keeps_the_order_of_bytes_sent_across_the_hand_over") {
            return;
        }
        let (_site, srv) = echo(model, ON);
        const SIZE: usize = 256 * 1024;
        const PIECE: usize = 1400;
        for seed in 0..12 {
            let mut client = connect(srv.addr());
            client.set_nodelay(true).unwrap();
            let sent = pattern(seed, SIZE);
            let mut writer = client.try_clone().unwrap();
            let to_send = sent.clone();
            let feeding = thread::spawn(move || {
                writer.write_all(&(SIZE as u32).to_be_bytes()).unwrap();
                for (i, piece) in to_send.chunks(PIECE).enumerate() {
                    writer.write_all(piece).unwrap();
                    if i % 8 == 0 {
                        thread::sleep(Duration::from_micros(200));
                    }
                }
            });
            let mut got = vec![0; SIZE];
            client.read_exact(&mut got).unwrap();
            feeding.join().unwrap();
            if let Some(at) = got.iter().zip(&sent).position(|(a, b)| a != b) {
                panic!("connection {seed}: the echo differs from byte {at} of {SIZE}");
            }
        }
    }
);

// On, off and the reasons.

httptest!(kernel_path_on_is_logged_and_holds_the_clients, |model| {
    let test = "kernel_path_on_is_logged_and_holds_the_clients";
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    let (_site, srv) = echo(model, ON);
    assert!(
        srv.wait_stderr(IO_TIMEOUT, "kernel path: on"),
        "{}",
        srv.stderr()
    );
    let map = sockhash_id(srv.pid());
    expect_sockets(bpftool, map, 0);
    // threads and prefork serve a client at a time per worker: two clients fit any model.
    let mut clients: Vec<TcpStream> = (0..2).map(|i| started_client(srv.addr(), 64, i)).collect();
    expect_sockets(bpftool, map, 2);
    for (i, client) in clients.iter_mut().enumerate() {
        round_trip(client, 64, 10 + i);
    }
    // A socket closing while in the map leaves it.
    drop(clients);
    expect_sockets(bpftool, map, 0);
});

httptest!(kernel_path_off_stays_in_user_space, |model| {
    let (_site, srv) = echo(model, &["--kernel-path", "off"]);
    assert!(
        srv.wait_stderr(IO_TIMEOUT, "kernel path: off (kernel_path = \"off\")"),
        "{}",
        srv.stderr()
    );
    let mut client = started_client(srv.addr(), 32, 1);
    round_trip(&mut client, 32, 2);
    assert_eq!(
        bpf_objects(srv.pid()),
        vec![],
        "BPF objects loaded with the path off"
    );
});

httptest!(
    kernel_path_auto_takes_what_the_probe_found_it_wins,
    |model| {
        // auto: a probe at start echoes messages of each size through both paths, and the kernel
        // gets only the buffer sizes from which it moved at least as many messages as user
        // space; the log gives the figures behind the choice.
        let test = "kernel_path_auto_takes_what_the_probe_found_it_wins";
        let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
            return;
        };
        let (_site, srv) = echo(model, &["--kernel-path", "auto"]);
        assert!(
            srv.wait_stderr(IO_TIMEOUT, "measured at start"),
            "{}",
            srv.stderr()
        );
        let stderr = srv.stderr();
        let line = stderr
            .lines()
            .find(|l| l.contains("measured at start"))
            .unwrap();
        // "512 B 0.69×, 4096 B 0.88×, 65536 B 0.83×": the kernel's messages per second over user
        // space's, for every size probed; 1.1 × is needed (printed to two places).
        let figures: Vec<(u32, f64)> = [512u32, 4096, 65536]
            .iter()
            .map(|&size| {
                let at = line
                    .find(&format!(" {size} B "))
                    .unwrap_or_else(|| panic!("no figure for {size} B: {line}"));
                let rest = &line[at + format!(" {size} B ").len()..];
                let ratio = rest.split('×').next().unwrap().parse().unwrap();
                (size, ratio)
            })
            .collect();
        let chosen: Option<u32> = line
            .split("on for buffers of ")
            .nth(1)
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap());
        match chosen {
            Some(from) => {
                for &(size, ratio) in &figures {
                    if size >= from {
                        assert!(ratio >= 1.095, "the kernel did not win at {size} B: {line}");
                    }
                }
                let map = sockhash_id(srv.pid());
                let mut small = started_client(srv.addr(), from as usize / 2, 0);
                round_trip(&mut small, from as usize / 2, 1);
                expect_sockets(bpftool, map, 0);
                let mut large = started_client(srv.addr(), from as usize, 2);
                round_trip(&mut large, from as usize, 3);
                expect_sockets(bpftool, map, 1);
            }
            None => {
                assert!(
                    line.contains("kernel path: off (kernel_path = \"auto\": measured at start"),
                    "{line}"
                );
                let (_, largest) = figures[figures.len() - 1];
                assert!(
                    largest < 1.105,
                    "the kernel won at the largest size: {line}"
                );
                // Nothing of the kernel path stays loaded where it is not used.
                let objects = wait_for(IO_TIMEOUT, || {
                    bpf_objects(srv.pid()).is_empty().then_some(())
                });
                assert!(objects.is_some(), "{:?}", bpf_objects(srv.pid()));
                let mut client = started_client(srv.addr(), 4096, 0);
                round_trip(&mut client, 4096, 1);
            }
        }
    }
);

httptest!(kernel_path_auto_leaves_plain_echo_in_user_space, |model| {
    let (_site, srv) = echo(model, &["--plain"]);
    assert!(
        srv.wait_stderr(
            IO_TIMEOUT,
            "kernel path: off (kernel_path = \"auto\": plain echo"
        ),
        "{}",
        srv.stderr()
    );
    assert_eq!(
        bpf_objects(srv.pid()),
        vec![],
        "BPF objects loaded for plain echo"
    );
});

#[test]
fn kernel_path_from_the_configuration_file() {
    let site = Site::new();
    let srv = site
        .server("epoll")
        .service("echo")
        .arg("--config")
        .arg(site.config("kernel_path = \"off\"\n").to_str().unwrap())
        .start();
    assert!(
        srv.wait_stderr(IO_TIMEOUT, "kernel path: off"),
        "{}",
        srv.stderr()
    );
    let out = Command::new(BIN)
        .args(["echo", "--run-as-root", "--listen", "127.0.0.1:0"])
        .args(["--kernel-path", "sometimes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown kernel path `sometimes` (expected auto, on or off)"),
        "{err}"
    );
    let bad = site.config("kernel_path = 1\n");
    let out = Command::new(BIN)
        .args([
            "echo",
            "--run-as-root",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`kernel_path` must be a string"), "{err}");
}

#[test]
fn kernel_path_without_privileges() {
    // capsh drops the capabilities from the bounding set, so the root it runs has none of
    // them: `on` refuses to start, saying why, and `auto` goes on in user space.
    let test = "kernel_path_without_privileges";
    if !bpf_allowed(test) {
        return;
    }
    let capsh = "/usr/sbin/capsh";
    if !std::path::Path::new(capsh).exists() {
        skip(
            test,
            Missing::Environment,
            "capsh (libcap2-bin) is not installed",
        );
        return;
    }
    let run = |mode: &str| {
        let port = free_port();
        let script =
            format!("exec {BIN} echo --run-as-root --listen 127.0.0.1:{port} --kernel-path {mode}");
        let mut child = Command::new(capsh)
            .args([
                "--drop=cap_bpf,cap_sys_admin,cap_net_admin,cap_perfmon",
                "--",
                "-c",
            ])
            .arg(script)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let exited = wait_for(Duration::from_secs(2), || child.try_wait().unwrap());
        if exited.is_none() {
            // Still serving (auto): ask it to stop.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let out = child.wait_with_output().unwrap();
        (exited, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (exited, err) = run("on");
    assert!(exited.is_some_and(|s| !s.success()), "{err}");
    assert!(err.contains("no CAP_BPF/CAP_NET_ADMIN"), "{err}");
    let (exited, err) = run("auto");
    assert!(exited.is_none(), "auto did not serve: {err}");
    assert!(
        err.contains("kernel path: off: no CAP_BPF/CAP_NET_ADMIN"),
        "{err}"
    );
}

// Nothing is left behind.

fn nothing_left_after(model: Model, signal: libc::c_int, test: &str) {
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    let (_site, srv) = echo(model, ON);
    let _client = started_client(srv.addr(), 32, 3);
    expect_released_after(srv, signal, bpftool);
}

/// Stops `srv` with `signal` (SIGKILL: its whole process group, since prefork's workers hold
/// the same descriptors) and checks that the BPF programs and maps it had loaded are gone.
pub(crate) fn expect_released_after(mut srv: Server, signal: libc::c_int, bpftool: &str) {
    let objects = bpf_objects(srv.pid());
    assert!(
        objects.iter().any(|o| o.0 == "prog") && objects.iter().any(|o| o.0 == "map"),
        "no program or map found: {objects:?}"
    );
    if signal == libc::SIGKILL {
        // SAFETY: kill(2) on the server's own process group.
        unsafe { libc::kill(-(srv.pid() as i32), libc::SIGKILL) };
    }
    srv.stop(signal, Duration::from_secs(10));
    // The kernel frees them shortly after the last descriptor goes.
    let gone = wait_for(Duration::from_secs(5), || {
        objects
            .iter()
            .all(|&o| !bpf_object_exists(bpftool, o))
            .then_some(())
    });
    let left: Vec<_> = objects
        .iter()
        .filter(|&&o| bpf_object_exists(bpftool, o))
        .collect();
    assert!(gone.is_some(), "left behind after exit: {left:?}");
}

httptest!(kernel_path_leaves_nothing_after_sigterm, |model| {
    nothing_left_after(
        model,
        libc::SIGTERM,
        "kernel_path_leaves_nothing_after_sigterm",
    );
});

httptest!(kernel_path_leaves_nothing_after_sigkill, |model| {
    nothing_left_after(
        model,
        libc::SIGKILL,
        "kernel_path_leaves_nothing_after_sigkill",
    );
});

// The hazards.

httptest!(
    kernel_echo_sends_everything_back_before_a_half_close,
    |model| {
        // The client sends a buffer of 2 MB and its FIN at once: closing drops what the
        // kernel still holds, so the server waits until every byte has gone back before its
        // own FIN.
        if !bpf_allowed("kernel_echo_sends_everything_back_before_a_half_close") {
            return;
        }
        let (_site, srv) = echo(model, ON);
        let mut client = started_client(srv.addr(), 2 << 20, 0);
        let data = pattern(5, 2 << 20);
        let writer = {
            let mut client = client.try_clone().unwrap();
            let data = data.clone();
            thread::spawn(move || {
                client.write_all(&data).unwrap();
                client.shutdown(Shutdown::Write).unwrap();
            })
        };
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got.len(), data.len(), "bytes lost at the half-close");
        assert!(got == data, "bytes altered");
    }
);

httptest!(kernel_echo_survives_a_reset_client, |model| {
    let test = "kernel_echo_survives_a_reset_client";
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    let (_site, srv) = echo(model, ON);
    let map = sockhash_id(srv.pid());
    let client = started_client(srv.addr(), 256, 0);
    (&client).write_all(&pattern(1, 100_000)).unwrap();
    // SO_LINGER 0: close sends a RST.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: SO_LINGER reads one struct linger.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&client),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    drop(client);
    expect_sockets(bpftool, map, 0);
    let mut next = started_client(srv.addr(), 256, 2);
    round_trip(&mut next, 256, 3);
});

#[test]
fn kernel_echo_holds_thousands_of_sockets() {
    let test = "kernel_echo_holds_thousands_of_sockets";
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    const CLIENTS: usize = 3000;
    raise_nofile(CLIENTS as u64 + 200);
    let site = Site::new();
    let srv = site
        .server("epoll")
        .service("echo")
        .nofile(CLIENTS as u64 + 200)
        .arg("--kernel-path")
        .arg("on")
        .start();
    let map = sockhash_id(srv.pid());
    let mut clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|i| started_client(srv.addr(), 32, i))
        .collect();
    expect_sockets(bpftool, map, CLIENTS);
    for (i, client) in clients.iter_mut().enumerate().step_by(97) {
        round_trip(client, 32, i + 1);
    }
    drop(clients);
    expect_sockets(bpftool, map, 0);
}

httptest!(kernel_echo_past_a_full_map_stays_in_user_space, |model| {
    let test = "kernel_echo_past_a_full_map_stays_in_user_space";
    let (true, Some(bpftool)) = (bpf_allowed(test), bpftool(test)) else {
        return;
    };
    let (_site, srv) = echo(
        model,
        &[
            "--kernel-path",
            "on",
            "--kernel-sockets",
            "1",
            "--workers",
            "2",
        ],
    );
    let map = sockhash_id(srv.pid());
    let mut clients: Vec<TcpStream> = (0..2).map(|i| started_client(srv.addr(), 128, i)).collect();
    expect_sockets(bpftool, map, 1);
    for (i, client) in clients.iter_mut().enumerate() {
        for round in 0..20 {
            round_trip(client, 128, 100 * i + round);
        }
    }
});

httptest!(kernel_echo_idle_timeout_counts_kernel_traffic, |model| {
    // User space sees no byte of a connection in the kernel: the idle timeout still closes
    // a silent client, and only a silent one.
    if !bpf_allowed("kernel_echo_idle_timeout_counts_kernel_traffic") {
        return;
    }
    let (_site, srv) = echo(
        model,
        &[
            "--kernel-path",
            "on",
            "--idle-timeout",
            "1s",
            "--workers",
            "2",
        ],
    );
    let mut busy = started_client(srv.addr(), 16, 0);
    let mut silent = started_client(srv.addr(), 16, 1);
    let start = Instant::now();
    let mut round = 2;
    while start.elapsed() < Duration::from_millis(2500) {
        round_trip(&mut busy, 16, round);
        round += 1;
        thread::sleep(Duration::from_millis(200));
    }
    silent
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut buf = [0; 1];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the silent client is still open after 2.5 s: {other:?}"),
    }
    round_trip(&mut busy, 16, round);
});

/// Raises this process's RLIMIT_NOFILE to at least `n` (for many clients).
pub(crate) fn raise_nofile(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit write and read one rlimit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur < n as libc::rlim_t {
            lim.rlim_cur = n as libc::rlim_t;
            lim.rlim_max = lim.rlim_max.max(lim.rlim_cur);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
