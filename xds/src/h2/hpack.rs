//! HPACK (RFC 7541). Decoding uses `loona-hpack`, which passed the RFC's
//! vectors and random input without panicking. Encoding is ours and
//! deliberately minimal: every field is a literal without indexing (§6.2.2),
//! so an encoded block never touches the dynamic table and can be built
//! once and reused for every response (a server's `:status 200` and
//! `content-type: application/grpc` never change).

use bytes::{BufMut, Bytes, BytesMut};

/// One decoded header field.
pub type Field = (Bytes, Bytes);

/// Why a header block could not be decoded: always a connection error
/// (COMPRESSION_ERROR), since the peer's and our tables now disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HPACK decoding failed: {0}")]
pub struct DecodeError(String);

/// The connection's HPACK decoder.
pub struct Decoder {
    inner: loona_hpack::Decoder<'static>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hpack::Decoder")
    }
}

/// The dynamic table size we allow (SETTINGS_HEADER_TABLE_SIZE default,
/// which we never change).
pub const TABLE_SIZE: usize = 4096;

impl Default for Decoder {
    fn default() -> Self {
        let mut inner = loona_hpack::Decoder::new();
        inner.set_max_allowed_table_size(TABLE_SIZE);
        Self { inner }
    }
}

impl Decoder {
    /// Decodes a complete header block. Returns the fields and the header
    /// list size (§6.5.2: name + value + 32 per field); fields stop being
    /// collected past `max_list_size` (the block is still decoded to keep
    /// the table in step) and the size tells the caller it was exceeded.
    pub fn decode(&mut self, block: &[u8], max_list_size: usize) -> Result<(Vec<Field>, usize), DecodeError> {
        let mut fields = Vec::new();
        let mut size = 0usize;
        self.inner
            .decode_with_cb(block, |name, value| {
                size = size.saturating_add(name.len() + value.len() + 32);
                if size <= max_list_size {
                    fields.push((Bytes::copy_from_slice(&name), Bytes::copy_from_slice(&value)));
                }
            })
            .map_err(|e| DecodeError(format!("{e:?}")))?;
        Ok((fields, size))
    }
}

/// Builds header blocks of literal-without-indexing fields.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: BytesMut,
}

impl Encoder {
    /// An empty block.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `name: value` (§6.2.2, literal name, no Huffman coding).
    pub fn field(mut self, name: &[u8], value: &[u8]) -> Self {
        self.buf.put_u8(0x00);
        put_string(&mut self.buf, name);
        put_string(&mut self.buf, value);
        self
    }

    /// Appends a field whose name is static-table entry `index` (§6.2.2
    /// with an indexed name; `:status` is 8, `content-type` 31).
    pub fn indexed_name(mut self, index: usize, value: &[u8]) -> Self {
        put_int(&mut self.buf, 0x00, 4, index);
        put_string(&mut self.buf, value);
        self
    }

    /// Appends the static-table field `index` (§6.1), e.g. 8 for
    /// `:status: 200`.
    pub fn indexed(mut self, index: usize) -> Self {
        put_int(&mut self.buf, 0x80, 7, index);
        self
    }

    /// The finished block.
    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

fn put_string(buf: &mut BytesMut, s: &[u8]) {
    put_int(buf, 0x00, 7, s.len()); // H bit clear: raw octets
    buf.put_slice(s);
}

/// §5.1 integer representation with an `n`-bit prefix under `first`.
fn put_int(buf: &mut BytesMut, first: u8, n: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        buf.put_u8(first | v as u8);
        return;
    }
    buf.put_u8(first | max as u8);
    v -= max;
    while v >= 128 {
        buf.put_u8((v % 128) as u8 | 0x80);
        v /= 128;
    }
    buf.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_blocks_decode_to_what_we_encoded() {
        let long = vec![b'x'; 300];
        let block = Encoder::new()
            .indexed(8)
            .indexed_name(31, b"application/grpc")
            .field(b"grpc-status", b"0")
            .field(b"grpc-message", &long)
            .finish();
        let mut d = Decoder::default();
        let (fields, size) = d.decode(&block, usize::MAX).unwrap();
        let want: Vec<Field> = vec![
            (":status".into(), "200".into()),
            ("content-type".into(), "application/grpc".into()),
            ("grpc-status".into(), "0".into()),
            ("grpc-message".into(), Bytes::from(long.clone())),
        ];
        assert_eq!(fields, want);
        assert_eq!(size, want.iter().map(|(n, v)| n.len() + v.len() + 32).sum::<usize>());
        // Literal without indexing leaves the decoder's table empty, so
        // decoding the same block again yields the same fields.
        assert_eq!(d.decode(&block, usize::MAX).unwrap().0, want);
    }

    #[test]
    fn rfc7541_c3_requests_with_indexing() {
        // RFC 7541 Appendix C.3.1 and C.3.2: the second block refers to the
        // dynamic table entry the first added.
        let first = [
            0x82, 0x86, 0x84, 0x41, 0x0f, b'w', b'w', b'w', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c',
            b'o', b'm',
        ];
        let second = [0x82, 0x86, 0x84, 0xbe, 0x58, 0x08, b'n', b'o', b'-', b'c', b'a', b'c', b'h', b'e'];
        let mut d = Decoder::default();
        let (f1, _) = d.decode(&first, usize::MAX).unwrap();
        assert_eq!(f1[3], (Bytes::from(":authority"), Bytes::from("www.example.com")));
        let (f2, _) = d.decode(&second, usize::MAX).unwrap();
        assert_eq!(f2[3], (Bytes::from(":authority"), Bytes::from("www.example.com")));
        assert_eq!(f2[4], (Bytes::from("cache-control"), Bytes::from("no-cache")));
    }

    #[test]
    fn oversized_lists_are_measured_but_not_collected() {
        let block = Encoder::new().field(b"a", &[b'v'; 100]).field(b"b", b"1").finish();
        let (fields, size) = Decoder::default().decode(&block, 50).unwrap();
        assert!(fields.is_empty());
        assert_eq!(size, 1 + 100 + 32 + 1 + 1 + 32);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut d = Decoder::default();
        for block in [&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..], &[0x00, 0x85], &[0xbf, 0x00], &[0x3f, 0xff, 0xff]] {
            assert!(d.decode(block, usize::MAX).is_err(), "{block:?}");
        }
    }

    #[test]
    fn integers_past_the_prefix() {
        let mut b = BytesMut::new();
        put_int(&mut b, 0x00, 5, 1337); // RFC 7541 C.1.2
        assert_eq!(&b[..], &[0x1f, 0x9a, 0x0a]);
    }
}
