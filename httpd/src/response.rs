//! An HTTP/1.1 response as a client reads it off a connection it closes
//! (`Connection: close`): its status and body, de-chunked. Used by
//! `pilot-discovery whatif`; every byte comes from the network (the
//! `http_response` fuzz target reads it).

/// An HTTP/1.1 response's status and body (de-chunked).
pub fn parse(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no complete answer")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {}", head.lines().next().unwrap_or_default()))?;
    let body = &raw[end + 4..];
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if !chunked {
        return Ok((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").ok_or("a chunk cut short")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("a bad chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok((status, out));
        }
        if size.checked_add(2).is_none_or(|n| rest.len() < n) {
            return Err("a chunk cut short".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// The `http_response` fuzz target's entry, with what must hold for any
/// bytes: an answer or an error, never a panic; a body no longer than
/// what was read.
pub fn fuzz_entry(data: &[u8]) {
    if let Ok((_, body)) = parse(data) {
        assert!(body.len() <= data.len());
    }
}

#[cfg(test)]
mod tests {
    use super::parse as parse_response;

    #[test]
    fn answers_are_read_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(plain).unwrap(), (200, b"{}".to_vec()));
        let chunked = b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), (400, b"abcde".to_vec()));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").is_err());
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab";
        assert!(parse_response(huge).is_err(), "a chunk size past memory is an error, not an overflow");
    }

    /// Replays what the `http_response` fuzz target keeps
    /// (fuzz/regressions/http_response/).
    #[test]
    fn kept_inputs_are_read_or_refused() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/http_response");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            super::fuzz_entry(&std::fs::read(entry.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n >= 2, "the seeds are there");
    }
}
