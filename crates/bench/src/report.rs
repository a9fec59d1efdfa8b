//! Human-readable output: the table of one run, runs side by side, and rate sweeps.

use std::fmt::Write;

use crate::stats::Report;

/// Formats a count of bytes with a decimal unit.
pub(crate) fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn load_line(r: &Report) -> String {
    let mut s = match r.meta.mode {
        "rate" => format!("open loop, {} req/s", r.meta.offered_rate.unwrap_or(0.0)),
        "conn-rate" => format!(
            "open loop, {} conn/s x {} calls",
            r.meta.offered_rate.unwrap_or(0.0),
            r.meta.calls.unwrap_or(1)
        ),
        _ => "closed loop".to_string(),
    };
    if r.meta.mode != "conn-rate" {
        let _ = write!(s, ", {} connections", r.meta.connections);
    }
    if r.meta.pipeline > 1 {
        let _ = write!(s, ", pipeline {}", r.meta.pipeline);
    }
    s.push_str(if r.meta.keepalive {
        ", keep-alive"
    } else {
        ", connection per request"
    });
    let _ = write!(
        s,
        ", {} thread{}",
        r.meta.threads,
        if r.meta.threads == 1 { "" } else { "s" }
    );
    s
}

fn errors_line(r: &Report) -> String {
    let e = &r.errors;
    format!(
        "total {}  refused {}  reset {}  timeout {}  fd-unavail {}  addr-unavail {}  short-body {}  bad-response {}  verify {}  tls {}  other {}",
        e.total, e.refused, e.reset, e.timeout, e.fd_unavail, e.addr_unavail, e.short_body,
        e.bad_response, e.verify, e.tls, e.other
    )
}

fn status_line(r: &Report) -> String {
    let s = &r.status;
    let mut line = format!(
        "1xx {}  2xx {}  3xx {}  4xx {}  5xx {}",
        s.s1xx, s.s2xx, s.s3xx, s.s4xx, s.s5xx
    );
    if s.other > 0 {
        let _ = write!(line, "  other {}", s.other);
    }
    line
}

/// The table printed at the end of one run.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "{}  ({})", r.meta.name, load_line(r));
    if r.meta.name != r.meta.url {
        let _ = writeln!(w, "url           {}", r.meta.url);
    }
    let _ = writeln!(w, "window        {:.2} s", r.duration_s);
    let _ = writeln!(
        w,
        "requests      {:<12} {:.1}/s",
        r.requests, r.request_rate
    );
    let _ = writeln!(w, "replies       {:<12} {:.1}/s", r.replies, r.rps);
    let _ = writeln!(
        w,
        "bytes         {:<12} {}/s  (bodies {})",
        bytes(r.bytes as f64),
        bytes(r.bytes_per_s),
        bytes(r.body_bytes as f64)
    );
    let _ = writeln!(
        w,
        "connections   {} opened ({:.1}/s), {} established, at most {} open",
        r.conns_opened, r.conn_rate, r.conns_established, r.max_open
    );
    let per_reply = if r.replies > 0 {
        r.cpu_s * 1e6 / r.replies as f64
    } else {
        0.0
    };
    let _ = writeln!(
        w,
        "client cpu    {:.2} s  ({:.2} µs per reply)",
        r.cpu_s, per_reply
    );
    if let Some(t) = &r.tls {
        let negotiated = if t.protocol.is_empty() {
            "no handshake finished".to_string()
        } else {
            format!("{} {} {}", t.protocol, t.cipher, t.group)
        };
        let _ = writeln!(
            w,
            "tls           {negotiated}; handshakes {} full, {} resumed, {} failed",
            t.handshakes_full, t.handshakes_resumed, t.failures
        );
        if let Some(why) = &t.first_failure {
            let _ = writeln!(w, "tls failure   {why}");
        }
    }
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "{:<14}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "time (µs)", "p50", "p90", "p99", "p99.9", "max", "mean", "count"
    );
    let mut rows = vec![("connect", &r.connect_us)];
    if let Some(t) = &r.tls {
        rows.push(("tls handshake", &t.handshake_us));
    }
    rows.extend([
        ("first byte", &r.first_byte_us),
        ("transfer", &r.transfer_us),
        ("total", &r.latency_us),
    ]);
    if r.meta.mode != "closed" {
        rows.push(("send lag", &r.send_lag_us));
    }
    for (name, p) in rows {
        let _ = writeln!(
            w,
            "{:<14}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10}",
            name, p.p50, p.p90, p.p99, p.p999, p.max, p.mean, p.count
        );
    }
    let _ = writeln!(w);
    let _ = writeln!(w, "status        {}", status_line(r));
    let _ = writeln!(w, "errors        {}", errors_line(r));
    if r.in_flight_at_end > 0 || r.missed > 0 || r.meta.mode != "closed" {
        let _ = writeln!(
            w,
            "unfinished    {} in flight at the end, {} due but never sent",
            r.in_flight_at_end, r.missed
        );
    }
    out
}

/// Several runs side by side, one column per run.
pub fn render_compare(reports: &[Report]) -> String {
    type Row = (&'static str, fn(&Report) -> String);
    let rows: &[Row] = &[
        ("load", |r| match r.meta.mode {
            "rate" => format!("{} req/s", r.meta.offered_rate.unwrap_or(0.0)),
            "conn-rate" => format!("{} conn/s", r.meta.offered_rate.unwrap_or(0.0)),
            _ => format!("{} conns", r.meta.connections),
        }),
        ("replies/s", |r| format!("{:.1}", r.rps)),
        ("requests", |r| r.requests.to_string()),
        ("replies", |r| r.replies.to_string()),
        ("bytes/s", |r| bytes(r.bytes_per_s)),
        ("latency p50 µs", |r| format!("{:.1}", r.latency_us.p50)),
        ("latency p90 µs", |r| format!("{:.1}", r.latency_us.p90)),
        ("latency p99 µs", |r| format!("{:.1}", r.latency_us.p99)),
        ("latency p99.9 µs", |r| format!("{:.1}", r.latency_us.p999)),
        ("latency max µs", |r| format!("{:.1}", r.latency_us.max)),
        ("connect p50 µs", |r| format!("{:.1}", r.connect_us.p50)),
        ("first byte p50 µs", |r| {
            format!("{:.1}", r.first_byte_us.p50)
        }),
        ("first byte p99 µs", |r| {
            format!("{:.1}", r.first_byte_us.p99)
        }),
        ("2xx", |r| r.status.s2xx.to_string()),
        ("3xx", |r| r.status.s3xx.to_string()),
        ("4xx", |r| r.status.s4xx.to_string()),
        ("5xx", |r| r.status.s5xx.to_string()),
        ("errors", |r| r.errors.total.to_string()),
        ("  refused", |r| r.errors.refused.to_string()),
        ("  reset", |r| r.errors.reset.to_string()),
        ("  timeout", |r| r.errors.timeout.to_string()),
        ("  fd-unavail", |r| r.errors.fd_unavail.to_string()),
        ("  addr-unavail", |r| r.errors.addr_unavail.to_string()),
        ("  short-body", |r| r.errors.short_body.to_string()),
        ("  bad-response", |r| r.errors.bad_response.to_string()),
        ("  verify", |r| r.errors.verify.to_string()),
        ("  tls", |r| r.errors.tls.to_string()),
        ("  other", |r| r.errors.other.to_string()),
        ("missed", |r| r.missed.to_string()),
        ("client cpu s", |r| format!("{:.2}", r.cpu_s)),
    ];
    let width = reports
        .iter()
        .map(|r| r.meta.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(12)
        + 2;
    let mut out = String::new();
    let _ = write!(out, "{:<20}", "");
    for r in reports {
        let _ = write!(out, "{:>width$}", r.meta.name);
    }
    out.push('\n');
    for (label, cell) in rows {
        let _ = write!(out, "{label:<20}");
        for r in reports {
            let _ = write!(out, "{:>width$}", cell(r));
        }
        out.push('\n');
    }
    out
}

/// A rate sweep: per target, one line per offered rate.
pub fn render_sweep(points: &[Report]) -> String {
    let mut out = String::new();
    let mut last = None;
    for r in points {
        if last != Some(&r.meta.name) {
            if last.is_some() {
                out.push('\n');
            }
            let unit = if r.meta.mode == "conn-rate" {
                "conn/s"
            } else {
                "req/s"
            };
            let _ = writeln!(out, "{}", r.meta.name);
            let _ = writeln!(
                out,
                "{:>14}{:>14}{:>12}{:>12}{:>10}{:>10}",
                format!("offered {unit}"),
                "replies/s",
                "p50 µs",
                "p99 µs",
                "errors",
                "missed"
            );
            last = Some(&r.meta.name);
        }
        let _ = writeln!(
            out,
            "{:>14}{:>14.1}{:>12.1}{:>12.1}{:>10}{:>10}",
            r.meta.offered_rate.unwrap_or(0.0),
            r.rps,
            r.latency_us.p50,
            r.latency_us.p99,
            r.errors.total,
            r.missed
        );
    }
    out
}
