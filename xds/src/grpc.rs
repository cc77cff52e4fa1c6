//! gRPC over the HTTP/2 state machine (gRPC's PROTOCOL-HTTP2.md), still
//! sans-I/O: request validation, routing by `:path`, length-prefixed
//! messages reassembled across DATA frames, responses as pre-encoded
//! headers, messages and trailers. Unary and streaming calls look the same
//! here: a [`Service`] gets the stream's messages and answers whenever it
//! likes, from a callback or later (a push).

mod status;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use istiod_xds_api::Code;
pub use status::{Status, percent_encode};

use crate::h2::violations::{self, Violation};
use crate::h2::{Connection, Event, Limits, Reason, Request, SendError, hpack};

/// Limits of the gRPC layer.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcLimits {
    /// Largest message accepted (istiod: `ISTIO_GPRC_MAXRECVMSGSIZE`, 4 MiB).
    pub max_recv_message: usize,
    /// Bytes of partial messages buffered across a connection's streams.
    pub max_buffered: usize,
    /// Largest message sent (`ISTIOD_RS_MAX_RESPONSE_BYTES`; gRPC's length
    /// prefix allows 4 GiB - 1, grpc-go's default send limit is 2 GiB - 1).
    pub max_send_message: usize,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        Self { max_recv_message: 4 << 20, max_buffered: 16 << 20, max_send_message: (1 << 31) - 1 }
    }
}

/// What the service sees of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// HTTP/2 stream id.
    pub stream: u32,
    /// The request head (`:path`, metadata).
    pub request: Request,
    /// `grpc-timeout` as an absolute deadline.
    pub deadline: Option<Instant>,
    /// Set by an authenticating wrapper around a service (never from the
    /// wire): the caller is authenticated and its node's namespace is
    /// checked against its identity before its first message reaches the
    /// service (istiod's `VerifiedIdentity`, which SDS requires).
    pub verified: bool,
    /// The caller's authenticated identities (SPIFFE ids), set by the same
    /// wrapper; empty for an unauthenticated call.
    pub identities: Arc<[String]>,
}

/// The application behind a connection.
pub trait Service {
    /// A call opened. `Err` answers at once with that status (e.g.
    /// UNIMPLEMENTED for an unknown `:path`).
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status>;
    /// A complete request message. `Err` ends the call with that status.
    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status>;
    /// The client finished sending (END_STREAM).
    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32);
    /// The call is gone: reset by the peer, cut off by the server, or its
    /// deadline passed. No more sends are possible on it.
    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32);
    /// A send failed with [`SendError::QueueFull`] earlier and the queue
    /// has since drained to half: the service may send again.
    fn drained(&mut self, conn: &mut GrpcConnection) {
        let _ = conn;
    }
}

#[derive(Debug)]
struct CallState {
    /// Partial message bytes (prefix included).
    buf: BytesMut,
    headers_sent: bool,
    finished: bool,
    deadline: Option<Instant>,
    /// Message bytes queued on the stream so far (prefixes included)...
    enqueued: u64,
    /// ...and, for each message not yet framed, where it ends and when it
    /// was queued (`pilot_xds_send_time`).
    sends: std::collections::VecDeque<(u64, Instant)>,
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnInfo {
    /// Unique on its core.
    pub id: u64,
    /// The peer's address.
    pub peer: Option<std::net::SocketAddr>,
    /// Whether the connection is TLS (services that take credentials,
    /// such as bearer tokens, refuse them in the clear).
    pub secure: bool,
    /// The client's certificate (DER), when it presented one the
    /// listener's client roots verified.
    pub peer_certificate: Option<Bytes>,
}

/// One gRPC server connection: the HTTP/2 connection and the calls on it.
#[derive(Debug)]
pub struct GrpcConnection {
    /// Identity of the connection, for services that keep per-connection state.
    pub info: ConnInfo,
    h2: Connection,
    limits: GrpcLimits,
    calls: HashMap<u32, CallState>,
    buffered: usize,
    /// A send hit the queue cap; [`Service::drained`] is owed.
    blocked: bool,
    /// Pre-encoded `:status 200` + `content-type: application/grpc`.
    response_headers: Bytes,
}

impl GrpcConnection {
    /// A connection accepted at `now`.
    pub fn new(limits: Limits, grpc: GrpcLimits, now: Instant) -> Self {
        Self {
            info: ConnInfo::default(),
            h2: Connection::new(limits, now),
            limits: grpc,
            calls: HashMap::new(),
            buffered: 0,
            blocked: false,
            response_headers: hpack::Encoder::new().indexed(8).indexed_name(31, b"application/grpc").finish(),
        }
    }

    /// The HTTP/2 connection (for its output and timers).
    pub fn h2(&mut self) -> &mut Connection {
        &mut self.h2
    }

    /// Feeds bytes from the peer and runs the service on what they carry.
    pub fn recv<S: Service + ?Sized>(&mut self, bytes: &[u8], now: Instant, svc: &mut S) -> bool {
        let alive = self.h2.recv(bytes, now);
        self.dispatch(now, svc);
        alive
    }

    /// Runs due timers (HTTP/2 keepalive and age; call deadlines).
    pub fn handle_timeout<S: Service + ?Sized>(&mut self, now: Instant, svc: &mut S) {
        self.h2.handle_timeout(now);
        let expired: Vec<u32> = self
            .calls
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now) && !c.finished)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.finish(id, &Status::new(Code::DeadlineExceeded, "deadline exceeded"));
            svc.closed(self, id);
        }
        self.dispatch(now, svc);
    }

    /// The earliest of the HTTP/2 timers and the call deadlines.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let calls = self.calls.values().filter(|c| !c.finished).filter_map(|c| c.deadline).min();
        match (self.h2.poll_timeout(), calls) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn dispatch<S: Service + ?Sized>(&mut self, now: Instant, svc: &mut S) {
        while let Some(ev) = self.h2.poll_event() {
            match ev {
                Event::Request { stream, request, end_stream } => {
                    self.on_request(stream, request, end_stream, now, svc)
                }
                Event::Data { stream, data, end_stream } => self.on_data(stream, data, end_stream, svc),
                Event::Reset { stream, .. } => {
                    if let Some(c) = self.calls.remove(&stream) {
                        self.buffered -= c.buf.len();
                        svc.closed(self, stream);
                    }
                }
                Event::GoAway { .. } => {}
            }
        }
    }

    fn on_request<S: Service + ?Sized>(
        &mut self,
        id: u32,
        request: Request,
        end_stream: bool,
        now: Instant,
        svc: &mut S,
    ) {
        let early = |http: u16, status: Status| (http, status);
        let rejected = if &request.method[..] != b"POST" {
            Some(early(405, Status::new(Code::Internal, "gRPC requires :method POST")))
        } else if !request.header("content-type").is_some_and(|ct| is_grpc_content_type(ct)) {
            Some(early(415, Status::new(Code::Internal, "invalid gRPC request content-type")))
        } else if let Some(enc) = request.header("grpc-encoding").filter(|e| &e[..] != b"identity") {
            let enc = String::from_utf8_lossy(enc).into_owned();
            Some(early(
                200,
                Status::new(Code::Unimplemented, format!("grpc-encoding {enc:?}: compression is not supported")),
            ))
        } else {
            None
        };
        if let Some((http, status)) = rejected {
            let _ = self.h2.send_headers(id, status.trailers_only(http), true);
            return;
        }
        let deadline = match request.header("grpc-timeout").map(|t| parse_timeout(t)) {
            None => None,
            Some(Some(d)) => Some(now + d),
            Some(None) => {
                let status = Status::new(Code::Internal, "malformed grpc-timeout");
                let _ = self.h2.send_headers(id, status.trailers_only(200), true);
                return;
            }
        };
        let call = Call { stream: id, request, deadline, verified: false, identities: Arc::from([]) };
        self.calls.insert(
            id,
            CallState {
                buf: BytesMut::new(),
                headers_sent: false,
                finished: false,
                deadline,
                enqueued: 0,
                sends: std::collections::VecDeque::new(),
            },
        );
        if let Err(status) = svc.open(self, &call) {
            self.finish(id, &status);
            svc.closed(self, id);
            return;
        }
        if end_stream && self.calls.contains_key(&id) {
            svc.half_close(self, id);
        }
    }

    fn on_data<S: Service + ?Sized>(&mut self, id: u32, data: Bytes, end_stream: bool, svc: &mut S) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        if call.finished {
            return;
        }
        call.buf.extend_from_slice(&data);
        self.buffered += data.len();
        loop {
            let Some(call) = self.calls.get_mut(&id) else { return };
            if call.buf.len() < 5 {
                break;
            }
            let flag = call.buf[0];
            let len = u32::from_be_bytes([call.buf[1], call.buf[2], call.buf[3], call.buf[4]]) as usize;
            let error = match flag {
                0 if len > self.limits.max_recv_message => {
                    violations::count(Violation::MessageTooLarge);
                    Some(Status::new(
                        Code::ResourceExhausted,
                        format!("grpc: received message larger than max ({len} vs. {})", self.limits.max_recv_message),
                    ))
                }
                0 => None,
                1 => Some(Status::new(
                    Code::Unimplemented,
                    "compressed messages are not supported (identity encoding only)",
                )),
                _ => Some(Status::new(Code::Internal, format!("invalid message flag {flag}"))),
            };
            if let Some(status) = error {
                self.finish(id, &status);
                svc.closed(self, id);
                return;
            }
            if call.buf.len() < 5 + len {
                if self.buffered > self.limits.max_buffered {
                    violations::count(Violation::ReceiveBufferFull);
                    let status =
                        Status::new(Code::ResourceExhausted, "too many bytes of partial messages on this connection");
                    self.finish(id, &status);
                    svc.closed(self, id);
                    return;
                }
                call.buf.reserve(5 + len - call.buf.len());
                break;
            }
            call.buf.advance(5);
            let msg = call.buf.split_to(len).freeze();
            crate::metrics::record_recv_size(len);
            if call.buf.is_empty() {
                // Nothing partial: the allocation goes with the message.
                call.buf = BytesMut::new();
            }
            self.buffered -= 5 + len;
            if let Err(status) = svc.message(self, id, msg) {
                self.finish(id, &status);
                svc.closed(self, id);
                return;
            }
        }
        if end_stream && self.calls.get(&id).is_some_and(|c| !c.finished) {
            let c = &self.calls[&id];
            if !c.buf.is_empty() {
                let status = Status::new(Code::Internal, "stream ended inside a message");
                self.finish(id, &status);
                svc.closed(self, id);
                return;
            }
            svc.half_close(self, id);
        }
    }

    /// Whether the send queue is under its cap (`max_queued_bytes`): the
    /// one admission rule for messages. A message admitted under the cap is
    /// queued whatever its size (sent as the peer's windows allow), so the
    /// queue exceeds the cap by at most one message, and a response larger
    /// than the cap is never refused forever.
    pub fn has_room(&self) -> bool {
        self.h2.queued() < self.h2.limits().max_queued_bytes
    }

    /// Sends one message (the encoded protobuf, without the gRPC prefix)
    /// if the queue [has room](Self::has_room); else `QueueFull`, and the
    /// service hears `drained` when it has again. Response headers go
    /// first if they have not.
    pub fn send(&mut self, id: u32, msg: Bytes) -> Result<(), SendError> {
        if !self.has_room() {
            violations::count(Violation::SendQueueFull);
            self.blocked = true;
            return Err(SendError::QueueFull);
        }
        self.send_admitted(id, msg)
    }

    /// Sends one message the caller admitted itself: it checked
    /// [`Self::has_room`] before building it (and so built nothing it
    /// cannot send). Up to the send limit, the message is queued whatever
    /// its size.
    pub fn send_admitted(&mut self, id: u32, msg: impl Into<Chain>) -> Result<(), SendError> {
        self.send_admitted_at(id, msg, Instant::now())
    }

    /// [`Self::send_admitted`], queued at `now` (when the caller last read
    /// the clock: `pilot_xds_send_time` counts from there).
    pub fn send_admitted_at(&mut self, id: u32, msg: impl Into<Chain>, now: Instant) -> Result<(), SendError> {
        let msg = msg.into();
        // One look-up of the call (its map is keyed by the peer's stream
        // ids, so hashed with SipHash): the connection's parts borrowed
        // apart.
        let Self { h2, limits, calls, response_headers, .. } = self;
        let call = calls.get_mut(&id).ok_or(SendError::StreamClosed)?;
        if call.finished {
            return Err(SendError::StreamClosed);
        }
        let len = msg.len();
        if len > limits.max_send_message {
            return Err(SendError::TooLarge { len, limit: limits.max_send_message });
        }
        if !call.headers_sent {
            call.headers_sent = true;
            h2.send_headers(id, response_headers.clone(), false)?;
        }
        let mut prefix = BytesMut::with_capacity(5);
        prefix.put_u8(0);
        prefix.put_u32(len as u32);
        h2.reserve_pieces(id, msg.0.len() + 1);
        h2.send_data_uncapped(id, prefix.freeze())?;
        // The pieces as they are: shared bytes stay shared until framed.
        for piece in msg.0 {
            h2.send_data_uncapped(id, piece)?;
        }
        call.enqueued += 5 + len as u64;
        call.sends.push_back((call.enqueued, now));
        Ok(())
    }

    /// Whether call `id` is open (not finished, reset or expired).
    pub fn is_open(&self, id: u32) -> bool {
        self.calls.contains_key(&id)
    }

    /// Ends a call with `status`: trailers (or a trailers-only response if
    /// nothing was sent). Idempotent.
    pub fn finish(&mut self, id: u32, status: &Status) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        if call.finished {
            return;
        }
        call.finished = true;
        let result = if call.headers_sent {
            self.h2.send_trailers(id, status.trailers())
        } else {
            self.h2.send_headers(id, status.trailers_only(200), true)
        };
        if let Some(c) = self.calls.remove(&id) {
            self.buffered -= c.buf.len();
        }
        if result.is_err() {
            self.h2.reset(id, Reason::InternalError);
        }
    }

    /// Frames output into `out` (see [`Connection::poll_transmit`]) and
    /// tells the service when a full queue has drained.
    pub fn poll_transmit<S: Service + ?Sized>(
        &mut self,
        out: &mut impl crate::h2::Transmit,
        budget: usize,
        svc: &mut S,
    ) {
        self.h2.poll_transmit(out, budget);
        if self.blocked && self.h2.queued() <= self.h2.limits().max_queued_bytes / 2 {
            self.blocked = false;
            svc.drained(self);
            self.h2.poll_transmit(out, budget);
        }
        self.record_sent();
    }

    /// `pilot_xds_send_time`: each message whose last byte is now framed,
    /// from when it was queued (the connection frames only once its socket
    /// took what was framed before).
    fn record_sent(&mut self) {
        // The clock is read once a message is found framed, not on every
        // transmit (most find none: a turn that only reads an ACK).
        let mut now = None;
        for (id, c) in self.calls.iter_mut().filter(|(_, c)| !c.sends.is_empty()) {
            let sent = c.enqueued.saturating_sub(self.h2.stream_queued(*id).unwrap_or(0) as u64);
            while c.sends.front().is_some_and(|(end, _)| *end <= sent) {
                if let Some((_, at)) = c.sends.pop_front() {
                    let now = *now.get_or_insert_with(Instant::now);
                    crate::metrics::SEND_TIME.record(now.saturating_duration_since(at));
                }
            }
        }
    }

    /// Asks for [`Service::drained`] once the send queue is down to half
    /// (at once on the next transmit if it already is).
    pub fn notify_when_drained(&mut self) {
        self.blocked = true;
    }

    /// The transport is gone: every open call is closed for the service.
    pub fn abort<S: Service + ?Sized>(&mut self, svc: &mut S) {
        let ids: Vec<u32> = self.calls.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.calls.remove(&id) {
                self.buffered -= c.buf.len();
                svc.closed(self, id);
            }
        }
    }

    /// Bytes queued for sending on this connection.
    pub fn queued(&self) -> usize {
        self.h2.queued()
    }

    /// Calls open on this connection.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// Starts a graceful shutdown that ends the connection `grace` from now.
    pub fn go_away_within(&mut self, now: Instant, grace: Duration) {
        self.h2.go_away_within(now, grace);
    }
}

/// `application/grpc`, optionally `+proto` etc. or with parameters.
fn is_grpc_content_type(ct: &[u8]) -> bool {
    ct.strip_prefix(b"application/grpc").is_some_and(|rest| rest.is_empty() || rest[0] == b'+' || rest[0] == b';')
}

/// `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit[0] {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Maps `:path` to a method of the application's choosing.
#[derive(Debug, Clone)]
pub struct Router<M> {
    routes: Vec<(&'static str, M)>,
}

impl<M: Copy> Router<M> {
    /// An empty router.
    pub fn new() -> Self {
        Self { routes: Vec::new() }
    }

    /// Adds a method path (e.g. a generated `*_PATH` constant).
    pub fn route(mut self, path: &'static str, method: M) -> Self {
        self.routes.push((path, method));
        self
    }

    /// The method for `path`, or the UNIMPLEMENTED status gRPC servers send.
    pub fn lookup(&self, path: &[u8]) -> Result<M, Status> {
        self.routes.iter().find(|(p, _)| p.as_bytes() == path).map(|(_, m)| *m).ok_or_else(|| {
            Status::new(Code::Unimplemented, format!("unknown method {}", String::from_utf8_lossy(path)))
        })
    }
}

impl<M: Copy> Default for Router<M> {
    fn default() -> Self {
        Self::new()
    }
}

/// An encoded message in pieces: the resources' bytes are the cache's own
/// (shared by every connection a push goes to, refcounted, never copied);
/// only the few bytes around them (field tags, lengths, nonce, names) are
/// this response's. The h2 layer queues the pieces as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain(pub Vec<Bytes>);

impl Chain {
    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.0.iter().map(Bytes::len).sum()
    }

    /// Empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message in one piece (a copy: tests, debugging).
    pub fn to_bytes(&self) -> Bytes {
        if let [one] = self.0.as_slice() {
            return one.clone();
        }
        let mut b = BytesMut::with_capacity(self.len());
        for p in &self.0 {
            b.extend_from_slice(p);
        }
        b.freeze()
    }
}

impl From<Bytes> for Chain {
    fn from(b: Bytes) -> Chain {
        Chain(vec![b])
    }
}

#[cfg(test)]
mod tests;
