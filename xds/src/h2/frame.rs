//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, decoding of every
//! frame type a server receives with the RFC's size and stream-id rules, and
//! encoders for what a server sends.
//!
//! Decoding is split in two: [`Head::parse`] reads the fixed header, and
//! [`Frame::decode`] validates and slices a complete payload. Neither
//! allocates: payloads are `Bytes` slices of the receive buffer.

use bytes::{BufMut, Bytes};

use super::error::{Error, Reason};

/// Length of the frame header (§4.1).
pub const HEAD_LEN: usize = 9;
/// The client connection preface (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The smallest SETTINGS_MAX_FRAME_SIZE and its default (§6.5.2).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE (§6.5.2).
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The default initial window size (§6.9.2).
pub const DEFAULT_INITIAL_WINDOW: u32 = 65_535;
/// The largest flow-control window (§6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// Frame type codes (§6).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (deprecated, ignored).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (clients may not send it).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (§6).
pub mod flags {
    /// DATA/HEADERS: last frame of the stream from this peer.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS/PING: acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS/CONTINUATION: last frame of the header block.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA/HEADERS: payload is padded.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: priority fields present.
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (§6.5.2).
pub mod setting {
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
}

/// The fixed 9-byte frame header (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length.
    pub len: u32,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier, reserved bit cleared.
    pub stream: u32,
}

impl Head {
    /// Parses a header from the first 9 bytes of `b`.
    pub fn parse(b: &[u8; HEAD_LEN]) -> Self {
        Self {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            // §4.1: the reserved bit MUST be ignored when receiving.
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW,
        }
    }

    /// Writes the header.
    pub fn encode(&self, out: &mut impl BufMut) {
        debug_assert!(self.len <= MAX_MAX_FRAME_SIZE);
        out.put_slice(&self.len.to_be_bytes()[1..]);
        out.put_u8(self.kind);
        out.put_u8(self.flags);
        out.put_u32(self.stream & MAX_WINDOW);
    }

    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// DATA, padding removed. `flow_len` is the whole payload length, which
    /// counts against flow control (§6.9.1) even when it is padding.
    Data {
        /// Stream.
        stream: u32,
        /// Data without padding.
        data: Bytes,
        /// END_STREAM.
        end_stream: bool,
        /// Bytes charged to flow control.
        flow_len: u32,
    },
    /// HEADERS, padding and priority removed.
    Headers {
        /// Stream.
        stream: u32,
        /// Header block fragment.
        fragment: Bytes,
        /// END_STREAM.
        end_stream: bool,
        /// END_HEADERS.
        end_headers: bool,
        /// Stream dependency, when the PRIORITY flag is set (only checked
        /// for self-dependency).
        depends_on: Option<u32>,
    },
    /// PRIORITY: parsed for validation, otherwise ignored (§5.3.2).
    Priority {
        /// Stream.
        stream: u32,
        /// Stream dependency.
        depends_on: u32,
    },
    /// RST_STREAM.
    RstStream {
        /// Stream.
        stream: u32,
        /// Error code.
        code: u32,
    },
    /// SETTINGS.
    Settings {
        /// ACK flag.
        ack: bool,
        /// The payload, a multiple of 6 bytes: see [`Frame::settings`].
        params: Bytes,
    },
    /// PING.
    Ping {
        /// ACK flag.
        ack: bool,
        /// Opaque data.
        data: [u8; 8],
    },
    /// GOAWAY.
    GoAway {
        /// Last stream the peer processed.
        last_stream: u32,
        /// Error code.
        code: u32,
        /// Debug data.
        debug: Bytes,
    },
    /// WINDOW_UPDATE.
    WindowUpdate {
        /// Stream (0: connection).
        stream: u32,
        /// Increment (may be 0, which the connection rejects).
        increment: u32,
    },
    /// CONTINUATION.
    Continuation {
        /// Stream.
        stream: u32,
        /// Header block fragment.
        fragment: Bytes,
        /// END_HEADERS.
        end_headers: bool,
    },
    /// A frame type this implementation does not know: ignored (§4.1, §5.5).
    Unknown {
        /// Frame type.
        kind: u8,
    },
}

fn conn_err(reason: Reason, msg: &'static str) -> Error {
    Error::Connection { reason, msg }
}

impl Frame {
    /// Validates and decodes one frame from its header and complete payload.
    /// The caller has already checked `head.len` against the advertised
    /// SETTINGS_MAX_FRAME_SIZE.
    pub fn decode(head: Head, payload: Bytes) -> Result<Self, Error> {
        use Reason::*;
        debug_assert_eq!(payload.len(), head.len as usize);
        let s = head.stream;
        match head.kind {
            kind::DATA => {
                if s == 0 {
                    return Err(conn_err(ProtocolError, "DATA on stream 0")); // §6.1
                }
                let data = strip_padding(&head, payload)?;
                Ok(Frame::Data { stream: s, data, end_stream: head.has(flags::END_STREAM), flow_len: head.len })
            }
            kind::HEADERS => {
                if s == 0 {
                    return Err(conn_err(ProtocolError, "HEADERS on stream 0")); // §6.2
                }
                let mut rest = strip_padding(&head, payload)?;
                let mut depends_on = None;
                if head.has(flags::PRIORITY) {
                    if rest.len() < 5 {
                        return Err(conn_err(FrameSizeError, "HEADERS too short for its priority fields"));
                    }
                    let dep = rest.split_to(5);
                    depends_on = Some(u32::from_be_bytes([dep[0], dep[1], dep[2], dep[3]]) & MAX_WINDOW);
                }
                Ok(Frame::Headers {
                    stream: s,
                    fragment: rest,
                    end_stream: head.has(flags::END_STREAM),
                    end_headers: head.has(flags::END_HEADERS),
                    depends_on,
                })
            }
            kind::PRIORITY => {
                if s == 0 {
                    return Err(conn_err(ProtocolError, "PRIORITY on stream 0")); // §6.3
                }
                if head.len != 5 {
                    // §6.3: a stream error, but the frame is otherwise harmless.
                    return Err(Error::Stream { stream: s, reason: FrameSizeError, msg: "PRIORITY length is not 5" });
                }
                let dep = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
                Ok(Frame::Priority { stream: s, depends_on: dep })
            }
            kind::RST_STREAM => {
                if s == 0 {
                    return Err(conn_err(ProtocolError, "RST_STREAM on stream 0")); // §6.4
                }
                if head.len != 4 {
                    return Err(conn_err(FrameSizeError, "RST_STREAM length is not 4"));
                }
                Ok(Frame::RstStream {
                    stream: s,
                    code: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
                })
            }
            kind::SETTINGS => {
                if s != 0 {
                    return Err(conn_err(ProtocolError, "SETTINGS on a stream")); // §6.5
                }
                let ack = head.has(flags::ACK);
                if ack && head.len != 0 {
                    return Err(conn_err(FrameSizeError, "SETTINGS ACK with a payload"));
                }
                if !head.len.is_multiple_of(6) {
                    return Err(conn_err(FrameSizeError, "SETTINGS length is not a multiple of 6"));
                }
                Ok(Frame::Settings { ack, params: payload })
            }
            kind::PUSH_PROMISE => Err(conn_err(ProtocolError, "PUSH_PROMISE from a client")), // §8.4
            kind::PING => {
                if s != 0 {
                    return Err(conn_err(ProtocolError, "PING on a stream")); // §6.7
                }
                if head.len != 8 {
                    return Err(conn_err(FrameSizeError, "PING length is not 8"));
                }
                let mut data = [0; 8];
                data.copy_from_slice(&payload);
                Ok(Frame::Ping { ack: head.has(flags::ACK), data })
            }
            kind::GOAWAY => {
                if s != 0 {
                    return Err(conn_err(ProtocolError, "GOAWAY on a stream")); // §6.8
                }
                if head.len < 8 {
                    return Err(conn_err(FrameSizeError, "GOAWAY shorter than 8 bytes"));
                }
                Ok(Frame::GoAway {
                    last_stream: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW,
                    code: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
                    debug: payload.slice(8..),
                })
            }
            kind::WINDOW_UPDATE => {
                if head.len != 4 {
                    return Err(conn_err(FrameSizeError, "WINDOW_UPDATE length is not 4")); // §6.9
                }
                let increment = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
                Ok(Frame::WindowUpdate { stream: s, increment })
            }
            kind::CONTINUATION => {
                if s == 0 {
                    return Err(conn_err(ProtocolError, "CONTINUATION on stream 0")); // §6.10
                }
                Ok(Frame::Continuation { stream: s, fragment: payload, end_headers: head.has(flags::END_HEADERS) })
            }
            other => Ok(Frame::Unknown { kind: other }),
        }
    }

    /// The (identifier, value) pairs of a SETTINGS payload.
    pub fn settings(params: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
        params.chunks_exact(6).map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
    }
}

/// §6.1, §6.2: the Pad Length byte and the padding; padding that reaches
/// the end of the payload is a connection PROTOCOL_ERROR.
fn strip_padding(head: &Head, mut payload: Bytes) -> Result<Bytes, Error> {
    if !head.has(flags::PADDED) {
        return Ok(payload);
    }
    if payload.is_empty() {
        return Err(conn_err(Reason::FrameSizeError, "padded frame without a Pad Length"));
    }
    let pad = payload[0] as usize;
    if pad >= payload.len() {
        return Err(conn_err(Reason::ProtocolError, "padding longer than the payload"));
    }
    let end = payload.len() - pad;
    payload.truncate(end);
    Ok(payload.slice(1..))
}

/// Encoders for the frames a server sends.
pub mod encode {
    use bytes::BufMut;

    use super::{Head, flags, kind};

    /// SETTINGS with the given parameters.
    pub fn settings(out: &mut impl BufMut, params: &[(u16, u32)]) {
        Head { len: (params.len() * 6) as u32, kind: kind::SETTINGS, flags: 0, stream: 0 }.encode(out);
        for (id, v) in params {
            out.put_u16(*id);
            out.put_u32(*v);
        }
    }

    /// SETTINGS ACK.
    pub fn settings_ack(out: &mut impl BufMut) {
        Head { len: 0, kind: kind::SETTINGS, flags: flags::ACK, stream: 0 }.encode(out);
    }

    /// PING (or its ACK).
    pub fn ping(out: &mut impl BufMut, ack: bool, data: [u8; 8]) {
        Head { len: 8, kind: kind::PING, flags: if ack { flags::ACK } else { 0 }, stream: 0 }.encode(out);
        out.put_slice(&data);
    }

    /// WINDOW_UPDATE.
    pub fn window_update(out: &mut impl BufMut, stream: u32, increment: u32) {
        Head { len: 4, kind: kind::WINDOW_UPDATE, flags: 0, stream }.encode(out);
        out.put_u32(increment);
    }

    /// RST_STREAM.
    pub fn rst_stream(out: &mut impl BufMut, stream: u32, code: u32) {
        Head { len: 4, kind: kind::RST_STREAM, flags: 0, stream }.encode(out);
        out.put_u32(code);
    }

    /// GOAWAY.
    pub fn go_away(out: &mut impl BufMut, last_stream: u32, code: u32, debug: &[u8]) {
        Head { len: 8 + debug.len() as u32, kind: kind::GOAWAY, flags: 0, stream: 0 }.encode(out);
        out.put_u32(last_stream);
        out.put_u32(code);
        out.put_slice(debug);
    }

    /// HEADERS carrying a whole header block, split into CONTINUATION
    /// frames when it exceeds `max_frame`.
    pub fn headers(out: &mut impl BufMut, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
        let mut chunks = block.chunks(max_frame.max(1));
        let first = chunks.next().unwrap_or(&[]);
        let rest = block.len() > first.len();
        let mut f = if end_stream { flags::END_STREAM } else { 0 };
        if !rest {
            f |= flags::END_HEADERS;
        }
        Head { len: first.len() as u32, kind: kind::HEADERS, flags: f, stream }.encode(out);
        out.put_slice(first);
        let mut remaining = block.len() - first.len();
        for c in chunks {
            remaining -= c.len();
            let f = if remaining == 0 { flags::END_HEADERS } else { 0 };
            Head { len: c.len() as u32, kind: kind::CONTINUATION, flags: f, stream }.encode(out);
            out.put_slice(c);
        }
    }

    /// The header of a DATA frame of `len` bytes; the caller appends them.
    pub fn data_head(out: &mut impl BufMut, stream: u32, len: usize, end_stream: bool) {
        Head { len: len as u32, kind: kind::DATA, flags: if end_stream { flags::END_STREAM } else { 0 }, stream }
            .encode(out);
    }
}

#[cfg(test)]
mod tests;
