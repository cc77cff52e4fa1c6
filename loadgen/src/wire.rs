//! Reading protobuf messages field by field without decoding them into
//! owned structs: a proxy needs a response's type, version, nonce and
//! resource names, and the resources' bytes only as slices of the message
//! (thousands of proxies receive the same bytes; copying each resource per
//! proxy cost loadgen more CPU than the server spent sending it).

use bytes::Bytes;

/// Why a message does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// It ends inside a field.
    #[error("truncated message")]
    Truncated,
    /// A varint longer than 10 bytes, or a wire type protobuf does not have.
    #[error("malformed field")]
    Malformed,
}

fn varint(b: &[u8], at: &mut usize) -> Result<u64, Error> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*at).ok_or(Error::Truncated)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err(Error::Malformed)
}

/// The length-delimited fields of `msg` (field number, bytes), in order;
/// other wire types are skipped.
pub fn fields(msg: &Bytes) -> impl Iterator<Item = Result<(u32, Bytes), Error>> + '_ {
    let mut at = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        while !failed && at < msg.len() {
            let r = (|| {
                let key = varint(msg, &mut at)?;
                let number = (key >> 3) as u32;
                match key & 7 {
                    0 => {
                        varint(msg, &mut at)?;
                        Ok(None)
                    }
                    1 | 5 => {
                        let n = if key & 7 == 1 { 8 } else { 4 };
                        if at + n > msg.len() {
                            return Err(Error::Truncated);
                        }
                        at += n;
                        Ok(None)
                    }
                    2 => {
                        let len = usize::try_from(varint(msg, &mut at)?).map_err(|_| Error::Malformed)?;
                        let end = at.checked_add(len).filter(|e| *e <= msg.len()).ok_or(Error::Truncated)?;
                        let v = msg.slice(at..end);
                        at = end;
                        Ok(Some((number, v)))
                    }
                    _ => Err(Error::Malformed),
                }
            })();
            match r {
                Ok(Some(f)) => return Some(Ok(f)),
                Ok(None) => {}
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        }
        None
    })
}

/// The last length-delimited field `number` of `msg` (protobuf's rule for
/// a repeated singular field), if any.
pub fn field(msg: &Bytes, number: u32) -> Result<Option<Bytes>, Error> {
    let mut out = None;
    for f in fields(msg) {
        let (n, v) = f?;
        if n == number {
            out = Some(v);
        }
    }
    Ok(out)
}

/// What [`MessageStream::read`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole length-delimited top-level field of the current message
    /// (field number, bytes).
    Field(u32, Bytes),
    /// The current message ended; its length.
    End(usize),
}

/// Largest field [`MessageStream`] gathers (a resource; the server's
/// largest are route configurations of a few MB).
pub const MAX_FIELD: usize = 64 << 20;

/// Reads a stream of gRPC messages one top-level field at a time, as the
/// bytes arrive: a response's resources are read and dropped one by one,
/// so a proxy holds one resource of a large response, not the whole
/// response (thousands of proxies receive their first responses at once).
#[derive(Debug, Default)]
pub struct MessageStream {
    input: std::collections::VecDeque<Bytes>,
    avail: usize,
    /// Bytes left in the current message; `None` before its prefix.
    left: Option<usize>,
    len: usize,
}

impl MessageStream {
    /// More bytes of the stream.
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.avail += b.len();
            self.input.push_back(b);
        }
    }

    /// Copies up to `out.len()` bytes from the front without consuming.
    fn peek(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        for b in &self.input {
            let take = (out.len() - n).min(b.len());
            out[n..n + take].copy_from_slice(&b[..take]);
            n += take;
            if n == out.len() {
                break;
            }
        }
        n
    }

    /// Consumes `n` bytes (available) as one `Bytes`: a slice of the input
    /// when they lie in one piece, else a copy.
    fn take(&mut self, n: usize) -> Bytes {
        self.avail -= n;
        if self.input.front().is_some_and(|b| b.len() >= n) {
            let front = self.input.front_mut().expect("checked");
            let out = front.split_to(n);
            if front.is_empty() {
                self.input.pop_front();
            }
            return out;
        }
        let mut out = bytes::BytesMut::with_capacity(n);
        while out.len() < n {
            let front = self.input.front_mut().expect("available");
            let want = (n - out.len()).min(front.len());
            out.extend_from_slice(&front.split_to(want));
            if front.is_empty() {
                self.input.pop_front();
            }
        }
        out.freeze()
    }

    /// The next field or message end, `None` until more bytes arrive.
    pub fn read(&mut self) -> Result<Option<Event>, Error> {
        loop {
            let Some(left) = self.left else {
                if self.avail < 5 {
                    return Ok(None);
                }
                let mut prefix = [0u8; 5];
                self.peek(&mut prefix);
                let _ = self.take(5);
                self.len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
                self.left = Some(self.len);
                continue;
            };
            if left == 0 {
                self.left = None;
                return Ok(Some(Event::End(self.len)));
            }
            // A field's key and length: at most 20 bytes, within the message.
            let mut head = [0u8; 20];
            let n = self.peek(&mut head[..20.min(left)]);
            let mut at = 0usize;
            let parsed = (|| {
                let key = varint(&head[..n], &mut at)?;
                let skip = match key & 7 {
                    0 => {
                        varint(&head[..n], &mut at)?;
                        0
                    }
                    1 => 8,
                    5 => 4,
                    2 => usize::try_from(varint(&head[..n], &mut at)?).map_err(|_| Error::Malformed)?,
                    _ => return Err(Error::Malformed),
                };
                Ok(((key >> 3) as u32, key & 7, skip))
            })();
            let (number, wire_type, len) = match parsed {
                Ok(x) => x,
                // The head is cut by the end of what arrived (or by the
                // message's end, which is malformed).
                Err(Error::Truncated) if n < 20.min(left) => return Ok(None),
                Err(e) => return Err(e),
            };
            if len > MAX_FIELD {
                return Err(Error::Malformed);
            }
            let total = at.checked_add(len).ok_or(Error::Malformed)?;
            if total > left {
                return Err(Error::Truncated);
            }
            if self.avail < total {
                return Ok(None);
            }
            let _ = self.take(at);
            let body = self.take(len);
            self.left = Some(left - total);
            if wire_type == 2 {
                return Ok(Some(Event::Field(number, body)));
            }
        }
    }

    /// Bytes received and not yet read.
    pub fn buffered(&self) -> usize {
        self.avail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use istiod_proto::envoy::service::discovery::v3::{DiscoveryResponse, Resource};
    use istiod_proto::prost::Message;
    use istiod_proto::prost_types::Any;

    #[test]
    fn reads_what_prost_writes_and_refuses_truncation() {
        let r = DiscoveryResponse {
            version_info: "v1".into(),
            resources: vec![
                Any { type_url: "t".into(), value: vec![1, 2, 3] },
                Any { type_url: "t".into(), value: vec![] },
            ],
            canary: true,
            type_url: "type".into(),
            nonce: "n".into(),
            ..Default::default()
        };
        let b = Bytes::from(r.encode_to_vec());
        let got: Vec<(u32, Bytes)> = fields(&b).collect::<Result<_, _>>().unwrap();
        let numbers: Vec<u32> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [1, 2, 2, 4, 5], "the varint canary skipped");
        assert_eq!(field(&got[1].1, 2).unwrap().as_deref(), Some(&[1u8, 2, 3][..]));
        assert_eq!(field(&got[2].1, 2).unwrap(), None, "an empty value is not on the wire");
        let res = Resource { name: "a".into(), version: "7".into(), ..Default::default() };
        let rb = Bytes::from(res.encode_to_vec());
        assert_eq!(field(&rb, 3).unwrap().as_deref(), Some(&b"a"[..]));
        for cut in 1..b.len() {
            let t = b.slice(..cut);
            let r: Result<Vec<_>, _> = fields(&t).collect();
            // A cut at a field boundary parses (fewer fields); elsewhere
            // it is refused, never read past.
            if let Ok(f) = r {
                assert!(f.len() < 5);
            }
        }
        assert_eq!(fields(&Bytes::from_static(&[0x0b])).next(), Some(Err(Error::Malformed)), "wire type 3");
    }

    #[test]
    fn a_stream_of_messages_reads_field_by_field_whatever_the_chunking() {
        let r = DiscoveryResponse {
            version_info: "v1".into(),
            resources: (0..20).map(|i| Any { type_url: "t".into(), value: vec![i as u8; 300 + i] }).collect(),
            canary: true,
            type_url: "type".into(),
            nonce: "n".into(),
            ..Default::default()
        };
        let one = r.encode_to_vec();
        let mut stream = Vec::new();
        for _ in 0..3 {
            stream.push(0u8);
            stream.extend_from_slice(&(one.len() as u32).to_be_bytes());
            stream.extend_from_slice(&one);
        }
        // The same events whatever the pieces the bytes arrive in.
        let whole: Vec<(u32, Bytes)> = fields(&Bytes::from(one.clone())).collect::<Result<_, _>>().unwrap();
        for chunk in [1, 2, 7, 300, 4096, stream.len()] {
            let mut m = MessageStream::default();
            let mut got = Vec::new();
            for piece in stream.chunks(chunk) {
                m.push(Bytes::copy_from_slice(piece));
                while let Some(e) = m.read().unwrap() {
                    got.push(e);
                }
            }
            let mut want = Vec::new();
            for _ in 0..3 {
                want.extend(whole.iter().map(|(n, b)| Event::Field(*n, b.clone())));
                want.push(Event::End(one.len()));
            }
            assert_eq!(got, want, "chunks of {chunk}");
            assert_eq!(m.buffered(), 0);
        }
        // A field running past its message is refused.
        let mut m = MessageStream::default();
        m.push(Bytes::from_static(&[0, 0, 0, 0, 2, 0x0a, 0x05, 1, 2, 3, 4, 5]));
        assert_eq!(m.read(), Err(Error::Truncated));
    }
}
