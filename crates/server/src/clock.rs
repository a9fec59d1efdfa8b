//! The worker's clock: the `Date` header value and the access-log timestamp, formatted once a
//! second instead of once per request.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Cached renderings of the current second.
pub(crate) struct Clock {
    second: u64,
    http_date: Vec<u8>,
    log_time: Vec<u8>,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        let mut clock = Clock {
            second: u64::MAX,
            http_date: Vec::with_capacity(29),
            log_time: Vec::with_capacity(28),
        };
        clock.refresh();
        clock
    }

    /// Re-renders if the second has changed.
    pub(crate) fn refresh(&mut self) {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second == self.second {
            return;
        }
        self.second = second;
        self.http_date.clear();
        fastpath_http::write_http_date(now, &mut self.http_date);
        self.log_time.clear();
        write_log_time(second, &mut self.log_time);
    }

    /// `Sat, 21 Nov 2026 22:50:00 GMT`
    pub(crate) fn http_date(&self) -> &[u8] {
        &self.http_date
    }

    /// `[21/Nov/2026:22:50:00 +0000]` (the access log is kept in UTC).
    pub(crate) fn log_time(&self) -> &[u8] {
        &self.log_time
    }
}

/// Formats seconds since the epoch in Common Log Format, UTC.
fn write_log_time(seconds: u64, out: &mut Vec<u8>) {
    let days = (seconds / 86_400) as i64;
    let rem = seconds % 86_400;
    let (year, month, day) = fastpath_http::civil_from_days(days);
    use std::io::Write;
    let _ = write!(
        out,
        "[{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000]",
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_time_matches_known_instants() {
        let mut out = Vec::new();
        write_log_time(0, &mut out);
        assert_eq!(out, b"[01/Jan/1970:00:00:00 +0000]");
        out.clear();
        // 2026-11-21 22:50:00 UTC
        write_log_time(1_795_301_400, &mut out);
        assert_eq!(out, b"[21/Nov/2026:22:50:00 +0000]");
        out.clear();
        // 2024-02-29 12:00:00 UTC, a leap day
        write_log_time(1_709_208_000, &mut out);
        assert_eq!(out, b"[29/Feb/2024:12:00:00 +0000]");
    }
}
