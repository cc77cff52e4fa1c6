//! Request heads (RFC 9113 §8.3.1) validated as §8.1.1 and §8.2 require:
//! a malformed request is a stream error, never a crash or a guess.

use bytes::Bytes;

use super::super::hpack::{Encoder, Field};

/// A validated request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `:method`.
    pub method: Bytes,
    /// `:scheme`.
    pub scheme: Bytes,
    /// `:path`.
    pub path: Bytes,
    /// `:authority`, if sent.
    pub authority: Option<Bytes>,
    /// Regular fields, in order.
    pub headers: Vec<Field>,
}

/// Fields that are specific to HTTP/1.1 connections (§8.2.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] =
    [b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"];

impl Request {
    /// Builds a request from decoded fields, or says why it is malformed.
    pub fn from_fields(fields: Vec<Field>) -> Result<Self, &'static str> {
        let (mut method, mut scheme, mut path, mut authority) = (None, None, None, None);
        let mut headers = Vec::with_capacity(fields.len());
        let mut regular_seen = false;
        for (name, value) in fields {
            if name.is_empty() {
                return Err("empty field name");
            }
            if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
                return Err("field value contains NUL, CR or LF"); // §8.2.1
            }
            if name[0] == b':' {
                if regular_seen {
                    return Err("pseudo-header after a regular field"); // §8.3
                }
                let slot = match &name[..] {
                    b":method" => &mut method,
                    b":scheme" => &mut scheme,
                    b":path" => &mut path,
                    b":authority" => &mut authority,
                    _ => return Err("unknown or response pseudo-header"),
                };
                if slot.replace(value).is_some() {
                    return Err("duplicate pseudo-header");
                }
                continue;
            }
            regular_seen = true;
            if name.iter().any(|b| b.is_ascii_uppercase() || !b.is_ascii_graphic()) {
                return Err("field name is not lowercase token characters"); // §8.2
            }
            if CONNECTION_SPECIFIC.contains(&&name[..]) {
                return Err("connection-specific field");
            }
            if &name[..] == b"te" && &value[..] != b"trailers" {
                return Err("TE other than trailers");
            }
            headers.push((name, value));
        }
        let method = method.ok_or("missing :method")?;
        if &method[..] == b"CONNECT" {
            return Err("CONNECT is not supported");
        }
        let path = path.ok_or("missing :path")?;
        if path.is_empty() {
            return Err("empty :path");
        }
        Ok(Self { method, scheme: scheme.ok_or("missing :scheme")?, path, authority, headers })
    }

    /// The first value of a regular field.
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers.iter().find(|(n, _)| n == name.as_bytes()).map(|(_, v)| v)
    }
}

/// A header block with only `:status`.
pub(crate) fn status_block(code: u16) -> Bytes {
    Encoder::new().indexed_name(8, code.to_string().as_bytes()).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Vec<Field> {
        pairs
            .iter()
            .map(|(n, v)| (Bytes::copy_from_slice(n.as_bytes()), Bytes::copy_from_slice(v.as_bytes())))
            .collect()
    }

    const OK: [(&str, &str); 5] =
        [(":method", "POST"), (":scheme", "http"), (":path", "/a/B"), (":authority", "x"), ("te", "trailers")];

    #[test]
    fn valid_request() {
        let r = Request::from_fields(f(&OK)).unwrap();
        assert_eq!(&r.path[..], b"/a/B");
        assert_eq!(r.header("te").map(|v| &v[..]), Some(&b"trailers"[..]));
    }

    #[test]
    fn malformed_requests() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![(":method", "POST"), (":path", "/")], "missing :scheme"),
            (vec![(":scheme", "http"), (":path", "/")], "missing :method"),
            (vec![(":method", "POST"), (":scheme", "http")], "missing :path"),
            (vec![(":method", "POST"), (":scheme", "http"), (":path", "")], "empty :path"),
            (vec![(":method", "POST"), (":method", "GET")], "duplicate"),
            (vec![(":status", "200")], "pseudo-header"),
            (vec![("a", "b"), (":method", "POST")], "after a regular"),
            (vec![(":method", "POST"), (":scheme", "http"), (":path", "/"), ("Upper", "x")], "lowercase"),
            (
                vec![(":method", "POST"), (":scheme", "http"), (":path", "/"), ("connection", "close")],
                "connection-specific",
            ),
            (vec![(":method", "POST"), (":scheme", "http"), (":path", "/"), ("te", "gzip")], "TE"),
            (vec![(":method", "POST"), (":scheme", "http"), (":path", "/"), ("x", "a\r\nb")], "NUL, CR or LF"),
            (vec![(":method", "CONNECT"), (":authority", "x:1")], "CONNECT"),
        ];
        for (fields, want) in cases {
            let err = Request::from_fields(f(&fields)).unwrap_err();
            assert!(err.contains(want), "{fields:?}: {err}");
        }
    }
}
