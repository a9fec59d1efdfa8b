//! bench/framework.py, the framework benchmark, end to end in its quick form with its built-in
//! Python clients: `fastpath echo` and `fastpath forward` (this build) and the peers of
//! bench/peers/framework (built by their build.sh) each serve both tables, and every row has
//! messages counted and no errors. The figures mean nothing here; that the script works does.

use std::path::Path;
use std::process::Command;

use crate::util::{skip, Missing, BIN};

const TEST: &str = "framework benchmark";

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn framework_benchmark_quick_run() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        skip(
            TEST,
            Missing::Environment,
            "the benchmark pins the server and the load generator to CPUs 0 and 1",
        );
        return;
    }
    let peers = Path::new(env!("CARGO_TARGET_TMPDIR")).join("framework-peers");
    let build = Command::new("bash")
        .arg(repo().join("bench/peers/framework/build.sh"))
        .arg(&peers)
        .output()
        .expect("run build.sh");
    let stderr = String::from_utf8_lossy(&build.stderr);
    match build.status.code() {
        Some(0) => {}
        // build.sh names each missing package.
        Some(3) => {
            skip(TEST, Missing::Installable, stderr.trim());
            return;
        }
        _ => panic!("build.sh failed ({}):\n{stderr}", build.status),
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = Command::new("python3")
        .arg(repo().join("bench/framework.py"))
        .args(["--quick", "--client", "python", "--no-build"])
        .arg("--peers")
        .arg(&peers)
        .arg("--out")
        .arg(tmp.path().join("framework.md"))
        .env("FASTPATH_BIN", BIN)
        .output()
        .expect("run framework.py");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "framework.py:\n{report}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("framework.json")).expect("framework.json"),
    )
    .unwrap();
    let rows = json["rows"].as_array().unwrap();
    // Two sizes per table, three servers each: fastpath and two peers; and the in-kernel
    // echo's row where BPF programs may be loaded.
    let kernel = crate::kernel_path::bpf_capable();
    assert_eq!(rows.len(), if kernel { 14 } else { 12 }, "{report}");
    for row in rows {
        assert!(row.get("failed").is_none(), "{row}");
        assert!(row["messages_per_sec"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["errors"].as_u64(), Some(0), "{row}");
        assert!(row["cpu_us_per_msg_server"].as_f64().is_some(), "{row}");
    }
    let markdown = std::fs::read_to_string(tmp.path().join("framework.md")).unwrap();
    for server in [
        "fastpath echo",
        "libevent",
        "tokio",
        "fastpath forward",
        "thrift C++",
    ] {
        assert!(markdown.contains(&format!("| {server} |")), "{markdown}");
    }
    assert_eq!(
        markdown.contains("| fastpath-kernel |"),
        kernel,
        "{markdown}"
    );
}
