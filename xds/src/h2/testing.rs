//! A frame-builder DSL for tests (after the `h2` crate's `h2-support`): a
//! scripted client sends raw frames into a [`Connection`] and expects exact
//! frames back, with a fake clock.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};

use super::conn::{Connection, Event};
use super::error::Reason;
use super::frame::{self, Frame, Head, flags, kind};
use super::hpack::{Decoder, Encoder, Field};
use super::limits::Limits;

/// Raw frame builders.
pub(crate) mod frames {
    use super::*;

    /// Any frame from its parts.
    pub(crate) fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + payload.len());
        Head { len: payload.len() as u32, kind, flags, stream }.encode(&mut out);
        out.put_slice(payload);
        out
    }

    pub(crate) fn settings(params: &[(u16, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        frame::encode::settings(&mut out, params);
        out
    }

    pub(crate) fn settings_ack() -> Vec<u8> {
        raw(kind::SETTINGS, flags::ACK, 0, &[])
    }

    pub(crate) fn ping(data: [u8; 8]) -> Vec<u8> {
        raw(kind::PING, 0, 0, &data)
    }

    pub(crate) fn ping_ack(data: [u8; 8]) -> Vec<u8> {
        raw(kind::PING, flags::ACK, 0, &data)
    }

    pub(crate) fn headers(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
        let f = flags::END_HEADERS | if end_stream { flags::END_STREAM } else { 0 };
        raw(kind::HEADERS, f, stream, block)
    }

    pub(crate) fn data(stream: u32, data: &[u8], end_stream: bool) -> Vec<u8> {
        raw(kind::DATA, if end_stream { flags::END_STREAM } else { 0 }, stream, data)
    }

    pub(crate) fn window_update(stream: u32, inc: u32) -> Vec<u8> {
        raw(kind::WINDOW_UPDATE, 0, stream, &inc.to_be_bytes())
    }

    pub(crate) fn rst(stream: u32, code: Reason) -> Vec<u8> {
        raw(kind::RST_STREAM, 0, stream, &code.code().to_be_bytes())
    }

    /// A gRPC request header block for `path`.
    pub(crate) fn request(path: &str) -> Bytes {
        Encoder::new()
            .field(b":method", b"POST")
            .field(b":scheme", b"http")
            .field(b":path", path.as_bytes())
            .field(b":authority", b"istiod")
            .field(b"content-type", b"application/grpc")
            .field(b"te", b"trailers")
            .finish()
    }

    /// A length-prefixed gRPC message.
    #[allow(dead_code, reason = "used by the gRPC tests")]
    pub(crate) fn grpc_message(body: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }
}

/// A scripted client around a server [`Connection`].
pub(crate) struct Peer {
    pub(crate) conn: Connection,
    pub(crate) now: Instant,
    /// Server bytes not yet parsed into frames.
    pending: Vec<u8>,
    decoder: Decoder,
}

impl Peer {
    /// A connection that has not seen the preface.
    pub(crate) fn raw(limits: Limits) -> Self {
        let now = Instant::now();
        Self { conn: Connection::new(limits, now), now, pending: Vec::new(), decoder: Decoder::default() }
    }

    /// A connection after the preface exchange: the server's SETTINGS and
    /// window update have been read, ours acknowledged both ways.
    pub(crate) fn open(limits: Limits) -> Self {
        Self::open_with(limits, &[])
    }

    /// Like [`Peer::open`] with client SETTINGS.
    pub(crate) fn open_with(limits: Limits, settings: &[(u16, u32)]) -> Self {
        let mut p = Self::raw(limits);
        let mut hello = frame::PREFACE.to_vec();
        hello.extend(frames::settings(settings));
        hello.extend(frames::settings_ack());
        p.send(hello);
        let got = p.frames();
        assert!(matches!(got[0], Frame::Settings { ack: false, .. }), "{got:?}");
        assert!(got.contains(&Frame::Settings { ack: true, params: Bytes::new() }), "{got:?}");
        p
    }

    pub(crate) fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.conn.recv(bytes.as_ref(), self.now);
    }

    pub(crate) fn advance(&mut self, d: Duration) {
        self.now += d;
        self.conn.handle_timeout(self.now);
    }

    /// Everything the server has to say now, as frames.
    pub(crate) fn frames(&mut self) -> Vec<Frame> {
        self.frames_budget(usize::MAX)
    }

    pub(crate) fn frames_budget(&mut self, budget: usize) -> Vec<Frame> {
        self.conn.poll_transmit(&mut self.pending, budget);
        let out = Self::parse(&self.pending);
        self.pending.clear();
        out
    }

    /// Server bytes as frames (whole frames only).
    pub(crate) fn parse(mut buf: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        while buf.len() >= 9 {
            let head = Head::parse(buf[..9].try_into().unwrap());
            let end = 9 + head.len as usize;
            assert!(buf.len() >= end, "server wrote a partial frame");
            out.push(Frame::decode(head, Bytes::copy_from_slice(&buf[9..end])).expect("server frame decodes"));
            buf = &buf[end..];
        }
        assert!(buf.is_empty(), "server wrote a partial frame header");
        out
    }

    pub(crate) fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    /// Decodes a header block the server sent.
    pub(crate) fn decode(&mut self, block: &[u8]) -> Vec<Field> {
        self.decoder.decode(block, usize::MAX).expect("server block decodes").0
    }

    /// Expects exactly a GOAWAY with `reason` and a closed connection.
    pub(crate) fn expect_goaway(&mut self, reason: Reason) {
        let got = self.frames();
        assert!(
            got.iter().any(|f| matches!(f, Frame::GoAway { code, .. } if *code == reason.code())),
            "expected GOAWAY {reason}, got {got:?}"
        );
        assert!(self.conn.is_closed(), "connection should be closed after GOAWAY {reason}");
    }

    /// Expects an RST_STREAM on `stream` with `reason`, connection alive.
    pub(crate) fn expect_rst(&mut self, stream: u32, reason: Reason) {
        let got = self.frames();
        assert_eq!(got, vec![Frame::RstStream { stream, code: reason.code() }]);
        assert!(!self.conn.is_closed());
    }
}
