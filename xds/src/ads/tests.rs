//! Property tests of push coalescing: however many snapshots pass while a
//! connection is busy, one flush sends each affected type once, with
//! exactly the changed resources, at their newest content.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use istiod_proto::prost::Message;
use proptest::prelude::*;

use super::cache::Cache;
use super::node::Peer;
use super::snapshot::{Delta, Kind, SimpleGenerator, SimpleModel, Snapshot};
use super::stream::{AdsStream, Ctx, Protocol};

fn intern(node: Option<&Node>) -> Result<(Peer, Arc<()>), String> {
    use super::snapshot::Generator;
    let c = SimpleGenerator.classify(node, false)?;
    Ok((c.peer, Arc::new(())))
}

proptest! {
    #[test]
    fn merged_delta_touches_exactly_the_union(deltas in proptest::collection::vec(
        proptest::option::weighted(0.9, proptest::collection::vec((0usize..4, 0u8..20), 0..10)), 1..20)) {
        let to_delta = |d: &Option<Vec<(usize, u8)>>| match d {
            None => Delta::Full,
            Some(v) => Delta::Resources(v.iter().map(|(k, n)| (Kind::ALL[*k], Arc::from(n.to_string()))).collect()),
        };
        let mut merged = to_delta(&deltas[0]);
        for d in &deltas[1..] {
            merged.merge(to_delta(d));
        }
        for k in Kind::ALL {
            for n in 0u8..20 {
                let name = n.to_string();
                let any = deltas.iter().any(|d| to_delta(d).touches(k, &name));
                prop_assert_eq!(merged.touches(k, &name), any);
            }
        }
    }

    #[test]
    fn busy_connection_gets_one_coalesced_push(steps in proptest::collection::vec(
        proptest::collection::vec((0u8..10, 0u32..1000), 1..5), 1..30)) {
        // A SotW proxy watching EDS for names 0..5 of 10.
        let generator = SimpleGenerator;
        let mut model = SimpleModel::default();
        let all: Vec<(Kind, Arc<str>, Option<Bytes>)> =
            (0..10u8).map(|n| (Kind::Endpoint, Arc::from(n.to_string()), Some(Bytes::from(vec![n])))).collect();
        model = model.apply(1, all).0;
        let mut snap = Snapshot::new(1, Instant::now(), Arc::new(model.clone()));
        let mut cache = Cache::default();
        let mut seq = 0u64;
        let mut nonce = || -> Arc<str> { seq += 1; seq.to_string().into() };
        let mut s = AdsStream::new(Protocol::Sotw, Instant::now());
        let watched: Vec<String> = (0..5).map(|n| n.to_string()).collect();
        s.on_sotw(DiscoveryRequest {
            node: Some(Node { id: "sidecar~1.1.1.1~a.ns~ns.svc.cluster.local".into(), ..Default::default() }),
            type_url: Kind::Endpoint.type_url().into(),
            resource_names: watched.clone(),
            ..Default::default()
        }, &mut intern, Instant::now()).unwrap();
        let first = s.flush(&mut Ctx { generator: &generator, snap: &snap, cache: &mut cache, nonce: &mut nonce, control_plane: "t", now: Instant::now() });
        prop_assert_eq!(first.len(), 1);

        // Snapshots go by without a flush (the connection is busy).
        let mut changed: BTreeSet<String> = BTreeSet::new();
        for (i, step) in steps.iter().enumerate() {
            let version = 2 + i as u64;
            let changes: Vec<(Kind, Arc<str>, Option<Bytes>)> = step
                .iter()
                .map(|(n, v)| (Kind::Endpoint, Arc::from(n.to_string()), Some(Bytes::from(v.to_be_bytes().to_vec()))))
                .collect();
            let (m, delta) = model.apply(version, changes);
            if let Delta::Resources(r) = &delta {
                changed.extend(r.iter().map(|(_, n)| n.to_string()));
            }
            model = m;
            snap = Snapshot::new(version, Instant::now(), Arc::new(model.clone()));
            s.on_delta_update(&delta, Instant::now(), false);
        }
        let out = s.flush(&mut Ctx { generator: &generator, snap: &snap, cache: &mut cache, nonce: &mut nonce, control_plane: "t", now: Instant::now() });
        let want: BTreeSet<String> = changed.into_iter().filter(|n| watched.contains(n)).collect();
        if want.is_empty() {
            prop_assert!(out.is_empty(), "nothing watched changed: no push");
        } else {
            prop_assert_eq!(out.len(), 1, "one push for all the snapshots that went by");
            let r = DiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap();
            prop_assert_eq!(r.version_info, snap.version.to_string(), "the newest version");
            for a in &r.resources {
                // Bodies here are raw bytes standing in for resources.
                let body = model.resources[Kind::Endpoint as usize].values().find(|e| e.body[..] == a.value[..]);
                prop_assert!(body.is_some(), "every resource is at its newest content");
            }
            prop_assert_eq!(r.resources.len(), want.len(), "exactly the changed, watched resources");
        }
    }
}

/// A forced push (`/debug/adsz?push=true`) is owed by the streams it
/// marked until they are flushed, even when a newer snapshot that is not
/// forced takes its place first: every watched resource is sent again,
/// unchanged as it is. Without the forced mark nothing is sent.
#[test]
fn a_forced_push_outlives_a_newer_snapshot() {
    for forced in [true, false] {
        let generator = SimpleGenerator;
        let all: Vec<(Kind, Arc<str>, Option<Bytes>)> =
            (0..10u8).map(|n| (Kind::Endpoint, Arc::from(n.to_string()), Some(Bytes::from(vec![n])))).collect();
        let model = SimpleModel::default().apply(1, all).0;
        let snap = Snapshot::new(1, Instant::now(), Arc::new(model.clone()));
        let mut cache = Cache::default();
        let mut seq = 0u64;
        let mut nonce = || -> Arc<str> {
            seq += 1;
            seq.to_string().into()
        };
        let mut s = AdsStream::new(Protocol::Sotw, Instant::now());
        let request = DiscoveryRequest {
            node: Some(Node { id: "sidecar~1.1.1.1~a.ns~ns.svc.cluster.local".into(), ..Default::default() }),
            type_url: Kind::Endpoint.type_url().into(),
            resource_names: (0..5).map(|n| n.to_string()).collect(),
            ..Default::default()
        };
        s.on_sotw(request, &mut intern, Instant::now()).unwrap();
        let mut ctx = Ctx {
            generator: &generator,
            snap: &snap,
            cache: &mut cache,
            nonce: &mut nonce,
            control_plane: "t",
            now: Instant::now(),
        };
        assert_eq!(s.flush(&mut ctx).len(), 1);
        // The forced snapshot, then a newer one that changes nothing
        // watched, both before the connection's turn.
        s.on_delta_update(&Delta::Full, Instant::now(), forced);
        s.on_delta_update(&Delta::Resources(vec![(Kind::Endpoint, Arc::from("9"))]), Instant::now(), false);
        let out = s.flush(&mut ctx);
        if forced {
            assert_eq!(out.len(), 1, "the forced push is sent");
            let r = DiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap();
            assert_eq!(r.resources.len(), 5, "with every watched resource, unchanged as they are");
            s.on_delta_update(&Delta::Full, Instant::now(), false);
            assert!(s.flush(&mut ctx).is_empty(), "and owed once only");
        } else {
            assert!(out.is_empty(), "nothing changed for the proxy: nothing is sent");
        }
    }
}
