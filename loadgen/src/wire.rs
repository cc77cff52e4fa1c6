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
}
