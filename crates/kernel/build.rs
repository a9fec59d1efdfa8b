//! Compiles the BPF programs in src/bpf with clang (`-target bpf -O2 -g`) into OUT_DIR, to be
//! embedded with include_bytes. Without clang (or if it fails) the crate is built without the
//! kernel path: the build says so once, and at run time the crate reports it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const PROGRAMS: &[&str] = &["echo", "bridge"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kernel_path)");
    println!("cargo::rerun-if-env-changed=CLANG");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // The kernel's uapi headers include <asm/types.h>, which Debian keeps under the
    // multiarch directory.
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86_64-linux-gnu",
        Ok("aarch64") => "aarch64-linux-gnu",
        Ok("riscv64") => "riscv64-linux-gnu",
        _ => "",
    };
    for name in PROGRAMS {
        let src = format!("src/bpf/{name}.bpf.c");
        println!("cargo::rerun-if-changed={src}");
        let obj = out.join(format!("{name}.bpf.o"));
        let mut cmd = Command::new(&clang);
        cmd.args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj);
        if !multiarch.is_empty() {
            cmd.arg("-idirafter")
                .arg(format!("/usr/include/{multiarch}"));
        }
        let why = match cmd.output() {
            Ok(o) if o.status.success() => continue,
            Ok(o) => format!(
                "{clang} failed on {src}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("{clang} not found ({e}); install clang, llvm and libbpf-dev"),
        };
        println!("cargo::warning=the kernel path is left out of this build: {why}");
        return;
    }
    println!("cargo::rustc-cfg=kernel_path");
}
