//! The framework benchmark's peers (bench/peers/framework: echo servers on libevent and tokio,
//! forwarders on libevent and Apache Thrift C++) are built by their build.sh and checked
//! against the echo and forwarder protocols by check.py, with messages encoded by the
//! official Apache Thrift Python library. bench/framework.py measures fastpath against them,
//! so a peer that breaks the protocol would make its figures meaningless (the script itself
//! is run by crates/fastpath/tests/framework_bench.rs, which has the fastpath binary).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Says this test cannot run here (see `fastpath_testkit::skip`).
fn skip(reason: &str) {
    fastpath_testkit::skip(
        "framework peers",
        fastpath_testkit::Missing::Installable,
        reason,
    );
}

fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers/framework")
}

/// The peers, built by build.sh; None (the skip said why) when a package they need is
/// missing.
fn peers() -> Option<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("framework-peers");
        let build = Command::new("bash")
            .arg(peers_dir().join("build.sh"))
            .arg(&out)
            .output()
            .expect("run build.sh");
        let stderr = String::from_utf8_lossy(&build.stderr);
        match build.status.code() {
            Some(0) => Ok(out),
            // build.sh names each missing package.
            Some(3) => Err(stderr.trim().to_owned()),
            _ => panic!(
                "build.sh failed ({}):\n{}{stderr}",
                build.status,
                String::from_utf8_lossy(&build.stdout)
            ),
        }
    });
    match built {
        Ok(out) => Some(out),
        Err(missing) => {
            skip(missing);
            None
        }
    }
}

#[test]
fn framework_peers_speak_the_protocols() {
    let Some(python) = fastpath_testkit::thrift_python() else {
        skip("no python3 has the thrift package (python3-thrift)");
        return;
    };
    let Some(out) = peers() else { return };
    let check = Command::new(python)
        .arg(peers_dir().join("check.py"))
        .arg(out)
        .output()
        .expect("run check.py");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(check.status.success(), "check.py:\n{report}");
    // Every peer was checked: none left out by a mistake in the list.
    for peer in [
        "libevent_echo",
        "tokio_echo",
        "libevent_forward",
        "thrift_forward",
    ] {
        assert!(
            report.contains(&format!("ok   {peer}\n")),
            "{peer} not checked:\n{report}"
        );
    }
}
