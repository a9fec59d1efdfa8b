//! HTTP/2 framing (RFC 9113 §4–§7): the connection preface, the frame
//! header, every frame type read and checked, the error codes, and writers
//! for the frames fastpath sends.
//!
//! Reading is sans-I/O and copies nothing: [`FrameReader::parse`] takes the
//! bytes read so far and returns `Ok(None)` until a whole frame is there,
//! then the [`Frame`] borrowing its payload from those bytes and how many
//! bytes it took. A DATA frame's body is a slice of the read buffer the
//! caller hands on as it is. Writing appends frame headers and fixed fields
//! to a `Vec<u8>`; a DATA frame gets only its header
//! ([`write_data_header`]), so that its payload can follow from a shared
//! buffer or a file range without passing through a copy.
//!
//! ```
//! use fastpath_http::h2::{
//!     write_data_header, write_settings, Frame, FrameReader, Setting, DEFAULT_MAX_FRAME_SIZE,
//! };
//!
//! let mut wire = Vec::new();
//! write_settings(&[Setting::MaxConcurrentStreams(100)], &mut wire);
//! write_data_header(1, 5, true, &mut wire);
//! wire.extend_from_slice(b"hello"); // from wherever the body lives
//!
//! let reader = FrameReader::new(DEFAULT_MAX_FRAME_SIZE);
//! assert_eq!(reader.parse(&wire[..10]).unwrap(), None); // need more
//! let (settings, used) = reader.parse(&wire).unwrap().unwrap();
//! let Frame::Settings { ack: false, settings } = settings else { panic!() };
//! assert_eq!(settings.iter().collect::<Vec<_>>(), [Setting::MaxConcurrentStreams(100)]);
//! let (data, _) = reader.parse(&wire[used..]).unwrap().unwrap();
//! assert_eq!(
//!     data,
//!     Frame::Data { stream_id: 1, data: b"hello", end_stream: true, flow_controlled_len: 5 }
//! );
//! ```
//!
//! Every check RFC 9113 puts on a single frame is made here, each failure a
//! [`FrameError`] saying whether the connection must end (GOAWAY) or only
//! the stream (RST_STREAM), with which [`ErrorCode`] and why. What needs
//! more than one frame is elsewhere: [`super::HeaderBlockAssembler`] joins
//! HEADERS and CONTINUATION frames, [`super::Window`] does flow-control
//! arithmetic, and stream states are the connection's business.

use std::fmt;

/// The client connection preface (RFC 9113 §3.4), followed by a SETTINGS
/// frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The length of a frame header (RFC 9113 §4.1).
pub const FRAME_HEADER_LEN: usize = 9;

/// SETTINGS_MAX_FRAME_SIZE's initial value, and the least it may be set to.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;

/// The most SETTINGS_MAX_FRAME_SIZE may be set to: 2^24 − 1, what the
/// 24-bit length field holds.
pub const MAX_FRAME_SIZE_LIMIT: u32 = (1 << 24) - 1;

/// The largest flow-control window, and the largest stream identifier:
/// 2^31 − 1.
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

/// SETTINGS_INITIAL_WINDOW_SIZE's initial value, which is also every
/// connection's first window (RFC 9113 §6.9.2).
pub const DEFAULT_INITIAL_WINDOW_SIZE: u32 = 65_535;

/// The flag bits of RFC 9113 §6; each applies only to the frame types named.
pub mod flags {
    /// DATA, HEADERS: the last frame the sender sends on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION: the field block ends here.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS, PUSH_PROMISE: a pad length and padding are present.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: the RFC 7540 priority fields are present.
    pub const PRIORITY: u8 = 0x20;
}

/// Whether the first bytes of a plaintext connection are the HTTP/2
/// preface ([`detect_preface`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefaceMatch {
    /// All 24 bytes of [`PREFACE`] are there: HTTP/2 with prior knowledge.
    Http2,
    /// The bytes differ from the preface: another protocol, HTTP/1 for one.
    NotHttp2,
    /// The bytes so far agree with the preface but are fewer than 24.
    NeedMore,
}

/// Tells HTTP/2 with prior knowledge (h2c) from HTTP/1 on a plaintext
/// connection, from the bytes read so far. An HTTP/1 request never starts
/// with `PRI * HTTP/2.0`, and one that starts with `PRI ` differs by its
/// fourth byte after that, so the answer comes as soon as the bytes differ.
pub fn detect_preface(input: &[u8]) -> PrefaceMatch {
    let n = input.len().min(PREFACE.len());
    if input[..n] != PREFACE[..n] {
        PrefaceMatch::NotHttp2
    } else if n < PREFACE.len() {
        PrefaceMatch::NeedMore
    } else {
        PrefaceMatch::Http2
    }
}

/// The frame types of RFC 9113 §6 and RFC 9218's PRIORITY_UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    /// DATA (0x0).
    Data = 0x0,
    /// HEADERS (0x1).
    Headers = 0x1,
    /// PRIORITY (0x2).
    Priority = 0x2,
    /// RST_STREAM (0x3).
    RstStream = 0x3,
    /// SETTINGS (0x4).
    Settings = 0x4,
    /// PUSH_PROMISE (0x5).
    PushPromise = 0x5,
    /// PING (0x6).
    Ping = 0x6,
    /// GOAWAY (0x7).
    GoAway = 0x7,
    /// WINDOW_UPDATE (0x8).
    WindowUpdate = 0x8,
    /// CONTINUATION (0x9).
    Continuation = 0x9,
    /// PRIORITY_UPDATE (0x10, RFC 9218 §7.1).
    PriorityUpdate = 0x10,
}

impl FrameType {
    /// The type with this code, if it is one of those above.
    pub fn from_u8(code: u8) -> Option<FrameType> {
        Some(match code {
            0x0 => FrameType::Data,
            0x1 => FrameType::Headers,
            0x2 => FrameType::Priority,
            0x3 => FrameType::RstStream,
            0x4 => FrameType::Settings,
            0x5 => FrameType::PushPromise,
            0x6 => FrameType::Ping,
            0x7 => FrameType::GoAway,
            0x8 => FrameType::WindowUpdate,
            0x9 => FrameType::Continuation,
            0x10 => FrameType::PriorityUpdate,
            _ => return None,
        })
    }

    /// The type's name as the RFCs write it.
    pub fn name(self) -> &'static str {
        match self {
            FrameType::Data => "DATA",
            FrameType::Headers => "HEADERS",
            FrameType::Priority => "PRIORITY",
            FrameType::RstStream => "RST_STREAM",
            FrameType::Settings => "SETTINGS",
            FrameType::PushPromise => "PUSH_PROMISE",
            FrameType::Ping => "PING",
            FrameType::GoAway => "GOAWAY",
            FrameType::WindowUpdate => "WINDOW_UPDATE",
            FrameType::Continuation => "CONTINUATION",
            FrameType::PriorityUpdate => "PRIORITY_UPDATE",
        }
    }
}

impl fmt::Display for FrameType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A frame header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The payload's length: 24 bits.
    pub length: u32,
    /// The type code, known to [`FrameType`] or not.
    pub frame_type: u8,
    /// The flags, as sent: each type reads its own.
    pub flags: u8,
    /// The stream identifier: 31 bits, the reserved bit left out.
    pub stream_id: u32,
}

impl FrameHeader {
    /// Reads a header. The reserved bit is ignored, as §4.1 says it must be.
    pub fn parse(bytes: &[u8; FRAME_HEADER_LEN]) -> FrameHeader {
        FrameHeader {
            length: u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]),
            frame_type: bytes[3],
            flags: bytes[4],
            stream_id: read_u31(&bytes[5..9]),
        }
    }

    /// Appends the header, the reserved bit unset.
    ///
    /// # Panics
    /// If `length` needs more than 24 bits or `stream_id` more than 31: both
    /// are the sender's own values, and a wrong one is a bug.
    pub fn write(&self, out: &mut Vec<u8>) {
        assert!(
            self.length <= MAX_FRAME_SIZE_LIMIT,
            "frame length {}",
            self.length
        );
        assert!(
            self.stream_id <= MAX_WINDOW_SIZE,
            "stream id {}",
            self.stream_id
        );
        out.extend_from_slice(&self.length.to_be_bytes()[1..]);
        out.push(self.frame_type);
        out.push(self.flags);
        out.extend_from_slice(&self.stream_id.to_be_bytes());
    }

    /// The whole frame's length: the header and the payload.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN + self.length as usize
    }

    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A 31-bit value (a stream identifier or window increment) from four
/// bytes, the reserved high bit ignored.
fn read_u31(bytes: &[u8]) -> u32 {
    read_u32(bytes) & MAX_WINDOW_SIZE
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The error codes of RFC 9113 §7, sent in RST_STREAM and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// NO_ERROR (0x0): a graceful shutdown.
    NoError = 0x0,
    /// PROTOCOL_ERROR (0x1).
    ProtocolError = 0x1,
    /// INTERNAL_ERROR (0x2).
    InternalError = 0x2,
    /// FLOW_CONTROL_ERROR (0x3).
    FlowControlError = 0x3,
    /// SETTINGS_TIMEOUT (0x4).
    SettingsTimeout = 0x4,
    /// STREAM_CLOSED (0x5).
    StreamClosed = 0x5,
    /// FRAME_SIZE_ERROR (0x6).
    FrameSizeError = 0x6,
    /// REFUSED_STREAM (0x7): nothing of the stream was processed.
    RefusedStream = 0x7,
    /// CANCEL (0x8).
    Cancel = 0x8,
    /// COMPRESSION_ERROR (0x9): the header compression context is lost.
    CompressionError = 0x9,
    /// CONNECT_ERROR (0xa).
    ConnectError = 0xa,
    /// ENHANCE_YOUR_CALM (0xb): the peer generates excessive load.
    EnhanceYourCalm = 0xb,
    /// INADEQUATE_SECURITY (0xc).
    InadequateSecurity = 0xc,
    /// HTTP_1_1_REQUIRED (0xd).
    Http11Required = 0xd,
}

impl ErrorCode {
    /// The code with this number, if it is defined. §7 says an unknown code
    /// must trigger nothing special; it may be read as INTERNAL_ERROR.
    pub fn from_u32(code: u32) -> Option<ErrorCode> {
        Some(match code {
            0x0 => ErrorCode::NoError,
            0x1 => ErrorCode::ProtocolError,
            0x2 => ErrorCode::InternalError,
            0x3 => ErrorCode::FlowControlError,
            0x4 => ErrorCode::SettingsTimeout,
            0x5 => ErrorCode::StreamClosed,
            0x6 => ErrorCode::FrameSizeError,
            0x7 => ErrorCode::RefusedStream,
            0x8 => ErrorCode::Cancel,
            0x9 => ErrorCode::CompressionError,
            0xa => ErrorCode::ConnectError,
            0xb => ErrorCode::EnhanceYourCalm,
            0xc => ErrorCode::InadequateSecurity,
            0xd => ErrorCode::Http11Required,
            _ => return None,
        })
    }

    /// The code's number on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The code's name as RFC 9113 writes it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::NoError => "NO_ERROR",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::FlowControlError => "FLOW_CONTROL_ERROR",
            ErrorCode::SettingsTimeout => "SETTINGS_TIMEOUT",
            ErrorCode::StreamClosed => "STREAM_CLOSED",
            ErrorCode::FrameSizeError => "FRAME_SIZE_ERROR",
            ErrorCode::RefusedStream => "REFUSED_STREAM",
            ErrorCode::Cancel => "CANCEL",
            ErrorCode::CompressionError => "COMPRESSION_ERROR",
            ErrorCode::ConnectError => "CONNECT_ERROR",
            ErrorCode::EnhanceYourCalm => "ENHANCE_YOUR_CALM",
            ErrorCode::InadequateSecurity => "INADEQUATE_SECURITY",
            ErrorCode::Http11Required => "HTTP_1_1_REQUIRED",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a [`FrameError`] ends (RFC 9113 §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorScope {
    /// The connection: send GOAWAY with the code and close.
    Connection,
    /// This stream only: send RST_STREAM with the code on it and go on
    /// reading. The frame that caused it was whole in the input (its header
    /// says how long it is, [`FrameHeader::frame_len`]).
    Stream(u32),
}

/// Why a frame, or a sequence of frames, was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The frame is longer than the SETTINGS_MAX_FRAME_SIZE fastpath
    /// advertised (§4.2).
    FrameTooLarge {
        /// The frame's type code.
        frame_type: u8,
        /// Its payload length.
        len: u32,
        /// The advertised limit.
        max: u32,
    },
    /// A frame whose payload has a fixed length has another (§6.3, §6.4,
    /// §6.7, §6.9).
    WrongLength {
        /// The frame's type.
        frame_type: FrameType,
        /// Its payload length.
        len: u32,
        /// The length its type has.
        expected: u32,
    },
    /// A payload too short for the frame's fixed fields (§4.2).
    TooShort {
        /// The frame's type.
        frame_type: FrameType,
        /// Its payload length.
        len: u32,
        /// The fixed fields' length, given its flags.
        min: u32,
    },
    /// A SETTINGS payload that is not a whole number of 6-byte settings
    /// (§6.5).
    SettingsLength {
        /// The payload length.
        len: u32,
    },
    /// A SETTINGS acknowledgement with a payload (§6.5).
    SettingsAckWithPayload {
        /// The payload length.
        len: u32,
    },
    /// A frame that belongs to a stream sent on stream 0.
    StreamIdZero {
        /// The frame's type.
        frame_type: FrameType,
    },
    /// A frame that belongs to the connection sent on a stream.
    StreamIdNotZero {
        /// The frame's type.
        frame_type: FrameType,
        /// The stream it was sent on.
        stream_id: u32,
    },
    /// Padding as long as, or longer than, the room the payload leaves for
    /// it (§6.1, §6.2).
    PaddingTooLong {
        /// The frame's type.
        frame_type: FrameType,
        /// The pad length sent.
        pad_len: u8,
        /// The payload bytes after the pad length and fixed fields.
        room: u32,
    },
    /// RFC 7540 priority fields naming the stream itself as its parent
    /// (RFC 7540 §5.3.1).
    SelfDependency {
        /// The frame's type.
        frame_type: FrameType,
        /// The stream.
        stream_id: u32,
    },
    /// A setting with a value outside its range (§6.5.2, RFC 8441 §3,
    /// RFC 9218 §2.1).
    InvalidSetting {
        /// The setting's identifier.
        id: u16,
        /// The value sent.
        value: u32,
    },
    /// SETTINGS_INITIAL_WINDOW_SIZE above 2^31 − 1 (§6.5.2).
    InitialWindowSizeTooLarge {
        /// The value sent.
        value: u32,
    },
    /// A PUSH_PROMISE, which only a server may send and only a client
    /// that enabled push may receive (§8.4).
    PushPromise,
    /// WINDOW_UPDATE with an increment of 0 (§6.9).
    ZeroWindowIncrement,
    /// PRIORITY_UPDATE for stream 0 (RFC 9218 §7.1).
    PriorityUpdateForStreamZero,
    /// Some other frame where a field block's CONTINUATION was due (§6.10).
    ExpectedContinuation {
        /// The stream whose field block is open.
        stream_id: u32,
        /// The type code of the frame that came instead.
        got_type: u8,
        /// The stream that frame was sent on.
        got_stream: u32,
    },
    /// A CONTINUATION with no field block open (§6.10).
    UnexpectedContinuation,
    /// A field block past [`super::HeaderBlockLimits::max_block_size`].
    HeaderBlockTooLarge {
        /// The limit.
        limit: usize,
    },
    /// More CONTINUATION frames in one field block than
    /// [`super::HeaderBlockLimits::max_continuations`] (the CONTINUATION
    /// flood, CVE-2024-27316).
    TooManyContinuations {
        /// The limit.
        limit: usize,
    },
    /// A WINDOW_UPDATE or a SETTINGS_INITIAL_WINDOW_SIZE change that takes
    /// a flow-control window past 2^31 − 1 (§6.9.1, §6.9.2).
    WindowOverflow {
        /// The window before.
        window: i32,
        /// What was to be added to it.
        delta: i64,
    },
    /// DATA beyond the flow-control window fastpath gave (§6.9.1).
    WindowExceeded {
        /// The window before.
        window: i32,
        /// The flow-controlled length received.
        len: u32,
    },
}

impl Reason {
    /// The error code to send.
    pub fn code(&self) -> ErrorCode {
        match self {
            Reason::FrameTooLarge { .. }
            | Reason::WrongLength { .. }
            | Reason::TooShort { .. }
            | Reason::SettingsLength { .. }
            | Reason::SettingsAckWithPayload { .. } => ErrorCode::FrameSizeError,
            Reason::StreamIdZero { .. }
            | Reason::StreamIdNotZero { .. }
            | Reason::PaddingTooLong { .. }
            | Reason::SelfDependency { .. }
            | Reason::InvalidSetting { .. }
            | Reason::PushPromise
            | Reason::ZeroWindowIncrement
            | Reason::PriorityUpdateForStreamZero
            | Reason::ExpectedContinuation { .. }
            | Reason::UnexpectedContinuation => ErrorCode::ProtocolError,
            Reason::InitialWindowSizeTooLarge { .. }
            | Reason::WindowOverflow { .. }
            | Reason::WindowExceeded { .. } => ErrorCode::FlowControlError,
            // Neither breaks the protocol: the peer asks for more than
            // fastpath spends on one field block.
            Reason::HeaderBlockTooLarge { .. } | Reason::TooManyContinuations { .. } => {
                ErrorCode::EnhanceYourCalm
            }
        }
    }
}

impl Reason {
    /// The type of the frame refused, when one frame was.
    pub fn frame_type(&self) -> Option<FrameType> {
        match *self {
            Reason::FrameTooLarge { frame_type, .. } => FrameType::from_u8(frame_type),
            Reason::WrongLength { frame_type, .. }
            | Reason::TooShort { frame_type, .. }
            | Reason::StreamIdZero { frame_type }
            | Reason::StreamIdNotZero { frame_type, .. }
            | Reason::PaddingTooLong { frame_type, .. }
            | Reason::SelfDependency { frame_type, .. } => Some(frame_type),
            Reason::SettingsLength { .. }
            | Reason::SettingsAckWithPayload { .. }
            | Reason::InvalidSetting { .. }
            | Reason::InitialWindowSizeTooLarge { .. } => Some(FrameType::Settings),
            Reason::PushPromise => Some(FrameType::PushPromise),
            Reason::ZeroWindowIncrement => Some(FrameType::WindowUpdate),
            Reason::PriorityUpdateForStreamZero => Some(FrameType::PriorityUpdate),
            Reason::UnexpectedContinuation => Some(FrameType::Continuation),
            Reason::ExpectedContinuation { got_type, .. } => FrameType::from_u8(got_type),
            Reason::HeaderBlockTooLarge { .. }
            | Reason::TooManyContinuations { .. }
            | Reason::WindowOverflow { .. }
            | Reason::WindowExceeded { .. } => None,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Reason::FrameTooLarge {
                frame_type,
                len,
                max,
            } => {
                write_type(f, frame_type)?;
                write!(
                    f,
                    " with {len} bytes of payload, past SETTINGS_MAX_FRAME_SIZE {max}"
                )
            }
            Reason::WrongLength {
                frame_type,
                len,
                expected,
            } => write!(
                f,
                "{frame_type} frame with {len} bytes of payload, not {expected}"
            ),
            Reason::TooShort {
                frame_type,
                len,
                min,
            } => write!(
                f,
                "{frame_type} frame with {len} bytes of payload, short of the {min} its fields take"
            ),
            Reason::SettingsLength { len } => write!(
                f,
                "SETTINGS frame with {len} bytes of payload, not a multiple of 6"
            ),
            Reason::SettingsAckWithPayload { len } => {
                write!(f, "SETTINGS acknowledgement with {len} bytes of payload")
            }
            Reason::StreamIdZero { frame_type } => write!(f, "{frame_type} frame on stream 0"),
            Reason::StreamIdNotZero {
                frame_type,
                stream_id,
            } => write!(
                f,
                "{frame_type} frame on stream {stream_id}, where it belongs to stream 0"
            ),
            Reason::PaddingTooLong {
                frame_type,
                pad_len,
                room,
            } => write!(
                f,
                "{frame_type} frame with {pad_len} bytes of padding where {room} remain"
            ),
            Reason::SelfDependency {
                frame_type,
                stream_id,
            } => write!(
                f,
                "{frame_type} frame making stream {stream_id} depend on itself"
            ),
            Reason::InvalidSetting { id, value } => {
                write!(
                    f,
                    "setting {} with value {value} out of its range",
                    setting_name(id)
                )
            }
            Reason::InitialWindowSizeTooLarge { value } => {
                write!(f, "SETTINGS_INITIAL_WINDOW_SIZE {value} above 2^31-1")
            }
            Reason::PushPromise => write!(f, "PUSH_PROMISE received, push being disabled"),
            Reason::ZeroWindowIncrement => write!(f, "WINDOW_UPDATE with an increment of 0"),
            Reason::PriorityUpdateForStreamZero => {
                write!(f, "PRIORITY_UPDATE for stream 0")
            }
            Reason::ExpectedContinuation {
                stream_id,
                got_type,
                got_stream,
            } => {
                write_type(f, got_type)?;
                write!(
                    f,
                    " on stream {got_stream} inside the field block of stream {stream_id}, where only CONTINUATION may come"
                )
            }
            Reason::UnexpectedContinuation => {
                write!(f, "CONTINUATION frame with no field block open")
            }
            Reason::HeaderBlockTooLarge { limit } => {
                write!(f, "field block larger than {limit} bytes")
            }
            Reason::TooManyContinuations { limit } => {
                write!(f, "field block in more than {limit} CONTINUATION frames")
            }
            Reason::WindowOverflow { window, delta } => write!(
                f,
                "flow-control window of {window} changed by {delta}, past 2^31-1"
            ),
            Reason::WindowExceeded { window, len } => write!(
                f,
                "{len} flow-controlled bytes received in a window of {window}"
            ),
        }
    }
}

/// "frame of type HEADERS", or of an unknown type's code.
fn write_type(f: &mut fmt::Formatter<'_>, code: u8) -> fmt::Result {
    match FrameType::from_u8(code) {
        Some(t) => write!(f, "frame of type {t}"),
        None => write!(f, "frame of type {code:#x}"),
    }
}

/// A frame, or a sequence of frames, refused: what it ends and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    /// The connection or one stream.
    pub scope: ErrorScope,
    /// What was wrong.
    pub reason: Reason,
}

impl FrameError {
    /// An error that ends the connection.
    pub fn connection(reason: Reason) -> FrameError {
        FrameError {
            scope: ErrorScope::Connection,
            reason,
        }
    }

    /// An error that ends only `stream_id`.
    pub fn stream(stream_id: u32, reason: Reason) -> FrameError {
        FrameError {
            scope: ErrorScope::Stream(stream_id),
            reason,
        }
    }

    /// A connection error on stream 0, a stream error on any other stream:
    /// for rules that apply to both kinds of flow-control window.
    pub fn on(stream_id: u32, reason: Reason) -> FrameError {
        if stream_id == 0 {
            FrameError::connection(reason)
        } else {
            FrameError::stream(stream_id, reason)
        }
    }

    /// The code for GOAWAY or RST_STREAM.
    pub fn code(&self) -> ErrorCode {
        self.reason.code()
    }

    /// Whether the connection must end.
    pub fn is_connection_error(&self) -> bool {
        self.scope == ErrorScope::Connection
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scope {
            ErrorScope::Connection => write!(f, "connection error {}: ", self.code())?,
            ErrorScope::Stream(id) => write!(f, "stream error {} on stream {id}: ", self.code())?,
        }
        write!(f, "{}", self.reason)
    }
}

impl std::error::Error for FrameError {}

/// The setting identifiers fastpath knows (RFC 9113 §6.5.2, RFC 8441 §3,
/// RFC 9218 §2.1).
pub mod setting_id {
    /// SETTINGS_HEADER_TABLE_SIZE.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441).
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
    /// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218).
    pub const NO_RFC7540_PRIORITIES: u16 = 0x9;
}

fn setting_name(id: u16) -> &'static str {
    match id {
        setting_id::HEADER_TABLE_SIZE => "SETTINGS_HEADER_TABLE_SIZE",
        setting_id::ENABLE_PUSH => "SETTINGS_ENABLE_PUSH",
        setting_id::MAX_CONCURRENT_STREAMS => "SETTINGS_MAX_CONCURRENT_STREAMS",
        setting_id::INITIAL_WINDOW_SIZE => "SETTINGS_INITIAL_WINDOW_SIZE",
        setting_id::MAX_FRAME_SIZE => "SETTINGS_MAX_FRAME_SIZE",
        setting_id::MAX_HEADER_LIST_SIZE => "SETTINGS_MAX_HEADER_LIST_SIZE",
        setting_id::ENABLE_CONNECT_PROTOCOL => "SETTINGS_ENABLE_CONNECT_PROTOCOL",
        setting_id::NO_RFC7540_PRIORITIES => "SETTINGS_NO_RFC7540_PRIORITIES",
        _ => "unknown",
    }
}

/// One setting with a value in its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Setting {
    /// SETTINGS_HEADER_TABLE_SIZE: the largest HPACK dynamic table the
    /// sender's decoder keeps.
    HeaderTableSize(u32),
    /// SETTINGS_ENABLE_PUSH.
    EnablePush(bool),
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    MaxConcurrentStreams(u32),
    /// SETTINGS_INITIAL_WINDOW_SIZE: at most 2^31 − 1.
    InitialWindowSize(u32),
    /// SETTINGS_MAX_FRAME_SIZE: 2^14 to 2^24 − 1.
    MaxFrameSize(u32),
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    MaxHeaderListSize(u32),
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441): extended CONNECT.
    EnableConnectProtocol(bool),
    /// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218): the sender ignores RFC
    /// 7540 priorities.
    NoRfc7540Priorities(bool),
}

impl Setting {
    /// The setting read from its identifier and value: `Ok(None)` for an
    /// identifier fastpath does not know, which §6.5.2 says to ignore.
    pub fn from_wire(id: u16, value: u32) -> Result<Option<Setting>, Reason> {
        let flag = |value: u32| match value {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Reason::InvalidSetting { id, value }),
        };
        Ok(Some(match id {
            setting_id::HEADER_TABLE_SIZE => Setting::HeaderTableSize(value),
            setting_id::ENABLE_PUSH => Setting::EnablePush(flag(value)?),
            setting_id::MAX_CONCURRENT_STREAMS => Setting::MaxConcurrentStreams(value),
            setting_id::INITIAL_WINDOW_SIZE if value > MAX_WINDOW_SIZE => {
                return Err(Reason::InitialWindowSizeTooLarge { value })
            }
            setting_id::INITIAL_WINDOW_SIZE => Setting::InitialWindowSize(value),
            setting_id::MAX_FRAME_SIZE
                if !(DEFAULT_MAX_FRAME_SIZE..=MAX_FRAME_SIZE_LIMIT).contains(&value) =>
            {
                return Err(Reason::InvalidSetting { id, value })
            }
            setting_id::MAX_FRAME_SIZE => Setting::MaxFrameSize(value),
            setting_id::MAX_HEADER_LIST_SIZE => Setting::MaxHeaderListSize(value),
            setting_id::ENABLE_CONNECT_PROTOCOL => Setting::EnableConnectProtocol(flag(value)?),
            setting_id::NO_RFC7540_PRIORITIES => Setting::NoRfc7540Priorities(flag(value)?),
            _ => return Ok(None),
        }))
    }

    /// The setting's identifier.
    pub fn id(&self) -> u16 {
        match self {
            Setting::HeaderTableSize(_) => setting_id::HEADER_TABLE_SIZE,
            Setting::EnablePush(_) => setting_id::ENABLE_PUSH,
            Setting::MaxConcurrentStreams(_) => setting_id::MAX_CONCURRENT_STREAMS,
            Setting::InitialWindowSize(_) => setting_id::INITIAL_WINDOW_SIZE,
            Setting::MaxFrameSize(_) => setting_id::MAX_FRAME_SIZE,
            Setting::MaxHeaderListSize(_) => setting_id::MAX_HEADER_LIST_SIZE,
            Setting::EnableConnectProtocol(_) => setting_id::ENABLE_CONNECT_PROTOCOL,
            Setting::NoRfc7540Priorities(_) => setting_id::NO_RFC7540_PRIORITIES,
        }
    }

    /// The setting's value on the wire.
    pub fn value(&self) -> u32 {
        match *self {
            Setting::HeaderTableSize(v)
            | Setting::MaxConcurrentStreams(v)
            | Setting::InitialWindowSize(v)
            | Setting::MaxFrameSize(v)
            | Setting::MaxHeaderListSize(v) => v,
            Setting::EnablePush(b)
            | Setting::EnableConnectProtocol(b)
            | Setting::NoRfc7540Priorities(b) => u32::from(b),
        }
    }
}

/// A SETTINGS frame's payload, every known setting in it already checked.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings<'a> {
    payload: &'a [u8],
}

impl<'a> Settings<'a> {
    /// The known settings in the order sent; a later one overrides an
    /// earlier one with the same identifier (§6.5.3 processes them in
    /// order). Unknown identifiers are skipped.
    pub fn iter(&self) -> impl Iterator<Item = Setting> + 'a {
        self.payload.chunks_exact(6).filter_map(|s| {
            let id = u16::from_be_bytes([s[0], s[1]]);
            // Checked when the frame was read.
            Setting::from_wire(id, read_u32(&s[2..])).ok().flatten()
        })
    }

    /// Whether the frame carried no setting at all, known or not.
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }
}

impl fmt::Debug for Settings<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A frame read, its payload borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA (§6.1), padding removed.
    Data {
        /// The stream, never 0.
        stream_id: u32,
        /// The body bytes.
        data: &'a [u8],
        /// END_STREAM.
        end_stream: bool,
        /// The payload's whole length, padding included, which is what
        /// flow control counts (§6.9.1).
        flow_controlled_len: u32,
    },
    /// HEADERS (§6.2), padding and RFC 7540 priority fields removed.
    Headers {
        /// The stream, never 0.
        stream_id: u32,
        /// The field block fragment.
        fragment: &'a [u8],
        /// END_STREAM.
        end_stream: bool,
        /// END_HEADERS: no CONTINUATION follows.
        end_headers: bool,
    },
    /// PRIORITY (§6.3): RFC 9113 deprecates its signal, and fastpath reads
    /// it only to check it.
    Priority {
        /// The stream, never 0.
        stream_id: u32,
    },
    /// RST_STREAM (§6.4).
    RstStream {
        /// The stream, never 0.
        stream_id: u32,
        /// The error code: [`ErrorCode::from_u32`] reads it.
        error_code: u32,
    },
    /// SETTINGS (§6.5).
    Settings {
        /// An acknowledgement, which carries no settings.
        ack: bool,
        /// The settings.
        settings: Settings<'a>,
    },
    /// PING (§6.7).
    Ping {
        /// An answer to a PING.
        ack: bool,
        /// The opaque data, returned in the answer.
        data: [u8; 8],
    },
    /// GOAWAY (§6.8).
    GoAway {
        /// The last stream the sender may have processed.
        last_stream_id: u32,
        /// The error code: [`ErrorCode::from_u32`] reads it.
        error_code: u32,
        /// Diagnostic data.
        debug_data: &'a [u8],
    },
    /// WINDOW_UPDATE (§6.9).
    WindowUpdate {
        /// The stream, or 0 for the connection's window.
        stream_id: u32,
        /// 1 to 2^31 − 1.
        increment: u32,
    },
    /// CONTINUATION (§6.10).
    Continuation {
        /// The stream, never 0.
        stream_id: u32,
        /// The field block fragment.
        fragment: &'a [u8],
        /// END_HEADERS: the field block ends here.
        end_headers: bool,
    },
    /// PRIORITY_UPDATE (RFC 9218 §7.1).
    PriorityUpdate {
        /// The stream whose priority changes, never 0.
        prioritized_stream_id: u32,
        /// The Priority Field Value: a Structured Fields dictionary
        /// (RFC 9218 §4), not parsed here.
        field_value: &'a [u8],
    },
    /// A frame of a type fastpath does not know, to be ignored (§5.5)
    /// except inside a field block.
    Unknown {
        /// The type code.
        frame_type: u8,
        /// The flags.
        flags: u8,
        /// The stream.
        stream_id: u32,
        /// The payload.
        payload: &'a [u8],
    },
}

impl Frame<'_> {
    /// The stream the frame was sent on: 0 for the connection's frames.
    pub fn stream_id(&self) -> u32 {
        match *self {
            Frame::Data { stream_id, .. }
            | Frame::Headers { stream_id, .. }
            | Frame::Priority { stream_id }
            | Frame::RstStream { stream_id, .. }
            | Frame::WindowUpdate { stream_id, .. }
            | Frame::Continuation { stream_id, .. }
            | Frame::Unknown { stream_id, .. } => stream_id,
            Frame::Settings { .. }
            | Frame::Ping { .. }
            | Frame::GoAway { .. }
            | Frame::PriorityUpdate { .. } => 0,
        }
    }

    /// The frame's type code.
    pub fn frame_type(&self) -> u8 {
        let known = match self {
            Frame::Data { .. } => FrameType::Data,
            Frame::Headers { .. } => FrameType::Headers,
            Frame::Priority { .. } => FrameType::Priority,
            Frame::RstStream { .. } => FrameType::RstStream,
            Frame::Settings { .. } => FrameType::Settings,
            Frame::Ping { .. } => FrameType::Ping,
            Frame::GoAway { .. } => FrameType::GoAway,
            Frame::WindowUpdate { .. } => FrameType::WindowUpdate,
            Frame::Continuation { .. } => FrameType::Continuation,
            Frame::PriorityUpdate { .. } => FrameType::PriorityUpdate,
            Frame::Unknown { frame_type, .. } => return *frame_type,
        };
        known as u8
    }
}

/// Reads frames from the bytes a peer sent, under the SETTINGS_MAX_FRAME_SIZE
/// fastpath advertised. It keeps no state between frames, so a caller may
/// hand it a buffer again after any `Ok(None)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameReader {
    max_frame_size: u32,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameReader {
    /// A reader refusing frames longer than `max_frame_size`. fastpath
    /// advertises 2^14 or more, as §6.5.2 requires; smaller values only
    /// make tests and fuzzing reach the limit sooner.
    pub fn new(max_frame_size: u32) -> Self {
        FrameReader {
            max_frame_size: max_frame_size.min(MAX_FRAME_SIZE_LIMIT),
        }
    }

    /// The longest payload accepted.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// Takes a new limit, once the peer has acknowledged the SETTINGS that
    /// announced it.
    pub fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.max_frame_size = max_frame_size.min(MAX_FRAME_SIZE_LIMIT);
    }

    /// Reads the frame at the start of `input`: `Ok(None)` while it is not
    /// all there, else the frame and the bytes it took. A frame longer
    /// than the limit is refused as soon as its header is in, without
    /// waiting for its payload.
    pub fn parse<'a>(&self, input: &'a [u8]) -> Result<Option<(Frame<'a>, usize)>, FrameError> {
        let Some(head) = input.first_chunk::<FRAME_HEADER_LEN>() else {
            return Ok(None);
        };
        let header = FrameHeader::parse(head);
        if header.length > self.max_frame_size {
            // Even on a stream a connection error: skipping the payload
            // would mean reading up to 16 MiB fastpath did not agree to.
            return Err(FrameError::connection(Reason::FrameTooLarge {
                frame_type: header.frame_type,
                len: header.length,
                max: self.max_frame_size,
            }));
        }
        let end = header.frame_len();
        let Some(payload) = input.get(FRAME_HEADER_LEN..end) else {
            return Ok(None);
        };
        let frame = parse_payload(&header, payload)?;
        Ok(Some((frame, end)))
    }
}

/// Checks a whole frame and reads its fields.
fn parse_payload<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
    let Some(frame_type) = FrameType::from_u8(h.frame_type) else {
        return Ok(Frame::Unknown {
            frame_type: h.frame_type,
            flags: h.flags,
            stream_id: h.stream_id,
            payload,
        });
    };
    let stream_id = h.stream_id;
    let len = h.length;
    let conn = FrameError::connection;
    let on_stream = || {
        if stream_id == 0 {
            Err(conn(Reason::StreamIdZero { frame_type }))
        } else {
            Ok(())
        }
    };
    let on_connection = || {
        if stream_id != 0 {
            Err(conn(Reason::StreamIdNotZero {
                frame_type,
                stream_id,
            }))
        } else {
            Ok(())
        }
    };
    // The fixed-length frames other than PRIORITY change the connection's
    // state, so §4.2 makes a wrong length a connection error.
    let exact = |expected: u32| {
        if len != expected {
            Err(conn(Reason::WrongLength {
                frame_type,
                len,
                expected,
            }))
        } else {
            Ok(())
        }
    };
    let at_least = |min: u32| {
        if len < min {
            Err(conn(Reason::TooShort {
                frame_type,
                len,
                min,
            }))
        } else {
            Ok(())
        }
    };
    Ok(match frame_type {
        FrameType::Data => {
            on_stream()?;
            let (_, data) = unpad(h, frame_type, payload, 0)?;
            Frame::Data {
                stream_id,
                data,
                end_stream: h.has(flags::END_STREAM),
                flow_controlled_len: len,
            }
        }
        FrameType::Headers => {
            on_stream()?;
            let fixed = if h.has(flags::PRIORITY) { 5 } else { 0 };
            let (priority, fragment) = unpad(h, frame_type, payload, fixed)?;
            // Ignored but for this: the check costs nothing, and a HEADERS
            // frame refused on its stream would leave its field block
            // undecoded and HPACK out of step, so it ends the connection.
            if fixed != 0 && read_u31(priority) == stream_id {
                return Err(conn(Reason::SelfDependency {
                    frame_type,
                    stream_id,
                }));
            }
            Frame::Headers {
                stream_id,
                fragment,
                end_stream: h.has(flags::END_STREAM),
                end_headers: h.has(flags::END_HEADERS),
            }
        }
        FrameType::Priority => {
            on_stream()?;
            // §6.3: the one length error that ends only the stream.
            if len != 5 {
                return Err(FrameError::stream(
                    stream_id,
                    Reason::WrongLength {
                        frame_type,
                        len,
                        expected: 5,
                    },
                ));
            }
            if read_u31(payload) == stream_id {
                return Err(FrameError::stream(
                    stream_id,
                    Reason::SelfDependency {
                        frame_type,
                        stream_id,
                    },
                ));
            }
            Frame::Priority { stream_id }
        }
        FrameType::RstStream => {
            on_stream()?;
            exact(4)?;
            Frame::RstStream {
                stream_id,
                error_code: read_u32(payload),
            }
        }
        FrameType::Settings => {
            on_connection()?;
            let ack = h.has(flags::ACK);
            if ack && len != 0 {
                return Err(conn(Reason::SettingsAckWithPayload { len }));
            }
            if !len.is_multiple_of(6) {
                return Err(conn(Reason::SettingsLength { len }));
            }
            for s in payload.chunks_exact(6) {
                let id = u16::from_be_bytes([s[0], s[1]]);
                Setting::from_wire(id, read_u32(&s[2..])).map_err(conn)?;
            }
            Frame::Settings {
                ack,
                settings: Settings { payload },
            }
        }
        // fastpath serves, and would send SETTINGS_ENABLE_PUSH 0 as a
        // client: a PUSH_PROMISE is never allowed (§6.6, §8.4).
        FrameType::PushPromise => return Err(conn(Reason::PushPromise)),
        FrameType::Ping => {
            on_connection()?;
            exact(8)?;
            let mut data = [0; 8];
            data.copy_from_slice(payload);
            Frame::Ping {
                ack: h.has(flags::ACK),
                data,
            }
        }
        FrameType::GoAway => {
            on_connection()?;
            at_least(8)?;
            Frame::GoAway {
                last_stream_id: read_u31(payload),
                error_code: read_u32(&payload[4..]),
                debug_data: &payload[8..],
            }
        }
        FrameType::WindowUpdate => {
            exact(4)?;
            let increment = read_u31(payload);
            if increment == 0 {
                return Err(FrameError::on(stream_id, Reason::ZeroWindowIncrement));
            }
            Frame::WindowUpdate {
                stream_id,
                increment,
            }
        }
        FrameType::Continuation => {
            on_stream()?;
            Frame::Continuation {
                stream_id,
                fragment: payload,
                end_headers: h.has(flags::END_HEADERS),
            }
        }
        FrameType::PriorityUpdate => {
            on_connection()?;
            at_least(4)?;
            let prioritized_stream_id = read_u31(payload);
            if prioritized_stream_id == 0 {
                return Err(conn(Reason::PriorityUpdateForStreamZero));
            }
            Frame::PriorityUpdate {
                prioritized_stream_id,
                field_value: &payload[4..],
            }
        }
    })
}

/// Splits a DATA or HEADERS payload into its `fixed` bytes of fields after
/// the pad length, and what lies between them and the padding. Both errors
/// are connection errors: §6.1 and §6.2 say so of padding, and a frame too
/// short for its fields is a frame size error that DATA (flow control) and
/// HEADERS (HPACK) cannot confine to a stream.
fn unpad<'a>(
    h: &FrameHeader,
    frame_type: FrameType,
    payload: &'a [u8],
    fixed: usize,
) -> Result<(&'a [u8], &'a [u8]), FrameError> {
    let padded = h.has(flags::PADDED);
    let start = usize::from(padded) + fixed;
    if payload.len() < start {
        return Err(FrameError::connection(Reason::TooShort {
            frame_type,
            len: h.length,
            min: start as u32,
        }));
    }
    let pad_len = if padded { payload[0] } else { 0 };
    let rest = &payload[start..];
    if usize::from(pad_len) > rest.len() {
        // §6.1's "the length of the frame payload or greater", the pad
        // length byte being part of the payload, and §6.2's "exceeds the
        // size remaining for the field block fragment": the same bound.
        return Err(FrameError::connection(Reason::PaddingTooLong {
            frame_type,
            pad_len,
            room: rest.len() as u32,
        }));
    }
    Ok((
        &payload[usize::from(padded)..start],
        &rest[..rest.len() - usize::from(pad_len)],
    ))
}

fn write_header(
    frame_type: FrameType,
    flags: u8,
    stream_id: u32,
    length: usize,
    out: &mut Vec<u8>,
) {
    let length = u32::try_from(length).unwrap_or(u32::MAX);
    FrameHeader {
        length,
        frame_type: frame_type as u8,
        flags,
        stream_id,
    }
    .write(out);
}

/// Appends a DATA frame's header for a payload of `len` bytes, unpadded;
/// the caller sends the payload after it from wherever it lives.
///
/// # Panics
/// If `stream_id` is 0 or `len` is past 2^24 − 1; `len` must also be within
/// the peer's SETTINGS_MAX_FRAME_SIZE, which this layer does not know.
pub fn write_data_header(stream_id: u32, len: usize, end_stream: bool, out: &mut Vec<u8>) {
    assert_ne!(stream_id, 0, "DATA on stream 0");
    let flags = if end_stream { flags::END_STREAM } else { 0 };
    write_header(FrameType::Data, flags, stream_id, len, out);
}

/// Appends a HEADERS frame carrying `block`, followed by as many
/// CONTINUATION frames as it takes to keep each frame within
/// `max_frame_size` (the peer's SETTINGS_MAX_FRAME_SIZE). END_STREAM goes on
/// the HEADERS frame, END_HEADERS on the last frame.
///
/// # Panics
/// If `stream_id` is 0 or `max_frame_size` is 0.
pub fn write_headers(
    stream_id: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: usize,
    out: &mut Vec<u8>,
) {
    assert_ne!(stream_id, 0, "HEADERS on stream 0");
    assert_ne!(
        max_frame_size, 0,
        "frames of no payload cannot carry a block"
    );
    let max = max_frame_size.min(MAX_FRAME_SIZE_LIMIT as usize);
    let first = block.len().min(max);
    let (mut chunk, mut rest) = block.split_at(first);
    let mut frame_type = FrameType::Headers;
    let mut flags = if end_stream { flags::END_STREAM } else { 0 };
    loop {
        if rest.is_empty() {
            flags |= flags::END_HEADERS;
        }
        write_header(frame_type, flags, stream_id, chunk.len(), out);
        out.extend_from_slice(chunk);
        if rest.is_empty() {
            return;
        }
        (chunk, rest) = rest.split_at(rest.len().min(max));
        frame_type = FrameType::Continuation;
        flags = 0;
    }
}

/// Appends a SETTINGS frame with `settings` in order.
pub fn write_settings(settings: &[Setting], out: &mut Vec<u8>) {
    write_header(FrameType::Settings, 0, 0, settings.len() * 6, out);
    for s in settings {
        out.extend_from_slice(&s.id().to_be_bytes());
        out.extend_from_slice(&s.value().to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(FrameType::Settings, flags::ACK, 0, 0, out);
}

/// Appends a PING carrying `data`.
pub fn write_ping(data: [u8; 8], out: &mut Vec<u8>) {
    write_header(FrameType::Ping, 0, 0, 8, out);
    out.extend_from_slice(&data);
}

/// Appends the answer to a PING that carried `data` (§6.7).
pub fn write_ping_ack(data: [u8; 8], out: &mut Vec<u8>) {
    write_header(FrameType::Ping, flags::ACK, 0, 8, out);
    out.extend_from_slice(&data);
}

/// Appends a GOAWAY. `debug_data` is cut to the 16,376 bytes that fit the
/// smallest SETTINGS_MAX_FRAME_SIZE, which every peer accepts.
///
/// # Panics
/// If `last_stream_id` is past 2^31 − 1.
pub fn write_goaway(last_stream_id: u32, code: ErrorCode, debug_data: &[u8], out: &mut Vec<u8>) {
    assert!(
        last_stream_id <= MAX_WINDOW_SIZE,
        "stream id {last_stream_id}"
    );
    let debug_data = &debug_data[..debug_data.len().min(DEFAULT_MAX_FRAME_SIZE as usize - 8)];
    write_header(FrameType::GoAway, 0, 0, 8 + debug_data.len(), out);
    out.extend_from_slice(&last_stream_id.to_be_bytes());
    out.extend_from_slice(&code.code().to_be_bytes());
    out.extend_from_slice(debug_data);
}

/// Appends an RST_STREAM.
///
/// # Panics
/// If `stream_id` is 0.
pub fn write_rst_stream(stream_id: u32, code: ErrorCode, out: &mut Vec<u8>) {
    assert_ne!(stream_id, 0, "RST_STREAM on stream 0");
    write_header(FrameType::RstStream, 0, stream_id, 4, out);
    out.extend_from_slice(&code.code().to_be_bytes());
}

/// Appends a WINDOW_UPDATE for a stream, or for the connection on stream 0.
///
/// # Panics
/// If `increment` is 0 or past 2^31 − 1, which the peer would refuse.
pub fn write_window_update(stream_id: u32, increment: u32, out: &mut Vec<u8>) {
    assert!(
        (1..=MAX_WINDOW_SIZE).contains(&increment),
        "window increment {increment}"
    );
    write_header(FrameType::WindowUpdate, 0, stream_id, 4, out);
    out.extend_from_slice(&increment.to_be_bytes());
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
