//! The bytes of an exchange: a request body read whole before the backend is asked
//! ([`BodyBuffer`]), a streamed one framed anew on its way ([`forward_body`]), a response
//! relayed to the client through the HTTP/1 encoder ([`relay_body`]) into a [`BodySink`]
//! that keeps a copy for the cache and reads ahead of a slow client into a temporary file
//! ([`Spill`]).

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Arc;

use fastpath_drivers::{BufferPool, Input, Output};
use fastpath_http::{
    BodyFilter, BodyForwarding, BodyRelay, ChunkedDecoder, Http1Body, Piece, Sink,
};

use crate::Capture;

/// A request body streamed to the backend as it arrives.
pub(crate) enum Streaming {
    /// This many bytes are left (the body is framed by length).
    Length(u64),
    /// Decoded, and sent on in chunks of fastpath's own.
    Chunked(Box<ChunkedDecoder>),
    /// All of it has gone.
    Done,
}

/// A request body read whole before the backend is asked, as nginx's
/// `proxy_request_buffering` does: in memory up to the backend's `request_buffer_memory`,
/// then in an unlinked temporary file (O_TMPFILE where the file system has it, so nothing is
/// ever left behind), which goes to the backend with sendfile.
pub(crate) struct BodyBuffer {
    /// Left to read of a body framed by length; a chunked body has its decoder instead.
    pub(crate) left: u64,
    pub(crate) decoder: Option<ChunkedDecoder>,
    memory: Vec<u8>,
    file: Option<Arc<File>>,
    /// Body bytes read (decoded, for a chunked body).
    pub(crate) len: u64,
    /// The head was staged open (`BodyForwarding::Open`): `Content-Length` ends it.
    pub(crate) open_head: bool,
    /// Codings other than chunked stay with the body, which then goes as one chunk.
    chunk: bool,
}

impl BodyBuffer {
    /// A buffer for a body framed by `length`, or chunked (`None`); `forwarding` says how
    /// the head was staged for it.
    pub(crate) fn new(length: Option<u64>, forwarding: BodyForwarding) -> Self {
        BodyBuffer {
            left: length.unwrap_or(0),
            decoder: length.is_none().then(ChunkedDecoder::new),
            memory: Vec::new(),
            file: None,
            len: 0,
            open_head: length.is_none() && forwarding == BodyForwarding::Open,
            chunk: length.is_none() && forwarding != BodyForwarding::Open,
        }
    }

    /// Keeps decoded body bytes: in memory while they fit, else in the temporary file.
    pub(crate) fn keep(&mut self, data: &[u8], memory_max: u64, dir: &Path) -> io::Result<()> {
        if self.file.is_none() && self.len + data.len() as u64 > memory_max {
            let mut file = tempfile::tempfile_in(dir)?;
            file.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(Arc::new(file));
        }
        match self.file.as_ref() {
            Some(file) => (&**file).write_all(data)?,
            None => self.memory.extend_from_slice(data),
        }
        self.len += data.len() as u64;
        Ok(())
    }

    /// Queues the body for the backend, after its head.
    pub(crate) fn send(&self, out: &mut Output, pool: &mut BufferPool) {
        if self.chunk && self.len > 0 {
            out.write_with(pool, |b| {
                b.extend_from_slice(format!("{:x}\r\n", self.len).as_bytes())
            });
        }
        match self.file.as_ref() {
            Some(file) => out.push_file(Arc::clone(file), 0, self.len),
            None => out.write_with(pool, |b| b.extend_from_slice(&self.memory)),
        }
        if self.chunk {
            let end: &[u8] = if self.len > 0 {
                b"\r\n0\r\n\r\n"
            } else {
                b"0\r\n\r\n"
            };
            out.write_with(pool, |b| b.extend_from_slice(end));
        }
    }
}

/// A response read ahead of a slow client (response buffering, nginx's `proxy_buffering`):
/// past the backend's `response_buffer_memory` of output waiting for the client, what the
/// backend sends is appended to an unlinked temporary file and queued as ranges of it, which
/// go to the client with sendfile. Past `max_temp_file_size`, or if no file can be made, the
/// response goes at the client's pace, as it does unbuffered.
#[derive(Default)]
pub(crate) struct Spill {
    file: Option<Arc<File>>,
    written: u64,
    /// No more goes to the file.
    pub(crate) full: bool,
}

/// Where relayed response bytes go: the client's output (through the temporary file when
/// buffering), and the copy being kept for the cache.
pub(crate) struct BodySink<'a> {
    pub(crate) out: &'a mut Output,
    pub(crate) pool: &'a mut BufferPool,
    pub(crate) capture: Option<&'a mut Capture>,
    /// When buffering: the spill, its memory threshold, its largest file and its directory.
    pub(crate) spill: Option<(&'a mut Spill, u64, u64, &'a Path)>,
}

impl Sink for BodySink<'_> {
    fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        // Framing the encoder makes (none for what is relayed today): kept and spilled like
        // the body bytes around it.
        let mut bytes = Vec::new();
        let result = write(&mut bytes);
        self.put(&bytes);
        result
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.put(bytes);
    }

    fn shared(&mut self, data: Arc<[u8]>) {
        self.put(&data);
    }

    fn file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        self.out.push_file(file, offset, len);
    }
}

/// A connection's output as the encoders' sink.
pub struct OutputSink<'a> {
    /// The output.
    pub output: &'a mut Output,
    /// The worker's buffers, for inline bytes.
    pub pool: &'a mut BufferPool,
}

impl Sink for OutputSink<'_> {
    fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.output.write_with(self.pool, write)
    }

    fn shared(&mut self, data: Arc<[u8]>) {
        self.output.push_shared(data);
    }

    fn file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        self.output.push_file(file, offset, len);
    }
}

impl BodySink<'_> {
    fn put(&mut self, data: &[u8]) {
        if let Some(capture) = self.capture.as_mut() {
            capture.push(data);
        }
        if let Some((spill, memory, max, dir)) = self.spill.as_mut() {
            let spilling = spill.file.is_some() || self.out.pending() + data.len() as u64 > *memory;
            if spilling && !spill.full {
                if spill.written + data.len() as u64 > *max {
                    spill.full = true;
                } else {
                    match Self::append(spill, dir, data) {
                        Ok(file) => {
                            self.out.push_file(file, spill.written, data.len() as u64);
                            spill.written += data.len() as u64;
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(
                                "cannot buffer a response in {}: {e}; it goes at the client's pace",
                                dir.display()
                            );
                            spill.full = true;
                        }
                    }
                }
            }
        }
        self.out
            .write_with(self.pool, |b| b.extend_from_slice(data));
    }

    fn append(spill: &mut Spill, dir: &Path, data: &[u8]) -> io::Result<Arc<File>> {
        if spill.file.is_none() {
            spill.file = Some(Arc::new(tempfile::tempfile_in(dir)?));
        }
        let file = spill.file.as_ref().expect("made above");
        (&**file).write_all(data)?;
        Ok(Arc::clone(file))
    }
}

/// Moves request body bytes from the client's input to the backend's output; returns how
/// many moved. A chunked body is decoded and sent on in chunks of its own, one per call:
/// never the client's framing, extensions or trailers (see `BodyForwarding`); `streamed`
/// counts its decoded bytes against `max_body` (0 for none): 413 past it.
pub(crate) fn forward_body(
    body: &mut Streaming,
    input: &mut Input,
    out: &mut Output,
    pool: &mut BufferPool,
    streamed: &mut u64,
    max_body: u64,
) -> Result<usize, u16> {
    match body {
        Streaming::Done => Ok(0),
        Streaming::Length(remaining) => {
            let n = (*remaining).min(input.len() as u64) as usize;
            if n > 0 {
                let data = &input.data()[..n];
                out.write_with(pool, |b| b.extend_from_slice(data));
                input.consume(n);
                *remaining -= n as u64;
            }
            if *remaining == 0 {
                *body = Streaming::Done;
            }
            Ok(n)
        }
        Streaming::Chunked(decoder) => {
            let data = input.data();
            let (used, done) = out
                .write_with(pool, |b| {
                    // The chunk's size goes before its data once known: room for it is left,
                    // then the header is written in and the data moved up to it.
                    let at = b.len();
                    b.extend_from_slice(&[0; CHUNK_HEADER_ROOM]);
                    let fed = decoder.feed(data, |piece| b.extend_from_slice(piece));
                    let len = b.len() - at - CHUNK_HEADER_ROOM;
                    if len == 0 {
                        b.truncate(at);
                    } else {
                        let header = format!("{len:x}\r\n");
                        let skip = CHUNK_HEADER_ROOM - header.len();
                        b[at + skip..at + CHUNK_HEADER_ROOM].copy_from_slice(header.as_bytes());
                        b.drain(at..at + skip);
                        b.extend_from_slice(b"\r\n");
                    }
                    if matches!(fed, Ok((_, true))) {
                        b.extend_from_slice(b"0\r\n\r\n");
                    }
                    *streamed += len as u64;
                    fed
                })
                .map_err(|e| e.status)?;
            if max_body > 0 && *streamed > max_body {
                return Err(413);
            }
            input.consume(used);
            if done {
                *body = Streaming::Done;
            }
            Ok(used)
        }
    }
}

/// Room left before a chunk's data for its size line: 16 hex digits and CRLF.
const CHUNK_HEADER_ROOM: usize = 18;

/// A body coded on the way to the client: the filter, and its output between pieces.
pub(crate) struct Coded {
    filter: Box<dyn BodyFilter>,
    out: Vec<u8>,
    ended: bool,
}

impl Coded {
    pub(crate) fn new(filter: Box<dyn BodyFilter>) -> Coded {
        Coded {
            filter,
            out: Vec::new(),
            ended: false,
        }
    }

    /// Codes `piece`, passing what the filter has ready to `encoder`; the bytes passed.
    fn push(&mut self, piece: &[u8], encoder: &mut Http1Body, sink: &mut BodySink<'_>) -> u64 {
        self.filter.push(piece, &mut self.out);
        self.pass(encoder, sink)
    }

    /// Ends the coded body when the backend's is `done`, else makes what was coded so far
    /// decodable: either way it all goes to `encoder`.
    pub(crate) fn end_or_flush(
        &mut self,
        done: bool,
        encoder: &mut Http1Body,
        sink: &mut BodySink<'_>,
    ) {
        if done {
            if !std::mem::replace(&mut self.ended, true) {
                self.filter.finish(&mut self.out);
            }
        } else {
            self.filter.flush(&mut self.out);
        }
        self.pass(encoder, sink);
    }

    fn pass(&mut self, encoder: &mut Http1Body, sink: &mut BodySink<'_>) -> u64 {
        let n = self.out.len();
        if n > 0 {
            encoder.piece(Piece::Bytes(&self.out), sink);
            self.out.clear();
        }
        n as u64
    }
}

/// Moves response body bytes from the backend's input through `encoder` (after `filter`, if
/// the body is coded on the way) to `sink`. Returns the body bytes moved (what the filter
/// passed on, for a coded body) and whether the body is complete; `Err` for a malformed
/// chunked body.
pub(crate) fn relay_body(
    relay: &BodyRelay,
    remaining: &mut u64,
    decoder: &mut Option<Box<ChunkedDecoder>>,
    input: &mut Input,
    (encoder, mut filter): (&mut Http1Body, Option<&mut Coded>),
    sink: &mut BodySink<'_>,
) -> Result<(u64, bool), ()> {
    let mut pass = |piece: &[u8], encoder: &mut Http1Body, sink: &mut BodySink<'_>| match filter
        .as_deref_mut()
    {
        Some(coded) => coded.push(piece, encoder, sink),
        None => {
            encoder.piece(Piece::Bytes(piece), sink);
            piece.len() as u64
        }
    };
    match relay {
        BodyRelay::None => Ok((0, true)),
        BodyRelay::Length(_) => {
            let n = (*remaining).min(input.len() as u64) as usize;
            let mut moved = 0;
            if n > 0 {
                moved = pass(&input.data()[..n], encoder, sink);
                input.consume(n);
                *remaining -= n as u64;
            }
            Ok((moved, *remaining == 0))
        }
        BodyRelay::UntilClose => {
            let n = input.len();
            let mut moved = 0;
            if n > 0 {
                moved = pass(input.data(), encoder, sink);
                input.consume(n);
            }
            Ok((moved, false))
        }
        BodyRelay::Chunked => {
            // Passed as it came, chunk lines and trailers included: the decoder only finds
            // where it ends.
            let decoder = decoder.as_mut().ok_or(())?;
            let (used, done) = decoder.feed(input.data(), |_| {}).map_err(|_| ())?;
            if used > 0 {
                encoder.piece(Piece::Bytes(&input.data()[..used]), sink);
                input.consume(used);
            }
            Ok((used as u64, done))
        }
        BodyRelay::Dechunk => {
            let decoder = decoder.as_mut().ok_or(())?;
            let mut moved = 0u64;
            let data = input.data();
            let (used, done) = decoder
                .feed(data, |piece| moved += pass(piece, encoder, sink))
                .map_err(|_| ())?;
            input.consume(used);
            Ok((moved, done))
        }
    }
}
