//! bench/sizes.py, the file-size sweep, end to end in a short form: the three fastpath
//! servers (every file copied, every file with sendfile, the default split) and the floor
//! (bench/peers/floor.c, built by the script) on two sizes,
//! with `fastpath bench` as the client. The figures mean nothing here (a debug build on a
//! busy machine); that the script runs, checks every file and writes its tables does.

use std::path::Path;
use std::process::Command;

use crate::util::{skip, Missing, BIN};
use fastpath_testkit::free_port_run;

const TEST: &str = "size sweep";

#[test]
fn size_sweep_short_run() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        skip(
            TEST,
            Missing::Environment,
            "the sweep pins the servers and the load generator to CPUs 0 and 1",
        );
        return;
    }
    let repo = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let run = Command::new("python3")
        .arg(repo.join("bench/sizes.py"))
        .args([
            "--quick",
            "--no-write",
            "--client",
            "fastpath",
            "--sizes",
            "4,16",
        ])
        .args([
            "--servers",
            "fastpath-copy,fastpath-sendfile,fastpath,floor",
        ])
        // The script listens on `--port-base` plus a server's place in its order (up to 8
        // ports).
        .args(["--port-base", &free_port_run(8).to_string()])
        .env("FASTPATH_BIN", BIN)
        .output()
        .expect("run sizes.py");
    let out = String::from_utf8_lossy(&run.stdout);
    let report = format!("{out}{}", String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "sizes.py:\n{report}");
    assert!(
        out.contains("| file | fastpath, copy | fastpath, sendfile | fastpath | floor |"),
        "{report}"
    );
    for row in ["| 4 KiB | ", "| 16 KiB | "] {
        assert_eq!(
            out.matches(row).count(),
            3,
            "CPU, req/s, kernel share: {report}"
        );
    }
    assert!(out.contains("\nCrossover: "), "{report}");
    assert!(!out.contains('⚠') && !out.contains("Problems"), "{report}");
}
