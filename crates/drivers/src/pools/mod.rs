//! The pool models: ways of spreading connections over threads or processes, each built on
//! the epoll loop's worker (`loops/epoll.rs`): pinned per-core loops, a thread pool with a
//! bound on running threads, and preforked single-threaded processes.

pub(crate) mod percore;
pub mod prefork;
pub(crate) mod threads;
