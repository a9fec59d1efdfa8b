//! What fastpath's test suites share: a skip that shows (and fails under CI when CI could
//! have installed what is missing), the Apache Thrift compiler and Python library that
//! the interop tests check against, a server started as a child process ([`Listening`]),
//! the superservers around one ([`openbsd_inetd`], [`Reaped`]), free ports to start one on
//! ([`free_port`]), the reader of the HTTP responses it sends ([`read_response`]), and a
//! certificate authority of its own for TLS tests ([`TestPki`]).
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! ```no_run
//! use fastpath_testkit::{skip, thrift_py, Missing};
//! # let (idl, out) = (std::path::Path::new("forwarder.thrift"), std::path::Path::new("gen"));
//! let Some(python) = thrift_py("interop", &[idl], out) else {
//!     return; // skipped, visibly
//! };
//! # let _ = python;
//! if !std::path::Path::new("/sys/fs/bpf").exists() {
//!     skip("kernel path", Missing::Environment, "no BPF file system");
//! }
//! ```

mod cargo_build;
mod http;
mod listening;
#[cfg(feature = "pebble")]
pub mod pebble;
mod pki;
mod ports;
mod superserver;
pub use cargo_build::build_beside_test;
pub use http::{read_response, Response};
pub use listening::Listening;
pub use pki::{KeyKind, TestPki};
pub use ports::{free_port, free_port_run};
pub use superserver::{openbsd_inetd, Reaped, OPENBSD_INETD};

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a test could not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// A program or package that `.ci/run` installs (or a limit it raises): under CI (the
    /// `CI` variable set), its absence fails the test instead of skipping it.
    Installable,
    /// Something of the machine no install provides (a kernel feature, a privilege).
    Environment,
}

/// Where skips are listed: `target/tmp/skipped-tests.txt`, found from the test binary's own
/// path (`target/<profile>/deps/<binary>`), which `.ci/run` prints.
fn skipped_list() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?.parent()?;
    let dir = target.join("tmp");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("skipped-tests.txt"))
}

/// Says that the calling test cannot run here, where it shows: on the terminal past the test
/// harness's output capture (a skipped test is otherwise reported `ok` like a passed one), and
/// as a line in `target/tmp/skipped-tests.txt`. Panics instead under CI when what is missing
/// is [`Missing::Installable`]: CI installs it, so a skip there means a broken install.
pub fn skip(test: &str, missing: Missing, reason: &str) {
    if missing == Missing::Installable && std::env::var_os("CI").is_some() {
        panic!("{test}: {reason}, and CI must run this test");
    }
    let line = format!("SKIPPED {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = skipped_list() {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// A Python that has the thrift package: Debian's python3-thrift is for /usr/bin/python3,
/// which may not be the first python3 on the PATH.
pub fn thrift_python() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import thrift.protocol.TBinaryProtocol"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Generates Python code from each IDL into `out` with the real `thrift` compiler and finds a
/// Python that has the thrift package; `None` after a visible [`skip`] when either is
/// missing. A compiler that refuses an IDL fails the test.
pub fn thrift_py(test: &str, idls: &[&Path], out: &Path) -> Option<&'static str> {
    for idl in idls {
        match Command::new("thrift")
            .args(["--gen", "py", "-out"])
            .arg(out)
            .arg(idl)
            .status()
        {
            Ok(status) => assert!(
                status.success(),
                "thrift --gen py {}: {status}",
                idl.display()
            ),
            Err(_) => {
                skip(
                    test,
                    Missing::Installable,
                    "the thrift compiler is not installed (thrift-compiler)",
                );
                return None;
            }
        }
    }
    let python = thrift_python();
    if python.is_none() {
        skip(
            test,
            Missing::Installable,
            "no python3 has the thrift package (python3-thrift)",
        );
    }
    python
}
