//! [`ThriftSocket`]: a [`BufferedSocket`] that reads and writes whole Thrift messages.

use fastpath_drivers::ConnRef;
use fastpath_thrift::{Decoded, Decoder, Encoder, Error, Header, Message};

use crate::relay::{Posted, Relay};
use crate::BufferedSocket;

/// A connection that speaks Apache Thrift's binary protocol (strict or old non-strict message
/// headers, framed or plain transport, as its [`Decoder`] says): Slick's ThriftSocket.
///
/// [`ThriftSocket::next`] gives the next whole message without copying it (its name, type,
/// sequence id and fields are read in place), or `None` until it has arrived;
/// [`ThriftSocket::discard`] drops it; [`ThriftSocket::forward`] moves it to another
/// connection's queue as it came, without decoding and encoding it again; and
/// [`ThriftSocket::write`] encodes a message into the output, whole. Input the decoder
/// refuses (a bad version, a length past the limits, nesting too deep, an unknown type) comes
/// back as an [`Error`] that says why: the service logs it and closes the connection.
///
/// ```
/// use fastpath_sockets::{BufferedSocket, Io, Next, ThriftSocket};
/// use fastpath_sockets::thrift::{Decoder, Header, Limits, MessageType, Transport};
///
/// /// Answers every call with an empty reply of the same name and sequence id.
/// fn on_ready(io: &mut Io<'_>, decoder: &Decoder) -> Next {
///     let mut sock = ThriftSocket::new(BufferedSocket::new(io), decoder);
///     loop {
///         let (name, seq_id) = match sock.next() {
///             Ok(Some(call)) => (call.name().to_vec(), call.seq_id()),
///             Ok(None) => return sock.buffered().next(),
///             Err(reason) => {
///                 eprintln!("closing: {reason}");
///                 return Next::Abort;
///             }
///         };
///         sock.discard();
///         let header = Header { name: &name, message_type: MessageType::Reply, seq_id, strict: true };
///         // A reply with no fields: the encoder ends the struct itself.
///         sock.write(header, |_reply| {});
///     }
/// }
/// # let _ = (Decoder::new(Transport::Framed, Limits::default()), on_ready);
/// ```
pub struct ThriftSocket<'s, 'io, 'd> {
    sock: BufferedSocket<'s, 'io>,
    decoder: &'d Decoder,
    /// The length on the wire of the message the last `next` gave.
    current: usize,
}

impl<'s, 'io, 'd> ThriftSocket<'s, 'io, 'd> {
    /// Reads and writes messages on `sock` as `decoder` says (transport and limits).
    pub fn new(sock: BufferedSocket<'s, 'io>, decoder: &'d Decoder) -> Self {
        ThriftSocket {
            sock,
            decoder,
            current: 0,
        }
    }

    /// The next whole message, `None` until it has all arrived, or why the input is bad.
    // Named as Slick's ThriftSocket_next; not an Iterator, as the message borrows the socket.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Message<'_>>, Error> {
        match self.decoder.decode(self.sock.peek())? {
            Decoded::Message(message) => {
                self.current = message.wire_len();
                Ok(Some(message))
            }
            Decoded::NeedMore(_) => {
                self.current = 0;
                Ok(None)
            }
        }
    }

    /// Drops the message the last [`ThriftSocket::next`] gave; false if it gave none.
    pub fn discard(&mut self) -> bool {
        let len = std::mem::take(&mut self.current);
        self.sock.discard(len) > 0
    }

    /// Moves the message the last [`ThriftSocket::next`] gave, byte for byte as it came (frame
    /// header included), to route `route` of `relay`, and drops it here.
    pub fn forward(&mut self, relay: &mut Relay, route: usize) -> Option<Posted> {
        let len = std::mem::take(&mut self.current);
        if len == 0 {
            return None;
        }
        let from: ConnRef = self.sock.me();
        let posted = relay.post(route, &self.sock.peek()[..len], from);
        self.sock.discard(len);
        Some(posted)
    }

    /// Writes one message, whole: its header, then the fields `fill` encodes (the argument
    /// struct's end is written after them), framed if the transport is.
    pub fn write(&mut self, header: Header<'_>, fill: impl FnOnce(&mut Encoder<'_>)) {
        let transport = self.decoder.transport();
        self.sock.write_with(|out| {
            let mut encoder = Encoder::new(out, transport, header);
            fill(&mut encoder);
            encoder.finish();
        });
    }

    /// Writes a message already encoded (as [`Message::wire_bytes`] gives it), whole.
    pub fn write_raw(&mut self, wire_bytes: &[u8]) {
        self.sock.write_all(wire_bytes);
    }

    /// The buffered socket underneath.
    pub fn buffered(&mut self) -> &mut BufferedSocket<'s, 'io> {
        &mut self.sock
    }
}
