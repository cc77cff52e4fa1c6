//! Assembling discovery responses from pre-encoded resources by
//! concatenation: the resource bytes are never decoded or re-encoded. The
//! layout is protobuf's (a length-delimited field is tag, varint length,
//! bytes), checked against prost decoding in the tests.

use bytes::{BufMut, Bytes, BytesMut};

use crate::grpc::Chain;

/// A resource ready to go on the wire: the encoded `Any` (type URL and
/// value) and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// `google.protobuf.Any` bytes.
    pub any: Bytes,
    /// The resource version (delta xDS).
    pub version: std::sync::Arc<str>,
}

fn varint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Writes field `number` as length-delimited bytes.
fn field_bytes(buf: &mut BytesMut, number: u32, bytes: &[u8]) {
    varint(buf, u64::from(number << 3 | 2));
    varint(buf, bytes.len() as u64);
    buf.put_slice(bytes);
}

fn field_len(number: u32, len: usize) -> usize {
    varint_len(u64::from(number << 3 | 2)) + varint_len(len as u64) + len
}

/// Encodes a `google.protobuf.Any`.
pub fn any(type_url: &str, value: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(field_len(1, type_url.len()) + field_len(2, value.len()));
    field_bytes(&mut buf, 1, type_url.as_bytes());
    field_bytes(&mut buf, 2, value);
    buf.freeze()
}

/// Builds a [`Chain`]: small bytes written here, shared pieces referenced.
struct ChainBuilder {
    small: BytesMut,
    /// (end of the small bytes before it, the shared piece).
    shared: Vec<(usize, Bytes)>,
}

impl ChainBuilder {
    fn new(small: usize, shared: usize) -> Self {
        ChainBuilder { small: BytesMut::with_capacity(small), shared: Vec::with_capacity(shared) }
    }

    /// Field `number` holding `b` (length-delimited): its tag and length
    /// written here, its bytes shared.
    fn share_field(&mut self, number: u32, b: &Bytes) {
        varint(&mut self.small, u64::from(number << 3 | 2));
        varint(&mut self.small, b.len() as u64);
        self.shared.push((self.small.len(), b.clone()));
    }

    fn finish(self) -> Chain {
        let small = self.small.freeze();
        let mut out = Vec::with_capacity(self.shared.len() * 2 + 1);
        let mut at = 0;
        for (end, b) in self.shared {
            if end > at {
                out.push(small.slice(at..end));
            }
            out.push(b);
            at = end;
        }
        if small.len() > at {
            out.push(small.slice(at..));
        }
        Chain(out)
    }
}

/// A state-of-the-world `DiscoveryResponse`: version_info (1), resources
/// (2), type_url (4), control_plane.identifier (6.1), and last the nonce
/// (5), as [`delta_response`] writes it.
pub fn sotw_response(version: &str, type_url: &str, nonce: &str, resources: &[&Encoded], control_plane: &str) -> Chain {
    sotw(version, type_url, Some(nonce), resources, control_plane)
}

/// A `DiscoveryResponse` without its nonce ([`sotw_response`]).
pub fn sotw_response_body(version: &str, type_url: &str, resources: &[&Encoded], control_plane: &str) -> Chain {
    sotw(version, type_url, None, resources, control_plane)
}

fn sotw(version: &str, type_url: &str, nonce: Option<&str>, resources: &[&Encoded], control_plane: &str) -> Chain {
    let mut len = field_len(1, version.len()) + field_len(4, type_url.len());
    len += nonce.map_or(0, |n| field_len(5, n.len()));
    len += resources.iter().map(|r| field_len(2, r.any.len())).sum::<usize>();
    let cp_inner = field_len(1, control_plane.len());
    len += field_len(6, cp_inner);
    let shared: usize = resources.iter().map(|r| r.any.len()).sum();
    let mut c = ChainBuilder::new(len - shared, resources.len());
    field_bytes(&mut c.small, 1, version.as_bytes());
    for r in resources {
        c.share_field(2, &r.any);
    }
    field_bytes(&mut c.small, 4, type_url.as_bytes());
    varint(&mut c.small, u64::from(6u32 << 3 | 2));
    varint(&mut c.small, cp_inner as u64);
    field_bytes(&mut c.small, 1, control_plane.as_bytes());
    if let Some(n) = nonce {
        field_bytes(&mut c.small, 5, n.as_bytes());
    }
    let chain = c.finish();
    debug_assert_eq!(chain.len(), len);
    chain
}

/// Resources of a `DiscoveryResponse` (2), to follow a shared part of one.
pub fn sotw_resources(resources: &[&Encoded]) -> Chain {
    let len: usize = resources.iter().map(|r| field_len(2, r.any.len()) - r.any.len()).sum();
    let mut c = ChainBuilder::new(len, resources.len());
    for r in resources {
        c.share_field(2, &r.any);
    }
    c.finish()
}

/// A `DeltaDiscoveryResponse`: system_version_info (1), resources (2, each a
/// `Resource` with version 1, resource 2, name 3, aliases 4), type_url (4),
/// removed_resources (6), control_plane (7), and last the nonce (5), so
/// that streams sent the same response share all of it but its end
/// ([`delta_response_body`], [`nonce_field`]). Each resource comes with
/// the names it was asked for by (its aliases; usually none).
pub fn delta_response(
    system_version: &str,
    type_url: &str,
    nonce: &str,
    resources: &[(&str, &Encoded, &[&str])],
    removed: &[&str],
    control_plane: &str,
) -> Chain {
    delta(system_version, type_url, Some(nonce), resources, removed, control_plane)
}

/// A `DeltaDiscoveryResponse` without its nonce ([`delta_response`]).
pub fn delta_response_body(
    system_version: &str,
    type_url: &str,
    resources: &[(&str, &Encoded, &[&str])],
    removed: &[&str],
    control_plane: &str,
) -> Chain {
    delta(system_version, type_url, None, resources, removed, control_plane)
}

fn delta(
    system_version: &str,
    type_url: &str,
    nonce: Option<&str>,
    resources: &[(&str, &Encoded, &[&str])],
    removed: &[&str],
    control_plane: &str,
) -> Chain {
    let mut len = field_len(1, system_version.len()) + field_len(4, type_url.len());
    len += nonce.map_or(0, |n| field_len(5, n.len()));
    len += resources.iter().map(|(n, r, a)| field_len(2, delta_resource_len(n, r, a))).sum::<usize>();
    len += removed.iter().map(|n| field_len(6, n.len())).sum::<usize>();
    let cp_inner = field_len(1, control_plane.len());
    len += field_len(7, cp_inner);
    let shared: usize = resources.iter().map(|(_, r, _)| r.any.len()).sum();
    let mut c = ChainBuilder::new(len - shared, resources.len());
    field_bytes(&mut c.small, 1, system_version.as_bytes());
    put_delta_resources(&mut c, resources);
    field_bytes(&mut c.small, 4, type_url.as_bytes());
    for n in removed {
        field_bytes(&mut c.small, 6, n.as_bytes());
    }
    varint(&mut c.small, u64::from(7u32 << 3 | 2));
    varint(&mut c.small, cp_inner as u64);
    field_bytes(&mut c.small, 1, control_plane.as_bytes());
    if let Some(n) = nonce {
        field_bytes(&mut c.small, 5, n.as_bytes());
    }
    let chain = c.finish();
    debug_assert_eq!(chain.len(), len);
    chain
}

/// Resources of a `DeltaDiscoveryResponse` (2, as [`delta_response`]
/// writes them), to follow a shared part of one.
pub fn delta_resources(resources: &[(&str, &Encoded, &[&str])]) -> Chain {
    let len: usize = resources.iter().map(|(n, r, a)| field_len(2, delta_resource_len(n, r, a))).sum();
    let shared: usize = resources.iter().map(|(_, r, _)| r.any.len()).sum();
    let mut c = ChainBuilder::new(len - shared, resources.len());
    put_delta_resources(&mut c, resources);
    c.finish()
}

/// The length of a delta `Resource`: version 1, resource 2, name 3,
/// aliases 4.
fn delta_resource_len(name: &str, r: &Encoded, aliases: &[&str]) -> usize {
    field_len(1, r.version.len())
        + field_len(2, r.any.len())
        + field_len(3, name.len())
        + aliases.iter().map(|a| field_len(4, a.len())).sum::<usize>()
}

/// Writes each resource as field 2 of a `DeltaDiscoveryResponse`.
fn put_delta_resources(c: &mut ChainBuilder, resources: &[(&str, &Encoded, &[&str])]) {
    for (name, r, aliases) in resources {
        varint(&mut c.small, u64::from(2u32 << 3 | 2));
        varint(&mut c.small, delta_resource_len(name, r, aliases) as u64);
        field_bytes(&mut c.small, 1, r.version.as_bytes());
        c.share_field(2, &r.any);
        field_bytes(&mut c.small, 3, name.as_bytes());
        for a in *aliases {
            field_bytes(&mut c.small, 4, a.as_bytes());
        }
    }
}

/// A response's nonce field (5, in both protocols' responses).
pub fn nonce_field(nonce: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(field_len(5, nonce.len()));
    field_bytes(&mut b, 5, nonce.as_bytes());
    b.freeze()
}

#[cfg(test)]
mod tests {
    use istiod_proto::envoy::config::cluster::v3::Cluster;
    use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryResponse, DiscoveryResponse};
    use istiod_proto::prost::Message;
    use istiod_proto::type_url;

    use super::*;

    fn cluster(name: &str) -> Encoded {
        let body = Cluster { name: name.into(), ..Default::default() }.encode_to_vec();
        Encoded { any: any(type_url::CLUSTER, &body), version: "7".into() }
    }

    #[test]
    fn sotw_response_decodes_with_prost() {
        let big = "x".repeat(300); // multi-byte varint lengths
        let (a, b) = (cluster("a"), cluster(&big));
        let chain = sotw_response("42", type_url::CLUSTER, "n-1", &[&a, &b], "istiod-rs");
        // The resources are the cache's bytes, not copies.
        assert!(chain.0.iter().any(|p| p.as_ptr() == a.any.as_ptr() && p.len() == a.any.len()));
        assert!(chain.0.iter().any(|p| p.as_ptr() == b.any.as_ptr()));
        let own: usize = chain
            .0
            .iter()
            .filter(|p| p.as_ptr() != a.any.as_ptr() && p.as_ptr() != b.any.as_ptr())
            .map(Bytes::len)
            .sum();
        assert_eq!(own, chain.len() - a.any.len() - b.any.len(), "only the bytes around them are the response's");
        let r = DiscoveryResponse::decode(chain.to_bytes()).unwrap();
        assert_eq!(r.version_info, "42");
        assert_eq!(r.type_url, type_url::CLUSTER);
        assert_eq!(r.nonce, "n-1");
        assert_eq!(r.control_plane.unwrap().identifier, "istiod-rs");
        let names: Vec<String> =
            r.resources.iter().map(|a| Cluster::decode(a.value.as_slice()).unwrap().name).collect();
        assert_eq!(names, vec!["a".to_owned(), big]);
        assert!(r.resources.iter().all(|a| a.type_url == type_url::CLUSTER));
    }

    #[test]
    fn delta_response_decodes_with_prost() {
        let a = cluster("a");
        let chain =
            delta_response("9", type_url::CLUSTER, "n-2", &[("a", &a, &["by-alias"])], &["gone", "also-gone"], "cp");
        assert!(chain.0.iter().any(|p| p.as_ptr() == a.any.as_ptr()), "shared, not copied");
        let r = DeltaDiscoveryResponse::decode(chain.to_bytes()).unwrap();
        assert_eq!(r.system_version_info, "9");
        assert_eq!(r.nonce, "n-2");
        assert_eq!(r.removed_resources, vec!["gone", "also-gone"]);
        assert_eq!(r.resources.len(), 1);
        assert_eq!(r.resources[0].name, "a");
        assert_eq!(r.resources[0].version, "7");
        assert_eq!(r.resources[0].aliases, vec!["by-alias"]);
        let any = r.resources[0].resource.as_ref().unwrap();
        assert_eq!(Cluster::decode(any.value.as_slice()).unwrap().name, "a");
        assert_eq!(r.control_plane.unwrap().identifier, "cp");
    }

    /// A shared part with the nonce after it is byte for byte the whole
    /// response, and a part followed by more resources decodes as one
    /// response holding all of them: what a stream sent a shared first
    /// response receives.
    #[test]
    fn a_body_and_its_nonce_are_the_response() {
        let (a, b, own) = (cluster("a"), cluster("b"), cluster("own"));
        let joined = |parts: Vec<Chain>| Chain(parts.into_iter().flat_map(|c| c.0).collect()).to_bytes();
        let whole = sotw_response("3", type_url::CLUSTER, "n-9", &[&a, &b], "cp").to_bytes();
        let body = sotw_response_body("3", type_url::CLUSTER, &[&a, &b], "cp");
        assert_eq!(joined(vec![body.clone(), nonce_field("n-9").into()]), whole);
        let with_own = joined(vec![body, sotw_resources(&[&own]), nonce_field("n-9").into()]);
        let r = DiscoveryResponse::decode(with_own).unwrap();
        let names: Vec<String> =
            r.resources.iter().map(|a| Cluster::decode(a.value.as_slice()).unwrap().name).collect();
        assert_eq!(names, ["a", "b", "own"]);
        assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("3", "n-9"));

        let refs: [(&str, &Encoded, &[&str]); 2] = [("a", &a, &[]), ("b", &b, &["by-alias"])];
        let whole = delta_response("3", type_url::CLUSTER, "n-9", &refs, &["gone"], "cp").to_bytes();
        let body = delta_response_body("3", type_url::CLUSTER, &refs, &["gone"], "cp");
        assert_eq!(joined(vec![body.clone(), nonce_field("n-9").into()]), whole);
        let with_own = joined(vec![body, delta_resources(&[("own", &own, &[])]), nonce_field("n-9").into()]);
        let r = DeltaDiscoveryResponse::decode(with_own).unwrap();
        let names: Vec<&str> = r.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "own"]);
        assert_eq!(r.resources[1].aliases, ["by-alias"]);
        assert_eq!((r.nonce.as_str(), r.removed_resources.as_slice()), ("n-9", &["gone".to_owned()][..]));
    }
}
