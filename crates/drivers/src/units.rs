//! Sizes and durations as configurations and command lines write them ("64KiB", "16m",
//! "500ms", "2m"), one reading for every part of fastpath that takes them.

use std::time::Duration;

/// Splits "16k" into ("16", "k"); `None` without leading digits.
fn split_number(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// Bytes from "512", "16k", "16K", "16KiB", "1m", "1MiB", "1g" (binary
/// units, case-insensitive); `None` if malformed or overflowing.
pub fn parse_size(s: &str) -> Option<u64> {
    let (n, unit) = split_number(s)?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// A duration from "500ms", "10s", "2m", "1h" or "10" (seconds); `None`
/// if malformed or overflowing. Zero is accepted here and rejected later
/// with its own message.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (n, unit) = split_number(s)?;
    Some(match unit {
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    })
}
