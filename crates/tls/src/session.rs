//! One TLS connection: a rustls `ServerConnection` between the engine's buffers.

use std::io::{Read, Write};
use std::sync::Arc;

use fastpath_drivers::{Received, Transport, TransportError, TransportInfo};
use rustls::server::ServerConfig;
use rustls::{HandshakeKind, ServerConnection};

/// Plain HTTP sent to a TLS port gets this, as nginx answers it, rather than a TLS alert the
/// person at the other end could not read.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
    Content-Type: text/plain; charset=utf-8\r\n\
    Content-Length: 54\r\n\
    Connection: close\r\n\
    \r\n\
    This port speaks HTTPS: the request was sent as HTTP.\n";

/// A TLS connection of a [`crate::TlsSetup`]'s listener.
pub struct TlsSession {
    conn: ServerConnection,
    /// No byte has arrived yet: the first ones are looked at for plain HTTP.
    fresh: bool,
    /// Bytes queued outside rustls (the plain-HTTP answer).
    answer: &'static [u8],
}

impl TlsSession {
    /// A connection under `config`, waiting for the ClientHello.
    pub fn new(config: Arc<ServerConfig>) -> Self {
        let mut conn = ServerConnection::new(config).expect("a server connection starts");
        // What is encoded ahead of the socket is bounded by the engine (ENCODE_AHEAD), so
        // rustls takes all the plaintext it is given.
        conn.set_buffer_limit(None);
        TlsSession {
            conn,
            fresh: true,
            answer: b"",
        }
    }

    fn take_plaintext(&mut self, plain: &mut Vec<u8>, n: usize) -> Result<(), TransportError> {
        let at = plain.len();
        plain.resize(at + n, 0);
        self.conn
            .reader()
            .read_exact(&mut plain[at..])
            .map_err(|e| failure("read", e.to_string()))
    }
}

fn failure(kind: &'static str, message: String) -> TransportError {
    TransportError { message, kind }
}

/// The metrics' name of a rustls error.
fn kind_of(error: &rustls::Error) -> &'static str {
    use rustls::Error::*;
    match error {
        InvalidMessage(_) => "bad_message",
        PeerIncompatible(_) => "incompatible",
        PeerMisbehaved(_) => "misbehaved",
        AlertReceived(_) => "alert_received",
        DecryptError => "decrypt",
        NoCertificatesPresented | InvalidCertificate(_) => "certificate",
        General(_) => "general",
        _ => "other",
    }
}

/// What the first bytes of a connection start with.
#[derive(Debug, PartialEq, Eq)]
enum Word {
    /// An HTTP method and a space: plain HTTP.
    Method,
    /// Upper-case letters so far, no longer than a method.
    Unfinished,
    /// Anything else: a TLS record starts with its content type (0x16 for a handshake).
    Other,
}

fn first_word(bytes: &[u8]) -> Word {
    /// Longer than any method a client sends first.
    const LONGEST_METHOD: usize = 16;
    let word = bytes.iter().take_while(|b| b.is_ascii_uppercase()).count();
    match bytes.get(word) {
        _ if word == 0 => Word::Other,
        Some(b' ') => Word::Method,
        None if word <= LONGEST_METHOD => Word::Unfinished,
        _ => Word::Other,
    }
}

impl Transport for TlsSession {
    fn receive(&mut self, wire: &[u8], plain: &mut Vec<u8>) -> Result<Received, TransportError> {
        if self.fresh && !wire.is_empty() {
            match first_word(wire) {
                // Maybe a method whose end has not arrived: a record starts otherwise.
                Word::Unfinished => return Ok(Received::default()),
                Word::Method => {
                    self.fresh = false;
                    self.answer = PLAIN_HTTP_ANSWER;
                    return Err(failure(
                        "plain_http",
                        "plain HTTP sent to a TLS port".to_owned(),
                    ));
                }
                Word::Other => self.fresh = false,
            }
        }
        let mut received = Received::default();
        while received.taken < wire.len() {
            let mut rest = &wire[received.taken..];
            let n = match self.conn.read_tls(&mut rest) {
                Ok(n) => n,
                // rustls holds all it may (plaintext not taken yet is impossible here: it is
                // taken after every record); what is left is offered again.
                Err(_) => break,
            };
            if n == 0 {
                break;
            }
            received.taken += n;
            let state = self
                .conn
                .process_new_packets()
                .map_err(|e| failure(kind_of(&e), format!("TLS: {e}")))?;
            let ready = state.plaintext_bytes_to_read();
            if ready > 0 {
                self.take_plaintext(plain, ready)?;
            }
            received.ended |= state.peer_has_closed();
        }
        Ok(received)
    }

    fn send(&mut self, plain: &[u8]) -> Result<(), TransportError> {
        self.conn
            .writer()
            .write_all(plain)
            .map_err(|e| failure("write", e.to_string()))
    }

    fn take_wire(&mut self, wire: &mut Vec<u8>) {
        if !self.answer.is_empty() {
            wire.extend_from_slice(std::mem::take(&mut self.answer));
            return;
        }
        while self.conn.wants_write() {
            // Writing into a Vec does not fail.
            if self.conn.write_tls(wire).is_err() {
                break;
            }
        }
    }

    fn wants_wire(&self) -> bool {
        !self.answer.is_empty() || self.conn.wants_write()
    }

    fn is_established(&self) -> bool {
        !self.conn.is_handshaking()
    }

    fn close(&mut self) {
        self.conn.send_close_notify();
    }

    fn info(&self) -> TransportInfo {
        TransportInfo {
            server_name: self
                .conn
                .server_name()
                .map(|name| name.to_ascii_lowercase().into_boxed_str()),
            alpn: self.conn.alpn_protocol().map(Box::from),
            protocol: match self.conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "TLS",
            },
            cipher: self
                .conn
                .negotiated_cipher_suite()
                .and_then(|suite| suite.suite().as_str())
                .unwrap_or("unknown"),
            resumed: self.conn.handshake_kind() == Some(HandshakeKind::Resumed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_told_from_records() {
        assert_eq!(first_word(b"GET / HTTP/1.1\r\n"), Word::Method);
        assert_eq!(first_word(b"PROPFIND /x"), Word::Method);
        assert_eq!(first_word(b"\x16\x03\x01\x02\x00"), Word::Other);
        assert_eq!(first_word(b"GE"), Word::Unfinished);
        assert_eq!(first_word(b"get / HTTP/1.1"), Word::Other);
        assert_eq!(first_word(b"ABCDEFGHIJKLMNOPQRSTU"), Word::Other);
    }
}
