//! gRPC status codes and the trailers that carry them (gRPC's
//! PROTOCOL-HTTP2.md): `grpc-status`, and `grpc-message` percent-encoded.

use std::fmt;

use bytes::Bytes;

use istiod_xds_api::Code;

use crate::h2::hpack::Encoder;

/// A status: code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// Human-readable message (sent percent-encoded).
    pub message: String,
}

impl Status {
    /// A status with a message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// Success.
    pub fn ok() -> Self {
        Self::new(Code::Ok, "")
    }

    /// The trailer block (`grpc-status`, and `grpc-message` when not empty).
    pub fn trailers(&self) -> Bytes {
        self.fields(Encoder::new()).finish()
    }

    /// A trailers-only response (§ "Trailers-Only"): `:status`,
    /// `content-type` and the status, in one block with END_STREAM.
    pub fn trailers_only(&self, http_status: u16) -> Bytes {
        let enc = Encoder::new().indexed_name(8, http_status.to_string().as_bytes());
        self.fields(enc.indexed_name(31, b"application/grpc")).finish()
    }

    fn fields(&self, enc: Encoder) -> Encoder {
        let enc = enc.field(b"grpc-status", (self.code as u8).to_string().as_bytes());
        if self.message.is_empty() {
            enc
        } else {
            enc.field(b"grpc-message", percent_encode(&truncate(&self.message)).as_bytes())
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// Longest `grpc-message` sent, in bytes before encoding. A message that
/// quotes client input (a node id, a resource name) must not make the
/// trailers larger than the client's header list limit (grpcio: 16 KiB),
/// or the client reports that instead of the status.
pub(crate) const MAX_MESSAGE_BYTES: usize = 512;

/// `message` cut to [`MAX_MESSAGE_BYTES`] on a character boundary, saying
/// how long it was.
pub(crate) fn truncate(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.into();
    }
    let mut end = MAX_MESSAGE_BYTES - 40;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... (truncated, {} bytes)", &message[..end], message.len()).into()
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside 0x20..=0x7E,
/// and `%` itself, become `%XX`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::hpack::Decoder;

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("plain text"), "plain text");
        assert_eq!(percent_encode("100% sure"), "100%25 sure");
        assert_eq!(percent_encode("línea\n"), "l%C3%ADnea%0A");
    }

    #[test]
    fn long_messages_are_truncated() {
        // A 3 MiB node id echoed whole made 3 MB trailers (issue #19, item 9).
        let s = Status::new(Code::InvalidArgument, format!("malformed node id {:?}", "é".repeat(1 << 20)));
        let (fields, _) = Decoder::default().decode(&s.trailers(), usize::MAX).unwrap();
        let msg = String::from_utf8(fields.iter().find(|(n, _)| n == "grpc-message").unwrap().1.to_vec()).unwrap();
        assert!(msg.len() < 3 * MAX_MESSAGE_BYTES, "{} bytes", msg.len());
        assert!(msg.starts_with("malformed node id"), "{msg}");
        assert!(msg.ends_with("(truncated, 2097172 bytes)"), "{msg}");
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn trailers_only_block() {
        let s = Status::new(Code::Unimplemented, "unknown method /a/b");
        let (fields, _) = Decoder::default().decode(&s.trailers_only(200), usize::MAX).unwrap();
        let names: Vec<_> = fields.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        assert_eq!(
            names,
            vec![
                (":status".into(), "200".into()),
                ("content-type".into(), "application/grpc".into()),
                ("grpc-status".into(), "12".into()),
                ("grpc-message".into(), "unknown method /a/b".into()),
            ]
        );
        let (fields, _) = Decoder::default().decode(&Status::ok().trailers(), usize::MAX).unwrap();
        assert_eq!(fields, vec![("grpc-status".into(), "0".into())]);
    }
}
