//! Running as root: the serving processes switch to `user` and `group` once the listeners are
//! bound and the roots and logs opened; without `user`, root is refused unless `run_as_root`.
//! These tests need root (CI runs them as root) and say so when they do not have it.

use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::check::run;
use crate::util::*;

/// Whether the tests run as root; if not, says that `test` is skipped.
fn as_root(test: &str) -> bool {
    // SAFETY: cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip(
        test,
        Missing::Environment,
        "needs root: it checks the switch from root to another user",
    );
    false
}

/// The uid and primary gid of `name`.
fn ids_of(name: &str) -> (u32, u32) {
    let cname = CString::new(name).unwrap();
    // SAFETY: the tests do not look users up concurrently with anything that would mind;
    // the entry is copied out at once.
    let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
    assert!(!pw.is_null(), "no user {name} on this machine");
    // SAFETY: not null, so it points to a valid entry.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// A site whose files the user `nobody` can read (temporary directories are private to
/// their owner), with a log directory only root can enter.
fn public_site() -> Site {
    let site = Site::new();
    site.file("a.txt", "hello");
    fs::set_permissions(site.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let logs = site.base().join("logs");
    fs::create_dir(&logs).unwrap();
    fs::set_permissions(&logs, fs::Permissions::from_mode(0o700)).unwrap();
    site
}

/// One line of /proc/PID[/task/TID]/status, such as `Uid:`, without its name.
fn status_line(status_path: &std::path::Path, name: &str) -> String {
    let text = fs::read_to_string(status_path)
        .unwrap_or_else(|e| panic!("{}: {e}", status_path.display()));
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in {}", status_path.display()))
        .trim()
        .to_owned()
}

/// The status files of every thread of `pid`.
fn thread_statuses(pid: u32) -> Vec<std::path::PathBuf> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks.map(|t| t.unwrap().path().join("status")).collect()
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The fields after the command name, which is in parentheses and may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            children.push(child);
        }
    }
    children
}

/// Asserts that every thread of `pid` runs as `uid`/`gid` (real, effective, saved and file
/// system ids), and, for a user other than root, outside root's group.
fn assert_runs_as(pid: u32, uid: u32, gid: u32) {
    if let Err(e) = runs_as(pid, uid, gid) {
        panic!("{e}");
    }
}

/// Whether every thread of `pid` runs as `uid`/`gid` (see [`assert_runs_as`]); why not.
fn runs_as(pid: u32, uid: u32, gid: u32) -> Result<(), String> {
    let statuses = thread_statuses(pid);
    assert!(!statuses.is_empty());
    let want_uid = format!("{uid}\t{uid}\t{uid}\t{uid}");
    let want_gid = format!("{gid}\t{gid}\t{gid}\t{gid}");
    for status in statuses {
        let (got_uid, got_gid) = (status_line(&status, "Uid:"), status_line(&status, "Gid:"));
        if got_uid != want_uid || got_gid != want_gid {
            return Err(format!(
                "{}: Uid {got_uid:?}, Gid {got_gid:?}; wanted {want_uid:?}, {want_gid:?}",
                status.display()
            ));
        }
        let groups = status_line(&status, "Groups:");
        if uid != 0 && groups.split_whitespace().any(|g| g == "0") {
            return Err(format!("{}: still in group 0: {groups}", status.display()));
        }
    }
    Ok(())
}

httptest!(workers_run_as_the_configured_user, |model| {
    if !as_root("privileges::workers_run_as_the_configured_user") {
        return;
    }
    let (uid, gid) = ids_of("nobody");
    let site = public_site();
    let srv = site
        .server(model)
        .without_run_as_root()
        .config(
            "root = \"root\"\nuser = \"nobody\"\n[prefork]\nstart = 2\nmin_spare = 2\n\
             [log]\naccess = \"logs/access.log\"\n",
        )
        .start();
    srv.get("/a.txt").assert_ok(200, "hello");
    assert!(
        srv.stderr().contains("serving as nobody"),
        "{}",
        srv.report()
    );
    if model == "prefork" {
        // The parent stays root, to start children that open the roots and logs as the
        // first ones did; every child runs as the user.
        let children = wait_for(Duration::from_secs(5), || {
            let c = children_of(srv.pid());
            (c.len() >= 2).then_some(c)
        })
        .expect("no prefork children");
        // A child the pool has just forked runs as root until it has opened what it needs
        // and switched, a moment later; one still root after a few seconds has not.
        for child in children {
            if !std::path::Path::new(&format!("/proc/{child}")).exists() {
                continue; // retired meanwhile
            }
            let switched = wait_for(Duration::from_secs(3), || runs_as(child, uid, gid).ok());
            if switched.is_none() && std::path::Path::new(&format!("/proc/{child}")).exists() {
                assert_runs_as(child, uid, gid);
            }
        }
        assert_runs_as(srv.pid(), 0, 0);
    } else {
        assert_runs_as(srv.pid(), uid, gid);
    }
    // The access log in the root-only directory was opened before the switch and is
    // written to after it.
    let log = site.base().join("logs/access.log");
    let logged = wait_for(Duration::from_secs(5), || {
        fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("\"GET /a.txt HTTP/1.1\" 200 5"))
    });
    assert!(logged.is_some(), "no access-log line\n{}", srv.report());
});

#[test]
fn root_without_user_is_refused() {
    if !as_root("privileges::root_without_user_is_refused") {
        return;
    }
    let site = public_site();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .arg(site.root());
    let out = run(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("refusing to run as root"), "{stderr}");
    assert!(stderr.contains("user = \"www-data\""), "{stderr}");
    assert!(stderr.contains("run_as_root = true"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
}

httptest!(run_as_root_keeps_root, |model| {
    if !as_root("privileges::run_as_root_keeps_root") {
        return;
    }
    let site = public_site();
    let srv = site
        .server(model)
        .without_run_as_root()
        .config("root = \"root\"\nrun_as_root = true\n[prefork]\nstart = 1\nmin_spare = 1\n")
        .start();
    srv.get("/a.txt").assert_ok(200, "hello");
    assert_runs_as(srv.pid(), 0, 0);
    for child in children_of(srv.pid()) {
        assert_runs_as(child, 0, 0);
    }
});

#[test]
fn check_reports_unknown_users_and_groups_with_their_positions() {
    let site = public_site();
    let config = site
        .config("root = \"root\"\nuser = \"no-such-user-here\"\ngroup = \"no-such-group-here\"\n");
    let mut cmd = Command::new(BIN);
    cmd.arg("check").arg("--config").arg(&config);
    let out = run(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let file = config.display();
    assert!(
        stderr.contains(&format!("{file}:2:8: unknown user \"no-such-user-here\"")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{file}:3:9: unknown group \"no-such-group-here\"")),
        "{stderr}"
    );
}

/// `fastpath serve --config CONFIG` started as the user `nobody`: the first line of its
/// stderr that says it listens or why it does not, and whether it was still running then.
fn serve_as_nobody(config: &std::path::Path) -> (String, bool) {
    let (uid, gid) = ids_of("nobody");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only system calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let groups = [gid];
            if libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            if line.contains("listening on") || line.contains("fastpath:") {
                let _ = tx.send(all.clone());
            }
        }
        let _ = tx.send(all);
    });
    let said = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    (said, running)
}

#[test]
fn without_root_the_user_must_be_the_current_one() {
    if !as_root("privileges::without_root_the_user_must_be_the_current_one") {
        return;
    }
    let site = public_site();
    let other = site.write("other.toml", "root = \"root\"\nuser = \"root\"\n");
    let (said, _) = serve_as_nobody(&other);
    assert!(
        said.contains("cannot switch to user root (uid 0, gid 0)")
            && said.contains("not running as root"),
        "{said}"
    );
    assert!(!said.contains("listening on"), "{said}");
    let same = site.write("same.toml", "root = \"root\"\nuser = \"nobody\"\n");
    let (said, running) = serve_as_nobody(&same);
    assert!(said.contains("listening on") && running, "{said}");
}

/// Lines of the file at `path` (none if it is missing) that contain `needle`.
fn count_lines(path: &std::path::Path, needle: &str) -> usize {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines().filter(|l| l.contains(needle)).count()
}

httptest!(
    logs_reopened_after_the_switch_are_opened_as_the_user,
    |model| {
        if !as_root("privileges::logs_reopened_after_the_switch_are_opened_as_the_user") {
            return;
        }
        let (uid, gid) = ids_of("nobody");
        let site = public_site();
        site.file("b.txt", "bee");
        site.file("c.txt", "sea");
        // Root's directory, which the user may enter but not create files in.
        let logs = site.base().join("logs");
        fs::set_permissions(&logs, fs::Permissions::from_mode(0o755)).unwrap();
        let (access, error) = (logs.join("access.log"), logs.join("error.log"));
        // One prefork child at most: a child forked later would open the log as root, before
        // its switch, which is not what this test is about.
        let mut srv = site
            .server(model)
            .without_run_as_root()
            .config(
                "root = \"root\"\nuser = \"nobody\"\n\
                 [prefork]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax_children = 1\n\
                 [log]\naccess = \"logs/access.log\"\nerror = \"logs/error.log\"\n",
            )
            .listening_line_in(error.clone())
            .start();
        srv.get("/a.txt").assert_ok(200, "hello");
        let written = wait_for(Duration::from_secs(5), || {
            (count_lines(&access, "/a.txt") == 1).then_some(())
        });
        assert!(written.is_some(), "no access-log line\n{}", srv.report());

        // logrotate with `create 0640 nobody nogroup`: rename, create the new files for the
        // user, signal. The server reopens them as the user.
        for path in [&access, &error] {
            fs::rename(path, path.with_extension("log.1")).unwrap();
            fs::File::create(path).unwrap();
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
            fs::set_permissions(path, fs::Permissions::from_mode(0o640)).unwrap();
        }
        srv.signal(libc::SIGUSR1);
        let moved = wait_for(Duration::from_secs(5), || {
            srv.get("/b.txt").assert_ok(200, "bee");
            (count_lines(&access, "/b.txt") >= 1).then_some(())
        });
        assert!(
            moved.is_some(),
            "the access log was not reopened\n{}",
            srv.report()
        );
        // Requests answered before the reopen took effect may still be in the renamed file
        // (a prefork child reopens on its next tick); once the new file has lines, the
        // renamed one gets no more.
        let old = count_lines(&access.with_extension("log.1"), "/b.txt");
        for _ in 0..5 {
            srv.get("/b.txt").assert_ok(200, "bee");
        }
        wait_for(Duration::from_secs(5), || {
            (count_lines(&access, "/b.txt") >= 6).then_some(())
        })
        .expect("the new access log did not get the later lines");
        assert_eq!(count_lines(&access.with_extension("log.1"), "/b.txt"), old);

        // Without `create`, the user cannot make a new file in root's directory: the reopen
        // fails, the error log says so, and the lines go on to the renamed file.
        let renamed = access.with_extension("log.2");
        fs::rename(&access, &renamed).unwrap();
        srv.signal(libc::SIGUSR1);
        let said = wait_for(Duration::from_secs(5), || {
            srv.get("/c.txt").assert_ok(200, "sea");
            (count_lines(&error, "cannot reopen the access log") >= 1).then_some(())
        });
        assert!(
            said.is_some(),
            "the failed reopen was not said\n{}",
            srv.report()
        );
        let kept = wait_for(Duration::from_secs(5), || {
            (count_lines(&renamed, "/c.txt") >= 1).then_some(())
        });
        assert!(
            kept.is_some(),
            "lines lost after a failed reopen\n{}",
            srv.report()
        );
        assert!(!access.exists(), "a file was created in root's directory");
        srv.stop(libc::SIGTERM, Duration::from_secs(10));
    }
);
