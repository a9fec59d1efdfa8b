//! What the stream load generators (echo, Thrift forwarder) share: worker threads started
//! together and watched once a second for the progress line.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Called about once a second with the time since the start and the counters of
/// [`supervise`]'s `sample`.
pub type Tick<'a> = &'a mut dyn FnMut(Duration, [u64; 3]);

/// Runs `work(0..threads)` on threads of their own and returns their results in thread
/// order; meanwhile calls `tick` once a second with what `sample` reads.
pub(crate) fn supervise<T: Send>(
    threads: usize,
    work: impl Fn(usize) -> io::Result<T> + Sync,
    mut tick: Option<Tick<'_>>,
    sample: &(dyn Fn() -> [u64; 3] + Sync),
) -> io::Result<Vec<T>> {
    let start = Instant::now();
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        for t in 0..threads {
            let tx = tx.clone();
            let work = &work;
            std::thread::Builder::new()
                .name("bench-worker".into())
                .spawn_scoped(scope, move || {
                    let _ = tx.send((t, work(t)));
                })?;
        }
        drop(tx);
        let mut results: Vec<Option<T>> = (0..threads).map(|_| None).collect();
        let mut first_error = None;
        let mut next = start + Duration::from_secs(1);
        let mut left = threads;
        while left > 0 {
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok((t, result)) => {
                    left -= 1;
                    match result {
                        Ok(v) => results[t] = Some(v),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(f) = tick.as_mut() {
                        f(start.elapsed(), sample());
                    }
                    next += Duration::from_secs(1);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(io::Error::other("a worker thread died"));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every thread answered"))
            .collect())
    })
}

/// Writes `--json FILE`: `-` is stdout (in place of the text summary).
pub(crate) fn write_json<T: serde::Serialize>(
    value: &T,
    path: &std::path::Path,
    out: &mut dyn io::Write,
) -> Result<(), String> {
    let mut s = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    s.push('\n');
    if path.as_os_str() == "-" {
        out.write_all(s.as_bytes()).map_err(|e| e.to_string())
    } else {
        std::fs::write(path, s).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}
