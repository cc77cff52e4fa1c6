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
use super::stream::{AdsStream, Changes, Ctx, Protocol};

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
            s.on_delta_update(&Changes::of(&delta), Instant::now(), false);
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
        s.on_delta_update(&Changes::of(&Delta::Full), Instant::now(), forced);
        s.on_delta_update(
            &Changes::of(&Delta::Resources(vec![(Kind::Endpoint, Arc::from("9"))])),
            Instant::now(),
            false,
        );
        let out = s.flush(&mut ctx);
        if forced {
            assert_eq!(out.len(), 1, "the forced push is sent");
            let r = DiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap();
            assert_eq!(r.resources.len(), 5, "with every watched resource, unchanged as they are");
            s.on_delta_update(&Changes::of(&Delta::Full), Instant::now(), false);
            assert!(s.flush(&mut ctx).is_empty(), "and owed once only");
        } else {
            assert!(out.is_empty(), "nothing changed for the proxy: nothing is sent");
        }
    }
}

#[test]
fn a_nonce_reads_core_connection_and_sequence() {
    for (core, conn, seq) in [(0, 0, 0), (1, 42, 7), (usize::MAX, u64::MAX, u64::MAX), (3, 10, 1_000_000)] {
        assert_eq!(&*super::nonce_text(core, conn, seq), format!("{core}-{conn}-{seq}"));
    }
}

/// Reduces a class `c` to `c % 2` plus ten times what the snapshot says,
/// and counts its reductions; classes from 100 up read more of the
/// snapshot than `reduction_inputs` says.
/// `lie`: its reduction inputs say nothing changed, whatever the
/// snapshot says.
#[derive(Default)]
struct CountingReductions {
    reductions: std::sync::atomic::AtomicUsize,
    lie: bool,
}

impl super::snapshot::Generator for CountingReductions {
    type Mesh = u32;
    type Class = u32;
    fn classify(&self, _: Option<&Node>, _: bool) -> Result<super::node::Classified<u32>, String> {
        Err("not served".into())
    }
    /// The shared names and the class's own.
    fn wildcard_names(&self, snap: &Snapshot<u32>, class: &u32, kind: Kind) -> Vec<Arc<str>> {
        let mut names = self.shared_wildcard_names(snap, class, kind);
        names.extend(self.class_wildcard_names(snap, class, kind));
        names
    }
    /// `a`, `b` and `m<mesh>` (a name of this snapshot's), and for an
    /// even reduced class `ownshared` too (a name that reads the whole
    /// class, where a generator would not put it).
    fn shared_wildcard_names(&self, snap: &Snapshot<u32>, reduced: &u32, _: Kind) -> Vec<Arc<str>> {
        let mesh = snap.mesh.as_deref().copied().unwrap_or(0);
        let mut names: Vec<Arc<str>> =
            vec!["m".to_owned() + &mesh.to_string(), "a".into(), "b".into()].into_iter().map(Arc::from).collect();
        if reduced.is_multiple_of(2) {
            names.push("ownshared".into());
        }
        names
    }
    /// `own<class>`, and for class 7 `c7` too (a name that does not read
    /// the whole class, where a generator would not put it).
    fn class_wildcard_names(&self, _: &Snapshot<u32>, class: &u32, _: Kind) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = vec![format!("own{class}").into()];
        if *class == 7 {
            names.push("c7".into());
        }
        names
    }
    fn input_generation(&self, snap: &Snapshot<u32>, _: &u32, _: Kind, _: &str) -> Option<u64> {
        snap.mesh.as_deref().map(|m| u64::from(*m))
    }
    fn generate(&self, snap: &Snapshot<u32>, class: &u32, _: Kind, name: &str) -> Option<Bytes> {
        let class = if name.starts_with("own") { *class } else { class % 2 };
        Some(Bytes::from(format!("{class}-{}", snap.mesh.as_deref().copied().unwrap_or(0))))
    }
    /// Names starting `own` read the whole class.
    fn whole_class(&self, _: Kind, name: &str) -> bool {
        name.starts_with("own")
    }
    fn reduce(&self, snap: &Snapshot<u32>, class: &u32, _: Kind) -> Option<u32> {
        self.reductions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(class % 2 + 10 * snap.mesh.as_deref().copied().unwrap_or(0))
    }
    fn reduction_inputs(&self, snap: &Snapshot<u32>) -> Option<u64> {
        if self.lie {
            return Some(0);
        }
        snap.mesh.as_deref().map(|m| u64::from(*m))
    }
    fn reduction_reads_more(&self, class: &u32, _: Kind) -> bool {
        *class >= 100
    }
}

#[test]
fn a_reduction_is_kept_while_its_inputs_are() {
    let g = CountingReductions::default();
    let reductions = || g.reductions.load(std::sync::atomic::Ordering::Relaxed);
    let mut cache: Cache<u32> = Cache::default();
    let snap = |version: u64, says: u32| {
        let mut s = Snapshot::new(version, Instant::now(), Arc::default());
        s.mesh = Some(Arc::new(says));
        s
    };
    let (a, b, wide) = (Arc::new(3u32), Arc::new(4u32), Arc::new(101u32));
    let name: Arc<str> = Arc::from("r");
    let ask = |cache: &mut Cache<u32>, s: &Snapshot<u32>, c: &Arc<u32>| cache.get(&g, s, c, Kind::Endpoint, &name);
    let first = snap(1, 5);
    for c in [&a, &b, &wide] {
        ask(&mut cache, &first, c);
    }
    let after_first = reductions();
    // A newer snapshot with the same reduction inputs: only the class that
    // reads more is reduced again (debug builds check the kept ones
    // against a fresh reduction, which counts too).
    let same = snap(2, 5);
    for c in [&a, &b, &wide] {
        ask(&mut cache, &same, c);
    }
    let kept_checks = if cfg!(debug_assertions) { 2 } else { 0 };
    assert_eq!(reductions() - after_first, 1 + kept_checks);
    // Other inputs: every class is reduced again, and the answer follows.
    let other = snap(3, 6);
    let before = reductions();
    assert_eq!(ask(&mut cache, &other, &a).map(|e| e.any), ask(&mut cache, &snap(4, 6), &a).map(|e| e.any));
    assert!(reductions() > before);
    let answer = |e: Option<super::wire::Encoded>| e.map(|e| e.any);
    assert_ne!(answer(ask(&mut cache, &snap(5, 7), &a)), answer(ask(&mut cache, &same, &a)));
}

#[test]
fn a_kept_reduction_that_a_fresh_one_contradicts_fails_debug_builds() {
    let g = CountingReductions { lie: true, ..Default::default() };
    let mut cache: Cache<u32> = Cache::default();
    let snap = |version: u64, says: u32| {
        let mut s = Snapshot::new(version, Instant::now(), Arc::default());
        s.mesh = Some(Arc::new(says));
        s
    };
    let (class, name) = (Arc::new(3u32), Arc::<str>::from("r"));
    cache.get(&g, &snap(1, 5), &class, Kind::Endpoint, &name);
    let later = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.get(&g, &snap(2, 6), &class, Kind::Endpoint, &name).map(|e| e.any)
    }));
    match (later, cfg!(debug_assertions)) {
        // Kept: reduced once, for the first snapshot.
        (Ok(_), false) => assert_eq!(g.reductions.load(std::sync::atomic::Ordering::Relaxed), 1),
        (Err(e), true) => {
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains("kept from an earlier snapshot differs"), "{msg}");
        }
        (Ok(_), true) => panic!("debug builds check a kept reduction"),
        (Err(_), false) => panic!("only debug builds check a kept reduction"),
    }
}

/// Streams of one class with the same subscription share their first
/// delta response (built when the second asks, shared from the third),
/// and receive exactly what a stream answered on its own does, each with
/// its own nonce; a stream sent the shared response then follows changes
/// as any other. Another subscription is answered on its own.
#[test]
fn first_delta_responses_are_shared_by_a_class() {
    use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
    let generator = SimpleGenerator;
    let all: Vec<(Kind, Arc<str>, Option<Bytes>)> =
        (0..10u8).map(|n| (Kind::Endpoint, Arc::from(n.to_string()), Some(Bytes::from(vec![n])))).collect();
    let (model, _) = SimpleModel::default().apply(1, all);
    let snap = Snapshot::new(1, Instant::now(), Arc::new(model.clone()));
    let mut cache = Cache::default();
    let mut seq = 0u64;
    let mut nonce = || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    let class = Arc::new(());
    let mut same_class = |node: Option<&Node>| -> Result<(Peer, Arc<()>), String> {
        use super::snapshot::Generator;
        Ok((SimpleGenerator.classify(node, false)?.peer, class.clone()))
    };
    let subscribe = |names: &[&str]| DeltaDiscoveryRequest {
        node: Some(Node { id: "sidecar~1.1.1.1~a.ns~ns.svc.cluster.local".into(), ..Default::default() }),
        type_url: Kind::Endpoint.type_url().into(),
        resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    };
    let mut streams = Vec::new();
    let mut answers = Vec::new();
    for names in [&["1", "3", "5"][..], &["1", "3", "5"], &["5", "3", "1"], &["1", "3"], &["1", "3", "5"]] {
        let mut s = AdsStream::new(Protocol::Delta, Instant::now());
        s.on_delta(subscribe(names), &mut same_class, Instant::now()).unwrap();
        let mut ctx = Ctx {
            generator: &generator,
            snap: &snap,
            cache: &mut cache,
            nonce: &mut nonce,
            control_plane: "t",
            now: Instant::now(),
        };
        let out = s.flush(&mut ctx);
        assert_eq!(out.len(), 1);
        answers.push(DeltaDiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap());
        streams.push(s);
    }
    let names = |r: &DeltaDiscoveryResponse| r.resources.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&answers[0]), ["1", "3", "5"]);
    assert_eq!(names(&answers[3]), ["1", "3"]);
    for r in &answers[1..] {
        if names(r).len() == 3 {
            assert_eq!(r.resources, answers[0].resources);
        }
        assert_eq!(r.system_version_info, answers[0].system_version_info);
    }
    let nonces: BTreeSet<&str> = answers.iter().map(|r| r.nonce.as_str()).collect();
    assert_eq!(nonces.len(), answers.len(), "each response has its own nonce");
    // The second stream built it; the third and the fifth were sent it.
    assert_eq!(cache.first_shared, 2);

    // A change to one of the names reaches a stream sent the shared
    // response, with that name only.
    let (model2, delta) = model.apply(2, vec![(Kind::Endpoint, Arc::from("3"), Some(Bytes::from_static(b"new")))]);
    let snap2 = Snapshot::new(2, Instant::now(), Arc::new(model2));
    let s = &mut streams[4];
    s.on_delta(
        DeltaDiscoveryRequest {
            type_url: Kind::Endpoint.type_url().into(),
            response_nonce: answers[4].nonce.clone(),
            ..Default::default()
        },
        &mut same_class,
        Instant::now(),
    )
    .unwrap();
    s.on_delta_update(&Changes::of(&delta), Instant::now(), false);
    let mut ctx = Ctx {
        generator: &generator,
        snap: &snap2,
        cache: &mut cache,
        nonce: &mut nonce,
        control_plane: "t",
        now: Instant::now(),
    };
    let out = s.flush(&mut ctx);
    assert_eq!(out.len(), 1);
    let r = DeltaDiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap();
    assert_eq!(names(&r), ["3"]);
    assert!(r.removed_resources.is_empty());
}

/// A new stream of `class` subscribed to `kind` under `protocol`, to
/// `names` (none: a wildcard subscription).
fn subscribed(protocol: Protocol, class: &Arc<u32>, kind: Kind, names: &[String]) -> AdsStream<u32> {
    use istiod_proto::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    let node = Some(Node { id: "sidecar~1.1.1.1~a.ns~ns.svc.cluster.local".into(), ..Default::default() });
    let mut identify = |node: Option<&Node>| -> Result<(Peer, Arc<u32>), String> {
        use super::snapshot::Generator;
        Ok((SimpleGenerator.classify(node, false)?.peer, class.clone()))
    };
    let mut s = AdsStream::new(protocol, Instant::now());
    let type_url = kind.type_url().to_owned();
    match protocol {
        Protocol::Sotw => {
            let r = DiscoveryRequest { node, type_url, resource_names: names.to_vec(), ..Default::default() };
            s.on_sotw(r, &mut identify, Instant::now()).unwrap();
        }
        Protocol::Delta => {
            let r = DeltaDiscoveryRequest {
                node,
                type_url,
                resource_names_subscribe: names.to_vec(),
                ..Default::default()
            };
            s.on_delta(r, &mut identify, Instant::now()).unwrap();
        }
    }
    s
}

/// The resources of response `bytes` (values, with their names for
/// delta), in order, and its nonce; its version must be `version` and its
/// control plane `t`.
fn answer(protocol: Protocol, bytes: Bytes, version: &str) -> (Vec<String>, String) {
    use istiod_proto::envoy::service::discovery::v3::DeltaDiscoveryResponse;
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    match protocol {
        Protocol::Sotw => {
            let r = DiscoveryResponse::decode(bytes).unwrap();
            assert_eq!((r.version_info.as_str(), r.control_plane.unwrap().identifier.as_str()), (version, "t"));
            (r.resources.iter().map(|a| text(&a.value)).collect::<Vec<_>>(), r.nonce)
        }
        Protocol::Delta => {
            let r = DeltaDiscoveryResponse::decode(bytes).unwrap();
            assert_eq!((r.system_version_info.as_str(), r.control_plane.unwrap().identifier.as_str()), (version, "t"));
            let values =
                r.resources.iter().map(|r| format!("{}={}", r.name, text(&r.resource.as_ref().unwrap().value)));
            (values.collect(), r.nonce)
        }
    }
}

/// What stream `s` of a `CountingReductions` class is sent on a flush of
/// `snap`: one response, its bytes.
fn flushed_once(
    s: &mut AdsStream<u32>,
    g: &CountingReductions,
    snap: &Snapshot<u32>,
    cache: &mut Cache<u32>,
    nonce: &mut dyn FnMut() -> Arc<str>,
) -> Bytes {
    let mut ctx = Ctx { generator: g, snap, cache, nonce, control_plane: "t", now: Instant::now() };
    let out = s.flush(&mut ctx);
    assert_eq!(out.len(), 1);
    out[0].bytes.to_bytes()
}

/// Streams of classes 3, 5, 4 and 7 (`CountingReductions`: 3, 5 and 7
/// reduce to one class, 4 to another) subscribe to endpoints `a`, `own`
/// (which reads the whole class) and `b`; each is flushed once and then
/// after a full push. Returns each first response's resources (values,
/// with their names for delta), sorted, and its nonce, and how many were
/// sent a shared part.
fn first_responses_of_reduced_classes(protocol: Protocol) -> (Vec<(Vec<String>, String)>, u64) {
    let g = CountingReductions::default();
    let mut snap = Snapshot::new(1, Instant::now(), Arc::default());
    snap.mesh = Some(Arc::new(5u32));
    let mut cache: Cache<u32> = Cache::default();
    let mut seq = 0u64;
    let mut nonce = || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    let names: Vec<String> = ["a", "own", "b"].map(String::from).to_vec();
    let mut answers = Vec::new();
    for class in [3u32, 5, 4, 7] {
        let mut s = subscribed(protocol, &Arc::new(class), Kind::Endpoint, &names);
        let bytes = flushed_once(&mut s, &g, &snap, &mut cache, &mut nonce);
        let (mut values, nonce_text) = answer(protocol, bytes, "1");
        values.sort();
        answers.push((values, nonce_text));
        // What it holds now: nothing changed, nothing is sent.
        s.on_delta_update(&Changes::of(&Delta::Full), Instant::now(), false);
        let mut ctx = Ctx {
            generator: &g,
            snap: &snap,
            cache: &mut cache,
            nonce: &mut nonce,
            control_plane: "t",
            now: Instant::now(),
        };
        assert!(s.flush(&mut ctx).is_empty(), "holds every resource as it is");
    }
    let nonces: BTreeSet<&str> = answers.iter().map(|a| a.1.as_str()).collect();
    assert_eq!(nonces.len(), answers.len(), "each response has its own nonce");
    (answers, cache.first_shared)
}

/// Proxies of distinct classes that reduce to one class share their first
/// responses, each with its own resources that read the whole class; a
/// class that reduces to another does not.
#[test]
fn first_delta_responses_are_shared_by_a_reduced_class() {
    let (answers, shared) = first_responses_of_reduced_classes(Protocol::Delta);
    let expect = |shared: &str, own: &str| vec![format!("a={shared}"), format!("b={shared}"), format!("own={own}")];
    assert_eq!(answers[0].0, expect("1-5", "3-5"));
    assert_eq!(answers[1].0, expect("1-5", "5-5"));
    assert_eq!(answers[3].0, expect("1-5", "7-5"));
    assert_eq!(answers[2].0, expect("0-5", "4-5"));
    // 5 built the shared part (3 was the first), 7 was sent it; 4 was
    // answered alone.
    assert_eq!(shared, 1);
}

/// The same for state-of-the-world streams.
#[test]
fn first_sotw_responses_are_shared_by_a_reduced_class() {
    let (answers, shared) = first_responses_of_reduced_classes(Protocol::Sotw);
    let expect = |shared: &str, own: &str| {
        let mut v = vec![shared.to_owned(), shared.to_owned(), own.to_owned()];
        v.sort();
        v
    };
    assert_eq!(answers[0].0, expect("1-5", "3-5"));
    assert_eq!(answers[1].0, expect("1-5", "5-5"));
    assert_eq!(answers[3].0, expect("1-5", "7-5"));
    assert_eq!(answers[2].0, expect("0-5", "4-5"));
    assert_eq!(shared, 1);
}

/// Wildcard streams of classes that reduce to one class share the first
/// response's names and its shared part, and each is sent its own class's
/// resources too, whichever class asked first; the next snapshot's names
/// are its own. A shared name that reads the whole class (class 4's and
/// 6's `ownshared`) is the class's own, and an own name that does not
/// (class 7's `c7`) is not. Each response holds the names sorted, the
/// shared part before the class's own (which here also sort last, so a
/// response answered alone, sorted as a whole, reads the same).
#[test]
fn wildcard_first_responses_of_reduced_classes_each_have_their_own_names() {
    for protocol in [Protocol::Delta, Protocol::Sotw] {
        let g = CountingReductions::default();
        let mut cache: Cache<u32> = Cache::default();
        let mut seq = 0u64;
        let mut nonce = || -> Arc<str> {
            seq += 1;
            seq.to_string().into()
        };
        let classes: Vec<Arc<u32>> = [3u32, 5, 7, 4, 6].into_iter().map(Arc::new).collect();
        for mesh in [5u32, 6] {
            let mut snap = Snapshot::new(u64::from(mesh), Instant::now(), Arc::default());
            snap.mesh = Some(Arc::new(mesh));
            let shared_before = cache.first_shared;
            for i in [0usize, 1, 0, 2, 1, 3, 4, 3] {
                let mut s = subscribed(protocol, &classes[i], Kind::Listener, &[]);
                let bytes = flushed_once(&mut s, &g, &snap, &mut cache, &mut nonce);
                let (got, _) = answer(protocol, bytes, &mesh.to_string());
                let c = *classes[i];
                // Names in order, each with the class it is generated for.
                let mut rest = vec!["a", "b", "m"];
                let mut own = vec!["own"];
                if c == 7 {
                    rest.insert(2, "c7");
                }
                if c.is_multiple_of(2) {
                    own.push("ownshared");
                }
                let name = |n: &str| match n {
                    "m" => format!("m{mesh}"),
                    "own" => format!("own{c}"),
                    n => n.to_owned(),
                };
                let want: Vec<String> = rest
                    .iter()
                    .map(|n| (name(n), c % 2))
                    .chain(own.iter().map(|n| (name(n), c)))
                    .map(|(n, of)| match protocol {
                        Protocol::Sotw => format!("{of}-{mesh}"),
                        Protocol::Delta => format!("{n}={of}-{mesh}"),
                    })
                    .collect();
                assert_eq!(got, want, "{protocol:?}, class {c}, mesh {mesh}");
            }
            // Of the four streams of classes 3 and 5 (one reduced class,
            // with the same names), the second built the shared part and
            // the other two were sent it (7, of the same reduced class,
            // has other names: answered alone); of the three of 4 and 6
            // (another), the last.
            assert_eq!(cache.first_shared - shared_before, 3, "{protocol:?}, mesh {mesh}");
        }
    }
}

/// A first response over the bound on what a core keeps for shared first
/// responses is built once, not kept, and from then on answered as usual:
/// it neither resets what is kept nor is built again for each stream.
#[test]
fn a_first_response_too_big_to_keep_is_answered_as_usual() {
    use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
    let generator = SimpleGenerator;
    let big = Bytes::from(vec![7u8; 33 << 20]);
    let all = vec![
        (Kind::Endpoint, Arc::from("big"), Some(big.clone())),
        (Kind::Endpoint, Arc::from("small"), Some(Bytes::from_static(b"s"))),
    ];
    let (model, _) = SimpleModel::default().apply(1, all);
    let snap = Snapshot::new(1, Instant::now(), Arc::new(model));
    let mut cache = Cache::default();
    let mut seq = 0u64;
    let mut nonce = || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    let class = Arc::new(());
    let mut same_class = |node: Option<&Node>| -> Result<(Peer, Arc<()>), String> {
        use super::snapshot::Generator;
        Ok((SimpleGenerator.classify(node, false)?.peer, class.clone()))
    };
    let mut sizes = Vec::new();
    for name in ["small", "small", "big", "big", "big", "big", "small"] {
        let mut s = AdsStream::new(Protocol::Delta, Instant::now());
        let request = DeltaDiscoveryRequest {
            node: Some(Node { id: "sidecar~1.1.1.1~a.ns~ns.svc.cluster.local".into(), ..Default::default() }),
            type_url: Kind::Endpoint.type_url().into(),
            resource_names_subscribe: vec![name.into()],
            ..Default::default()
        };
        s.on_delta(request, &mut same_class, Instant::now()).unwrap();
        let mut ctx = Ctx {
            generator: &generator,
            snap: &snap,
            cache: &mut cache,
            nonce: &mut nonce,
            control_plane: "t",
            now: Instant::now(),
        };
        let out = s.flush(&mut ctx);
        let r = DeltaDiscoveryResponse::decode(out[0].bytes.to_bytes()).unwrap();
        assert_eq!(r.resources.len(), 1);
        sizes.push(r.resources[0].resource.as_ref().unwrap().value.len());
    }
    assert_eq!(sizes, [1, 1, 33 << 20, 33 << 20, 33 << 20, 33 << 20, 1]);
    // Only the last "small" was sent the kept response: the big one was
    // built by the second to ask, once, and never kept.
    assert_eq!(cache.first_shared, 1);
    assert_eq!(cache.first_built, 2, "one build of each");
}

/// A change pushed to the streams of one reduced class is built once and
/// sent to the rest but for the nonce, byte for byte what each would be
/// sent on its own (delta, and SotW for a type whose responses carry what
/// changed); a stream that does not take it as the others do (it was sent
/// the new version already) is answered as usual, and a stream of another
/// reduced class is sent its own. A change of a name that reads the whole
/// class is not shared: each stream is sent its own class's.
#[test]
fn a_change_is_pushed_to_a_reduced_class_once_built() {
    for protocol in [Protocol::Delta, Protocol::Sotw] {
        a_change_pushed_to_a_reduced_class(protocol);
    }
}

fn a_change_pushed_to_a_reduced_class(protocol: Protocol) {
    use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
    // A response's resources (name and value), its bytes but for its
    // nonce (the last field, 5 in both messages), and its nonce.
    let read = |bytes: Bytes| -> (Vec<(String, Vec<u8>)>, Bytes, String) {
        let (values, nonce): (Vec<(String, Vec<u8>)>, String) = match protocol {
            Protocol::Delta => {
                let r = DeltaDiscoveryResponse::decode(bytes.clone()).unwrap();
                let values = r.resources.iter().map(|x| (x.name.clone(), x.resource.as_ref().unwrap().value.to_vec()));
                (values.collect(), r.nonce)
            }
            Protocol::Sotw => {
                let r = DiscoveryResponse::decode(bytes.clone()).unwrap();
                (r.resources.iter().map(|x| (String::new(), x.value.to_vec())).collect(), r.nonce)
            }
        };
        let field = [&[5 << 3 | 2, nonce.len() as u8][..], nonce.as_bytes()].concat();
        assert!(bytes.ends_with(&field), "the nonce is the last field");
        (values, bytes.slice(..bytes.len() - field.len()), nonce)
    };
    let g = CountingReductions::default();
    let snap = |version: u64, mesh: u32| {
        let mut s = Snapshot::new(version, Instant::now(), Arc::default());
        s.mesh = Some(Arc::new(mesh));
        s
    };
    let (first, second) = (snap(1, 5), snap(2, 6));
    let mut cache: Cache<u32> = Cache::default();
    let mut seq = 0u64;
    let mut nonce = || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    // `own` reads the whole class (`CountingReductions`).
    let ab = ["a".to_owned(), "b".to_owned(), "own".to_owned()];
    // Classes 3, 5, 7 and 9 reduce to one class, 4 to another; 9 was sent
    // the second snapshot's resources first.
    let sent_first = |c: u32| if c == 9 { &second } else { &first };
    let mut streams: Vec<(u32, AdsStream<u32>)> = [3u32, 5, 7, 4, 9]
        .into_iter()
        .map(|c| {
            let mut s = subscribed(protocol, &Arc::new(c), Kind::Endpoint, &ab);
            let (_, _, nonce) = read(flushed_once(&mut s, &g, sent_first(c), &mut cache, &mut nonce));
            let type_url = Kind::Endpoint.type_url().to_owned();
            let mut known = |_: Option<&Node>| Err("known".to_owned());
            match protocol {
                Protocol::Delta => {
                    let ack = DeltaDiscoveryRequest { type_url, response_nonce: nonce, ..Default::default() };
                    s.on_delta(ack, &mut known, Instant::now()).unwrap();
                }
                Protocol::Sotw => {
                    let names = ab.to_vec();
                    let ack = DiscoveryRequest {
                        type_url,
                        response_nonce: nonce,
                        resource_names: names,
                        ..Default::default()
                    };
                    s.on_sotw(ack, &mut known, Instant::now()).unwrap();
                }
            }
            (c, s)
        })
        .collect();
    // The streams of the same classes, each on its own: the change's names
    // are theirs alone.
    let alone: Vec<Option<Bytes>> = [3u32, 5, 7, 4, 9]
        .into_iter()
        .map(|c| {
            let mut s = subscribed(protocol, &Arc::new(c), Kind::Endpoint, &ab);
            let mut own = Cache::default();
            flushed_once(&mut s, &g, sent_first(c), &mut own, &mut nonce);
            let change = Changes::of(&Delta::Resources(vec![(Kind::Endpoint, Arc::from("a"))]));
            s.on_delta_update(&change, Instant::now(), false);
            drop(change);
            let mut ctx = Ctx {
                generator: &g,
                snap: &second,
                cache: &mut own,
                nonce: &mut nonce,
                control_plane: "t",
                now: Instant::now(),
            };
            s.flush(&mut ctx).pop().map(|o| o.bytes.to_bytes())
        })
        .collect();
    assert_eq!(cache.changed_shared, 0);
    // `a` changes (and with the mesh, every resource's bytes).
    let changes = Changes::of(&Delta::Resources(vec![(Kind::Endpoint, Arc::from("a"))]));
    for (_, s) in &mut streams {
        s.on_delta_update(&changes, Instant::now(), false);
    }
    drop(changes);
    let mut nonces = BTreeSet::new();
    for ((class, s), alone) in streams.iter_mut().map(|(c, s)| (*c, s)).zip(alone) {
        let mut ctx = Ctx {
            generator: &g,
            snap: &second,
            cache: &mut cache,
            nonce: &mut nonce,
            control_plane: "t",
            now: Instant::now(),
        };
        let got = s.flush(&mut ctx).pop().map(|o| o.bytes.to_bytes());
        if class == 9 {
            assert!(got.is_none() && alone.is_none(), "{protocol:?}: class 9 has the new a: nothing to send");
            continue;
        }
        let (values, rest, nonce) = read(got.unwrap());
        let (alone_values, alone_rest, _) = read(alone.unwrap());
        assert!(nonces.insert(nonce), "each push has its own nonce");
        let name = if protocol == Protocol::Delta { "a" } else { "" };
        assert_eq!(values, [(name.to_owned(), format!("{}-6", class % 2).into_bytes())], "{protocol:?}, class {class}");
        assert_eq!(
            (values, rest),
            (alone_values, alone_rest),
            "{protocol:?}, class {class}: as it would be sent on its own"
        );
    }
    // 3 saw it, 5 built it, 7 was sent it (4 is the first of its class,
    // 9 found it and did not take it).
    assert_eq!(cache.changed_shared, 1, "{protocol:?}");

    // A change of `names` in `snap`: each stream's pushed values, by class.
    let mut change = |snap: &Snapshot<u32>, names: &[&str], cache: &mut Cache<u32>| {
        let changes = Changes::of(&Delta::Resources(names.iter().map(|n| (Kind::Endpoint, Arc::from(*n))).collect()));
        for (_, s) in &mut streams {
            s.on_delta_update(&changes, Instant::now(), false);
        }
        drop(changes);
        let mut pushed = Vec::new();
        for (class, s) in &mut streams {
            let mut ctx = Ctx {
                generator: &g,
                snap,
                cache: &mut *cache,
                nonce: &mut nonce,
                control_plane: "t",
                now: Instant::now(),
            };
            pushed.push((*class, read(s.flush(&mut ctx).pop().unwrap().bytes.to_bytes()).0));
        }
        pushed
    };
    let name = |n: &str| if protocol == Protocol::Delta { n.to_owned() } else { String::new() };

    // `a` and `own` change: every stream is sent its own `own`.
    for (class, values) in change(&snap(3, 7), &["a", "own"], &mut cache) {
        let want =
            [(name("a"), format!("{}-7", class % 2).into_bytes()), (name("own"), format!("{class}-7").into_bytes())];
        assert_eq!(values, want, "{protocol:?}, class {class}");
    }
    assert_eq!(cache.changed_shared, 1, "{protocol:?}: none shared");

    // `a` and `z` change, `z` held and asked for by none: the streams take
    // the same part of the change (`a`), and share its push as when `a`
    // changed alone (a VirtualService's change of a sidecar's route
    // configuration `8080` and of the proxyless gRPC clients' one for the host).
    for (class, values) in change(&snap(4, 8), &["a", "z"], &mut cache) {
        assert_eq!(values, [(name("a"), format!("{}-8", class % 2).into_bytes())], "{protocol:?}, class {class}");
    }
    // 3 saw it, 5 built it, 7 and 9 were sent it (4 is its class's first).
    assert_eq!(cache.changed_shared, 3, "{protocol:?}: a part of a change shared");
}

/// Delta clients of an on-demand type subscribe by a name that stands for
/// others (`Aliases`): `vip` here, for `w1` to `w3`.
struct Aliasing;

impl super::snapshot::Generator for Aliasing {
    type Mesh = u32;
    type Class = u32;
    fn classify(&self, _: Option<&Node>, _: bool) -> Result<super::node::Classified<u32>, String> {
        Err("not served".into())
    }
    fn wildcard_names(&self, _: &Snapshot<u32>, _: &u32, _: Kind) -> Vec<Arc<str>> {
        Vec::new()
    }
    fn input_generation(&self, _: &Snapshot<u32>, _: &u32, _: Kind, _: &str) -> Option<u64> {
        Some(1)
    }
    fn generate(&self, _: &Snapshot<u32>, _: &u32, _: Kind, name: &str) -> Option<Bytes> {
        name.starts_with('w').then(|| Bytes::from(name.to_owned()))
    }
    fn aliases(&self, _: &Snapshot<u32>, _: Kind) -> Option<super::snapshot::Aliases> {
        let workloads: Vec<Arc<str>> = ["w1", "w2", "w3"].into_iter().map(Arc::from).collect();
        let stands_for = [(Arc::from("vip"), workloads.clone())].into_iter().collect();
        let of = workloads.into_iter().map(|w| (w, vec![Arc::from("vip")])).collect();
        Some(super::snapshot::Aliases { stands_for, of })
    }
}

#[test]
fn names_the_server_subscribes_a_stream_to_are_told_once() {
    // What an alias stands for joins the stream's subscriptions in the
    // response: the names' bound (ISTIOD_RS_MAX_NAMES_PER_STREAM) is held
    // again at the stream's next request, as a request's own are.
    let snap = Snapshot::new(1, Instant::now(), Arc::default());
    let mut cache: Cache<u32> = Cache::default();
    let mut seq = 0u64;
    let mut nonce = || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    let mut s = subscribed(Protocol::Delta, &Arc::new(1), Kind::Endpoint, &["vip".to_owned()]);
    assert_eq!(s.subscribed(), 1);
    assert!(!s.take_grown(), "the request's own name is the request's");
    let mut ctx = Ctx {
        generator: &Aliasing,
        snap: &snap,
        cache: &mut cache,
        nonce: &mut nonce,
        control_plane: "t",
        now: Instant::now(),
    };
    assert_eq!(s.flush(&mut ctx).len(), 1);
    assert_eq!(s.subscribed(), 4, "vip and the three it stands for");
    assert!(s.take_grown(), "the server's names are told");
    assert!(!s.take_grown(), "once");
}

#[test]
fn streams_that_take_the_same_part_of_a_change_share_its_set() {
    // `a`, `b` and `c` change in endpoints and in routes. Streams taking
    // the same names of a type are marked with one set, that part alone;
    // those taking other names, or the same names of another type, with
    // their own.
    let names = |ns: &[&str]| ns.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let mut streams: Vec<AdsStream<u32>> = [&["a", "x"][..], &["a", "y"], &["b"], &["a", "b", "c"]]
        .into_iter()
        .map(|ns| {
            let mut s = subscribed(Protocol::Delta, &Arc::new(1), Kind::Endpoint, &names(ns));
            s.watches[Kind::Endpoint as usize].as_mut().unwrap().dirty = Default::default();
            s
        })
        .collect();
    let mut route = subscribed(Protocol::Delta, &Arc::new(1), Kind::Route, &names(&["a"]));
    route.watches[Kind::Route as usize].as_mut().unwrap().dirty = Default::default();
    let changed: Vec<(Kind, Arc<str>)> = [Kind::Endpoint, Kind::Route]
        .into_iter()
        .flat_map(|k| ["a", "b", "c"].into_iter().map(move |n| (k, Arc::from(n))))
        .collect();
    let changes = Changes::of(&Delta::Resources(changed));
    for s in streams.iter_mut().chain([&mut route]) {
        s.on_delta_update(&changes, Instant::now(), false);
    }
    drop(changes);
    let set = |s: &AdsStream<u32>, kind: Kind| match &s.watches[kind as usize].as_ref().unwrap().dirty {
        super::stream::Dirty::Names(n) => n.clone(),
        other => panic!("{other:?}"),
    };
    let listed = |n: &Arc<BTreeSet<Arc<str>>>| n.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let (a1, a2, b, abc) = (
        set(&streams[0], Kind::Endpoint),
        set(&streams[1], Kind::Endpoint),
        set(&streams[2], Kind::Endpoint),
        set(&streams[3], Kind::Endpoint),
    );
    assert!(Arc::ptr_eq(&a1, &a2), "the same part: one set");
    assert_eq!((listed(&a1), listed(&b), listed(&abc)), (names(&["a"]), names(&["b"]), names(&["a", "b", "c"])));
    assert!(!Arc::ptr_eq(&a1, &b) && !Arc::ptr_eq(&a1, &abc));
    let r = set(&route, Kind::Route);
    assert_eq!(listed(&r), names(&["a"]));
    assert!(!Arc::ptr_eq(&a1, &r), "the same names of another type: its own");

    // Of more than 64 changed names: each stream its own copy of what it
    // takes, none where it takes nothing, the type's set where it takes all.
    let many: Vec<String> = (0..70).map(|i| format!("n{i:02}")).collect();
    let mut part = subscribed(Protocol::Delta, &Arc::new(1), Kind::Endpoint, &names(&["n03", "n65"]));
    let mut none = subscribed(Protocol::Delta, &Arc::new(1), Kind::Endpoint, &names(&["other"]));
    let mut all = subscribed(Protocol::Delta, &Arc::new(1), Kind::Endpoint, &many);
    for s in [&mut part, &mut none, &mut all] {
        s.watches[Kind::Endpoint as usize].as_mut().unwrap().dirty = Default::default();
    }
    let changes =
        Changes::of(&Delta::Resources(many.iter().map(|n| (Kind::Endpoint, Arc::from(n.as_str()))).collect()));
    for s in [&mut part, &mut none, &mut all] {
        s.on_delta_update(&changes, Instant::now(), false);
    }
    drop(changes);
    assert_eq!(listed(&set(&part, Kind::Endpoint)), names(&["n03", "n65"]));
    assert_eq!(none.watches[Kind::Endpoint as usize].as_ref().unwrap().dirty, super::stream::Dirty::Clean);
    assert_eq!(listed(&set(&all, Kind::Endpoint)), many);
}

/// A mass disconnection of proxies of classes of their own: the cache is
/// pruned about log N times, the walks together about 5 N (a pruning
/// every 16 classes walked about N * N / 32), and what retired classes
/// leave in it is never more than a quarter of the live classes' (or 16).
#[test]
fn a_mass_disconnection_prunes_the_cache_a_logarithmic_number_of_times() {
    let n = 10_000;
    let (mut live, mut retired, mut prunings, mut walked) = (n, 0, 0, 0);
    while live > 0 {
        live -= 1;
        retired += 1;
        if super::prune_due(retired, live) {
            // The walk: the live classes and everything still cached.
            walked += live + retired;
            prunings += 1;
            retired = 0;
        }
        assert!(retired < 16.max(live / 4) + 1, "{retired} retired classes kept beside {live} live");
    }
    assert!(prunings <= 40, "{prunings} prunings");
    assert!(walked <= 6 * n, "{walked} classes walked");
    // A steady trickle still prunes every 16.
    assert!(super::prune_due(16, 10) && !super::prune_due(15, 10));
}
