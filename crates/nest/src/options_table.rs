//! The `%option` table: names and the kind of value each takes (docs/nest.md, "Options").
//!
//! The runtime crate (`fastpath-nest-runtime`) owns the authoritative table, which also reads
//! `config.nest`; this module mirrors its names and value kinds so that the compiler can check a
//! specification on its own. When both crates are in the workspace, `check` and `is_spec_only`
//! become calls to `fastpath_nest_runtime::options` and this file goes: nothing else in the
//! compiler knows the table.

use fastpath_drivers::units::{parse_duration, parse_size};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// No value (`inetd`, `percoreServer`).
    Flag,
    /// A count of at least one.
    Count,
    /// An optional count of at least one.
    OptCount,
    Port,
    Address,
    Name,
    Size,
    Duration,
    Level,
}

/// (name, kind, spec only: the model and inetd cannot be changed by config.nest)
const TABLE: &[(&str, Kind, bool)] = &[
    ("processServer", Kind::Count, true),
    ("threadServer", Kind::Count, true),
    ("eventServer", Kind::OptCount, true),
    ("uringServer", Kind::OptCount, true),
    ("percoreServer", Kind::Flag, true),
    ("inetd", Kind::Flag, true),
    ("serverPort", Kind::Port, false),
    ("serverAddress", Kind::Address, false),
    ("serverName", Kind::Name, false),
    ("inputBuffer", Kind::Size, false),
    ("outputBuffer", Kind::Size, false),
    ("idleTimeout", Kind::Duration, false),
    ("sendTimeout", Kind::Duration, false),
    ("maxConnections", Kind::Count, false),
    ("logLevel", Kind::Level, false),
];

/// The options that choose the concurrency model; a specification names at most one.
pub const MODELS: &[&str] = &[
    "processServer",
    "threadServer",
    "eventServer",
    "uringServer",
    "percoreServer",
];

/// Every option name, in table order.
pub fn names() -> Vec<&'static str> {
    TABLE.iter().map(|t| t.0).collect()
}

/// Whether `value` (the text after the name, trimmed; "" when absent) suits option `name`.
pub fn check(name: &str, value: &str) -> Result<(), String> {
    let Some(&(_, kind, _)) = TABLE.iter().find(|t| t.0 == name) else {
        return Err(format!(
            "unknown option `{name}` (known: {})",
            names().join(", ")
        ));
    };
    let count = |v: &str| matches!(v.parse::<u64>(), Ok(n) if n >= 1);
    let ok = match kind {
        Kind::Flag => value.is_empty(),
        Kind::Count => count(value),
        Kind::OptCount => value.is_empty() || count(value),
        Kind::Port => matches!(value.parse::<u16>(), Ok(p) if p >= 1),
        Kind::Address => value.parse::<std::net::IpAddr>().is_ok(),
        Kind::Name => !value.is_empty() && !value.contains(char::is_whitespace),
        Kind::Size => matches!(parse_size(value), Some(n) if n >= 1),
        Kind::Duration => matches!(parse_duration(value), Some(d) if !d.is_zero()),
        Kind::Level => ["error", "warn", "info", "debug", "trace"].contains(&value),
    };
    if ok {
        return Ok(());
    }
    let want = match kind {
        Kind::Flag => "no value",
        Kind::Count => "a whole number of at least 1",
        Kind::OptCount => "nothing or a whole number of at least 1",
        Kind::Port => "a port from 1 to 65535",
        Kind::Address => "an IP address such as 127.0.0.1 or ::1",
        Kind::Name => "a name without spaces",
        Kind::Size => "a size such as 65536, 64KiB or 1MiB",
        Kind::Duration => "a duration such as 500ms, 60s or 2m",
        Kind::Level => "one of error, warn, info, debug, trace",
    };
    if value.is_empty() {
        Err(format!("option `{name}` needs a value: {want}"))
    } else {
        Err(format!("bad value `{value}` for option `{name}`: {want}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert!(check("threadServer", "100").is_ok());
        assert!(check("threadServer", "0").is_err());
        assert!(check("eventServer", "").is_ok());
        assert!(check("inetd", "").is_ok());
        assert!(check("inetd", "yes").is_err());
        assert!(check("inputBuffer", "64KiB").is_ok());
        assert!(check("idleTimeout", "0s").is_err());
        assert!(check("serverPort", "70000").is_err());
        assert!(check("nope", "1").unwrap_err().contains("unknown option"));
    }
}
