//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the
//! regression test that replays their saved inputs
//! (`xds/tests/fuzz_regressions.rs`). Each feeds arbitrary bytes to a parser
//! that reads from the network and checks invariants beyond "no panic".

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::grpc::{Call, GrpcConnection, GrpcLimits, Service, Status};
use crate::h2::frame::{self, Frame, Head};
use crate::h2::{Connection, Event, Limits, hpack};

/// The frame decoder: any bytes either decode or fail with an error; a
/// decoded frame re-checks its own fields.
pub fn frame_decoder(data: &[u8]) {
    let mut rest = data;
    while rest.len() >= frame::HEAD_LEN {
        let head = Head::parse(rest[..frame::HEAD_LEN].try_into().expect("9 bytes"));
        let len = (head.len as usize).min(rest.len() - frame::HEAD_LEN);
        let payload = Bytes::copy_from_slice(&rest[frame::HEAD_LEN..frame::HEAD_LEN + len]);
        let head = Head { len: len as u32, ..head };
        if let Ok(Frame::Data { data, flow_len, .. }) = Frame::decode(head, payload) {
            assert!(data.len() as u32 <= flow_len);
        }
        rest = &rest[frame::HEAD_LEN + len..];
    }
}

/// HPACK decoding of one or several blocks on one decoder.
pub fn hpack_decoder(data: &[u8]) {
    let mut d = hpack::Decoder::default();
    for block in data.split(|b| *b == 0xfe) {
        if let Ok((fields, size)) = d.decode(block, 16 * 1024) {
            let counted: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
            assert!(counted <= size);
        }
    }
}

/// The connection state machine: a valid preface and SETTINGS, then the
/// input split into chunks at bytes chosen by the input itself, with time
/// moving on and the application answering every request.
pub fn connection(data: &[u8]) {
    let mut now = Instant::now();
    let limits = Limits { max_queued_bytes: 1 << 20, ..Limits::default() };
    let mut c = Connection::new(limits, now);
    let mut hello = frame::PREFACE.to_vec();
    frame::encode::settings(&mut hello, &[]);
    c.recv(&hello, now);
    let mut out = Vec::new();
    let (chunk_len, body) = match data.split_first() {
        Some((n, rest)) => (usize::from(*n).max(1), rest),
        None => return,
    };
    for chunk in body.chunks(chunk_len) {
        c.recv(chunk, now);
        while let Some(ev) = c.poll_event() {
            if let Event::Request { stream, .. } = ev {
                let _ = c.send_headers(stream, hpack::Encoder::new().indexed(8).finish(), false);
                let _ = c.send_data(stream, Bytes::from_static(b"response"));
            }
        }
        out.clear();
        c.poll_transmit(&mut out, 64 * 1024);
        check_output(&out);
        assert!(c.queued() <= 1 << 20);
        now += Duration::from_millis(u64::from(chunk[0]));
        c.handle_timeout(now);
    }
}

/// Everything the server writes must be well-formed frames.
fn check_output(mut out: &[u8]) {
    while !out.is_empty() {
        assert!(out.len() >= frame::HEAD_LEN, "partial frame header written");
        let head = Head::parse(out[..frame::HEAD_LEN].try_into().expect("9 bytes"));
        let end = frame::HEAD_LEN + head.len as usize;
        assert!(out.len() >= end, "partial frame written");
        out = &out[end..];
    }
}

/// gRPC on top: an echo service answers whatever arrives.
pub fn grpc(data: &[u8]) {
    struct Echo;
    impl Service for Echo {
        fn open(&mut self, _: &mut GrpcConnection, _: &Call) -> Result<(), Status> {
            Ok(())
        }
        fn message(&mut self, c: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
            let _ = c.send(stream, msg);
            Ok(())
        }
        fn half_close(&mut self, c: &mut GrpcConnection, stream: u32) {
            c.finish(stream, &Status::ok());
        }
        fn closed(&mut self, _: &mut GrpcConnection, _: u32) {}
    }
    let now = Instant::now();
    let grpc = GrpcLimits { max_recv_message: 64 * 1024, max_buffered: 256 * 1024, ..GrpcLimits::default() };
    let mut c = GrpcConnection::new(Limits::default(), grpc, now);
    let mut hello = frame::PREFACE.to_vec();
    frame::encode::settings(&mut hello, &[]);
    let mut svc = Echo;
    c.recv(&hello, now, &mut svc);
    c.recv(data, now, &mut svc);
    let mut out = Vec::new();
    c.poll_transmit(&mut out, usize::MAX, &mut svc);
    check_output(&out);
    c.abort(&mut svc);
    assert_eq!(c.calls(), 0);
}
