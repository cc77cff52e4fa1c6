//! The gRPC layer driven through the HTTP/2 test peer.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::h2::frame::Frame;
use crate::h2::hpack::Encoder;
use crate::h2::testing::{Peer, frames};

/// Echo: unary `/test.Echo/Unary` answers each message and finishes;
/// `/test.Echo/Bidi` answers each message and finishes on half-close.
#[derive(Default)]
struct Echo {
    closed: Vec<u32>,
    router: Option<Router<u8>>,
}

impl Service for Echo {
    fn open(&mut self, _: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        let router =
            self.router.get_or_insert_with(|| Router::new().route("/test.Echo/Unary", 0).route("/test.Echo/Bidi", 1));
        router.lookup(&call.request.path).map(|_| ())
    }
    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        if &msg[..] == b"fail" {
            return Err(Status::new(Code::InvalidArgument, "asked to fail"));
        }
        conn.send(stream, msg).map_err(|e| Status::new(Code::Internal, e.to_string()))
    }
    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        conn.finish(stream, &Status::ok());
    }
    fn closed(&mut self, _: &mut GrpcConnection, stream: u32) {
        self.closed.push(stream);
    }
}

struct Harness {
    peer: Peer,
    grpc: GrpcConnection,
    svc: Echo,
}

impl Harness {
    fn new(grpc: GrpcLimits) -> Self {
        Self::with(Limits::default(), grpc)
    }

    fn with(limits: Limits, grpc: GrpcLimits) -> Self {
        // The peer drives the raw h2 handshake; then its connection moves
        // into a GrpcConnection with the same state.
        let mut peer = Peer::open(limits.clone());
        let h2 = std::mem::replace(&mut peer.conn, Connection::new(limits.clone(), peer.now));
        let mut grpc_conn = GrpcConnection::new(limits, grpc, peer.now);
        grpc_conn.h2 = h2;
        Self { peer, grpc: grpc_conn, svc: Echo::default() }
    }

    fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.grpc.recv(bytes.as_ref(), self.peer.now, &mut self.svc);
    }

    /// Server frames, decoded headers turned into field lists.
    fn frames(&mut self) -> Vec<Frame> {
        std::mem::swap(&mut self.peer.conn, &mut self.grpc.h2);
        let f = self.peer.frames();
        std::mem::swap(&mut self.peer.conn, &mut self.grpc.h2);
        f
    }

    fn fields(&mut self, f: &Frame) -> Vec<(String, String)> {
        let Frame::Headers { fragment, .. } = f else { panic!("not HEADERS: {f:?}") };
        self.peer
            .decode(fragment)
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()))
            .collect()
    }

    fn status_of(&mut self, f: &Frame) -> (String, String) {
        let fields = self.fields(f);
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
        (get("grpc-status"), get("grpc-message"))
    }
}

fn data_payload(frames: &[Frame]) -> Vec<u8> {
    frames.iter().flat_map(|f| if let Frame::Data { data, .. } = f { data.to_vec() } else { vec![] }).collect()
}

#[test]
fn unary_call() {
    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Unary"), false));
    h.send(frames::data(1, &frames::grpc_message(b"ping"), true));
    let got = h.frames();
    assert_eq!(
        h.fields(&got[0]),
        vec![(":status".into(), "200".into()), ("content-type".into(), "application/grpc".into())]
    );
    assert_eq!(data_payload(&got), frames::grpc_message(b"ping"));
    assert!(matches!(got.last(), Some(Frame::Headers { end_stream: true, .. })));
    assert_eq!(h.status_of(got.last().unwrap()), ("0".into(), String::new()));
}

/// Found by the grpc fuzz target: an empty message (a valid, empty
/// protobuf) once left an empty chunk queued that no DATA frame could
/// drain, and poll_transmit looped writing empty frames.
#[test]
fn empty_messages_echo() {
    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    h.send(frames::data(1, &frames::grpc_message(b""), false));
    h.send(frames::data(1, &frames::grpc_message(b""), true));
    let got = h.frames();
    assert_eq!(data_payload(&got), [frames::grpc_message(b""), frames::grpc_message(b"")].concat());
    assert_eq!(h.status_of(got.last().unwrap()).0, "0");
}

#[test]
fn messages_split_across_frames_and_frames_carrying_several() {
    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    let mut wire = frames::grpc_message(b"one");
    wire.extend(frames::grpc_message(b"two"));
    wire.extend(frames::grpc_message(&[9u8; 100]));
    for chunk in wire.chunks(7) {
        h.send(frames::data(1, chunk, false));
    }
    h.send(frames::data(1, &[], true));
    let got = h.frames();
    assert_eq!(data_payload(&got), wire);
    assert_eq!(h.status_of(got.last().unwrap()).0, "0");
}

#[test]
fn unknown_method_is_unimplemented() {
    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Nope"), true));
    let got = h.frames();
    assert!(matches!(got[0], Frame::Headers { end_stream: true, .. }), "trailers-only");
    assert_eq!(h.status_of(&got[0]), ("12".into(), "unknown method /test.Echo/Nope".into()));
    assert_eq!(h.svc.closed, vec![1]);
}

#[test]
fn compression_is_unimplemented() {
    let mut h = Harness::new(GrpcLimits::default());
    let block = Encoder::new()
        .field(b":method", b"POST")
        .field(b":scheme", b"http")
        .field(b":path", b"/test.Echo/Unary")
        .field(b"content-type", b"application/grpc")
        .field(b"grpc-encoding", b"gzip")
        .finish();
    h.send(frames::headers(1, &block, false));
    let got = h.frames();
    let (code, msg) = h.status_of(&got[0]);
    assert_eq!(code, "12");
    assert!(msg.contains("compression is not supported"), "{msg}");

    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Unary"), false));
    h.send(frames::data(1, &[1, 0, 0, 0, 1, 0], true)); // compressed flag
    let got = h.frames();
    let (code, msg) = h.status_of(got.last().unwrap());
    assert_eq!(code, "12");
    assert!(msg.contains("compressed messages are not supported"), "{msg}");
}

#[test]
fn oversized_message_is_resource_exhausted() {
    let mut h = Harness::new(GrpcLimits { max_recv_message: 1000, ..GrpcLimits::default() });
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    h.send(frames::data(1, &[0, 0, 0, 0x03, 0xe9], false)); // 1001 bytes announced
    let got = h.frames();
    let (code, msg) = h.status_of(&got[0]);
    assert_eq!(code, "8");
    assert_eq!(msg, "grpc: received message larger than max (1001 vs. 1000)");
    assert_eq!(got[1], Frame::RstStream { stream: 1, code: 0 }, "the client may stop sending");
}

#[test]
fn not_grpc_requests() {
    let mut h = Harness::new(GrpcLimits::default());
    let get = Encoder::new().field(b":method", b"GET").field(b":scheme", b"http").field(b":path", b"/").finish();
    h.send(frames::headers(1, &get, true));
    let got = h.frames();
    let fields = h.fields(&got[0]);
    assert_eq!(fields[0], (":status".into(), "405".into()));
    let json = Encoder::new()
        .field(b":method", b"POST")
        .field(b":scheme", b"http")
        .field(b":path", b"/x")
        .field(b"content-type", b"application/json")
        .finish();
    h.send(frames::headers(3, &json, true));
    let got = h.frames();
    assert_eq!(h.fields(&got[0])[0], (":status".into(), "415".into()));
}

#[test]
fn service_error_ends_the_call_with_its_status() {
    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    h.send(frames::data(1, &frames::grpc_message(b"ok"), false));
    h.send(frames::data(1, &frames::grpc_message(b"fail"), false));
    let got = h.frames();
    assert_eq!(
        h.status_of(got.iter().rev().find(|f| matches!(f, Frame::Headers { .. })).unwrap()),
        ("3".into(), "asked to fail".into())
    );
    assert_eq!(h.svc.closed, vec![1]);
}

#[test]
fn deadline_exceeded() {
    let mut h = Harness::new(GrpcLimits::default());
    let block = Encoder::new()
        .field(b":method", b"POST")
        .field(b":scheme", b"http")
        .field(b":path", b"/test.Echo/Bidi")
        .field(b"content-type", b"application/grpc")
        .field(b"grpc-timeout", b"50m")
        .finish();
    h.send(frames::headers(1, &block, false));
    assert_eq!(h.grpc.poll_timeout(), Some(h.peer.now + Duration::from_millis(50)));
    h.peer.now += Duration::from_millis(50);
    h.grpc.handle_timeout(h.peer.now, &mut h.svc);
    let got = h.frames();
    assert_eq!(h.status_of(&got[0]).0, "4");
    assert_eq!(h.svc.closed, vec![1]);
}

#[test]
fn peer_reset_closes_the_call() {
    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    h.send(frames::data(1, &[0, 0, 0, 0, 9, 1, 2], false)); // partial message buffered
    h.send(frames::rst(1, crate::h2::Reason::Cancel));
    assert_eq!(h.svc.closed, vec![1]);
    assert_eq!(h.grpc.buffered, 0, "partial bytes released");
    assert_eq!(h.grpc.send(1, Bytes::from("x")), Err(SendError::StreamClosed));
}

#[test]
fn a_message_larger_than_the_queue_cap_is_sent_not_dropped() {
    // Issue #19, item 2: a response over the per-connection cap was refused
    // forever, even with nothing queued, and the proxy waited for it.
    let cap = 64 * 1024;
    let mut h = Harness::with(Limits { max_queued_bytes: cap, ..Limits::default() }, GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    let big = Bytes::from(vec![7u8; 1 << 20]);
    assert_eq!(h.grpc.send(1, big.clone()), Ok(()), "an empty queue takes a message of any size");
    assert!(h.grpc.queued() > cap);
    assert_eq!(h.grpc.send(1, Bytes::from("more")), Err(SendError::QueueFull), "nothing more behind it");
    // The peer reads with open windows: every byte arrives.
    let mut got = 0;
    for _ in 0..100 {
        h.send(frames::window_update(0, 1 << 20));
        h.send(frames::window_update(1, 1 << 20));
        got += h.frames().iter().map(|f| if let Frame::Data { data, .. } = f { data.len() } else { 0 }).sum::<usize>();
        if h.grpc.queued() == 0 {
            break;
        }
    }
    assert_eq!(got, (1 << 20) + 5, "the whole message, with its prefix");
}

#[test]
fn a_message_over_the_send_limit_is_refused_with_its_size() {
    let mut h = Harness::new(GrpcLimits { max_send_message: 1000, ..GrpcLimits::default() });
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    assert_eq!(h.grpc.send(1, Bytes::from(vec![0u8; 1001])), Err(SendError::TooLarge { len: 1001, limit: 1000 }));
    assert_eq!(h.grpc.queued(), 0);
}

#[test]
fn partial_message_buffer_is_bounded_per_connection() {
    let mut h = Harness::new(GrpcLimits { max_recv_message: 1 << 20, max_buffered: 100_000, ..GrpcLimits::default() });
    for id in [1u32, 3, 5] {
        h.send(frames::headers(id, &frames::request("/test.Echo/Bidi"), false));
        let mut head = vec![0];
        head.extend_from_slice(&(900_000u32).to_be_bytes());
        h.send(frames::data(id, &head, false));
        for _ in 0..3 {
            h.send(frames::data(id, &[0u8; 16_000], false));
        }
    }
    assert!(h.grpc.buffered <= 100_000 + 16_005, "buffered {}", h.grpc.buffered);
    assert!(!h.svc.closed.is_empty(), "a stream past the connection's budget was ended");
}

#[test]
fn grpc_timeout_syntax() {
    assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
    assert_eq!(parse_timeout(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
    assert_eq!(parse_timeout(b"10S"), Some(Duration::from_secs(10)));
    for bad in [&b""[..], b"S", b"123456789S", b"1s", b"-1S", b"1.5S"] {
        assert_eq!(parse_timeout(bad), None, "{bad:?}");
    }
}

/// Issue #15: a response whose resources are shared with the core's cache
/// reaches the socket's output as those same allocations; only the small
/// per-response pieces are copied, and the bytes on the wire are intact.
#[test]
fn shared_pieces_are_written_from_where_they_are() {
    use crate::h2::out::{MAX_IOV, copied_bytes};
    use crate::h2::{Segments, Transmit};
    use std::io::IoSlice;

    let mut h = Harness::new(GrpcLimits::default());
    h.send(frames::headers(1, &frames::request("/test.Echo/Bidi"), false));
    h.frames();
    let shared = Bytes::from(vec![9u8; 4000]);
    let chain = crate::grpc::Chain(vec![Bytes::from_static(b"\x0a\x03abc"), shared.clone(), shared.slice(..100)]);
    h.grpc.send_admitted(1, chain).unwrap();
    let before = copied_bytes();
    let mut out = Segments::default();
    h.grpc.poll_transmit(&mut out, usize::MAX, &mut h.svc);
    assert_eq!(copied_bytes() - before, 5 + 5, "the gRPC prefix and the 5-byte field, nothing shared");
    let mut iov = [IoSlice::new(&[]); MAX_IOV];
    let n = out.slices(&mut iov);
    assert!(iov[..n].iter().any(|s| s.as_ptr() == shared.as_ptr() && s.len() == 4000));
    assert!(iov[..n].iter().any(|s| s.as_ptr() == shared.as_ptr() && s.len() == 100));
    // What the socket would receive decodes to the message.
    let wire: Vec<u8> = iov[..n].iter().flat_map(|s| s.iter().copied()).collect();
    let len = out.written();
    out.advance(len);
    assert_eq!(wire.len(), len);
    let peer_view = crate::h2::testing::Peer::parse(&wire);
    let mut want = b"\x0a\x03abc".to_vec();
    want.extend_from_slice(&shared);
    want.extend_from_slice(&shared[..100]);
    assert_eq!(data_payload(&peer_view), frames::grpc_message(&want));
}
