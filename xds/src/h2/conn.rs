//! The server side of one HTTP/2 connection as a deterministic state
//! machine (RFC 9113): bytes and `now` go in through [`Connection::recv`]
//! and [`Connection::handle_timeout`]; requests come out as [`Event`]s;
//! the application answers with [`Connection::send_headers`],
//! [`Connection::send_data`] and [`Connection::send_trailers`]; bytes to
//! write come out of [`Connection::poll_transmit`], and the next deadline
//! out of [`Connection::poll_timeout`]. No I/O, no clock reads, no locks:
//! one serving core owns the connection.

mod request;
mod stream;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use request::Request;
use stream::{Recv, Send, Stream};

use super::error::{Error, Reason};
use super::frame::{self, Frame, Head, encode, setting};
use super::hpack;
use super::limits::{Bucket, Limits};
use super::out::Transmit;
use crate::h2::violations::{self, Violation};

/// What the connection tells the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new request stream with valid request headers.
    Request {
        /// Stream id.
        stream: u32,
        /// The request head.
        request: Request,
        /// The client sent END_STREAM with the headers.
        end_stream: bool,
    },
    /// Request body bytes (possibly empty when only END_STREAM arrived).
    Data {
        /// Stream id.
        stream: u32,
        /// Bytes, in order.
        data: Bytes,
        /// The client finished sending.
        end_stream: bool,
    },
    /// The stream ended abnormally: the peer reset it, or the server did
    /// because the peer broke a rule. The application drops its state.
    Reset {
        /// Stream id.
        stream: u32,
        /// The RST_STREAM error code.
        code: u32,
    },
    /// The peer sent GOAWAY: it opens no more streams.
    GoAway {
        /// Error code.
        code: u32,
    },
}

/// Why the application could not queue something on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The stream is gone (reset or finished).
    #[error("stream is closed")]
    StreamClosed,
    /// The connection's send queue is at `max_queued_bytes`: the peer is
    /// not reading fast enough.
    #[error("connection send queue is full")]
    QueueFull,
    /// Response headers were already sent, or trailers were.
    #[error("headers already sent")]
    HeadersSent,
    /// A message over the configured send limit (never queued).
    #[error("message of {len} bytes is over the send limit of {limit} bytes")]
    TooLarge {
        /// The message's size.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the 24-byte client preface; `usize` bytes matched.
    Preface(usize),
    /// Preface seen; the first frame must be SETTINGS (§3.4).
    FirstSettings,
    Open,
    /// Graceful shutdown: GOAWAY(2^31-1) sent with a PING; on its ACK the
    /// final GOAWAY carries the real last stream (§6.8).
    Draining {
        final_sent: bool,
    },
    /// Fatal error or done: flush what is queued, then close.
    Closed,
}

/// Payload of the PING that follows the first GOAWAY.
const DRAIN_PING: [u8; 8] = *b"drain-gw";

/// An in-progress header block (HEADERS without END_HEADERS).
#[derive(Debug)]
struct PendingBlock {
    stream: u32,
    block: BytesMut,
    end_stream: bool,
    continuations: u32,
}

/// One server connection.
#[derive(Debug)]
pub struct Connection {
    limits: Limits,
    phase: Phase,
    /// Bytes received and not yet parsed into frames.
    rbuf: BytesMut,
    decoder: hpack::Decoder,
    pending_block: Option<PendingBlock>,
    streams: HashMap<u32, Stream>,
    /// Highest client stream id seen; everything above is idle.
    last_stream: u32,
    /// Last stream id announced in our final GOAWAY.
    goaway_last: Option<u32>,
    events: VecDeque<Event>,

    // Peer settings.
    peer_max_frame: usize,
    peer_initial_window: i64,

    // Flow control (§6.9): send windows may go negative after a SETTINGS change.
    send_window: i64,
    recv_window: i64,
    recv_unacked: u32,
    /// Streams with something to send, in round-robin order.
    ready: VecDeque<u32>,
    /// Application bytes queued across streams.
    queued: usize,
    /// Control frames, sent before anything else.
    ctrl: BytesMut,

    // Timers.
    created: Instant,
    last_recv: Instant,
    /// Last time the connection had no open streams (for idle timeout).
    idle_since: Option<Instant>,
    ping_sent: Option<Instant>,
    ping_seq: u64,
    settings_sent: Option<Instant>,
    drain_started: Option<Instant>,
    /// How long streams may go on after the first GOAWAY.
    drain_grace: Duration,

    // Flood protection.
    settings_bucket: Bucket,
    ping_bucket: Bucket,
    reset_bucket: Bucket,
    local_reset_bucket: Bucket,
    empty_data_bucket: Bucket,
}

impl Connection {
    /// A connection accepted at `now`. Our SETTINGS and the connection
    /// window update are queued at once (§3.4: the server preface).
    pub fn new(limits: Limits, now: Instant) -> Self {
        let mut ctrl = BytesMut::with_capacity(64);
        encode::settings(
            &mut ctrl,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams),
                (setting::INITIAL_WINDOW_SIZE, limits.stream_window),
                (setting::MAX_FRAME_SIZE, limits.max_frame_size),
                (setting::MAX_HEADER_LIST_SIZE, limits.max_header_list_size),
            ],
        );
        let conn_window = limits.connection_window.max(frame::DEFAULT_INITIAL_WINDOW);
        if conn_window > frame::DEFAULT_INITIAL_WINDOW {
            encode::window_update(&mut ctrl, 0, conn_window - frame::DEFAULT_INITIAL_WINDOW);
        }
        Self {
            phase: Phase::Preface(0),
            rbuf: BytesMut::new(),
            decoder: hpack::Decoder::default(),
            pending_block: None,
            streams: HashMap::new(),
            last_stream: 0,
            goaway_last: None,
            events: VecDeque::new(),
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE as usize,
            peer_initial_window: i64::from(frame::DEFAULT_INITIAL_WINDOW),
            send_window: i64::from(frame::DEFAULT_INITIAL_WINDOW),
            recv_window: i64::from(conn_window),
            recv_unacked: 0,
            ready: VecDeque::new(),
            queued: 0,
            ctrl,
            created: now,
            last_recv: now,
            idle_since: Some(now),
            ping_sent: None,
            ping_seq: 0,
            settings_sent: Some(now),
            drain_started: None,
            drain_grace: limits.max_connection_age_grace,
            settings_bucket: Bucket::new(limits.settings_rate, now),
            ping_bucket: Bucket::new(limits.ping_rate, now),
            reset_bucket: Bucket::new(limits.reset_rate, now),
            local_reset_bucket: Bucket::new(limits.local_reset_rate, now),
            empty_data_bucket: Bucket::new(limits.empty_data_rate, now),
            limits,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    // ---- input ------------------------------------------------------------

    /// Feeds bytes read from the peer. Protocol errors are handled inside
    /// (RST_STREAM or GOAWAY queued); the return value only says whether
    /// the connection is still usable.
    pub fn recv(&mut self, mut input: &[u8], now: Instant) -> bool {
        if self.phase == Phase::Closed {
            return false;
        }
        self.last_recv = now;
        if let Phase::Preface(matched) = self.phase {
            let n = (frame::PREFACE.len() - matched).min(input.len());
            if input[..n] != frame::PREFACE[matched..matched + n] {
                // Not HTTP/2 with prior knowledge (perhaps HTTP/1.1 or TLS
                // on the plaintext port): nothing sensible to answer but GOAWAY.
                self.connection_error(Reason::ProtocolError, "invalid connection preface", Violation::BadPreface);
                return false;
            }
            input = &input[n..];
            self.phase =
                if matched + n == frame::PREFACE.len() { Phase::FirstSettings } else { Phase::Preface(matched + n) };
        }
        self.rbuf.extend_from_slice(input);
        while self.phase != Phase::Closed {
            if self.rbuf.len() < frame::HEAD_LEN {
                break;
            }
            let head = Head::parse(self.rbuf[..frame::HEAD_LEN].try_into().expect("9 bytes"));
            if head.len > self.limits.max_frame_size {
                // §4.2: a frame larger than we advertised.
                self.connection_error(
                    Reason::FrameSizeError,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                    Violation::FrameTooLarge,
                );
                break;
            }
            let total = frame::HEAD_LEN + head.len as usize;
            if self.rbuf.len() < total {
                self.rbuf.reserve(total - self.rbuf.len());
                break;
            }
            self.rbuf.advance(frame::HEAD_LEN);
            let payload = self.rbuf.split_to(head.len as usize).freeze();
            if let Err(e) = self.on_frame(head, payload, now) {
                self.on_error(e);
            }
        }
        if self.rbuf.is_empty() {
            // Nothing partial: give back the allocation (an idle
            // connection keeps no read memory).
            self.rbuf = BytesMut::new();
        }
        self.phase != Phase::Closed
    }

    fn on_error(&mut self, e: Error) {
        match e {
            Error::Stream { stream, reason, msg } => {
                tracing::debug!(target: "grpc", stream, %reason, msg, "stream error");
                self.local_reset(stream, reason, Violation::StreamError);
            }
            Error::Connection { reason, msg } => self.connection_error(reason, msg, Violation::ConnectionError),
        }
    }

    fn on_frame(&mut self, head: Head, payload: Bytes, now: Instant) -> Result<(), Error> {
        let frame = Frame::decode(head, payload)?;
        if self.phase == Phase::FirstSettings {
            match &frame {
                Frame::Settings { ack: false, .. } => self.phase = Phase::Open,
                _ => return Err(conn(Reason::ProtocolError, "first frame is not SETTINGS")),
            }
        }
        // §6.10: nothing may interleave a header block.
        if let Some(p) = &self.pending_block {
            match &frame {
                Frame::Continuation { stream, .. } if *stream == p.stream => {}
                _ => return Err(conn(Reason::ProtocolError, "header block interrupted")),
            }
        }
        match frame {
            Frame::Data { stream, data, end_stream, flow_len } => self.on_data(stream, data, end_stream, flow_len, now),
            Frame::Headers { stream, fragment, end_stream, end_headers, depends_on } => {
                if depends_on == Some(stream) {
                    return Err(Error::Stream {
                        stream,
                        reason: Reason::ProtocolError,
                        msg: "stream depends on itself",
                    });
                }
                let block = PendingBlock { stream, block: BytesMut::from(&fragment[..]), end_stream, continuations: 0 };
                self.check_block_size(&block)?;
                if end_headers {
                    self.on_header_block(block, now)
                } else {
                    self.pending_block = Some(block);
                    Ok(())
                }
            }
            Frame::Continuation { stream, fragment, end_headers } => {
                let Some(mut block) = self.pending_block.take() else {
                    return Err(conn(Reason::ProtocolError, "CONTINUATION without HEADERS"));
                };
                debug_assert_eq!(block.stream, stream);
                block.continuations += 1;
                if block.continuations > self.limits.max_continuation_frames {
                    violations::count(Violation::ContinuationFlood);
                    return Err(conn(Reason::EnhanceYourCalm, "too many CONTINUATION frames"));
                }
                block.block.extend_from_slice(&fragment);
                self.check_block_size(&block)?;
                if end_headers {
                    self.on_header_block(block, now)
                } else {
                    self.pending_block = Some(block);
                    Ok(())
                }
            }
            Frame::Priority { stream, depends_on } => {
                if depends_on == stream {
                    return Err(Error::Stream {
                        stream,
                        reason: Reason::ProtocolError,
                        msg: "stream depends on itself",
                    });
                }
                Ok(())
            }
            Frame::RstStream { stream, code } => {
                // Rapid reset (CVE-2023-44487) is opening streams and
                // resetting them before they are answered, so that the
                // server works for nothing. As Envoy and nginx do, only
                // such resets count: a client cancelling streams it got
                // answers on (a grpc client's ordinary cancel) does not.
                let unanswered = self.streams.get(&stream).is_some_and(|s| s.send == Send::Idle);
                if unanswered && !self.reset_bucket.take(now) {
                    violations::count(Violation::ResetFlood);
                    return Err(conn(Reason::EnhanceYourCalm, "too many RST_STREAM frames"));
                }
                if stream > self.last_stream {
                    return Err(conn(Reason::ProtocolError, "RST_STREAM on an idle stream")); // §6.4
                }
                if let Some(s) = self.streams.remove(&stream) {
                    self.queued -= s.queued;
                    self.events.push_back(Event::Reset { stream, code });
                    self.note_idle(now);
                }
                Ok(())
            }
            Frame::Settings { ack, params } => {
                if ack {
                    self.settings_sent = None;
                    return Ok(());
                }
                if !self.settings_bucket.take(now) {
                    violations::count(Violation::SettingsFlood);
                    return Err(conn(Reason::EnhanceYourCalm, "too many SETTINGS frames"));
                }
                self.apply_settings(&params)?;
                encode::settings_ack(&mut self.ctrl);
                Ok(())
            }
            Frame::Ping { ack, data } => {
                if ack {
                    if data == DRAIN_PING {
                        self.send_final_goaway();
                    } else if data == self.ping_seq.to_be_bytes() {
                        self.ping_sent = None;
                    }
                    return Ok(());
                }
                if !self.ping_bucket.take(now) {
                    violations::count(Violation::PingFlood);
                    return Err(conn(Reason::EnhanceYourCalm, "too many PING frames"));
                }
                encode::ping(&mut self.ctrl, true, data);
                Ok(())
            }
            Frame::GoAway { code, .. } => {
                if code != 0 {
                    tracing::debug!(target: "grpc", code = Reason::name_of(code), "peer sent GOAWAY");
                }
                self.events.push_back(Event::GoAway { code });
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
            Frame::Unknown { .. } => Ok(()),
        }
    }

    fn check_block_size(&self, block: &PendingBlock) -> Result<(), Error> {
        if block.block.len() > self.limits.max_header_block {
            violations::count(Violation::HeaderBlockTooLarge);
            return Err(conn(Reason::EnhanceYourCalm, "header block too large"));
        }
        Ok(())
    }

    fn apply_settings(&mut self, params: &[u8]) -> Result<(), Error> {
        for (id, value) in Frame::settings(params) {
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(conn(Reason::ProtocolError, "SETTINGS_ENABLE_PUSH is not 0 or 1"));
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if value > frame::MAX_WINDOW {
                        return Err(conn(Reason::FlowControlError, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1"));
                    }
                    // §6.9.2: the change applies to every open stream.
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for (id, s) in self.streams.iter_mut() {
                        s.send_window += delta;
                        if s.send_window > i64::from(frame::MAX_WINDOW) {
                            return Err(conn(Reason::FlowControlError, "stream window overflow"));
                        }
                        if delta > 0 && s.wants_send() && !s.in_ready {
                            s.in_ready = true;
                            self.ready.push_back(*id);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return Err(conn(Reason::ProtocolError, "SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.peer_max_frame = value as usize;
                }
                // HEADER_TABLE_SIZE: our encoder never indexes. Others:
                // advisory for a server, or unknown (ignored, §6.5.2).
                _ => {}
            }
        }
        Ok(())
    }

    fn on_window_update(&mut self, stream: u32, increment: u32) -> Result<(), Error> {
        if stream == 0 {
            if increment == 0 {
                return Err(conn(Reason::ProtocolError, "WINDOW_UPDATE of 0 on the connection")); // §6.9
            }
            let was_closed = self.send_window <= 0;
            self.send_window += i64::from(increment);
            if self.send_window > i64::from(frame::MAX_WINDOW) {
                return Err(conn(Reason::FlowControlError, "connection window above 2^31-1")); // §6.9.1
            }
            if was_closed {
                // Streams that stopped on the connection window may go on.
                for (id, s) in self.streams.iter_mut() {
                    if s.wants_send() && s.send_window > 0 && !s.in_ready {
                        s.in_ready = true;
                        self.ready.push_back(*id);
                    }
                }
            }
            return Ok(());
        }
        if stream > self.last_stream {
            return Err(conn(Reason::ProtocolError, "WINDOW_UPDATE on an idle stream"));
        }
        let Some(s) = self.streams.get_mut(&stream) else { return Ok(()) }; // closed: ignore
        if increment == 0 {
            return Err(Error::Stream { stream, reason: Reason::ProtocolError, msg: "WINDOW_UPDATE of 0" });
        }
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(frame::MAX_WINDOW) {
            return Err(Error::Stream { stream, reason: Reason::FlowControlError, msg: "stream window above 2^31-1" });
        }
        if s.wants_send() && !s.in_ready {
            s.in_ready = true;
            self.ready.push_back(stream);
        }
        Ok(())
    }

    fn on_data(&mut self, id: u32, data: Bytes, end_stream: bool, flow_len: u32, now: Instant) -> Result<(), Error> {
        // §6.9.1: every DATA frame counts against the connection window,
        // whatever becomes of its stream.
        if i64::from(flow_len) > self.recv_window {
            return Err(conn(Reason::FlowControlError, "DATA beyond the connection window"));
        }
        self.recv_window -= i64::from(flow_len);
        self.release_connection_credit(flow_len);
        if data.is_empty() && !end_stream && !self.empty_data_bucket.take(now) {
            violations::count(Violation::EmptyDataFlood);
            return Err(conn(Reason::EnhanceYourCalm, "too many empty DATA frames"));
        }
        if id > self.last_stream {
            return Err(conn(Reason::ProtocolError, "DATA on an idle stream")); // §5.1
        }
        let Some(s) = self.streams.get_mut(&id) else { return Ok(()) }; // closed: ignore (§5.1)
        if s.recv == Recv::Closed {
            return Err(Error::Stream { stream: id, reason: Reason::StreamClosed, msg: "DATA after END_STREAM" });
        }
        if i64::from(flow_len) > s.recv_window {
            return Err(Error::Stream {
                stream: id,
                reason: Reason::FlowControlError,
                msg: "DATA beyond the stream window",
            });
        }
        s.recv_window -= i64::from(flow_len);
        if end_stream {
            s.recv = Recv::Closed;
        } else {
            // The application consumes data as it arrives: give the credit
            // back once half the window is used, so uploads never stall.
            s.recv_unacked += flow_len;
            if s.recv_unacked >= self.limits.stream_window / 2 {
                encode::window_update(&mut self.ctrl, id, s.recv_unacked);
                s.recv_window += i64::from(s.recv_unacked);
                s.recv_unacked = 0;
            }
        }
        self.events.push_back(Event::Data { stream: id, data, end_stream });
        if end_stream {
            self.maybe_finish(id, now);
        }
        Ok(())
    }

    fn release_connection_credit(&mut self, n: u32) {
        self.recv_unacked += n;
        if self.recv_unacked >= self.limits.connection_window / 2 {
            encode::window_update(&mut self.ctrl, 0, self.recv_unacked);
            self.recv_window += i64::from(self.recv_unacked);
            self.recv_unacked = 0;
        }
    }

    fn on_header_block(&mut self, block: PendingBlock, now: Instant) -> Result<(), Error> {
        let PendingBlock { stream: id, block, end_stream, .. } = block;
        let max = self.limits.max_header_list_size as usize;
        let (fields, size) =
            self.decoder.decode(&block, max).map_err(|_| conn(Reason::CompressionError, "HPACK decoding failed"))?;
        if id.is_multiple_of(2) {
            return Err(conn(Reason::ProtocolError, "client opened an even stream")); // §5.1.1
        }
        if let Some(s) = self.streams.get_mut(&id) {
            // Trailers (§8.1): must end the stream.
            if s.recv == Recv::Closed {
                return Err(Error::Stream {
                    stream: id,
                    reason: Reason::StreamClosed,
                    msg: "HEADERS after END_STREAM",
                });
            }
            if !end_stream {
                return Err(Error::Stream {
                    stream: id,
                    reason: Reason::ProtocolError,
                    msg: "trailers without END_STREAM",
                });
            }
            s.recv = Recv::Closed;
            self.events.push_back(Event::Data { stream: id, data: Bytes::new(), end_stream: true });
            self.maybe_finish(id, now);
            return Ok(());
        }
        if id <= self.last_stream {
            return Ok(()); // a stream we already closed: decoded for HPACK's sake, ignored
        }
        self.last_stream = id;
        if let Some(last) = self.goaway_last
            && id > last
        {
            return Ok(()); // §6.8: after GOAWAY, new streams are ignored
        }
        // Between the two GOAWAYs of a graceful shutdown streams are still accepted.
        if self.streams.len() >= self.limits.max_concurrent_streams as usize {
            violations::count(Violation::TooManyStreams);
            return Err(Error::Stream {
                stream: id,
                reason: Reason::RefusedStream,
                msg: "too many concurrent streams",
            });
        }
        if size > max {
            let stream = self.insert_stream(id, end_stream);
            // §8.2.3 lets a server answer 431; the block was decoded in full.
            violations::count(Violation::HeaderListTooLarge);
            stream.pending_headers = Some(request::status_block(431));
            stream.send = Send::Done;
            stream.end_stream_queued = true;
            self.schedule(id);
            return Ok(());
        }
        match Request::from_fields(fields) {
            Ok(request) => {
                self.insert_stream(id, end_stream);
                self.events.push_back(Event::Request { stream: id, request, end_stream });
                Ok(())
            }
            Err(msg) => Err(Error::Stream { stream: id, reason: Reason::ProtocolError, msg }), // §8.1.1
        }
    }

    fn insert_stream(&mut self, id: u32, end_stream: bool) -> &mut Stream {
        self.idle_since = None;
        let s = Stream::new(self.peer_initial_window, i64::from(self.limits.stream_window), end_stream);
        self.streams.entry(id).or_insert(s)
    }

    // ---- output from the application --------------------------------------

    /// Queues the response header block (pre-encoded HPACK, see
    /// [`hpack::Encoder`]). With `end_stream` the response is complete.
    pub fn send_headers(&mut self, id: u32, block: Bytes, end_stream: bool) -> Result<(), SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::StreamClosed)?;
        if s.send != Send::Idle {
            return Err(SendError::HeadersSent);
        }
        s.pending_headers = Some(block);
        s.send = if end_stream { Send::Done } else { Send::Open };
        s.end_stream_queued = end_stream;
        self.schedule(id);
        Ok(())
    }

    /// Queues body bytes. They are sent as flow control allows; the caller
    /// may pass a message in pieces (prefix, payload) without copying.
    pub fn send_data(&mut self, id: u32, data: Bytes) -> Result<(), SendError> {
        if self.queued + data.len() > self.limits.max_queued_bytes {
            violations::count(Violation::SendQueueFull);
            return Err(SendError::QueueFull);
        }
        self.queue_data(id, data)
    }

    /// Makes room for `pieces` more chunks on stream `id` at once (a
    /// message queued in pieces would otherwise grow the queue by
    /// doubling, up to twice what it holds).
    pub fn reserve_pieces(&mut self, id: u32, pieces: usize) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.data.reserve(pieces);
        }
    }

    /// Queues body bytes whatever the queue holds: for a caller that
    /// bounds the queue itself (gRPC admits a message larger than the cap
    /// into an empty queue; it is then sent as the peer's windows allow).
    pub fn send_data_uncapped(&mut self, id: u32, data: Bytes) -> Result<(), SendError> {
        self.queue_data(id, data)
    }

    fn queue_data(&mut self, id: u32, data: Bytes) -> Result<(), SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::StreamClosed)?;
        if s.send != Send::Open {
            return Err(if s.send == Send::Idle { SendError::StreamClosed } else { SendError::HeadersSent });
        }
        if data.is_empty() {
            // Nothing to frame (an empty message's payload). Queued, it
            // would look like pending data that no window can ever send.
            return Ok(());
        }
        self.queued += data.len();
        s.queued += data.len();
        s.data.push_back(data);
        self.schedule(id);
        Ok(())
    }

    /// Queues trailers (pre-encoded) that end the response.
    pub fn send_trailers(&mut self, id: u32, block: Bytes) -> Result<(), SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::StreamClosed)?;
        if s.send != Send::Open {
            return Err(SendError::HeadersSent);
        }
        s.trailers = Some(block);
        s.send = Send::Done;
        self.schedule(id);
        Ok(())
    }

    /// Resets a stream from the application's side (e.g. CANCEL).
    pub fn reset(&mut self, id: u32, reason: Reason) {
        if let Some(s) = self.streams.remove(&id) {
            self.queued -= s.queued;
            encode::rst_stream(&mut self.ctrl, id, reason.code());
        }
    }

    /// Application bytes queued on stream `id` and not yet sent.
    pub fn stream_queued(&self, id: u32) -> Option<usize> {
        self.streams.get(&id).map(|s| s.queued)
    }

    /// Application bytes queued on the whole connection.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Open streams.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Starts a graceful shutdown (§6.8): GOAWAY with the largest stream
    /// id and a PING; when the PING returns, the final GOAWAY names the
    /// last stream accepted. Streams already open may finish until
    /// `max_connection_age_grace` has passed.
    pub fn go_away(&mut self, now: Instant) {
        self.go_away_within(now, self.limits.max_connection_age_grace);
    }

    /// [`Connection::go_away`] with its own grace period: a server shutting
    /// down gives each connection a different one, so that its proxies
    /// leave (and reconnect elsewhere) spread over the shutdown instead of
    /// all at once.
    pub fn go_away_within(&mut self, now: Instant, grace: Duration) {
        if matches!(self.phase, Phase::Closed | Phase::Draining { .. }) {
            return;
        }
        self.drain_grace = grace;
        if matches!(self.phase, Phase::Preface(_) | Phase::FirstSettings) {
            self.phase = Phase::Closed;
            return;
        }
        encode::go_away(&mut self.ctrl, frame::MAX_WINDOW, Reason::NoError.code(), b"graceful shutdown");
        encode::ping(&mut self.ctrl, false, DRAIN_PING);
        self.phase = Phase::Draining { final_sent: false };
        self.drain_started = Some(now);
    }

    fn send_final_goaway(&mut self) {
        if let Phase::Draining { final_sent: false } = self.phase {
            encode::go_away(&mut self.ctrl, self.last_stream, Reason::NoError.code(), b"graceful shutdown");
            self.goaway_last = Some(self.last_stream);
            self.phase = Phase::Draining { final_sent: true };
            if self.streams.is_empty() {
                self.phase = Phase::Closed;
            }
        }
    }

    fn schedule(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id)
            && !s.in_ready
        {
            s.in_ready = true;
            self.ready.push_back(id);
        }
    }

    // ---- errors --------------------------------------------------------------

    fn local_reset(&mut self, id: u32, reason: Reason, v: Violation) {
        violations::count(v);
        violations::count_reset(reason);
        if let Some(s) = self.streams.remove(&id) {
            self.queued -= s.queued;
            self.events.push_back(Event::Reset { stream: id, code: reason.code() });
        }
        encode::rst_stream(&mut self.ctrl, id, reason.code());
        // Making the server reset streams is a flood too ("made you reset").
        if !self.local_reset_bucket.take(self.last_recv) {
            violations::count(Violation::LocalResetFlood);
            self.connection_error(Reason::EnhanceYourCalm, "too many stream errors", Violation::ConnectionError);
        }
    }

    fn connection_error(&mut self, reason: Reason, msg: &'static str, v: Violation) {
        if self.phase == Phase::Closed {
            return;
        }
        tracing::debug!(target: "grpc", %reason, msg, "connection error");
        violations::count(v);
        violations::count_goaway(reason);
        encode::go_away(&mut self.ctrl, self.last_stream, reason.code(), msg.as_bytes());
        self.phase = Phase::Closed;
        self.pending_block = None;
        for (id, s) in self.streams.drain() {
            self.events.push_back(Event::Reset { stream: id, code: reason.code() });
            let _ = s;
        }
        self.queued = 0;
        self.ready.clear();
    }

    /// Drops a stream whose both directions are done.
    fn maybe_finish(&mut self, id: u32, now: Instant) {
        if let Some(s) = self.streams.get(&id)
            && s.recv == Recv::Closed
            && s.send == Send::Done
            && s.sent_end
        {
            self.streams.remove(&id);
            self.note_idle(now);
        }
    }

    fn note_idle(&mut self, now: Instant) {
        if self.streams.is_empty() {
            self.idle_since = Some(now);
            if let Phase::Draining { final_sent: true } = self.phase {
                self.phase = Phase::Closed;
            }
        }
    }

    // ---- output to the socket -------------------------------------------------

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether [`Connection::poll_transmit`] would write anything.
    pub fn wants_write(&self) -> bool {
        !self.ctrl.is_empty() || self.ready.iter().any(|id| self.streams.get(id).is_some_and(|s| self.can_send(s)))
    }

    fn can_send(&self, s: &Stream) -> bool {
        s.pending_headers.is_some()
            || (!s.data.is_empty() && s.send_window > 0 && self.send_window > 0)
            || (s.data.is_empty() && (s.trailers.is_some() || (s.send == Send::Done && !s.sent_end)))
    }

    /// Appends frames to `out`, about `budget` bytes at most (one frame may
    /// go over). Control frames first, then streams round-robin, one frame
    /// each per turn, within both flow-control windows.
    pub fn poll_transmit(&mut self, out: &mut impl Transmit, budget: usize) {
        out.buf().put_slice(&self.ctrl);
        self.ctrl.clear();
        let mut turns = self.ready.len();
        while out.written() < budget && turns > 0 {
            let Some(id) = self.ready.pop_front() else { break };
            turns -= 1;
            let Some(s) = self.streams.get_mut(&id) else { continue };
            if let Some(block) = s.pending_headers.take() {
                let end = s.end_stream_queued && s.data.is_empty() && s.trailers.is_none();
                encode::headers(out.buf(), id, &block, end, self.peer_max_frame);
                if end {
                    s.sent_end = true;
                }
            }
            if !s.data.is_empty() && s.send_window > 0 && self.send_window > 0 {
                let n =
                    (self.peer_max_frame as i64).min(s.send_window).min(self.send_window).min(s.queued as i64) as usize;
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                s.queued -= n;
                self.queued -= n;
                encode::data_head(out.buf(), id, n, false);
                let mut left = n;
                while left > 0 {
                    let chunk = s.data.front_mut().expect("queued bytes are in the deque");
                    let take = left.min(chunk.len());
                    out.body(chunk.split_to(take));
                    if chunk.is_empty() {
                        s.data.pop_front();
                    }
                    left -= take;
                }
                if s.data.is_empty() && s.data.capacity() > 16 {
                    // A response of thousands of pieces is out: its deque
                    // goes with it (an idle stream keeps no queue memory).
                    s.data = VecDeque::new();
                }
            }
            if s.data.is_empty() && !s.sent_end && s.send == Send::Done {
                match s.trailers.take() {
                    Some(t) => encode::headers(out.buf(), id, &t, true, self.peer_max_frame),
                    None => encode::data_head(out.buf(), id, 0, true),
                }
                s.sent_end = true;
            }
            if s.sent_end {
                s.in_ready = false;
                if s.recv == Recv::Open {
                    // §8.1: the response is complete; ask the client to stop sending.
                    encode::rst_stream(out.buf(), id, Reason::NoError.code());
                    self.streams.remove(&id);
                    self.note_idle(self.last_recv);
                } else {
                    self.streams.remove(&id);
                    self.note_idle(self.last_recv);
                }
            } else if !s.data.is_empty() && s.send_window > 0 && self.send_window > 0 {
                self.ready.push_back(id); // more to send: back of the line
                turns += 1;
            } else {
                s.in_ready = false; // blocked on a window, or nothing queued
            }
        }
    }

    /// Whether the connection is finished: close the socket once
    /// [`Connection::wants_write`] is false.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    // ---- timers --------------------------------------------------------------

    /// The next instant at which [`Connection::handle_timeout`] must run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Closed {
            return None;
        }
        let l = &self.limits;
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        match self.phase {
            Phase::Preface(_) | Phase::FirstSettings => at(self.created + l.handshake_timeout),
            _ => {}
        }
        if let Some(sent) = self.settings_sent {
            at(sent + l.settings_timeout);
        }
        match self.ping_sent {
            Some(sent) => at(sent + l.keepalive_timeout),
            None => at(self.last_recv + l.keepalive_interval),
        }
        if let Some(age) = l.max_connection_age
            && self.drain_started.is_none()
        {
            at(self.created + age);
        }
        if let Some(started) = self.drain_started {
            at(started + self.drain_grace);
            if let Phase::Draining { final_sent: false } = self.phase {
                // The PING may never come back: send the final GOAWAY anyway.
                at(started + DRAIN_PING_WAIT);
            }
        }
        if let (Some(idle), Some(since)) = (l.idle_timeout, self.idle_since) {
            at(since + idle);
        }
        next
    }

    /// Runs whatever is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Closed {
            return;
        }
        let l = self.limits.clone();
        if matches!(self.phase, Phase::Preface(_) | Phase::FirstSettings) && now >= self.created + l.handshake_timeout {
            violations::count(Violation::HandshakeTimeout);
            self.phase = Phase::Closed;
            return;
        }
        if let Some(sent) = self.settings_sent
            && now >= sent + l.settings_timeout
        {
            self.connection_error(Reason::SettingsTimeout, "SETTINGS not acknowledged", Violation::SettingsTimeout);
            return;
        }
        match self.ping_sent {
            Some(sent) if now >= sent + l.keepalive_timeout => {
                // The peer is gone or stuck; nothing it could read would help.
                violations::count(Violation::KeepaliveTimeout);
                self.phase = Phase::Closed;
                self.ctrl.clear();
                return;
            }
            None if now >= self.last_recv + l.keepalive_interval => {
                self.ping_seq += 1;
                encode::ping(&mut self.ctrl, false, self.ping_seq.to_be_bytes());
                self.ping_sent = Some(now);
            }
            _ => {}
        }
        if let Some(age) = l.max_connection_age
            && self.drain_started.is_none()
            && now >= self.created + age
        {
            self.go_away(now);
        }
        if let (Some(idle), Some(since)) = (l.idle_timeout, self.idle_since)
            && now >= since + idle
        {
            self.go_away(now);
        }
        if let Some(started) = self.drain_started {
            if now >= started + DRAIN_PING_WAIT {
                self.send_final_goaway();
            }
            if now >= started + self.drain_grace && self.phase != Phase::Closed {
                // Grace is over: whatever is still open is cut off.
                for (id, s) in self.streams.drain() {
                    self.queued -= s.queued;
                    self.events.push_back(Event::Reset { stream: id, code: Reason::Cancel.code() });
                }
                self.ready.clear();
                self.phase = Phase::Closed;
            }
        }
    }
}

/// How long the drain PING may take before the final GOAWAY goes anyway.
const DRAIN_PING_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn conn(reason: Reason, msg: &'static str) -> Error {
    Error::Connection { reason, msg }
}

#[cfg(test)]
mod tests;
