//! The per-connection state machine, the same for every model and for inetd: START at open,
//! then matching (or receiving a file), END once before the close.

use std::net::SocketAddr;

use crate::cx::{Captures, Cx, Effects, Sink};
use crate::options::Options;
use crate::pattern::{self, Pattern, Progress, Scan, Scratch};
use crate::receive::Receive;
use crate::{Server, StateId, States};

/// What a process shares between its connections: the server, its compiled patterns, its
/// options. Built once, before serving.
pub(crate) struct Engine<S: Server> {
    pub(crate) server: S,
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) options: Options,
}

/// One connection of a generated server: its variables, its states, and what it is doing.
pub struct Machine<C> {
    pub(crate) conn: C,
    states: States,
    receive: Option<Receive>,
    /// Each rule's scan of the unconsumed input so far; reset when input is consumed.
    progress: Vec<Progress>,
    /// The last arrival left input unmatched: scan on from where it stopped.
    scanning: bool,
    ended: bool,
    peer: Option<SocketAddr>,
}

/// The unconsumed input, in the driver's buffer or inetd's.
pub(crate) trait InputBuf {
    fn data(&self) -> &[u8];
    fn consume(&mut self, n: usize);
}

/// What the connection does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Wait for more input.
    Read,
    /// Wait for the output to drain below outputBuffer before matching more.
    Drain,
    /// END has run: close once the output is sent.
    Close,
}

impl<S: Server> Engine<S> {
    /// Compiles the specification's patterns; errors are `FILE:LINE: message`.
    pub(crate) fn new(server: S, options: Options) -> Result<Engine<S>, String> {
        let spec = server.spec();
        let mut patterns = Vec::with_capacity(spec.rules.len());
        for rule in spec.rules {
            let p = pattern::compile(rule.pattern)
                .map_err(|e| format!("{}:{}: {e}", spec.file, rule.line))?;
            patterns.push(p);
        }
        Ok(Engine {
            server,
            patterns,
            options,
        })
    }

    /// Scratch space for a worker.
    pub(crate) fn scratch(&self) -> Vec<Scratch> {
        self.patterns.iter().map(Pattern::scratch).collect()
    }

    /// A new connection: runs START (which may reply and may close), then DEFAULT is seen.
    pub(crate) fn open(
        &self,
        peer: Option<SocketAddr>,
        sink: &mut dyn Sink,
    ) -> (Machine<S::Conn>, Step) {
        let mut m = Machine {
            conn: S::Conn::default(),
            states: States::new(self.server.spec().states.len()),
            receive: None,
            progress: vec![Progress::default(); self.patterns.len()],
            scanning: false,
            ended: false,
            peer,
        };
        m.states.set(StateId::START);
        m.states.last = None;
        let mut effects = Effects::default();
        {
            let mut cx = Cx {
                states: &mut m.states,
                sink,
                effects: &mut effects,
                options: &self.options,
                peer,
                ending: false,
            };
            self.server.start(&mut m.conn, &mut cx);
        }
        // DEFAULT is seen on leaving START; it is also the last seen unless START saw one.
        let last = m.states.last;
        m.states.set(StateId::DEFAULT);
        if last.is_some() {
            m.states.last = last;
        }
        m.receive = effects.receive;
        if effects.close {
            self.end(&mut m, sink, "closed by $close in START");
            return (m, Step::Close);
        }
        (m, Step::Read)
    }

    /// Handles the input at hand: receives into a file or matches rules and runs their
    /// actions, until the input is used up (or cannot be matched yet), the output is full, or
    /// the connection ends. `eof`: the peer has finished sending.
    pub(crate) fn feed(
        &self,
        m: &mut Machine<S::Conn>,
        scratch: &mut [Scratch],
        input: &mut dyn InputBuf,
        eof: bool,
        sink: &mut dyn Sink,
    ) -> Step {
        let spec = self.server.spec();
        loop {
            if m.ended {
                return Step::Close;
            }
            if sink.failed() {
                self.end(m, sink, "write error");
                return Step::Close;
            }
            if let Some(r) = &mut m.receive {
                m.progress.fill(Progress::default());
                m.scanning = false;
                match receive(r, input, eof) {
                    Ok(true) => {
                        let r = m.receive.take().expect("receiving");
                        if let Err(e) = r.finish() {
                            let why =
                                format!("$fileReceive: cannot rename {}: {e}", r.part.display());
                            self.end(m, sink, &why);
                            return Step::Close;
                        }
                        tracing::debug!(
                            "{}: received {} ({} bytes)",
                            who(m.peer),
                            r.target.display(),
                            r.received
                        );
                        continue;
                    }
                    Ok(false) if eof => {
                        let why = format!(
                            "peer closed after {} of {} bytes of {}",
                            r.received,
                            r.received + r.remaining.unwrap_or(0),
                            r.target.display()
                        );
                        self.end(m, sink, &why);
                        return Step::Close;
                    }
                    Ok(false) => return Step::Read,
                    Err(e) => {
                        let why = format!("$fileReceive: cannot write {}: {e}", r.part.display());
                        self.end(m, sink, &why);
                        return Step::Close;
                    }
                }
            }
            if sink.queued() >= self.options.output_buffer {
                return Step::Drain;
            }
            let data = input.data();
            // A match never takes more than inputBuffer bytes: what lies beyond waits.
            let hay = &data[..data.len().min(self.options.input_buffer)];
            if hay.is_empty() {
                if eof {
                    self.end(m, sink, "peer closed");
                    return Step::Close;
                }
                return Step::Read;
            }
            // Longest match over every qualifying rule; ties to the rule written first. Input
            // that has just arrived is searched with each rule's regex (fastest); input left
            // unmatched by an earlier arrival is scanned on from where that scan stopped, so
            // a line that arrives a byte at a time costs linear time, not quadratic.
            let mut best: Option<(usize, usize)> = None;
            let mut viable = false;
            if !m.scanning {
                for (i, p) in self.patterns.iter().enumerate() {
                    if !self.server.qualifies(i, &m.states) {
                        continue;
                    }
                    if let Some(len) = p.match_len(&mut scratch[i], hay) {
                        if best.is_none_or(|(_, l)| len > l) {
                            best = Some((i, len));
                        }
                    }
                }
            }
            if best.is_none() {
                m.scanning = true;
                for (i, p) in self.patterns.iter().enumerate() {
                    if !self.server.qualifies(i, &m.states) {
                        continue;
                    }
                    match p.scan(&mut scratch[i], &mut m.progress[i], hay) {
                        Scan::Match(len) => {
                            if best.is_none_or(|(_, l)| len > l) {
                                best = Some((i, len));
                            }
                        }
                        Scan::Viable => viable = true,
                        Scan::Dead => {}
                    }
                }
            }
            if let Some((rule, len)) = best {
                let p = &self.patterns[rule];
                let found = p.capture(&mut scratch[rule], hay, len);
                debug_assert_eq!(found, Some(len), "the regex and the DFA agree");
                let mut effects = Effects::default();
                {
                    let captures = Captures::new(scratch[rule].captures(), hay);
                    let mut cx = Cx {
                        states: &mut m.states,
                        sink,
                        effects: &mut effects,
                        options: &self.options,
                        peer: m.peer,
                        ending: false,
                    };
                    self.server.action(rule, &mut m.conn, &mut cx, &captures);
                }
                input.consume(len);
                if m.scanning {
                    m.progress.fill(Progress::default());
                    m.scanning = false;
                }
                m.receive = effects.receive.or(m.receive.take());
                if effects.close {
                    let why = format!("closed by $close ({}:{})", spec.file, spec.rules[rule].line);
                    self.end(m, sink, &why);
                    return Step::Close;
                }
                continue;
            }
            if !viable {
                self.end(m, sink, "input matches no rule");
                return Step::Close;
            }
            if hay.len() >= self.options.input_buffer {
                let why = format!(
                    "input buffer full ({} bytes unmatched)",
                    self.options.input_buffer
                );
                self.end(m, sink, &why);
                return Step::Close;
            }
            if eof {
                self.end(m, sink, "peer closed with unmatched input");
                return Step::Close;
            }
            return Step::Read;
        }
    }

    /// Runs END, once, with `reason` logged; what it replies goes to `sink`. A file being
    /// received is removed.
    pub(crate) fn end(&self, m: &mut Machine<S::Conn>, sink: &mut dyn Sink, reason: &str) {
        if m.ended {
            return;
        }
        m.ended = true;
        if let Some(r) = m.receive.take() {
            r.abandon();
        }
        let quiet = matches!(reason, "peer closed" | "server stopping")
            || reason.starts_with("closed by $close");
        if quiet {
            tracing::debug!("{}: closing: {reason}", who(m.peer));
        } else {
            tracing::info!("{}: closing: {reason}", who(m.peer));
        }
        m.states.set(StateId::END);
        let mut effects = Effects::default();
        let mut cx = Cx {
            states: &mut m.states,
            sink,
            effects: &mut effects,
            options: &self.options,
            peer: m.peer,
            ending: true,
        };
        self.server.end(&mut m.conn, &mut cx);
    }
}

impl<C> Machine<C> {
    /// END has run.
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }
}

/// Moves input into the file being received; true once it is complete (the length reached,
/// or, without a length, the peer finished).
fn receive(r: &mut Receive, input: &mut dyn InputBuf, eof: bool) -> std::io::Result<bool> {
    let taken = r.write(input.data())?;
    input.consume(taken);
    Ok(r.complete(eof))
}

pub(crate) fn who(peer: Option<SocketAddr>) -> String {
    match peer {
        Some(p) => format!("client {p}"),
        None => "client".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::fs::File;
    use std::sync::Arc;

    use super::*;
    use crate::{Rule, Spec};

    const A: StateId = StateId(3);

    static SPEC: Spec = Spec {
        name: "t",
        file: "t.nest",
        states: &["START", "END", "DEFAULT", "A"],
        rules: &[
            Rule {
                line: 1,
                pattern: "ab",
            },
            Rule {
                line: 2,
                pattern: "abc",
            },
            Rule {
                line: 3,
                pattern: "ab|xy",
            },
            Rule {
                line: 4,
                pattern: "only-in-a\n",
            },
        ],
        options: &[],
    };

    /// Replies with the rule's number and the states it saw.
    struct T;

    impl Server for T {
        type Conn = Vec<String>;
        fn spec(&self) -> &'static Spec {
            &SPEC
        }
        fn qualifies(&self, rule: usize, states: &States) -> bool {
            match rule {
                0..=2 => states.is(StateId::DEFAULT),
                _ => states.is(A),
            }
        }
        fn start(&self, conn: &mut Vec<String>, cx: &mut Cx<'_>) {
            conn.push(format!("start: START {}", cx.states().is(StateId::START)));
        }
        fn end(&self, _conn: &mut Vec<String>, cx: &mut Cx<'_>) {
            cx.reply(format_args!("end;"));
        }
        fn action(&self, rule: usize, _conn: &mut Vec<String>, cx: &mut Cx<'_>, m: &Captures<'_>) {
            cx.reply(format_args!("{rule}:{};", m.text(0)));
            if rule == 2 {
                cx.clear_all();
                cx.seen(A);
            }
        }
    }

    #[derive(Default)]
    struct VecSink(Vec<u8>);

    impl Sink for VecSink {
        fn bytes(&mut self, b: &[u8]) {
            self.0.extend_from_slice(b);
        }
        fn text(&mut self, args: fmt::Arguments<'_>) {
            use std::io::Write;
            let _ = self.0.write_fmt(args);
        }
        fn file(&mut self, _: Arc<File>, _: u64) {}
        fn queued(&self) -> usize {
            0
        }
    }

    struct Buf(Vec<u8>);

    impl InputBuf for Buf {
        fn data(&self) -> &[u8] {
            &self.0
        }
        fn consume(&mut self, n: usize) {
            self.0.drain(..n);
        }
    }

    #[test]
    fn longest_match_then_first_written() {
        let engine = Engine::new(T, Options::default()).unwrap();
        let mut scratch = engine.scratch();
        let mut sink = VecSink::default();
        let (mut m, step) = engine.open(None, &mut sink);
        assert_eq!(step, Step::Read);
        assert_eq!(m.conn, ["start: START true"]);
        // START is never cleared; DEFAULT was seen on leaving it, and is the last seen.
        assert!(m.states.last_seen(StateId::DEFAULT));
        // "abc": rule 1 is longer than rules 0 and 2. "ab" then: rules 0 and 2 tie, 0 wins.
        // "ab" alone could still become "abc": it is matched now (what is buffered decides).
        let mut input = Buf(b"abcab".to_vec());
        assert_eq!(
            engine.feed(&mut m, &mut scratch, &mut input, false, &mut sink),
            Step::Read
        );
        assert_eq!(String::from_utf8_lossy(&sink.0), "1:abc;0:ab;");
        // "xy": only rule 2, which clears every state but START and sees A.
        let mut input = Buf(b"xyonly-in".to_vec());
        assert_eq!(
            engine.feed(&mut m, &mut scratch, &mut input, false, &mut sink),
            Step::Read
        );
        assert!(m.states.is(StateId::START) && !m.states.is(StateId::DEFAULT));
        assert!(m.states.last_seen(A));
        assert_eq!(input.0, b"only-in", "a prefix of rule 3's pattern waits");
        // Rules 0-2 no longer qualify, and rule 3 cannot match "only-in-b" whatever follows.
        input.0.extend_from_slice(b"-b");
        let step = engine.feed(&mut m, &mut scratch, &mut input, false, &mut sink);
        assert_eq!(step, Step::Close);
        assert_eq!(String::from_utf8_lossy(&sink.0), "1:abc;0:ab;2:xy;end;");
        assert!(m.ended());
        // END runs once.
        engine.end(&mut m, &mut sink, "again");
        assert!(sink.0.ends_with(b"2:xy;end;"));
    }
}
