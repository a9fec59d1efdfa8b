//! What a response-cache hit costs when workers share one cache: each of N threads looks up
//! pages that are all cached, for a fixed time, in one cache per thread (no sharing, the
//! old layout), one cache behind one lock, and the sharded shared cache.
//!
//! `cargo run --release -p fastpath-handover --example cache_contention [SECONDS]`

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use fastpath_handover::{cache_key, Capture, Found, ResponseCache, ResponseFields, SharedCache};
use fastpath_http::{Limits, Recoding, ResponseParser, Version};

const PAGES: usize = 1000;

fn capture() -> Capture {
    let response = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, max-age=600\r\nContent-Length: 1024\r\n\r\n";
    let mut parser = ResponseParser::new(Limits::default());
    let head = parser.parse(response, false).unwrap().unwrap();
    let mut capture = Capture::new(
        &head,
        Version::Http11,
        &ResponseFields::read(head.headers()),
        Recoding::Unchanged,
    )
    .unwrap();
    capture.push(&[b'x'; 1024]);
    capture
}

fn target(i: usize) -> String {
    format!("/app/page/{i}?q=1")
}

/// The CPU time this process has used so far, from /proc (user and system, in clock ticks
/// of 10 ms: runs of seconds keep the error near 1 %).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Runs `lookup` on `threads` threads for `time`; returns CPU nanoseconds per lookup (the
/// machine may be shared: CPU time, not wall time, is what a lookup costs).
fn run(threads: usize, time: Duration, lookup: impl Fn(usize, usize) + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let cpu = cpu_time();
    let counts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, start, lookup) = (&stop, &start, &lookup);
                s.spawn(move || {
                    start.wait();
                    let mut n = 0u64;
                    let mut i = t * 7919;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            i = (i + 7919) % PAGES;
                            lookup(t, i);
                        }
                        n += 64;
                    }
                    n
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(time);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: u64 = counts.iter().sum();
    (cpu_time() - cpu).as_nanos() as f64 / total as f64
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let time = Duration::from_secs_f64(seconds);
    let now = Instant::now();
    let later = now + Duration::from_secs(600);
    let memory = 32 << 20;
    println!(
        "CPU ns per hit\nthreads  per-thread caches  one lock  sharded ({} shards)  one rwlock, read-only",
        SharedCache::new(memory, 1 << 20).shards()
    );
    for threads in [1, 2, 4] {
        // One cache per thread, each holding every page: no sharing, no lock.
        let own: Vec<Mutex<ResponseCache>> = (0..threads)
            .map(|_| {
                let mut c = ResponseCache::new(memory, 1 << 20);
                let mut key = Vec::new();
                for i in 0..PAGES {
                    cache_key(&mut key, b"h", target(i).as_bytes(), None);
                    c.insert(&key, capture(), now, later);
                }
                Mutex::new(c)
            })
            .collect();
        // Uncontended: each thread locks only its own (a lock that is never shared costs
        // an uncontended atomic, as a worker's own cache costs nothing; see the note).
        let targets: Vec<String> = (0..PAGES).map(target).collect();
        let per_thread = run(threads, time, |t, i| {
            let mut key = Vec::with_capacity(64);
            cache_key(&mut key, b"h", targets[i].as_bytes(), None);
            let hit = own[t].lock().unwrap().get(&key, now);
            std::hint::black_box(hit);
        });
        let shared = |shards| {
            let cache = Arc::new(SharedCache::with_shards(memory, 1 << 20, shards));
            let mut key = Vec::new();
            for t in &targets {
                cache.insert(&mut key, (b"h", t.as_bytes(), None), capture(), now, later);
            }
            run(threads, time, |_, i| {
                let mut key = Vec::with_capacity(64);
                let found = cache.find(
                    &mut key,
                    (b"h", targets[i].as_bytes(), None),
                    now,
                    (|_: &fastpath_handover::Hit| true, false),
                    Some(now),
                );
                assert!(matches!(found, Found::Hit(_)));
                std::hint::black_box(found);
            })
        };
        let one_lock = shared(1);
        let sharded = shared(
            std::env::var("SHARDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(fastpath_handover::MAX_SHARDS),
        );
        // Readers that never write (no LRU order kept), under one read-write lock: what
        // entries read in place without a writer's lock would cost, at best.
        let read_only = {
            let mut key = Vec::new();
            let mut map = HashMap::new();
            for t in &targets {
                cache_key(&mut key, b"h", t.as_bytes(), None);
                let hit = own[0].lock().unwrap().get(&key, now).unwrap();
                map.insert(Box::<[u8]>::from(&key[..]), hit);
            }
            let cache = RwLock::new(map);
            run(threads, time, |_, i| {
                let mut key = Vec::with_capacity(64);
                cache_key(&mut key, b"h", targets[i].as_bytes(), None);
                let hit = cache.read().unwrap().get(&key[..]).cloned();
                std::hint::black_box(hit);
            })
        };
        println!(
            "{threads:7}  {per_thread:17.0}  {one_lock:8.0}  {sharded:18.0}  {read_only:21.0}"
        );
    }
}
