//! The SPECweb96 file set: `make-docroot` writes it with a manifest, and `--mix specweb96`
//! reads the manifest to request its files with the SPECweb96 frequencies and to verify
//! every reply against each file's size and checksum.
//!
//! SPECweb96 has four size classes, each of nine files whose sizes are 1..9 tenths of the
//! class's decade: class 0 is 102..921 bytes, class 1 1..9 KiB, class 2 10..90 KiB, class 3
//! 100..900 KiB. Requests go 35% / 50% / 14% / 1% to the classes, and within a class to the
//! nine files with the SPECweb96 frequencies (the fifth file is the most popular).

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::target::{Expect, Request, Selection, Target, TargetError, Url};

/// Name of the manifest written next to the file set.
pub const MANIFEST: &str = "specweb96.manifest";

/// First line of a manifest, so an unrelated file is not mistaken for one.
const MANIFEST_HEADER: &str = "# fastpath bench manifest v1: path size crc32 weight";

/// Share of requests per class (35% under 1 KiB, 50% 1-10 KiB, 14% 10-100 KiB, 1% above).
pub const CLASS_SHARE: [f64; 4] = [0.35, 0.50, 0.14, 0.01];

/// Share of requests per file within a class, from SPECweb96 (sums to 99.9%).
pub const FILE_SHARE: [f64; 9] = [
    0.039, 0.059, 0.088, 0.177, 0.353, 0.118, 0.071, 0.050, 0.044,
];

/// Size of file `file` (0..9) of class `class` (0..4): (file+1) tenths of 1 KiB × 10^class.
pub fn file_size(class: usize, file: usize) -> u64 {
    (1024 * 10u64.pow(class as u32) * (file as u64 + 1)) / 10
}

/// One file of the set.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// URL path below the document root, starting with `/`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of the content.
    pub crc32: u32,
    /// Share of requests (all entries sum to about 1).
    pub weight: f64,
}

/// Writes `dirs` directories of the 36 SPECweb96 files below `root`, and the manifest.
/// Contents are deterministic printable bytes, so two runs give the same set.
pub fn make_docroot(root: &Path, dirs: usize) -> io::Result<Vec<Entry>> {
    let dirs = dirs.max(1);
    fs::create_dir_all(root)?;
    let mut entries = Vec::with_capacity(dirs * 36);
    let mut buf = Vec::new();
    for d in 0..dirs {
        let dir_name = format!("dir{d:05}");
        fs::create_dir_all(root.join(&dir_name))?;
        for (class, class_share) in CLASS_SHARE.iter().enumerate() {
            for (file, file_share) in FILE_SHARE.iter().enumerate() {
                let name = format!("class{class}_{file}");
                let path = format!("/{dir_name}/{name}");
                let size = file_size(class, file);
                fill(&mut buf, size as usize, &path);
                fs::write(root.join(&dir_name).join(&name), &buf)?;
                entries.push(Entry {
                    path,
                    size,
                    crc32: crc32fast::hash(&buf),
                    weight: class_share * file_share / dirs as f64,
                });
            }
        }
    }
    let mut out = io::BufWriter::new(fs::File::create(root.join(MANIFEST))?);
    writeln!(out, "{MANIFEST_HEADER}")?;
    for e in &entries {
        writeln!(
            out,
            "{}\t{}\t{:08x}\t{:.9}",
            e.path, e.size, e.crc32, e.weight
        )?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(entries)
}

/// Printable pseudo-random bytes seeded by the path: distinct per file, not compressible
/// to nothing, and reproducible.
fn fill(buf: &mut Vec<u8>, size: usize, seed: &str) {
    const ALPHABET: &[u8; 64] =
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789\n ";
    let mut x = crc32fast::hash(seed.as_bytes()) as u64 | 1 << 40;
    buf.clear();
    buf.extend((0..size).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ALPHABET[(x >> 58) as usize]
    }));
}

/// Reads a manifest written by [`make_docroot`].
pub fn read_manifest(path: &Path) -> Result<Vec<Entry>, TargetError> {
    let text = fs::read_to_string(path)
        .map_err(|e| TargetError(format!("cannot read manifest {}: {e}", path.display())))?;
    let mut lines = text.lines().enumerate();
    if lines.next().map(|(_, l)| l) != Some(MANIFEST_HEADER) {
        return Err(TargetError(format!(
            "{}: not a manifest written by `fastpath bench make-docroot`",
            path.display()
        )));
    }
    let mut entries = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || TargetError(format!("{}:{}: bad manifest line", path.display(), n + 1));
        let mut f = line.split('\t');
        let (Some(p), Some(size), Some(crc), Some(weight), None) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad());
        };
        entries.push(Entry {
            path: p.to_string(),
            size: size.parse().map_err(|_| bad())?,
            crc32: u32::from_str_radix(crc, 16).map_err(|_| bad())?,
            weight: weight.parse().map_err(|_| bad())?,
        });
    }
    if entries.is_empty() {
        return Err(TargetError(format!("{}: empty manifest", path.display())));
    }
    Ok(entries)
}

/// A target that requests the manifest's files below `base` with their weights; every
/// request carries the file's size and checksum for `--verify`.
pub fn mix_target(name: &str, base: &Url, entries: &[Entry]) -> Result<Target, TargetError> {
    Ok(Target {
        name: name.to_string(),
        url: base.to_string(),
        addr: base.resolve()?,
        host: base.host_header(),
        tls_name: base.tls_name(),
        requests: entries
            .iter()
            .map(|e| Request {
                path: base.join(&e.path),
                expect: Expect {
                    len: Some(e.size),
                    crc32: Some(e.crc32),
                },
            })
            .collect(),
        selection: Selection::Weighted(entries.iter().map(|e| e.weight).collect()),
    })
}

/// Gives the requests of `target` whose path ends with a manifest path (the file set may
/// sit below a prefix) that file's size and checksum, so `--verify` checks URL lists too.
pub fn apply_manifest(target: &mut Target, entries: &[Entry]) {
    for req in &mut target.requests {
        let path = req.path.split('?').next().unwrap_or_default();
        if let Some(e) = entries.iter().find(|e| path.ends_with(&e.path)) {
            req.expect = Expect {
                len: Some(e.size),
                crc32: Some(e.crc32),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_specweb96_classes() {
        assert_eq!(file_size(0, 0), 102);
        assert_eq!(file_size(0, 8), 921);
        assert_eq!(file_size(1, 0), 1024);
        assert_eq!(file_size(2, 8), 92160);
        assert_eq!(file_size(3, 8), 921600);
        let total: f64 = CLASS_SHARE.iter().sum();
        assert!((total - 1.0).abs() < 1e-9);
    }

    #[test]
    fn docroot_round_trips_through_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let written = make_docroot(dir.path(), 2).unwrap();
        assert_eq!(written.len(), 72);
        let read = read_manifest(&dir.path().join(MANIFEST)).unwrap();
        assert_eq!(read.len(), 72);
        for (w, r) in written.iter().zip(&read) {
            assert_eq!((&w.path, w.size, w.crc32), (&r.path, r.size, r.crc32));
            assert!((w.weight - r.weight).abs() < 1e-8);
            let body = fs::read(dir.path().join(&w.path[1..])).unwrap();
            assert_eq!(body.len() as u64, w.size);
            assert_eq!(crc32fast::hash(&body), w.crc32);
        }
        let small: f64 = read
            .iter()
            .filter(|e| e.size < 1024)
            .map(|e| e.weight)
            .sum();
        assert!((small - 0.35 * 0.999).abs() < 1e-6, "{small}");
    }
}
