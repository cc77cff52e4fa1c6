//! A deterministic encoding of dynamic messages. prost-reflect keeps a map
//! field in a `HashMap`, so encoding a patched resource gave its map
//! entries (a `Struct`'s fields, metadata) in a different order each time:
//! the same resource had different bytes, so a different version, and a
//! cache entry never matched a rebuild. [`encode`] re-encodes the wire
//! bytes with every map's entries sorted by their encoded key, recursing
//! into nested messages and into `Any` values whose type the schema knows.

use prost::Message;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, ReflectMessage};

/// `m`'s encoding, maps sorted by key.
pub fn encode(m: &DynamicMessage) -> Vec<u8> {
    let bytes = m.encode_to_vec();
    canonical(&m.descriptor(), &bytes).unwrap_or(bytes)
}

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One field on the wire: its number, wire type and whole encoding
/// (tag included), and for length-delimited ones the payload's range.
struct WireField<'a> {
    number: u32,
    raw: &'a [u8],
    payload: Option<&'a [u8]>,
}

fn fields(b: &[u8]) -> Option<Vec<WireField<'_>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let start = at;
        let tag = varint(b, &mut at)?;
        let (number, wire) = ((tag >> 3) as u32, tag & 7);
        let payload = match wire {
            0 => {
                varint(b, &mut at)?;
                None
            }
            1 => {
                at = at.checked_add(8).filter(|e| *e <= b.len())?;
                None
            }
            2 => {
                let len = usize::try_from(varint(b, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|e| *e <= b.len())?;
                let p = &b[at..end];
                at = end;
                Some(p)
            }
            5 => {
                at = at.checked_add(4).filter(|e| *e <= b.len())?;
                None
            }
            _ => return None,
        };
        out.push(WireField { number, raw: &b[start..at], payload });
    }
    Some(out)
}

/// A map entry: its key's encoding (to sort by) and its own.
type Entry = (Vec<u8>, Vec<u8>);

fn put_delimited(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// `b`, a `desc` on the wire, with its maps' entries sorted.
fn canonical(desc: &MessageDescriptor, b: &[u8]) -> Option<Vec<u8>> {
    let wire = fields(b)?;
    let mut out = Vec::with_capacity(b.len());
    let field = |n: u32| -> Option<FieldDescriptor> { desc.get_field(n) };
    // A map's entries, gathered where its first one was.
    let mut maps: Vec<(u32, Vec<Entry>)> = Vec::new();
    let mut order: Vec<Result<usize, usize>> = Vec::new();
    let mut any_type: Option<String> = None;
    for (i, f) in wire.iter().enumerate() {
        let fd = field(f.number);
        match (&fd, f.payload) {
            (Some(fd), Some(p)) if fd.is_map() => {
                let Kind::Message(entry) = fd.kind() else { return None };
                let entry_bytes = canonical(&entry, p)?;
                // The key's encoding (field 1), to sort by.
                let key = fields(&entry_bytes)?
                    .into_iter()
                    .find(|e| e.number == 1)
                    .map(|e| e.raw.to_vec())
                    .unwrap_or_default();
                match maps.iter_mut().find(|(n, _)| *n == f.number) {
                    Some((_, entries)) => entries.push((key, entry_bytes)),
                    None => {
                        maps.push((f.number, vec![(key, entry_bytes)]));
                        order.push(Err(maps.len() - 1));
                    }
                }
            }
            (Some(fd), Some(p)) if desc.full_name() == "google.protobuf.Any" && fd.name() == "type_url" => {
                any_type = std::str::from_utf8(p).ok().map(|t| t.rsplit('/').next().unwrap_or(t).to_owned());
                order.push(Ok(i));
            }
            _ => order.push(Ok(i)),
        }
    }
    for o in order {
        match o {
            Ok(i) => {
                let f = &wire[i];
                let fd = field(f.number);
                match (fd, f.payload) {
                    (Some(fd), Some(p)) if matches!(fd.kind(), Kind::Message(_)) => {
                        let Kind::Message(inner) = fd.kind() else { return None };
                        put_delimited(&mut out, f.number, &canonical(&inner, p)?);
                    }
                    (Some(fd), Some(p)) if desc.full_name() == "google.protobuf.Any" && fd.name() == "value" => {
                        let inner = any_type.as_deref().and_then(crate::schema::message);
                        match inner.and_then(|d| canonical(&d, p)) {
                            Some(c) => put_delimited(&mut out, f.number, &c),
                            None => out.extend_from_slice(f.raw),
                        }
                    }
                    _ => out.extend_from_slice(f.raw),
                }
            }
            Err(m) => {
                let (number, entries) = &mut maps[m];
                entries.sort();
                for (_, e) in entries.iter() {
                    put_delimited(&mut out, *number, e);
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Struct of several fields encodes the same however its map was
    /// filled, and reads back as the same message.
    #[test]
    fn maps_encode_in_key_order() {
        let desc = crate::schema::message("envoy.config.core.v3.Metadata").unwrap();
        let json = serde_json::json!({"filterMetadata": {"istio": {"services": [{"host": "a", "name": "b", "namespace": "c"}]}, "other": {"z": 1, "a": 2}}});
        let m = crate::schema::from_json(desc.clone(), &json).unwrap();
        let first = encode(&m);
        for _ in 0..20 {
            let again = crate::schema::from_json(desc.clone(), &json).unwrap();
            assert_eq!(encode(&again), first);
        }
        let back = DynamicMessage::decode(desc, first.as_slice()).unwrap();
        assert_eq!(back, m);
    }
}
