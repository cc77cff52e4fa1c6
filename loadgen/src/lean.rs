//! A lean HTTP/2 client for one gRPC bidirectional stream over plaintext
//! TCP: what a simulated proxy needs and no more, so that 10,000 of them
//! cost kilobytes each. The `h2` crate keeps a 16 KiB write buffer, read
//! buffers and HPACK tables per connection (about 28 KiB); here a
//! connection reads into its thread's buffer, keeps only a partial frame
//! head between reads, and hands DATA payloads straight to the message
//! reader. TLS runs (and `--client h2`) use the `h2` crate.
//!
//! It speaks RFC 9113 as a client: the preface and SETTINGS, one request
//! stream (id 1), DATA within the peer's windows and frame size,
//! WINDOW_UPDATE as it consumes, SETTINGS and PING acknowledged, GOAWAY and
//! RST_STREAM ending the stream, header blocks (with CONTINUATION) decoded
//! with HPACK for the status.

use std::cell::RefCell;
use std::collections::VecDeque;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::wire::MessageStream;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// What we let the server send before we acknowledge it (per stream and,
/// after the first WINDOW_UPDATE, per connection). What arrives is read
/// at once, so this bounds the kernel's buffers, not ours.
const WINDOW: u32 = 1 << 20;
/// Largest header block accepted (the server's are a few hundred bytes).
const MAX_HEADER_BLOCK: usize = 64 * 1024;

thread_local! {
    /// The thread's read buffer: a connection reads into it and consumes
    /// what it read before it awaits again.
    static READ: RefCell<Vec<u8>> = RefCell::new(vec![0; 64 * 1024]);
}

/// One connection with its one stream.
pub struct Client {
    tcp: TcpStream,
    /// The connection's state, without the socket.
    pub framer: Framer,
}

/// A connection's HTTP/2 state without I/O: bytes read go in
/// ([`Framer::input`]), frames to write come out in `out`.
pub struct Framer {
    /// A frame head cut by the end of a read.
    head: [u8; 9],
    head_len: usize,
    /// The frame being read.
    frame: Option<Frame>,
    /// A header block being gathered (HEADERS + CONTINUATION), rare.
    block: Vec<u8>,
    block_end_stream: bool,
    hpack: loona_hpack::Decoder<'static>,
    /// Bytes consumed and not yet returned with WINDOW_UPDATE.
    unacked: u32,
    /// The peer's windows and frame size.
    send_conn: i64,
    send_stream: i64,
    peer_initial: i64,
    peer_max_frame: usize,
    /// Request bytes waiting for window.
    waiting: VecDeque<Bytes>,
    /// Frames to write (acknowledgements, window updates).
    out: Vec<u8>,
    /// Response headers seen (status 200).
    pub responded: bool,
    /// Why the stream ended, once it has: a gRPC status or the
    /// connection's fate.
    pub ended: Option<String>,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            head: [0; 9],
            head_len: 0,
            frame: None,
            block: Vec::new(),
            block_end_stream: false,
            hpack: loona_hpack::Decoder::new(),
            unacked: 0,
            send_conn: 65_535,
            send_stream: 65_535,
            peer_initial: 65_535,
            peer_max_frame: 16_384,
            waiting: VecDeque::new(),
            out: Vec::new(),
            responded: false,
            ended: None,
        }
    }
}

/// A frame whose payload is being read.
#[derive(Debug, Clone, Copy)]
struct Frame {
    ty: u8,
    flags: u8,
    stream: u32,
    /// Payload bytes still to read (padding included).
    left: usize,
    /// A padded DATA frame's padding length, once its first byte was read.
    pad: Option<usize>,
}

fn head(out: &mut Vec<u8>, len: usize, ty: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(ty);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

impl Client {
    /// Opens the connection and the stream: preface, SETTINGS, the
    /// connection window, the request's HEADERS.
    pub async fn open(mut tcp: TcpStream, authority: &str, path: &str) -> std::io::Result<Client> {
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // ENABLE_PUSH 0, INITIAL_WINDOW_SIZE.
        head(&mut out, 12, SETTINGS, 0, 0);
        out.extend_from_slice(&[0, 2, 0, 0, 0, 0]);
        out.extend_from_slice(&[0, 4]);
        out.extend_from_slice(&WINDOW.to_be_bytes());
        head(&mut out, 4, WINDOW_UPDATE, 0, 0);
        out.extend_from_slice(&(WINDOW - 65_535).to_be_bytes());
        let block = loona_hpack::Encoder::new().encode([
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
            (b":authority", authority.as_bytes()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]);
        head(&mut out, block.len(), HEADERS, END_HEADERS, 1);
        out.extend_from_slice(&block);
        tcp.write_all(&out).await?;
        Ok(Client { tcp, framer: Framer::default() })
    }

    /// Sends gRPC message bytes on the stream, as the windows allow (the
    /// rest waits for the server's WINDOW_UPDATE).
    pub async fn send(&mut self, msg: Bytes) -> std::io::Result<()> {
        self.framer.waiting.push_back(msg);
        self.framer.frame_waiting();
        self.flush().await
    }

    /// Why the stream ended, if it has.
    pub fn ended(&self) -> Option<&str> {
        self.framer.ended.as_deref()
    }
}

impl Framer {
    /// After a read: returns the window credit consumed once it is half
    /// the window, and frames what the windows now allow.
    pub fn after_read(&mut self) {
        if self.unacked >= WINDOW / 2 {
            head(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
            self.out.extend_from_slice(&self.unacked.to_be_bytes());
            head(&mut self.out, 4, WINDOW_UPDATE, 0, 1);
            self.out.extend_from_slice(&self.unacked.to_be_bytes());
            self.unacked = 0;
        }
        self.frame_waiting();
    }

    /// Frames request bytes waiting, as the windows allow.
    pub fn frame_waiting(&mut self) {
        while let Some(front) = self.waiting.front_mut() {
            let room = self.send_conn.min(self.send_stream).min(self.peer_max_frame as i64);
            if room <= 0 {
                return;
            }
            let n = front.len().min(room as usize);
            let chunk = front.split_to(n);
            if front.is_empty() {
                self.waiting.pop_front();
            }
            head(&mut self.out, n, DATA, 0, 1);
            self.out.extend_from_slice(&chunk);
            self.send_conn -= n as i64;
            self.send_stream -= n as i64;
        }
    }

    /// Consumes bytes read: frame heads, payloads.
    pub fn input(&mut self, mut b: &[u8], messages: &mut MessageStream) -> Result<(), String> {
        while !b.is_empty() {
            let Some(mut f) = self.frame else {
                let take = (9 - self.head_len).min(b.len());
                self.head[self.head_len..self.head_len + take].copy_from_slice(&b[..take]);
                self.head_len += take;
                b = &b[take..];
                if self.head_len < 9 {
                    return Ok(());
                }
                self.head_len = 0;
                let h = self.head;
                let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                if h[3] == DATA {
                    // Flow control counts the whole payload, padding too.
                    self.unacked = self.unacked.saturating_add(len as u32);
                }
                self.frame = Some(Frame { ty: h[3], flags: h[4], stream, left: len, pad: None });
                if len == 0 {
                    self.frame_done()?;
                }
                continue;
            };
            if f.ty == DATA {
                if f.flags & PADDED != 0 && f.pad.is_none() {
                    let pad = usize::from(b[0]);
                    f.left -= 1;
                    b = &b[1..];
                    if pad > f.left {
                        return Err("DATA padding longer than the frame".into());
                    }
                    f.pad = Some(pad);
                } else {
                    // `left` counts the padding still to skip (`pad`).
                    let pad = f.pad.unwrap_or(0);
                    let data_left = f.left - pad;
                    let take = data_left.min(b.len());
                    if take > 0 && f.stream == 1 {
                        messages.push(Bytes::copy_from_slice(&b[..take]));
                    }
                    b = &b[take..];
                    f.left -= take;
                    if take == data_left && pad > 0 {
                        let skip = pad.min(b.len());
                        b = &b[skip..];
                        f.left -= skip;
                        f.pad = Some(pad - skip);
                    }
                }
            } else {
                let take = f.left.min(b.len());
                if self.block.len() + take > MAX_HEADER_BLOCK {
                    return Err("frame payload too large".into());
                }
                self.block.extend_from_slice(&b[..take]);
                b = &b[take..];
                f.left -= take;
            }
            self.frame = Some(f);
            if f.left == 0 {
                self.frame_done()?;
            }
        }
        Ok(())
    }

    /// A frame's payload is complete (`self.block` holds it unless DATA).
    fn frame_done(&mut self) -> Result<(), String> {
        let Some(Frame { ty, flags, stream, .. }) = self.frame.take() else { return Ok(()) };
        let payload = if ty == DATA { Vec::new() } else { std::mem::take(&mut self.block) };
        match ty {
            DATA if stream == 1 && flags & END_STREAM != 0 => {
                self.ended.get_or_insert_with(|| "the server ended the stream without trailers".into());
            }
            SETTINGS if flags & ACK == 0 => {
                for s in payload.chunks_exact(6) {
                    let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                    match u16::from_be_bytes([s[0], s[1]]) {
                        4 => {
                            self.send_stream += i64::from(v) - self.peer_initial;
                            self.peer_initial = i64::from(v);
                        }
                        5 => self.peer_max_frame = v as usize,
                        _ => {}
                    }
                }
                head(&mut self.out, 0, SETTINGS, ACK, 0);
            }
            PING if flags & ACK == 0 && payload.len() == 8 => {
                head(&mut self.out, 8, PING, ACK, 0);
                self.out.extend_from_slice(&payload);
            }
            WINDOW_UPDATE if payload.len() == 4 => {
                let inc = i64::from(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff);
                match stream {
                    0 => self.send_conn += inc,
                    1 => self.send_stream += inc,
                    _ => {}
                }
            }
            GOAWAY => {
                let last = payload.get(..4).map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) & 0x7fff_ffff);
                let code = payload.get(4..8).map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                // A graceful GOAWAY that keeps stream 1 (a draining server
                // spreads its closes over its shutdown period) is noted, and
                // the stream goes on until the server ends it or closes.
                if code != 0 || last < 1 {
                    let debug = String::from_utf8_lossy(payload.get(8..).unwrap_or_default()).into_owned();
                    self.ended.get_or_insert_with(|| format!("GOAWAY (error code {code}) {debug}"));
                }
            }
            RST_STREAM if stream == 1 => {
                let code = payload.get(..4).map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                self.ended.get_or_insert_with(|| format!("the server reset the stream (error code {code})"));
            }
            HEADERS | CONTINUATION if stream == 1 => {
                let mut block = payload;
                if ty == HEADERS {
                    self.block_end_stream = flags & END_STREAM != 0;
                    let mut start = 0;
                    let mut pad = 0;
                    if flags & PADDED != 0 {
                        pad = usize::from(*block.first().unwrap_or(&0));
                        start = 1;
                    }
                    if flags & PRIORITY != 0 {
                        start += 5;
                    }
                    if start + pad > block.len() {
                        return Err("malformed HEADERS".into());
                    }
                    block = block[start..block.len() - pad].to_vec();
                }
                if flags & END_HEADERS == 0 {
                    // CONTINUATION follows: keep gathering.
                    self.block = block;
                    return Ok(());
                }
                // Decoded with a bound: references to a large table entry
                // could otherwise expand a 64 KiB block a thousandfold.
                let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                let mut size = 0usize;
                self.hpack
                    .decode_with_cb(&block, |n, v| {
                        size += n.len() + v.len() + 32;
                        if size <= MAX_HEADER_BLOCK {
                            fields.push((n.into_owned(), v.into_owned()));
                        }
                    })
                    .map_err(|e| format!("HPACK: {e}"))?;
                if size > MAX_HEADER_BLOCK {
                    return Err(format!("a header list of {size} bytes"));
                }
                let get = |k: &str| {
                    fields.iter().find(|(n, _)| n == k.as_bytes()).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                };
                match get("grpc-status") {
                    Some(status) if self.block_end_stream || !self.responded => {
                        let message = get("grpc-message").unwrap_or_default();
                        self.ended = Some(if self.responded {
                            format!("grpc-status {status} {message}")
                        } else {
                            format!("the server refused the stream: grpc-status {status:?} {message}")
                        });
                    }
                    _ if !self.responded && get(":status").as_deref() != Some("200") => {
                        self.ended =
                            Some(format!("the server answered HTTP status {}", get(":status").unwrap_or_default()));
                    }
                    _ => {
                        self.responded = true;
                        if self.block_end_stream {
                            self.ended.get_or_insert_with(|| "no status".into());
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Client {
    /// Writes everything pending (not cancel-safe: called from the
    /// proxy's own sequence, never raced).
    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.framer.out.is_empty() {
            let out = std::mem::take(&mut self.framer.out);
            self.tcp.write_all(&out).await?;
        }
        Ok(())
    }

    /// Writes what it can of [`Client::out`] without waiting.
    fn write_some(&mut self) -> Result<(), String> {
        while !self.framer.out.is_empty() {
            match self.tcp.try_write(&self.framer.out) {
                Ok(n) => {
                    self.framer.out.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        if self.framer.out.is_empty() {
            self.framer.out = Vec::new();
        }
        Ok(())
    }

    /// Waits for bytes and reads what arrived: DATA of the stream goes to
    /// `messages`. False once the stream has ended ([`Client::ended`]).
    /// Cancel-safe (it waits only for readiness; reading, acknowledging
    /// and writing happen without waiting), so it can race other events.
    pub async fn read(&mut self, messages: &mut MessageStream) -> bool {
        use tokio::io::Interest;
        loop {
            if self.framer.ended.is_some() {
                return false;
            }
            let interest =
                if self.framer.out.is_empty() { Interest::READABLE } else { Interest::READABLE | Interest::WRITABLE };
            let ready = match self.tcp.ready(interest).await {
                Ok(r) => r,
                Err(e) => {
                    self.framer.ended = Some(format!("read: {e}"));
                    return false;
                }
            };
            if ready.is_writable()
                && let Err(e) = self.write_some()
            {
                self.framer.ended = Some(e);
                return false;
            }
            if !ready.is_readable() {
                continue;
            }
            let got = READ.with(|b| {
                let mut buf = b.borrow_mut();
                match self.tcp.try_read(&mut buf) {
                    Ok(0) => Err("the server closed the connection".to_owned()),
                    Ok(n) => self.framer.input(&buf[..n], messages).map(|()| true),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
                    Err(e) => Err(format!("read: {e}")),
                }
            });
            match got {
                Ok(false) => continue,
                Ok(true) => break,
                Err(e) => {
                    self.framer.ended.get_or_insert(e);
                    return false;
                }
            }
        }
        self.framer.after_read();
        if let Err(e) = self.write_some() {
            self.framer.ended.get_or_insert(e);
        }
        // What arrived before the end is still the caller's to read.
        true
    }
}

/// Fuzzing entry: arbitrary server bytes, fed in pieces whose sizes the
/// input's first byte picks, through the frame reader and the message
/// reader; answers and errors, never a panic, and bounded memory.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    let Some((&step, rest)) = data.split_first() else { return };
    let step = usize::from(step % 64) + 1;
    let mut f = Framer::default();
    let mut m = MessageStream::default();
    for piece in rest.chunks(step) {
        if f.input(piece, &mut m).is_err() {
            return;
        }
        f.after_read();
        while let Ok(Some(_)) = m.read() {}
        assert!(f.block.len() <= MAX_HEADER_BLOCK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Event;

    fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        head(&mut out, payload.len(), ty, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    fn grpc(msg: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        out.extend_from_slice(msg);
        out
    }

    /// Feeds `bytes` one piece of `step` at a time; the events read.
    fn feed(f: &mut Framer, bytes: &[u8], step: usize) -> Vec<Event> {
        let mut m = MessageStream::default();
        let mut got = Vec::new();
        for piece in bytes.chunks(step) {
            f.input(piece, &mut m).unwrap();
            while let Some(e) = m.read().unwrap() {
                got.push(e);
            }
        }
        got
    }

    #[test]
    fn data_padded_or_split_reaches_the_message_reader_and_control_frames_are_answered() {
        // A message (field 4 = "t") in a padded DATA frame, then split over
        // two frames; a PING and a SETTINGS between them.
        let msg = grpc(&[0x22, 0x01, b't']);
        let mut padded = vec![3u8];
        padded.extend_from_slice(&msg);
        padded.extend_from_slice(&[0, 0, 0]);
        let mut bytes = frame(DATA, PADDED, 1, &padded);
        bytes.extend(frame(PING, 0, 0, b"12345678"));
        bytes.extend(frame(SETTINGS, 0, 0, &[0, 5, 0, 1, 0, 0, 0, 4, 0, 1, 0, 0]));
        bytes.extend(frame(DATA, 0, 1, &msg[..4]));
        bytes.extend(frame(DATA, 0, 1, &msg[4..]));
        for step in [1, 2, 5, 1000] {
            let mut f = Framer::default();
            let got = feed(&mut f, &bytes, step);
            let want = vec![Event::Field(4, Bytes::from_static(b"t")), Event::End(3)];
            assert_eq!(got, [want.clone(), want].concat(), "pieces of {step}");
            // PING ACK with its payload, SETTINGS ACK.
            let mut acks = frame(PING, ACK, 0, b"12345678");
            acks.extend(frame(SETTINGS, ACK, 0, &[]));
            assert_eq!(f.out, acks);
            assert_eq!(f.peer_max_frame, 16_384 * 4, "MAX_FRAME_SIZE");
            assert_eq!(f.send_stream, 65_536, "INITIAL_WINDOW_SIZE moves the stream window");
            assert_eq!(f.unacked as usize, padded.len() + msg.len(), "flow control counts padding");
        }
    }

    #[test]
    fn trailers_after_continuation_end_the_stream_with_their_status() {
        let mut enc = loona_hpack::Encoder::new();
        let headers = enc.encode([(&b":status"[..], &b"200"[..]), (b"content-type", b"application/grpc")]);
        let trailers = enc.encode([(&b"grpc-status"[..], &b"14"[..]), (b"grpc-message", b"going away")]);
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &headers);
        bytes.extend(frame(HEADERS, END_STREAM, 1, &trailers[..3]));
        bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &trailers[3..]));
        let mut f = Framer::default();
        feed(&mut f, &bytes, 7);
        assert!(f.responded);
        assert_eq!(f.ended.as_deref(), Some("grpc-status 14 going away"));
        // A trailers-only answer is a refusal.
        let mut f = Framer::default();
        let only = loona_hpack::Encoder::new().encode([(&b"grpc-status"[..], &b"14"[..])]);
        feed(&mut f, &frame(HEADERS, END_STREAM | END_HEADERS, 1, &only), 100);
        assert_eq!(f.ended.as_deref(), Some("the server refused the stream: grpc-status \"14\" "));
    }

    #[test]
    fn requests_wait_for_window_and_go_out_in_frames_the_peer_allows() {
        let mut f = Framer { send_conn: 10, ..Framer::default() };
        f.waiting.push_back(Bytes::from(vec![1u8; 25]));
        f.frame_waiting();
        assert_eq!(f.out, frame(DATA, 0, 1, &[1u8; 10]), "10 bytes of window");
        f.out.clear();
        feed(&mut f, &frame(WINDOW_UPDATE, 0, 0, &100u32.to_be_bytes()), 100);
        f.frame_waiting();
        assert_eq!(f.out, frame(DATA, 0, 1, &[1u8; 15]));
        assert!(f.waiting.is_empty());
        // A graceful GOAWAY that keeps stream 1 lets it go on; one that
        // does not, or an error, ends it.
        let mut f = Framer::default();
        feed(&mut f, &frame(GOAWAY, 0, 0, &[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]), 100);
        assert_eq!(f.ended, None);
        feed(&mut f, &frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0, b'b', b'y', b'e']), 100);
        assert_eq!(f.ended.as_deref(), Some("GOAWAY (error code 0) bye"));
        let mut f = Framer::default();
        feed(&mut f, &frame(GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 11]), 100);
        assert_eq!(f.ended.as_deref(), Some("GOAWAY (error code 11) "));
    }

    /// The inputs kept under `fuzz/regressions/lean_client/` (seeds, and
    /// crashes once fixed) through the fuzz target's entry point.
    #[test]
    fn fuzz_regressions_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/lean_client");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            fuzz(&std::fs::read(entry.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n > 0);
    }

    #[test]
    fn hostile_bytes_are_refused_not_followed() {
        let mut f = Framer::default();
        let mut m = MessageStream::default();
        // Padding longer than its DATA frame.
        assert!(f.input(&frame(DATA, PADDED, 1, &[9, 1, 2]), &mut m).is_err());
        // A header block over the limit.
        let mut f = Framer::default();
        let big = vec![0u8; MAX_HEADER_BLOCK + 1];
        assert!(f.input(&frame(HEADERS, 0, 1, &big), &mut m).is_err());
        for seed in 0..200u32 {
            let bytes: Vec<u8> =
                (0..300u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed * 97) >> 13) as u8).collect();
            fuzz(&bytes);
        }
    }
}
