use bytes::Bytes;

use super::*;

fn decode(bytes: &[u8]) -> Result<Frame, Error> {
    let head = Head::parse(bytes[..9].try_into().unwrap());
    Frame::decode(head, Bytes::copy_from_slice(&bytes[9..]))
}

#[test]
fn head_round_trip_ignores_reserved_bit() {
    let mut out = Vec::new();
    Head { len: 0x01_02_03, kind: kind::DATA, flags: 0x09, stream: 7 }.encode(&mut out);
    assert_eq!(out, [1, 2, 3, 0, 9, 0, 0, 0, 7]);
    out[5] |= 0x80;
    assert_eq!(Head::parse(out[..].try_into().unwrap()).stream, 7);
}

#[test]
fn padded_data_strips_padding_but_counts_it() {
    let mut f = Vec::new();
    Head { len: 8, kind: kind::DATA, flags: flags::PADDED | flags::END_STREAM, stream: 1 }.encode(&mut f);
    f.extend_from_slice(&[3, b'a', b'b', b'c', b'd', 0, 0, 0]);
    assert_eq!(
        decode(&f).unwrap(),
        Frame::Data { stream: 1, data: Bytes::from("abcd"), end_stream: true, flow_len: 8 }
    );
}

#[test]
fn headers_with_priority_and_padding() {
    let mut f = Vec::new();
    Head { len: 10, kind: kind::HEADERS, flags: flags::PADDED | flags::PRIORITY | flags::END_HEADERS, stream: 3 }
        .encode(&mut f);
    f.extend_from_slice(&[2, 0, 0, 0, 1, 16, 0x82, 0x84, 0, 0]);
    assert_eq!(
        decode(&f).unwrap(),
        Frame::Headers {
            stream: 3,
            fragment: Bytes::from_static(&[0x82, 0x84]),
            end_stream: false,
            end_headers: true,
            depends_on: Some(1)
        }
    );
}

#[test]
fn encoded_headers_split_into_continuations() {
    let block: Vec<u8> = (0..40u8).collect();
    let mut out = Vec::new();
    encode::headers(&mut out, 5, &block, true, 16);
    let mut frames = Vec::new();
    let mut buf = &out[..];
    while !buf.is_empty() {
        let head = Head::parse(buf[..9].try_into().unwrap());
        let end = 9 + head.len as usize;
        frames.push(Frame::decode(head, Bytes::copy_from_slice(&buf[9..end])).unwrap());
        buf = &buf[end..];
    }
    assert_eq!(frames.len(), 3);
    assert!(
        matches!(&frames[0], Frame::Headers { end_stream: true, end_headers: false, fragment, .. } if fragment.len() == 16)
    );
    assert!(matches!(&frames[1], Frame::Continuation { end_headers: false, .. }));
    assert!(matches!(&frames[2], Frame::Continuation { end_headers: true, fragment, .. } if fragment.len() == 8));
}

#[test]
fn control_frames_round_trip() {
    let mut out = Vec::new();
    encode::ping(&mut out, true, *b"abcdefgh");
    assert_eq!(decode(&out).unwrap(), Frame::Ping { ack: true, data: *b"abcdefgh" });
    out.clear();
    encode::go_away(&mut out, 9, 0xb, b"calm");
    assert_eq!(decode(&out).unwrap(), Frame::GoAway { last_stream: 9, code: 0xb, debug: Bytes::from("calm") });
    out.clear();
    encode::window_update(&mut out, 3, 1000);
    assert_eq!(decode(&out).unwrap(), Frame::WindowUpdate { stream: 3, increment: 1000 });
    out.clear();
    encode::rst_stream(&mut out, 3, 8);
    assert_eq!(decode(&out).unwrap(), Frame::RstStream { stream: 3, code: 8 });
    out.clear();
    encode::settings(&mut out, &[(setting::MAX_FRAME_SIZE, 20_000)]);
    let Frame::Settings { ack: false, params } = decode(&out).unwrap() else { panic!() };
    assert_eq!(Frame::settings(&params).collect::<Vec<_>>(), vec![(setting::MAX_FRAME_SIZE, 20_000)]);
}

#[test]
fn stream_zero_rules() {
    let on_zero = [kind::DATA, kind::HEADERS, kind::PRIORITY, kind::RST_STREAM, kind::CONTINUATION];
    for k in on_zero {
        let mut f = Vec::new();
        let len = if k == kind::PRIORITY {
            5
        } else if k == kind::RST_STREAM {
            4
        } else {
            0
        };
        Head { len, kind: k, flags: 0, stream: 0 }.encode(&mut f);
        f.resize(9 + len as usize, 0);
        assert!(
            matches!(decode(&f), Err(Error::Connection { reason: Reason::ProtocolError, .. })),
            "kind {k} on stream 0"
        );
    }
    for (k, len) in [(kind::SETTINGS, 0), (kind::PING, 8), (kind::GOAWAY, 8)] {
        let mut f = Vec::new();
        Head { len, kind: k, flags: 0, stream: 1 }.encode(&mut f);
        f.resize(9 + len as usize, 0);
        assert!(
            matches!(decode(&f), Err(Error::Connection { reason: Reason::ProtocolError, .. })),
            "kind {k} on a stream"
        );
    }
}
