//! The answers the server makes itself, written onto a connection's output with the
//! HTTP/1 encoder: static replies, and the short pages of errors and redirects. Each is a
//! head and a body of pieces ([`Piece`]): a static file's range stays a file range, a cached
//! file's content a shared buffer, so they leave without a copy.

use std::io::Write;

use fastpath_content::{Body, Part, Reply, Source};

use crate::module::Response;
use fastpath_drivers::{BufferPool, Output};
use fastpath_handover::exchange::OutputSink;
use fastpath_http::{
    reason_phrase, start_response, Fields, Framing, Head, HeadFields, Metadata, Piece, Sink,
    Version,
};

/// The type of the error pages.
const PAGE_TYPE: &[u8] = b"Content-Type: text/html; charset=utf-8\r\n";
/// A 405's fields: the methods the static path allows, then the page's type.
const ALLOW_AND_PAGE_TYPE: &[u8] =
    b"Allow: GET, HEAD\r\nContent-Type: text/html; charset=utf-8\r\n";
/// Bytes of the error page without its two "NNN Reason" strings.
const PAGE_OVERHEAD: usize =
    "<!DOCTYPE html>\n<html><head><title></title></head><body><h1></h1></body></html>\n".len();

/// How a request is answered, whatever the answer.
#[derive(Clone, Copy)]
pub(crate) struct Answer {
    /// The client's version.
    pub(crate) version: Version,
    /// HEAD: the head without the body.
    pub(crate) head: bool,
    /// The connection closes after the answer.
    pub(crate) close: bool,
}

impl Answer {
    /// The answer to a request that could not be read (or not in time).
    pub(crate) const BAD_REQUEST: Answer = Answer {
        version: Version::Http11,
        head: false,
        close: true,
    };
}

/// Where an answer goes: a connection's output, the worker's buffers, and the `Date` of
/// this second.
pub(crate) struct Writer<'a> {
    pub(crate) output: &'a mut Output,
    pub(crate) pool: &'a mut BufferPool,
    pub(crate) date: &'a [u8],
    /// Lines every head carries (see [`fastpath_http::Head::also`]).
    pub(crate) also: &'a [u8],
    /// Rules every head goes through (see [`fastpath_http::Head::edit`]).
    pub(crate) edit: Option<&'a dyn fastpath_http::HeadEdit>,
}

impl Writer<'_> {
    /// Queues a static reply, head and body; returns its status and body bytes.
    pub(crate) fn static_reply(&mut self, reply: &Reply, answer: Answer) -> (u16, u64) {
        let status = reply.status;
        if matches!(reply.body, Body::None) && (status >= 400 || status == 301) {
            let sent = self.page(status, answer, reply.metadata());
            return (status, sent);
        }
        // A cached file's 200 has its fields prebuilt: the head costs a copy.
        let fields = match &reply.fields {
            Some(fields) => HeadFields::Prebuilt(fields),
            None => HeadFields::Write(Fields {
                meta: reply.metadata(),
                extra: b"",
                content_length: (status != 304).then_some(reply.content_length),
            }),
        };
        let framing = if answer.head || status == 304 {
            Framing::None
        } else {
            Framing::Length(reply.content_length)
        };
        let head = head(self.date, status, fields, answer, (self.also, self.edit));
        let out = &mut self.sink();
        let mut body = start_response(&head, framing, out);
        match &reply.body {
            Body::None => {}
            Body::File { file, offset, len } => body.piece(
                Piece::File {
                    file: file.clone(),
                    offset: *offset,
                    len: *len,
                },
                out,
            ),
            // A whole in-memory file goes out shared with the cache; a slice is copied.
            Body::Memory { data, offset, len } if *offset == 0 && *len == data.len() => {
                body.piece(Piece::Shared(data.clone()), out)
            }
            Body::Memory { data, offset, len } => {
                body.piece(Piece::Bytes(&data[*offset..*offset + *len]), out)
            }
            Body::Parts { source, parts } => {
                for part in parts {
                    let piece = match (part, source) {
                        (Part::Bytes(bytes), _) => Piece::Bytes(bytes),
                        (Part::File { offset, len }, Source::File(file)) => Piece::File {
                            file: file.clone(),
                            offset: *offset,
                            len: *len,
                        },
                        (Part::File { offset, len }, Source::Memory(data)) => {
                            Piece::Bytes(&data[*offset as usize..(*offset + *len) as usize])
                        }
                    };
                    body.piece(piece, out);
                }
            }
        }
        body.end(out);
        let sent = if framing == Framing::None {
            0
        } else {
            reply.content_length
        };
        (status, sent)
    }

    /// Queues a 200 with `body`, whose head has the field lines `extra` (its
    /// `Content-Type`, say); returns its body bytes.
    pub(crate) fn document(&mut self, answer: Answer, extra: &[u8], body: &[u8]) -> u64 {
        let fields = HeadFields::Write(Fields {
            meta: Metadata::default(),
            extra,
            content_length: Some(body.len() as u64),
        });
        let framing = if answer.head {
            Framing::None
        } else {
            Framing::Length(body.len() as u64)
        };
        let head = head(self.date, 200, fields, answer, (self.also, self.edit));
        let out = &mut self.sink();
        let mut encoder = start_response(&head, framing, out);
        // Its own allocation, so that a large body does not grow a pooled buffer for good.
        encoder.piece(Piece::Shared(body.into()), out);
        encoder.end(out);
        encoder.written()
    }

    /// Queues a module's answer: its fields, and its body or the server's page for its
    /// status; returns its body bytes.
    pub(crate) fn module_response(&mut self, response: &Response, answer: Answer) -> u64 {
        let Some((content_type, body)) = &response.body else {
            let mut extra = response.fields.clone();
            extra.extend_from_slice(PAGE_TYPE);
            return self.page_with(response.status, answer, Metadata::default(), &extra);
        };
        let mut extra = response.fields.clone();
        extra.extend_from_slice(b"Content-Type: ");
        extra.extend_from_slice(content_type.as_bytes());
        extra.extend_from_slice(b"\r\n");
        let fields = HeadFields::Write(Fields {
            meta: Metadata::default(),
            extra: &extra,
            content_length: Some(body.len() as u64),
        });
        let framing = if answer.head {
            Framing::None
        } else {
            Framing::Length(body.len() as u64)
        };
        let head = head(
            self.date,
            response.status,
            fields,
            answer,
            (self.also, self.edit),
        );
        let out = &mut self.sink();
        let mut encoder = start_response(&head, framing, out);
        encoder.piece(Piece::Bytes(body), out);
        encoder.end(out);
        encoder.written()
    }

    /// Queues the page of an error status; returns its body bytes.
    pub(crate) fn error(&mut self, status: u16, answer: Answer) -> u64 {
        self.page(status, answer, Metadata::default())
    }

    /// Queues a 405 for a method the static path does not allow; returns its body bytes.
    pub(crate) fn method_not_allowed(&mut self, answer: Answer) -> u64 {
        self.page_with(405, answer, Metadata::default(), ALLOW_AND_PAGE_TYPE)
    }

    /// Queues a short HTML page for an error or redirect status whose head also carries
    /// `meta` (a redirect's Location, say); returns its body bytes.
    pub(crate) fn page(&mut self, status: u16, answer: Answer, meta: Metadata<'_>) -> u64 {
        self.page_with(status, answer, meta, PAGE_TYPE)
    }

    /// A page whose head has the field lines `extra` after `meta`.
    fn page_with(&mut self, status: u16, answer: Answer, meta: Metadata<'_>, extra: &[u8]) -> u64 {
        let reason = reason_phrase(status);
        let page_len = PAGE_OVERHEAD + 2 * (4 + reason.len());
        let fields = HeadFields::Write(Fields {
            meta,
            extra,
            content_length: Some(page_len as u64),
        });
        let framing = if answer.head {
            Framing::None
        } else {
            Framing::Length(page_len as u64)
        };
        let head = head(self.date, status, fields, answer, (self.also, self.edit));
        let out = &mut self.sink();
        let mut body = start_response(&head, framing, out);
        if !answer.head {
            // Written in place (after the head, in the same buffer): a page is never kept.
            out.write_with(|out| {
                let before = out.len();
                let _ = write!(
                    out,
                    "<!DOCTYPE html>\n<html><head><title>{status} {reason}</title></head><body><h1>{status} {reason}</h1></body></html>\n"
                );
                debug_assert_eq!(out.len() - before, page_len);
            });
            body.wrote(page_len as u64);
        }
        body.end(out);
        body.written()
    }

    /// The connection's output as the encoder's sink.
    fn sink(&mut self) -> OutputSink<'_> {
        OutputSink {
            output: self.output,
            pool: self.pool,
        }
    }
}

/// The head of an answer: what every head fastpath makes shares.
fn head<'h>(
    date: &'h [u8],
    status: u16,
    fields: HeadFields<'h>,
    answer: Answer,
    (also, edit): (&'h [u8], Option<&'h dyn fastpath_http::HeadEdit>),
) -> Head<'h> {
    Head {
        status,
        date,
        fields,
        version: answer.version,
        close: answer.close,
        also,
        edit,
    }
}
