//! [`NestService`]: a generated server as a fastpath service, on any model.

use std::fmt;
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use fastpath_sockets::{BufferedSocket, CloseReason, Handler, Io, Next, Opened, Worker};

use fastpath_drivers::{BufferPool, Input, Output};

use crate::cx::{NoSink, Sink};
use crate::machine::{Engine, InputBuf, Machine, Step};
use crate::pattern::Scratch;
use crate::Server;

/// One worker of a generated server: the process's engine and this worker's scratch space.
pub struct NestService<S: Server> {
    engine: Arc<Engine<S>>,
    scratch: Vec<Scratch>,
}

impl<S: Server> NestService<S> {
    pub(crate) fn new(engine: Arc<Engine<S>>) -> Self {
        let scratch = engine.scratch();
        NestService { engine, scratch }
    }

    fn idle(&self) -> Duration {
        self.engine.options.idle_timeout
    }
}

/// The driver's output queue as a sink.
struct IoSink<'a> {
    output: &'a mut Output,
    pool: &'a mut BufferPool,
}

impl Sink for IoSink<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        self.output
            .write_with(self.pool, |out| out.extend_from_slice(bytes));
    }

    fn text(&mut self, args: fmt::Arguments<'_>) {
        self.output.write_with(self.pool, |out| {
            use std::io::Write;
            // Writing into a Vec fails only if a Display impl does.
            let _ = out.write_fmt(args);
        });
    }

    fn file(&mut self, file: Arc<File>, len: u64) {
        self.output.push_file(file, 0, len);
    }

    fn copy_file(&mut self, file: &File, len: u64) -> std::io::Result<u64> {
        self.output
            .write_with(self.pool, |out| crate::cx::read_into(file, len, out))
    }

    fn queued(&self) -> usize {
        self.output.pending() as usize
    }
}

struct IoInput<'a>(&'a mut Input);

impl InputBuf for IoInput<'_> {
    fn data(&self) -> &[u8] {
        self.0.data()
    }
    fn consume(&mut self, n: usize) {
        self.0.consume(n)
    }
}

impl<S: Server> NestService<S> {
    /// What the driver does after a step.
    fn next(&self, step: Step, io: &mut Io<'_>) -> Next {
        match step {
            Step::Close => Next::Close,
            Step::Drain => {
                // The send timeout watches a peer that does not read.
                io.set_deadline(None);
                Next::Drain
            }
            Step::Read => {
                let at = io.now() + self.idle();
                io.set_deadline(Some(at));
                BufferedSocket::with_limit(io, self.engine.options.output_buffer).next()
            }
        }
    }
}

impl<S: Server> Handler for NestService<S> {
    type Conn = Machine<S::Conn>;

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> (Self::Conn, Next) {
        let (output, pool) = io.output_and_pool();
        let mut sink = IoSink { output, pool };
        let (m, step) = self.engine.open(Some(opened.peer()), &mut sink);
        let next = self.next(step, io);
        (m, next)
    }

    fn on_ready(&mut self, m: &mut Self::Conn, io: &mut Io<'_>) -> Next {
        let eof = io.eof();
        let parts = io.parts();
        let mut sink = IoSink {
            output: parts.output,
            pool: parts.pool,
        };
        let mut input = IoInput(parts.input);
        let step = self
            .engine
            .feed(m, &mut self.scratch, &mut input, eof, &mut sink);
        self.next(step, io)
    }

    fn on_timeout(&mut self, m: &mut Self::Conn, io: &mut Io<'_>) -> Next {
        let (output, pool) = io.output_and_pool();
        let mut sink = IoSink { output, pool };
        let why = format!("idle timeout (no input for {:?})", self.idle());
        self.engine.end(m, &mut sink, &why);
        Next::Close
    }

    fn on_drain(&mut self, m: &mut Self::Conn, io: &mut Io<'_>) -> Option<Next> {
        let (output, pool) = io.output_and_pool();
        let mut sink = IoSink { output, pool };
        self.engine.end(m, &mut sink, "server stopping");
        Some(Next::Close)
    }

    fn on_close(&mut self, mut m: Self::Conn, reason: CloseReason, _worker: &mut Worker<'_>) {
        if m.ended() {
            return;
        }
        let why = match reason {
            CloseReason::PeerGone => "peer gone",
            CloseReason::SendTimeout => "send timeout (the peer takes no output)",
            CloseReason::Error => "socket error",
            CloseReason::Shutdown => "server stopped",
            CloseReason::FileShrunk => "a file replied shrank while being sent",
            _ => "connection ended",
        };
        // The peer can no longer be written to: END runs, its replies go nowhere.
        self.engine.end(&mut m, &mut NoSink, why);
    }
}
