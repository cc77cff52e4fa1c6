//! Misbehaving peers over real loopback sockets: each gets a clear error
//! (GOAWAY with the right code, or a closed connection) and costs bounded
//! memory, while a well-behaved client on the same server keeps working.

#[path = "support/echo.rs"]
mod echo;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use istiod_xds::h2::frame::{self, Frame, Head, encode};
use istiod_xds::h2::violations::{self, Violation};
use istiod_xds::h2::{Limits, Reason, hpack};

/// A raw HTTP/2 client on a blocking socket.
struct Raw {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Self {
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = Self { tcp, buf: Vec::new() };
        let mut hello = frame::PREFACE.to_vec();
        encode::settings(&mut hello, &[]);
        encode::settings_ack(&mut hello);
        r.send(&hello);
        r
    }

    fn send(&mut self, b: &[u8]) {
        // The server may already have closed: that is what some tests expect.
        let _ = self.tcp.write_all(b);
    }

    /// Reads frames until `pred` matches one or the connection ends;
    /// returns everything read.
    fn read_until(&mut self, mut pred: impl FnMut(&Frame) -> bool) -> (Vec<Frame>, bool) {
        let mut frames = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            while self.buf.len() >= 9 {
                let head = Head::parse(self.buf[..9].try_into().unwrap());
                let end = 9 + head.len as usize;
                if self.buf.len() < end {
                    break;
                }
                let f = Frame::decode(head, Bytes::copy_from_slice(&self.buf[9..end])).unwrap();
                self.buf.drain(..end);
                let hit = pred(&f);
                frames.push(f);
                if hit {
                    return (frames, true);
                }
            }
            match self.tcp.read(&mut chunk) {
                Ok(0) | Err(_) => return (frames, false),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn expect_goaway(&mut self, reason: Reason) {
        let (frames, found) = self.read_until(|f| matches!(f, Frame::GoAway { .. }));
        assert!(found, "no GOAWAY; got {frames:?}");
        let Some(Frame::GoAway { code, debug, .. }) = frames.last() else { unreachable!() };
        assert_eq!(Reason::name_of(*code), Reason::name_of(reason.code()), "debug: {}", String::from_utf8_lossy(debug));
        // And then the server closes the socket.
        let (rest, _) = self.read_until(|_| false);
        assert!(rest.is_empty(), "frames after GOAWAY: {rest:?}");
    }
}

fn request(path: &str) -> Bytes {
    hpack::Encoder::new()
        .field(b":method", b"POST")
        .field(b":scheme", b"http")
        .field(b":path", path.as_bytes())
        .field(b"content-type", b"application/grpc")
        .finish()
}

/// A full unary call on a fresh raw connection: the server still serves.
fn healthy_call(addr: SocketAddr) {
    let mut c = Raw::connect(addr);
    let mut out = Vec::new();
    encode::headers(&mut out, 1, &request(echo::UNARY), false, 16384);
    let msg = echo::grpc_frame(b"still here");
    encode::data_head(&mut out, 1, msg.len(), true);
    out.extend_from_slice(&msg);
    c.send(&out);
    let (frames, found) = c.read_until(|f| matches!(f, Frame::Headers { end_stream: true, .. }));
    assert!(found, "unary call did not complete: {frames:?}");
    assert!(frames.iter().any(|f| matches!(f, Frame::Data { data, .. } if data[..] == msg[..])));
}

#[test]
fn floods_get_enhance_your_calm_and_others_are_unaffected() {
    let server = echo::start(1, Limits::default(), None);
    let addr = server.addrs()[0];
    let floods: Vec<(&str, Vec<u8>)> = vec![
        ("ping", {
            let mut b = Vec::new();
            for _ in 0..1000 {
                encode::ping(&mut b, false, [1; 8]);
            }
            b
        }),
        ("settings", {
            let mut b = Vec::new();
            for _ in 0..1000 {
                encode::settings(&mut b, &[]);
            }
            b
        }),
        ("rapid reset", {
            let mut b = Vec::new();
            for i in 0..1000u32 {
                encode::headers(&mut b, 1 + 2 * i, &request(echo::BIDI), false, 16384);
                encode::rst_stream(&mut b, 1 + 2 * i, Reason::Cancel.code());
            }
            b
        }),
        ("continuation", {
            let mut b = Vec::new();
            Head { len: 0, kind: frame::kind::HEADERS, flags: 0, stream: 1 }.encode(&mut b);
            for _ in 0..1000 {
                Head { len: 0, kind: frame::kind::CONTINUATION, flags: 0, stream: 1 }.encode(&mut b);
            }
            b
        }),
    ];
    for (name, bytes) in floods {
        let before = violations::get(Violation::ConnectionError);
        let mut c = Raw::connect(addr);
        c.send(&bytes);
        c.expect_goaway(Reason::EnhanceYourCalm);
        healthy_call(addr);
        assert!(violations::get(Violation::ConnectionError) > before, "{name} counted");
    }
    server.shutdown();
}

#[test]
fn garbage_and_wrong_protocols_are_refused() {
    let server = echo::start(1, Limits::default(), None);
    let addr = server.addrs()[0];
    // HTTP/1.1 on the h2c port.
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: istiod\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    let _ = c.read_to_end(&mut resp);
    assert!(resp.windows(4).any(|w| w == b"\x00\x00\x00\x01"), "GOAWAY PROTOCOL_ERROR bytes: {resp:?}");
    // Random bytes after a valid preface.
    let mut c = Raw::connect(addr);
    let mut x: u32 = 0x1234_5678;
    let junk: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    c.send(&junk);
    let (frames, _) = c.read_until(|f| matches!(f, Frame::GoAway { .. }));
    assert!(matches!(frames.last(), Some(Frame::GoAway { .. })), "{frames:?}");
    healthy_call(addr);
    server.shutdown();
}

#[test]
fn a_client_that_never_reads_is_cut_off_with_bounded_memory() {
    let limits = Limits { send_timeout: Duration::from_secs(1), max_queued_bytes: 2 << 20, ..Limits::default() };
    let server = echo::start(1, limits, None);
    let addr = server.addrs()[0];
    let before = violations::get(Violation::SendTimeout);
    // Ask for 1 GiB and never read; open the windows wide so only TCP
    // backpressure and the queue cap hold the server back.
    let mut c = Raw::connect(addr);
    let mut out = Vec::new();
    encode::settings(&mut out, &[(frame::setting::INITIAL_WINDOW_SIZE, frame::MAX_WINDOW)]);
    encode::window_update(&mut out, 0, frame::MAX_WINDOW - 65_535);
    encode::headers(&mut out, 1, &request(echo::PUSH), false, 16384);
    let mut req = 4096u32.to_be_bytes().to_vec();
    req.extend_from_slice(&(256 * 1024u32).to_be_bytes());
    let msg = echo::grpc_frame(&req);
    encode::data_head(&mut out, 1, msg.len(), true);
    out.extend_from_slice(&msg);
    c.send(&out);
    // Meanwhile another client is served normally.
    let t0 = Instant::now();
    healthy_call(addr);
    assert!(t0.elapsed() < Duration::from_secs(1), "a stuck peer must not delay others");
    let deadline = Instant::now() + Duration::from_secs(10);
    while violations::get(Violation::SendTimeout) == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(violations::get(Violation::SendTimeout) > before, "server gave up on the stuck peer");
    // The server closed it: reading now drains what was in flight and ends.
    let mut sink = vec![0u8; 1 << 20];
    let mut total = 0usize;
    loop {
        match c.tcp.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    assert!(total < 64 << 20, "only socket buffers and the queue cap were in flight: {total} bytes");
    healthy_call(addr);
    server.shutdown();
}

#[test]
fn max_connection_age_sends_graceful_goaway_over_the_wire() {
    let limits = Limits { max_connection_age: Some(Duration::from_millis(300)), ..Limits::default() };
    let server = echo::start(1, limits, None);
    let mut c = Raw::connect(server.addrs()[0]);
    let (frames, found) =
        c.read_until(|f| matches!(f, Frame::GoAway { last_stream, .. } if *last_stream == frame::MAX_WINDOW));
    assert!(found, "{frames:?}");
    // Answer the drain PING: the final GOAWAY follows and the socket closes.
    let Some(ping) = c.read_until(|f| matches!(f, Frame::Ping { ack: false, .. })).0.pop() else { panic!() };
    let Frame::Ping { data, .. } = ping else { panic!() };
    let mut ack = Vec::new();
    encode::ping(&mut ack, true, data);
    c.send(&ack);
    let (frames, found) = c.read_until(|f| matches!(f, Frame::GoAway { last_stream: 0, code: 0, .. }));
    assert!(found, "{frames:?}");
    server.shutdown();
}
