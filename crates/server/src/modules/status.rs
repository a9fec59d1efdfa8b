//! `status`: a page of the server's figures, per worker: connections, requests by status
//! class, body bytes, and both caches (off unless a `[[module]]` table asks for it, and
//! best put behind `access`: it tells who serves what).
//!
//! ```toml
//! [[module]]
//! name = "status"
//! prefix = "/server-status"
//! format = "json"            # or "html"
//! ```
//!
//! Every request in the table's scope is answered with the page. The figures are those of
//! the metrics exposition (`[metrics]`), which the server keeps for this page when no
//! metrics listener is configured.

use std::fmt::Write;
use std::sync::Arc;

use crate::metrics::{WorkerStatus, STATUS_CLASSES};
use crate::module::{Configured, Decision, Exchange, Hooks, Module, Response, Settings};

pub(crate) struct Status;

#[derive(Clone, Copy)]
struct Configuration {
    json: bool,
}

impl Module for Status {
    fn name(&self) -> &'static str {
        "status"
    }

    fn configure(&self, settings: &mut Settings<'_>) -> Result<Arc<dyn Configured>, String> {
        let json = super::json_format(settings, true);
        Ok(Arc::new(Configuration { json }))
    }
}

impl Configured for Configuration {
    fn for_worker(&self) -> Box<dyn Hooks> {
        Box::new(*self)
    }
}

impl Hooks for Configuration {
    fn handler(&mut self, exchange: &mut Exchange<'_>) -> Decision {
        if !matches!(exchange.method(), "GET" | "HEAD") {
            return Decision::Answer(Response::new(405).field("Allow", "GET, HEAD"));
        }
        let Some(metrics) = exchange.metrics else {
            // Kept whenever a status table exists; never expected.
            return Decision::Answer(Response::new(503));
        };
        let (started, workers) = metrics.status();
        let (content_type, body) = if self.json {
            ("application/json", json(started, &workers))
        } else {
            ("text/html; charset=utf-8", html(started, &workers))
        };
        Decision::Answer(
            Response::new(200)
                .field("Cache-Control", "no-store")
                .body(content_type, body.into_bytes()),
        )
    }
}

const CACHE_FIGURES: [&str; 4] = ["hits", "misses", "memory_bytes", "entries"];

fn json(started: f64, workers: &[WorkerStatus]) -> String {
    let worker = |w: &WorkerStatus| {
        let classes: serde_json::Map<String, serde_json::Value> = STATUS_CLASSES
            .iter()
            .zip(w.requests_by_class)
            .map(|(class, n)| ((*class).to_owned(), n.into()))
            .collect();
        let cache = |figures: [u64; 4]| -> serde_json::Value {
            CACHE_FIGURES
                .iter()
                .zip(figures)
                .map(|(name, n)| ((*name).to_owned(), serde_json::Value::from(n)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        serde_json::json!({
            "worker": w.worker,
            "requests": classes,
            "response_body_bytes": w.body_bytes,
            "connections_total": w.connections_total,
            "connections_open": w.connections_open,
            "connections_idle": w.connections_idle,
            "content_cache": cache(w.content_cache),
            "response_cache": cache(w.response_cache),
        })
    };
    let mut out = serde_json::json!({
        "started": started,
        "workers": workers.iter().map(worker).collect::<Vec<_>>(),
    })
    .to_string();
    out.push('\n');
    out
}

fn html(started: f64, workers: &[WorkerStatus]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fastpath status</title></head>\n<body>\n<h1>fastpath status</h1>\n",
    );
    let _ = writeln!(
        out,
        "<p>Started {started:.0} (seconds since the epoch).</p>"
    );
    out.push_str(
        "<table>\n<tr><th>worker</th><th>connections open</th><th>idle</th><th>total</th>",
    );
    for class in STATUS_CLASSES {
        let _ = write!(out, "<th>{class}</th>");
    }
    out.push_str("<th>body bytes</th><th>content cache hits</th><th>misses</th><th>memory</th><th>entries</th><th>response cache hits</th><th>misses</th><th>memory</th><th>entries</th></tr>\n");
    for w in workers {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            w.worker, w.connections_open, w.connections_idle, w.connections_total
        );
        for n in w.requests_by_class {
            let _ = write!(out, "<td>{n}</td>");
        }
        let _ = write!(out, "<td>{}</td>", w.body_bytes);
        for n in w.content_cache.iter().chain(&w.response_cache) {
            let _ = write!(out, "<td>{n}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n</body></html>\n");
    out
}
