//! Scripted peers against the connection state machine: one test per rule.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::h2::frame::{flags, kind};
use crate::h2::hpack::Encoder;
use crate::h2::testing::{Peer, frames};

fn limits() -> Limits {
    Limits::default()
}

/// Opens stream `id` with a request and returns its events.
fn open_stream(p: &mut Peer, id: u32) {
    p.send(frames::headers(id, &frames::request("/svc/M"), false));
    let ev = p.events();
    assert!(matches!(&ev[..], [Event::Request { stream, end_stream: false, .. }] if *stream == id), "{ev:?}");
}

fn ok_headers() -> Bytes {
    Encoder::new().indexed(8).finish()
}

#[test]
fn server_preface_then_settings_ack() {
    let mut p = Peer::raw(limits());
    let got = p.frames();
    let Frame::Settings { ack: false, params } = &got[0] else { panic!("{got:?}") };
    let params: Vec<_> = Frame::settings(params).collect();
    assert!(params.contains(&(setting::ENABLE_PUSH, 0)));
    assert!(params.contains(&(setting::MAX_CONCURRENT_STREAMS, 100_000)));
    assert!(params.contains(&(setting::INITIAL_WINDOW_SIZE, 1 << 20)));
    assert_eq!(got[1], Frame::WindowUpdate { stream: 0, increment: (4 << 20) - 65_535 });
    // The preface may arrive in pieces.
    p.send(&frame::PREFACE[..5]);
    p.send(&frame::PREFACE[5..]);
    p.send(frames::settings(&[]));
    assert_eq!(p.frames(), vec![Frame::Settings { ack: true, params: Bytes::new() }]);
}

#[test]
fn bad_preface_is_a_protocol_error() {
    let mut p = Peer::raw(limits());
    p.frames();
    p.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    p.expect_goaway(Reason::ProtocolError);
}

#[test]
fn first_frame_must_be_settings() {
    let mut p = Peer::raw(limits());
    p.frames();
    let mut b = frame::PREFACE.to_vec();
    b.extend(frames::ping([0; 8]));
    p.send(b);
    p.expect_goaway(Reason::ProtocolError);
}

#[test]
fn request_response_with_trailers() {
    let mut p = Peer::open(limits());
    p.send(frames::headers(1, &frames::request("/svc/Unary"), false));
    p.send(frames::data(1, b"hello", true));
    let ev = p.events();
    let Event::Request { stream: 1, request, end_stream: false } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!(&request.path[..], b"/svc/Unary");
    assert_eq!(ev[1], Event::Data { stream: 1, data: Bytes::from("hello"), end_stream: true });
    p.conn.send_headers(1, ok_headers(), false).unwrap();
    p.conn.send_data(1, Bytes::from("world")).unwrap();
    p.conn.send_trailers(1, Encoder::new().field(b"grpc-status", b"0").finish()).unwrap();
    let got = p.frames();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(matches!(&got[0], Frame::Headers { stream: 1, end_stream: false, end_headers: true, .. }));
    assert_eq!(got[1], Frame::Data { stream: 1, data: Bytes::from("world"), end_stream: false, flow_len: 5 });
    let Frame::Headers { fragment, end_stream: true, .. } = &got[2] else { panic!("{got:?}") };
    assert_eq!(p.decode(fragment), vec![(Bytes::from("grpc-status"), Bytes::from("0"))]);
    assert_eq!(p.conn.open_streams(), 0, "both sides done: stream dropped");
}

#[test]
fn response_respects_peer_max_frame_size_and_stream_window() {
    let mut p = Peer::open_with(limits(), &[(setting::INITIAL_WINDOW_SIZE, 20_000)]);
    open_stream(&mut p, 1);
    p.conn.send_headers(1, ok_headers(), false).unwrap();
    p.conn.send_data(1, Bytes::from(vec![7u8; 40_000])).unwrap();
    let sizes: Vec<usize> = p
        .frames()
        .iter()
        .filter_map(|f| match f {
            Frame::Data { data, .. } => Some(data.len()),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, vec![16_384, 3_616], "window of 20000 split at the max frame size");
    assert_eq!(p.conn.queued(), 20_000);
    p.send(frames::window_update(1, 50_000));
    let more: usize = p.frames().iter().map(|f| if let Frame::Data { data, .. } = f { data.len() } else { 0 }).sum();
    assert_eq!(more, 20_000);
    assert_eq!(p.conn.queued(), 0);
}

#[test]
fn connection_window_limits_all_streams() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    open_stream(&mut p, 3);
    for id in [1, 3] {
        p.conn.send_headers(id, ok_headers(), false).unwrap();
        p.conn.send_data(id, Bytes::from(vec![1u8; 50_000])).unwrap();
    }
    let sent: usize = p.frames().iter().map(|f| if let Frame::Data { data, .. } = f { data.len() } else { 0 }).sum();
    assert_eq!(sent, 65_535, "the default connection window");
    p.send(frames::window_update(0, 100_000));
    let sent: usize = p.frames().iter().map(|f| if let Frame::Data { data, .. } = f { data.len() } else { 0 }).sum();
    assert_eq!(sent, 100_000 - 65_535);
}

#[test]
fn initial_window_change_applies_to_open_streams() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    p.conn.send_headers(1, ok_headers(), false).unwrap();
    p.conn.send_data(1, Bytes::from(vec![0u8; 30_000])).unwrap();
    p.frames(); // 30000 sent of 65535
    // §6.9.2: shrinking the initial window makes the stream's window negative.
    p.send(frames::settings(&[(setting::INITIAL_WINDOW_SIZE, 10_000)]));
    p.conn.send_data(1, Bytes::from(vec![0u8; 100])).unwrap();
    assert_eq!(p.frames(), vec![Frame::Settings { ack: true, params: Bytes::new() }]);
    p.send(frames::window_update(1, 20_000));
    assert!(p.frames().is_empty(), "window still -20000 + 20000 = 0");
    p.send(frames::window_update(1, 100));
    assert!(matches!(&p.frames()[..], [Frame::Data { data, .. }] if data.len() == 100));
}

#[test]
fn window_update_errors() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    p.send(frames::window_update(1, 0));
    p.expect_rst(1, Reason::ProtocolError);
    assert_eq!(p.events(), vec![Event::Reset { stream: 1, code: Reason::ProtocolError.code() }]);
    open_stream(&mut p, 3);
    p.send(frames::window_update(3, frame::MAX_WINDOW));
    p.expect_rst(3, Reason::FlowControlError);
    p.send(frames::window_update(0, frame::MAX_WINDOW));
    p.expect_goaway(Reason::FlowControlError);
    let mut p = Peer::open(limits());
    p.send(frames::window_update(0, 0));
    p.expect_goaway(Reason::ProtocolError);
    let mut p = Peer::open(limits());
    p.send(frames::window_update(9, 1));
    p.expect_goaway(Reason::ProtocolError); // idle stream
}

#[test]
fn receive_flow_control() {
    let small = Limits { stream_window: 100, connection_window: 65_535, ..limits() };
    let mut p = Peer::open(small);
    open_stream(&mut p, 1);
    p.send(frames::data(1, &[0; 101], false));
    let got = p.frames();
    assert!(got.contains(&Frame::RstStream { stream: 1, code: Reason::FlowControlError.code() }), "{got:?}");
    let mut p = Peer::open(Limits { connection_window: 65_535, ..limits() });
    open_stream(&mut p, 1);
    for _ in 0..4 {
        p.send(frames::data(1, &[0; 16_384], false));
    }
    p.frames();
    // 65536 bytes were allowed only because credit came back at half the window.
    let mut p = Peer::open(Limits { connection_window: 65_535, stream_window: 1 << 30, ..limits() });
    open_stream(&mut p, 1);
    p.conn.recv_unacked = 0;
    p.conn.recv_window = 10;
    p.send(frames::data(1, &[0; 11], false));
    p.expect_goaway(Reason::FlowControlError);
}

/// A client that only sends what the windows allow can upload far more
/// than any window: the server keeps granting credit as it consumes.
#[test]
fn large_uploads_never_stall() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    let (mut conn_window, mut stream_window) = (65_535i64, i64::from(limits().stream_window));
    // The server preface raised the connection window.
    conn_window += i64::from((4 << 20) - 65_535);
    let total = 20 << 20;
    let mut sent = 0usize;
    let mut received = 0usize;
    while sent < total {
        let n = (16_384i64).min(conn_window).min(stream_window).min((total - sent) as i64);
        assert!(n > 0, "stalled after {sent} bytes: windows {conn_window}/{stream_window}");
        p.send(frames::data(1, &vec![0u8; n as usize], false));
        conn_window -= n;
        stream_window -= n;
        sent += n as usize;
        for f in p.frames() {
            match f {
                Frame::WindowUpdate { stream: 0, increment } => conn_window += i64::from(increment),
                Frame::WindowUpdate { stream: 1, increment } => stream_window += i64::from(increment),
                other => panic!("unexpected {other:?}"),
            }
        }
        for e in p.events() {
            if let Event::Data { data, .. } = e {
                received += data.len();
            }
        }
    }
    assert_eq!(received, total);
}

#[test]
fn ping_is_acknowledged_and_floods_end_the_connection() {
    let mut p = Peer::open(limits());
    p.send(frames::ping(*b"12345678"));
    assert_eq!(p.frames(), vec![Frame::Ping { ack: true, data: *b"12345678" }]);
    let burst = limits().ping_rate.burst;
    let mut flood = Vec::new();
    for _ in 1..burst {
        flood.extend(frames::ping([0; 8]));
    }
    p.send(flood);
    assert!(!p.conn.is_closed(), "a full burst is allowed");
    p.frames();
    p.send(frames::ping([0; 8]));
    p.expect_goaway(Reason::EnhanceYourCalm);
}

#[test]
fn settings_flood() {
    let mut p = Peer::open(limits());
    let mut flood = Vec::new();
    for _ in 0..=limits().settings_rate.burst {
        flood.extend(frames::settings(&[]));
    }
    p.send(flood);
    p.expect_goaway(Reason::EnhanceYourCalm);
}

#[test]
fn rapid_reset_ends_the_connection() {
    let mut p = Peer::open(limits());
    let mut flood = Vec::new();
    for i in 0..=limits().reset_rate.burst {
        let id = 1 + 2 * i;
        flood.extend(frames::headers(id, &frames::request("/svc/M"), false));
        flood.extend(frames::rst(id, Reason::Cancel));
    }
    p.send(flood);
    p.expect_goaway(Reason::EnhanceYourCalm);
    assert!(violations::get(Violation::ResetFlood) > 0);
}

#[test]
fn cancelling_answered_streams_is_not_a_rapid_reset() {
    // A grpc client cancelling streams it got answers on (issue #19, item
    // 10: ~250 such cancels tripped the guard).
    let mut p = Peer::open(limits());
    let n = 5 * limits().reset_rate.burst;
    for i in 0..n {
        let id = 1 + 2 * i;
        p.send(frames::headers(id, &frames::request("/svc/M"), false));
        p.conn.send_headers(id, Bytes::from_static(&[0x88]), false).unwrap(); // :status 200
    }
    p.frames();
    let mut resets = Vec::new();
    for i in 0..n {
        resets.extend(frames::rst(1 + 2 * i, Reason::Cancel));
    }
    p.send(resets);
    assert!(!p.conn.is_closed(), "answered streams may be cancelled at any rate");
    assert_eq!(p.events().iter().filter(|e| matches!(e, Event::Reset { .. })).count(), n as usize);
    // Unanswered ones still count.
    let mut flood = Vec::new();
    for i in 0..=limits().reset_rate.burst {
        let id = 1 + 2 * (n + i);
        flood.extend(frames::headers(id, &frames::request("/svc/M"), false));
        flood.extend(frames::rst(id, Reason::Cancel));
    }
    p.send(flood);
    p.expect_goaway(Reason::EnhanceYourCalm);
}

#[test]
fn resets_at_a_sustained_low_rate_are_fine() {
    let mut p = Peer::open(limits());
    for i in 0..1000u32 {
        let id = 1 + 2 * i;
        p.send(frames::headers(id, &frames::request("/svc/M"), false));
        p.send(frames::rst(id, Reason::Cancel));
        p.now += Duration::from_millis(20); // 50/s, under the 100/s rate
    }
    assert!(!p.conn.is_closed());
    let resets = p.events().iter().filter(|e| matches!(e, Event::Reset { .. })).count();
    assert_eq!(resets, 1000);
}

#[test]
fn empty_data_flood() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    let mut flood = Vec::new();
    for _ in 0..=limits().empty_data_rate.burst {
        flood.extend(frames::data(1, &[], false));
    }
    p.send(flood);
    p.expect_goaway(Reason::EnhanceYourCalm);
}

#[test]
fn header_block_in_continuations() {
    let mut p = Peer::open(limits());
    let block = frames::request("/svc/Split");
    let (a, b) = block.split_at(10);
    let (b, c) = b.split_at(10);
    let mut bytes = frames::raw(kind::HEADERS, flags::END_STREAM, 1, a);
    bytes.extend(frames::raw(kind::CONTINUATION, 0, 1, b));
    bytes.extend(frames::raw(kind::CONTINUATION, flags::END_HEADERS, 1, c));
    p.send(bytes);
    let ev = p.events();
    assert!(
        matches!(&ev[..], [Event::Request { stream: 1, end_stream: true, request }] if &request.path[..] == b"/svc/Split")
    );
}

#[test]
fn continuation_flood_and_interleaving() {
    let mut p = Peer::open(limits());
    let mut bytes = frames::raw(kind::HEADERS, 0, 1, &[]);
    for _ in 0..=limits().max_continuation_frames {
        bytes.extend(frames::raw(kind::CONTINUATION, 0, 1, &[]));
    }
    p.send(bytes);
    p.expect_goaway(Reason::EnhanceYourCalm);

    let mut p = Peer::open(limits());
    let mut bytes = frames::raw(kind::HEADERS, 0, 1, &frames::request("/a/b")[..5]);
    bytes.extend(frames::ping([0; 8]));
    p.send(bytes);
    p.expect_goaway(Reason::ProtocolError);

    let mut p = Peer::open(limits());
    p.send(frames::raw(kind::CONTINUATION, flags::END_HEADERS, 1, &[]));
    p.expect_goaway(Reason::ProtocolError);

    let mut p = Peer::open(Limits { max_header_block: 100, ..limits() });
    p.send(frames::raw(kind::HEADERS, 0, 1, &[0x80; 101]));
    p.expect_goaway(Reason::EnhanceYourCalm);
}

#[test]
fn oversized_header_list_gets_431() {
    let mut p = Peer::open(Limits { max_header_list_size: 300, ..limits() });
    let block = Encoder::new()
        .field(b":method", b"POST")
        .field(b":scheme", b"http")
        .field(b":path", b"/a/b")
        .field(b"x-big", &[b'v'; 400])
        .finish();
    p.send(frames::headers(1, &block, true));
    assert!(p.events().is_empty(), "the application never sees it");
    let got = p.frames();
    let Frame::Headers { stream: 1, fragment, end_stream: true, .. } = &got[0] else { panic!("{got:?}") };
    assert_eq!(p.decode(fragment), vec![(Bytes::from(":status"), Bytes::from("431"))]);
    assert!(!p.conn.is_closed());
}

#[test]
fn concurrent_stream_limit_refuses() {
    let mut p = Peer::open(Limits { max_concurrent_streams: 2, ..limits() });
    open_stream(&mut p, 1);
    open_stream(&mut p, 3);
    p.send(frames::headers(5, &frames::request("/svc/M"), false));
    p.expect_rst(5, Reason::RefusedStream);
    assert!(p.events().is_empty());
}

#[test]
fn stream_state_rules() {
    let mut p = Peer::open(limits());
    p.send(frames::headers(2, &frames::request("/a/b"), false));
    p.expect_goaway(Reason::ProtocolError); // even id

    let mut p = Peer::open(limits());
    p.send(frames::data(1, b"x", false));
    p.expect_goaway(Reason::ProtocolError); // DATA on an idle stream

    let mut p = Peer::open(limits());
    p.send(frames::headers(1, &frames::request("/a/b"), true));
    p.events();
    p.send(frames::data(1, b"x", false));
    p.expect_rst(1, Reason::StreamClosed); // after END_STREAM

    let mut p = Peer::open(limits());
    p.send(frames::rst(7, Reason::Cancel));
    p.expect_goaway(Reason::ProtocolError); // RST on idle

    let mut p = Peer::open(limits());
    open_stream(&mut p, 5);
    p.send(frames::headers(3, &frames::request("/a/b"), false));
    assert!(p.events().is_empty(), "a lower id is a closed stream: ignored");
    assert!(p.frames().is_empty());
}

#[test]
fn malformed_request_resets_the_stream() {
    let mut p = Peer::open(limits());
    let block = Encoder::new().field(b":method", b"POST").field(b":scheme", b"http").finish();
    p.send(frames::headers(1, &block, true));
    p.expect_rst(1, Reason::ProtocolError);
    assert_eq!(p.events(), vec![]);
}

#[test]
fn frame_level_errors() {
    let cases: Vec<(Vec<u8>, Reason)> = vec![
        (frames::raw(kind::DATA, 0, 1, &[0; 16_385]), Reason::FrameSizeError),
        (frames::raw(kind::SETTINGS, 0, 0, &[0; 5]), Reason::FrameSizeError),
        (frames::raw(kind::SETTINGS, flags::ACK, 0, &[0; 6]), Reason::FrameSizeError),
        (frames::raw(kind::SETTINGS, 0, 1, &[]), Reason::ProtocolError),
        (frames::raw(kind::PING, 0, 0, &[0; 7]), Reason::FrameSizeError),
        (frames::raw(kind::PUSH_PROMISE, 0, 1, &[0; 4]), Reason::ProtocolError),
        (frames::raw(kind::GOAWAY, 0, 0, &[0; 7]), Reason::FrameSizeError),
        (frames::raw(kind::RST_STREAM, 0, 1, &[0; 3]), Reason::FrameSizeError),
        (frames::raw(kind::HEADERS, flags::PADDED | flags::END_HEADERS, 1, &[5, 0, 0]), Reason::ProtocolError),
        (frames::settings(&[(setting::MAX_FRAME_SIZE, 100)]), Reason::ProtocolError),
        (frames::settings(&[(setting::ENABLE_PUSH, 2)]), Reason::ProtocolError),
        (frames::settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]), Reason::FlowControlError),
        (frames::headers(1, &[0xff, 0xff, 0xff, 0xff, 0xff], true), Reason::CompressionError),
    ];
    for (bytes, reason) in cases {
        let mut p = Peer::open(limits());
        p.send(&bytes);
        p.expect_goaway(reason);
    }
}

#[test]
fn priority_and_unknown_frames_are_ignored() {
    let mut p = Peer::open(limits());
    p.send(frames::raw(kind::PRIORITY, 0, 3, &[0, 0, 0, 1, 16]));
    p.send(frames::raw(0xbe, 0, 0, b"extension"));
    assert!(p.frames().is_empty());
    assert!(!p.conn.is_closed());
    p.send(frames::raw(kind::PRIORITY, 0, 3, &[0, 0, 0, 3, 16]));
    p.expect_rst(3, Reason::ProtocolError); // §5.3.1 self-dependency
}

#[test]
fn graceful_goaway_drains() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    p.conn.go_away(p.now);
    let got = p.frames();
    assert_eq!(
        got[0],
        Frame::GoAway { last_stream: frame::MAX_WINDOW, code: 0, debug: Bytes::from("graceful shutdown") }
    );
    let Frame::Ping { ack: false, data } = got[1] else { panic!("{got:?}") };
    open_stream(&mut p, 3); // in flight before the client saw the GOAWAY: accepted
    p.send(frames::ping_ack(data));
    assert_eq!(p.frames(), vec![Frame::GoAway { last_stream: 3, code: 0, debug: Bytes::from("graceful shutdown") }]);
    p.send(frames::headers(5, &frames::request("/a/b"), false));
    assert!(p.events().is_empty(), "streams above the final GOAWAY are ignored");
    for id in [1, 3] {
        p.conn.send_headers(id, ok_headers(), true).unwrap();
    }
    p.frames();
    assert!(p.conn.is_closed(), "closed once the last stream is done");
}

#[test]
fn graceful_goaway_grace_period_cuts_off_streams() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    p.conn.go_away(p.now);
    p.frames();
    p.advance(Duration::from_secs(2));
    assert!(matches!(&p.frames()[..], [Frame::GoAway { last_stream: 1, .. }]), "final GOAWAY without a PING ACK");
    p.advance(limits().max_connection_age_grace);
    assert!(p.conn.is_closed());
    assert!(p.events().contains(&Event::Reset { stream: 1, code: Reason::Cancel.code() }));
}

#[test]
fn keepalive_pings_and_times_out() {
    let mut p = Peer::open(limits());
    assert_eq!(p.conn.poll_timeout(), Some(p.now + limits().keepalive_interval));
    p.advance(limits().keepalive_interval);
    let got = p.frames();
    let [Frame::Ping { ack: false, data }] = got[..] else { panic!("{got:?}") };
    p.send(frames::ping_ack(data));
    p.advance(limits().keepalive_timeout);
    assert!(!p.conn.is_closed(), "answered");
    p.advance(limits().keepalive_interval);
    assert!(matches!(p.frames()[..], [Frame::Ping { ack: false, .. }]));
    p.advance(limits().keepalive_timeout);
    assert!(p.conn.is_closed(), "unanswered PING ends the connection");
}

#[test]
fn max_connection_age_sends_goaway() {
    let age = Duration::from_secs(60);
    let mut p =
        Peer::open(Limits { max_connection_age: Some(age), keepalive_interval: Duration::from_secs(3600), ..limits() });
    p.advance(age - Duration::from_secs(1));
    assert!(p.frames().is_empty());
    p.advance(Duration::from_secs(1));
    assert!(matches!(p.frames()[0], Frame::GoAway { last_stream: frame::MAX_WINDOW, code: 0, .. }));
}

#[test]
fn idle_timeout_sends_goaway() {
    let mut p = Peer::open(Limits { idle_timeout: Some(Duration::from_secs(5)), ..limits() });
    open_stream(&mut p, 1);
    p.advance(Duration::from_secs(10));
    assert!(p.frames().is_empty(), "a stream is open: not idle");
    p.send(frames::rst(1, Reason::Cancel));
    p.advance(Duration::from_secs(5));
    assert!(matches!(p.frames()[0], Frame::GoAway { code: 0, .. }));
}

#[test]
fn handshake_and_settings_timeouts() {
    let mut p = Peer::raw(limits());
    p.frames();
    p.advance(limits().handshake_timeout);
    assert!(p.conn.is_closed());

    let mut p = Peer::raw(limits());
    p.frames();
    let mut b = frame::PREFACE.to_vec();
    b.extend(frames::settings(&[]));
    p.send(b); // never ACKs our SETTINGS
    p.frames();
    p.advance(limits().settings_timeout);
    p.expect_goaway(Reason::SettingsTimeout);
}

#[test]
fn a_client_that_never_reads_costs_bounded_memory() {
    let cap = 1 << 20;
    let mut p = Peer::open(Limits { max_queued_bytes: cap, ..limits() });
    open_stream(&mut p, 1);
    p.conn.send_headers(1, ok_headers(), false).unwrap();
    let mut queued = 0;
    loop {
        match p.conn.send_data(1, Bytes::from(vec![0u8; 64 * 1024])) {
            Ok(()) => queued += 64 * 1024,
            Err(SendError::QueueFull) => break,
            Err(e) => panic!("{e}"),
        }
        p.frames(); // the windows close after 65535 bytes
    }
    assert!(queued <= cap + 65_535, "queued {queued}");
    assert!(p.conn.queued() <= cap);
}

#[test]
fn provoked_stream_errors_are_a_flood_too() {
    let mut p = Peer::open(limits());
    let mut bytes = Vec::new();
    for i in 0..=limits().local_reset_rate.burst {
        bytes.extend(frames::raw(kind::PRIORITY, 0, 1 + 2 * i, &[0, 0, 0, 1 + 2 * i as u8, 0]));
    }
    p.send(bytes);
    assert!(p.conn.is_closed());
    let got = p.frames();
    assert!(matches!(got.last(), Some(Frame::GoAway { code, .. }) if *code == Reason::EnhanceYourCalm.code()));
}

#[test]
fn complete_response_before_request_end_resets_with_no_error() {
    let mut p = Peer::open(limits());
    open_stream(&mut p, 1);
    p.conn.send_headers(1, ok_headers(), true).unwrap();
    let got = p.frames();
    assert!(matches!(got[0], Frame::Headers { stream: 1, end_stream: true, .. }));
    assert_eq!(got[1], Frame::RstStream { stream: 1, code: 0 });
    p.send(frames::data(1, b"late", true));
    assert!(p.frames().is_empty(), "frames on a stream we closed are ignored");
    assert!(!p.conn.is_closed());
}

#[test]
fn round_robin_between_streams() {
    let mut p = Peer::open_with(limits(), &[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
    p.send(frames::window_update(0, 1 << 20));
    for id in [1, 3] {
        open_stream(&mut p, id);
        p.conn.send_headers(id, ok_headers(), false).unwrap();
        p.conn.send_data(id, Bytes::from(vec![0u8; 40_000])).unwrap();
    }
    let order: Vec<u32> = p
        .frames()
        .iter()
        .filter_map(|f| if let Frame::Data { stream, .. } = f { Some(*stream) } else { None })
        .collect();
    assert_eq!(order, vec![1, 3, 1, 3, 1, 3]);
}

#[test]
fn transmit_budget_batches_writes() {
    let mut p = Peer::open_with(limits(), &[(setting::INITIAL_WINDOW_SIZE, 1 << 20)]);
    p.send(frames::window_update(0, 1 << 20));
    open_stream(&mut p, 1);
    p.conn.send_headers(1, ok_headers(), false).unwrap();
    p.conn.send_data(1, Bytes::from(vec![0u8; 200_000])).unwrap();
    let first = p.frames_budget(50_000);
    let bytes: usize = first.iter().map(|f| if let Frame::Data { data, .. } = f { data.len() } else { 0 }).sum();
    assert!((32_768..=65_536).contains(&bytes), "one budget's worth: {bytes}");
    assert!(p.conn.wants_write());
}
