//! Upstream's cases as data: istio/istio
//! `pilot/pkg/autoregistration/controller_test.go`, against an in-memory
//! store shared by two replicas (`pilot-1`, `pilot-2`) as upstream's
//! tests share one config store. The grace period is upstream's test
//! value, 50 ms. Expected values are upstream's.

use std::cell::RefCell;
use std::rc::Rc;

use super::*;

#[derive(Default)]
struct Memory {
    entries: BTreeMap<(String, String), Json>,
    groups: BTreeMap<(String, String), Json>,
    rv: u64,
}

#[derive(Clone, Default)]
struct Mem(Rc<RefCell<Memory>>);

impl Mem {
    fn stamp(m: &mut Memory, mut o: Json) -> Json {
        m.rv += 1;
        o["metadata"]["resourceVersion"] = json!(m.rv.to_string());
        o
    }
    fn get(&self, ns: &str, name: &str) -> Option<Json> {
        self.0.borrow().entries.get(&(ns.to_owned(), name.to_owned())).cloned()
    }
    fn count(&self) -> usize {
        self.0.borrow().entries.len()
    }
    fn add_group(&self, g: Json) {
        let key = (
            g["metadata"]["namespace"].as_str().unwrap().to_owned(),
            g["metadata"]["name"].as_str().unwrap().to_owned(),
        );
        self.0.borrow_mut().groups.insert(key, g);
    }
    fn put(&self, e: Json) {
        let mut m = self.0.borrow_mut();
        let (ns, name) = ns_name(&e);
        let key = (ns.to_owned(), name.to_owned());
        let e = Mem::stamp(&mut m, e);
        m.entries.insert(key, e);
    }
}

impl Store for Mem {
    async fn entry(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        Ok(self.get(ns, name))
    }
    async fn group(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        Ok(self.0.borrow().groups.get(&(ns.to_owned(), name.to_owned())).cloned())
    }
    async fn create(&self, entry: &Json) -> Result<Write, String> {
        let mut m = self.0.borrow_mut();
        let (ns, name) = ns_name(entry);
        let key = (ns.to_owned(), name.to_owned());
        if m.entries.contains_key(&key) {
            return Ok(Write::Conflict);
        }
        let e = Mem::stamp(&mut m, entry.clone());
        m.entries.insert(key, e.clone());
        Ok(Write::Done(e))
    }
    async fn update(&self, entry: &Json) -> Result<Write, String> {
        let mut m = self.0.borrow_mut();
        let (ns, name) = ns_name(entry);
        let key = (ns.to_owned(), name.to_owned());
        let Some(cur) = m.entries.get(&key) else { return Err("not found".into()) };
        if cur["metadata"]["resourceVersion"] != entry["metadata"]["resourceVersion"] {
            return Ok(Write::Conflict);
        }
        let mut e = entry.clone();
        e["status"] = cur["status"].clone();
        let e = Mem::stamp(&mut m, e);
        m.entries.insert(key, e.clone());
        Ok(Write::Done(e))
    }
    async fn update_status(&self, entry: &Json) -> Result<Write, String> {
        let mut m = self.0.borrow_mut();
        let (ns, name) = ns_name(entry);
        let key = (ns.to_owned(), name.to_owned());
        let Some(cur) = m.entries.get(&key).cloned() else { return Err("not found".into()) };
        let mut e = cur;
        e["status"] = entry["status"].clone();
        let e = Mem::stamp(&mut m, e);
        m.entries.insert(key, e.clone());
        Ok(Write::Done(e))
    }
    async fn delete(&self, ns: &str, name: &str, rv: Option<&str>) -> Result<Deleted, String> {
        let mut m = self.0.borrow_mut();
        let key = (ns.to_owned(), name.to_owned());
        match m.entries.get(&key) {
            None => Ok(Deleted::Gone),
            Some(cur) if rv.is_some_and(|rv| cur["metadata"]["resourceVersion"] != json!(rv)) => Ok(Deleted::Conflict),
            Some(_) => {
                m.entries.remove(&key);
                Ok(Deleted::Done)
            }
        }
    }
    async fn list(&self) -> Result<Vec<Json>, String> {
        Ok(self.0.borrow().entries.values().cloned().collect())
    }
}

const GRACE: Duration = Duration::from_millis(50);

fn settings(instance: &str) -> Settings {
    Settings {
        autoregistration: true,
        health_checks: true,
        grace: GRACE,
        validate_identity: true,
        max_connection_age: None,
        instance: instance.into(),
        hbone: false,
    }
}

/// upstream's `wgA` (and `wgAWrongNs`, `wgWithoutSA`).
fn group(ns: &str, name: &str, sa: &str) -> Json {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "WorkloadGroup",
        "metadata": {"name": name, "namespace": ns, "labels": {"grouplabel": "notonentry"}},
        "spec": {"template": {"ports": {"http": 80}, "labels": {"app": "a"}, "network": "nw0",
                              "locality": "reg0/zone0/subzone0", "weight": 1, "serviceAccount": sa}},
    })
}

fn setup() -> Mem {
    let m = Mem::default();
    m.add_group(group("a", "wg-a", "sa-a"));
    m.add_group(group("wrong", "wg-a", "sa-a"));
    m.add_group(group("a", "wg-b", ""));
    m
}

/// upstream's `fakeProxy(ip, wg, nw, sa)`: identity `wg.ns/sa` when `sa`
/// is set.
fn proxy(ip: &str, group_ns: &str, group: &str, network: &str, sa: &str) -> (ProxyClass, Vec<String>) {
    let mut metadata: Vec<(Arc<str>, Arc<str>)> = vec![("AUTO_REGISTER_GROUP".into(), group.into())];
    if !network.is_empty() {
        metadata.push(("NETWORK".into(), network.into()));
    }
    metadata.sort();
    let class = ProxyClass {
        node_type: NodeType::Sidecar,
        namespace: group_ns.into(),
        generator: "".into(),
        labels: vec![("merge".into(), "me".into())],
        locality: "".into(),
        verified: !sa.is_empty(),
        service_account: "".into(),
        ips: if ip.is_empty() { vec![] } else { vec![ip.into()] },
        mesh_id: "".into(),
        cluster_id: "".into(),
        version: "".into(),
        metadata,
    };
    let ids = if sa.is_empty() { vec![] } else { vec![format!("spiffe://cluster.local/ns/{group_ns}/sa/{sa}")] };
    (class, ids)
}

fn located(mut c: ProxyClass, locality: &str) -> ProxyClass {
    c.locality = locality.into();
    c
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn ann(e: &Json, k: &str) -> Option<String> {
    annotation(e, k).map(str::to_owned)
}

/// upstream's `checkEntry`: name, ports, address, network, locality,
/// controller or disconnection, labels.
fn check_entry(
    store: &Mem,
    class: &ProxyClass,
    group: &str,
    network: &str,
    locality: &str,
    connected_to: Option<&str>,
) {
    let ip = &*class.ips[0];
    let name = if network.is_empty() { format!("{group}-{ip}") } else { format!("{group}-{ip}-{network}") };
    let e = store.get(&class.namespace, &name).unwrap_or_else(|| panic!("no entry {name}"));
    assert_eq!(e["spec"]["ports"], json!({"http": 80}));
    assert_eq!(e["spec"]["address"], json!(ip));
    assert_eq!(e["spec"]["network"], json!(if network.is_empty() { "nw0" } else { network }));
    assert_eq!(e["spec"]["locality"], json!(locality));
    match connected_to {
        Some(c) => {
            assert_eq!(ann(&e, CONTROLLER).as_deref(), Some(c), "{e:#}");
            assert!(ann(&e, CONNECTED_AT).is_some(), "{e:#}");
        }
        None => assert!(ann(&e, DISCONNECTED_AT).is_some(), "{e:#}"),
    }
    assert_eq!(e["metadata"]["labels"], e["spec"]["labels"]);
    assert_eq!(e["spec"]["labels"]["merge"], "me");
    assert_eq!(e["spec"]["labels"]["app"], "a");
}

/// `TestNonAutoRegisteredWorkloads`.
#[test]
fn non_auto_registered_workloads() {
    rt().block_on(async {
        let store = Mem::default();
        store.add_group(group("a", "wg-a", "sa-a"));
        let mut c = Controller::new(store.clone(), settings(""));
        let cases = [
            ("missing group", proxy("1.2.3.4", "a", "", "", "sa-a")),
            ("missing ip", proxy("", "a", "wg-a", "", "sa-a")),
            ("missing namespace", proxy("1.2.3.4", "", "wg-a", "", "sa-a")),
            ("non-existent group", proxy("1.2.3.4", "a", "dne", "", "sa-a")),
        ];
        for (i, (name, (class, ids))) in cases.into_iter().enumerate() {
            let _ = c.on_connect(&format!("c{i}"), Arc::new(class), &ids, SystemTime::now()).await;
            assert_eq!(store.count(), 0, "{name}");
        }
    });
}

/// `TestAutoregistrationLifecycle`, its subtests in order.
#[test]
fn autoregistration_lifecycle() {
    rt().block_on(async {
        let store = setup();
        let mut c1 = Controller::new(store.clone(), settings("pilot-1"));
        let mut s2 = settings("pilot-2");
        s2.max_connection_age = Some(Duration::from_secs(3600));
        let mut c2 = Controller::new(store.clone(), s2);
        let n = "reg1/zone1/subzone1";
        let (p, ids) = proxy("1.2.3.4", "a", "wg-a", "nw1", "sa-a");
        let p = Arc::new(located(p, n));
        let (p2, _) = proxy("1.2.3.4", "a", "wg-a", "nw2", "sa-a");
        let p2 = Arc::new(located(p2, n));
        let (p3, _) = proxy("1.2.3.5", "a", "wg-a", "nw1", "sa-a");
        let p3 = Arc::new(located(p3, n));
        let later = |t: SystemTime, ms: u64| t + Duration::from_millis(ms);

        // initial registration
        c1.on_connect("p1c1", p.clone(), &ids, SystemTime::now()).await.unwrap();
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-1"));

        // multinetwork same ip
        let p2conn1 = SystemTime::now();
        c2.on_connect("p2c1", p2.clone(), &ids, p2conn1).await.unwrap();
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-1"));
        check_entry(&store, &p2, "wg-a", "nw2", n, Some("pilot-2"));
        c2.on_disconnect("p2c1", SystemTime::now()).await;

        // fast reconnect/same instance
        c1.on_disconnect("p1c1", SystemTime::now()).await;
        tokio::time::sleep(GRACE / 2).await;
        check_entry(&store, &p, "wg-a", "nw1", n, None);
        let reconnect = SystemTime::now();
        c1.on_connect("p1c2", p.clone(), &ids, reconnect).await.unwrap();
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-1"));

        // fast reconnect/same instance: connect before disconnect (of the
        // original connection, not the reconnect)
        c1.on_connect("p1c3", p.clone(), &ids, later(reconnect, 10)).await.unwrap();
        c1.on_disconnect("p1c2", SystemTime::now()).await;
        tokio::time::sleep(GRACE / 2).await;
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-1"));

        // fast reconnect/different instance
        tokio::time::sleep(Duration::from_millis(10)).await; // past p1c3's connection
        c1.on_disconnect("p1c3", SystemTime::now()).await;
        tokio::time::sleep(GRACE / 2).await;
        check_entry(&store, &p, "wg-a", "nw1", n, None);
        c2.on_connect("p1c4", p.clone(), &ids, SystemTime::now()).await.unwrap();
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-2"));
        // pilot-1's delayed cleanup finds it connected elsewhere.
        tokio::time::sleep(GRACE * 2).await;
        c1.tick(Instant::now()).await;
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-2"));

        // slow reconnect: deleted after the grace period, then made again
        c2.on_disconnect("p1c4", SystemTime::now()).await;
        tokio::time::sleep(GRACE + Duration::from_millis(10)).await;
        c2.tick(Instant::now()).await;
        assert!(store.get("a", "wg-a-1.2.3.4-nw1").is_none(), "deleted after the grace period");
        c1.on_connect("p1c5", p.clone(), &ids, SystemTime::now()).await.unwrap();
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-1"));

        // garbage collected if pilot stops after disconnect
        c1.on_disconnect("p1c5", SystemTime::now()).await;
        drop(c1); // its delayed cleanup is lost
        tokio::time::sleep(GRACE + Duration::from_millis(10)).await;
        c2.sweep().await;
        assert!(store.get("a", "wg-a-1.2.3.4-nw1").is_none(), "the other replica's sweep deletes it");

        // garbage collected if pilot and workload stop simultaneously
        // before pilot can do anything: connected 2h ago, pilot-2 allows 1h.
        let p3conn1 = SystemTime::now() - Duration::from_secs(7200);
        let mut c1 = Controller::new(store.clone(), settings("pilot-1"));
        c1.on_connect("p3c1", p3.clone(), &ids, p3conn1).await.unwrap();
        assert!(store.get("a", "wg-a-1.2.3.5-nw1").is_some());
        c2.sweep().await;
        assert!(store.get("a", "wg-a-1.2.3.5-nw1").is_none(), "leaked: connected longer than the maximum age");

        // workload group recreate: entry and group deleted, the group comes
        // back, the connected proxy's entry is made again.
        c2.on_connect("p1c6", p.clone(), &ids, SystemTime::now()).await.unwrap();
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-2"));
        store.0.borrow_mut().groups.remove(&("a".into(), "wg-a".into()));
        store.0.borrow_mut().entries.remove(&("a".into(), "wg-a-1.2.3.4-nw1".into()));
        c2.sweep().await;
        assert!(store.get("a", "wg-a-1.2.3.4-nw1").is_none(), "no group, no entry");
        store.add_group(group("a", "wg-a", "sa-a"));
        c2.sweep().await;
        check_entry(&store, &p, "wg-a", "nw1", n, Some("pilot-2"));
        c2.on_disconnect("p1c6", SystemTime::now()).await;

        // unverified client
        let (p, ids) = proxy("1.2.3.6", "a", "wg-a", "nw1", "");
        let err = c1.on_connect("u", Arc::new(p), &ids, SystemTime::now()).await.unwrap_err();
        assert_eq!(err, "registration of WorkloadEntry requires a verified identity");
        assert!(store.get("a", "wg-a-1.2.3.6-nw1").is_none());
        // wrong SA client
        let (p, ids) = proxy("1.2.3.6", "a", "wg-a", "nw1", "wrong");
        let err = c1.on_connect("w", Arc::new(p), &ids, SystemTime::now()).await.unwrap_err();
        assert_eq!(err, "registration of WorkloadEntry service account mismatch: \"wrong\" vs \"sa-a\"");
        assert!(store.get("a", "wg-a-1.2.3.6-nw1").is_none());
        // wrong NS client: identity in `a`, the node in `wrong`
        let (mut p, _) = proxy("1.2.3.6", "wrong", "wg-a", "nw1", "sa-a");
        p.verified = true;
        let ids = vec!["spiffe://cluster.local/ns/a/sa/sa-a".to_owned()];
        let identity = Some(("a".to_owned(), "sa-a".to_owned()));
        let we = entry_from_group("wg-a-1.2.3.6-nw1", &p, &group("wrong", "wg-a", "sa-a"), false);
        assert_eq!(
            can_control(identity.as_ref(), &we).unwrap_err(),
            "registration of WorkloadEntry namespace mismatch: \"a\" vs \"wrong\""
        );
        // (Our streams' identity check already refuses such a node: no
        // identity of its namespace verifies it.)
        assert!(c1.on_connect("x", Arc::new(p), &ids, SystemTime::now()).await.is_err());
        assert!(store.get("wrong", "wg-a-1.2.3.6-nw1").is_none());
        // no SA WG: the template's locality (the node names none)
        let (p, ids) = proxy("1.2.3.6", "a", "wg-b", "nw1", "sa-a");
        let p = Arc::new(p);
        c1.on_connect("nosa", p.clone(), &ids, SystemTime::now()).await.unwrap();
        let e = store.get("a", "wg-b-1.2.3.6-nw1").expect("registered");
        assert_eq!(e["spec"]["locality"], "reg0/zone0/subzone0");
        assert_eq!(ann(&e, CONTROLLER).as_deref(), Some("pilot-1"));
    });
}

/// `TestAutoregistrationDisabled`.
#[test]
fn autoregistration_disabled() {
    rt().block_on(async {
        let store = setup();
        store.put(manual_entry("true"));
        let mut s = settings("pilot-x");
        s.autoregistration = false;
        let mut c = Controller::new(store.clone(), s);
        // health check still works
        let (p, ids) = health_proxy();
        c.on_connect("h", Arc::new(p), &ids, SystemTime::now()).await.unwrap();
        c.on_health("h", true, "").await;
        assert_eq!(health(&store), Some("True".into()));
        // registration does nothing
        let (p, ids) = proxy("1.2.3.4", "a", "wg-a", "litNw", "sa-a");
        c.on_connect("r", Arc::new(p), &ids, SystemTime::now()).await.unwrap();
        assert!(store.get("a", "wg-a-1.2.3.4-litNw").is_none());
    });
}

/// `TestUpdateHealthCondition`.
#[test]
fn update_health_condition() {
    rt().block_on(async {
        let store = setup();
        let mut c = Controller::new(store.clone(), settings("pilot-1"));
        let (p, ids) = proxy("1.2.3.4", "a", "wg-a", "litNw", "sa-a");
        c.on_connect("p", Arc::new(p), &ids, SystemTime::now()).await.unwrap();
        c.on_health("p", true, "").await;
        let e = store.get("a", "wg-a-1.2.3.4-litNw").unwrap();
        assert_eq!(e["status"]["conditions"][0]["type"], "Healthy");
        assert_eq!(e["status"]["conditions"][0]["status"], "True", "auto registered healthy health");
        c.on_health("p", false, "lol health bad").await;
        let e = store.get("a", "wg-a-1.2.3.4-litNw").unwrap();
        assert_eq!(e["status"]["conditions"][0]["status"], "False", "auto registered unhealthy health");
        assert_eq!(e["status"]["conditions"][0]["message"], "lol health bad");
        assert_eq!(e["status"]["conditions"].as_array().unwrap().len(), 1, "replaced, not added");
    });
}

/// `TestWorkloadEntryFromGroup`: upstream's golden entry.
#[test]
fn workload_entry_from_group() {
    let g = json!({
        "apiVersion": "networking.istio.io/v1", "kind": "WorkloadGroup",
        "metadata": {"name": "wg-a", "namespace": "a"},
        "spec": {
            "metadata": {"labels": {"foo": "bar"}, "annotations": {"foo": "bar"}},
            "template": {"ports": {"http": 80}, "labels": {"app": "a"}, "weight": 1, "network": "nw0",
                         "locality": "rgn1/zone1/subzone1", "serviceAccount": "sa-a"},
        },
    });
    let (mut p, _) = proxy("10.0.0.1", "a", "wg-a", "nw1", "sa-a");
    p.locality = "rgn2/zone2/subzone2".into();
    let got = entry_from_group("test-we", &p, &g, false);
    let labels = json!({"app": "a", "foo": "bar", "merge": "me"});
    let want = json!({
        "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
        "metadata": {
            "name": "test-we", "namespace": "a", "labels": labels,
            "annotations": {"istio.io/autoRegistrationGroup": "wg-a", "foo": "bar"},
            "ownerReferences": [{"apiVersion": "networking.istio.io/v1", "kind": "WorkloadGroup", "name": "wg-a",
                                 "uid": "", "controller": true}],
        },
        "spec": {"address": "10.0.0.1", "ports": {"http": 80}, "labels": labels, "network": "nw1",
                 "locality": "rgn2/zone2/subzone2", "weight": 1, "serviceAccount": "sa-a"},
    });
    assert_eq!(got, want);
}

/// `TestWorkloadEntryFromGroupHBONE`.
#[test]
fn workload_entry_from_group_hbone() {
    let g = |tunnel: Option<&str>| {
        let mut labels = json!({"app": "a"});
        if let Some(t) = tunnel {
            labels[TUNNEL] = json!(t);
        }
        json!({"metadata": {"name": "wg-a", "namespace": "a"},
               "spec": {"template": {"labels": labels, "serviceAccount": "sa-a"}}})
    };
    let with = |hbone: &str| {
        let (mut p, _) = proxy("10.0.0.1", "a", "wg-a", "", "sa-a");
        p.metadata.push(("ENABLE_HBONE".into(), hbone.into()));
        p
    };
    let tunnel = |e: Json| e["spec"]["labels"][TUNNEL].as_str().unwrap_or_default().to_owned();
    assert_eq!(tunnel(entry_from_group("we", &with("true"), &g(None), true)), "http", "EnableHBONE sets tunnel label");
    assert_eq!(
        tunnel(entry_from_group("we", &with("false"), &g(None), true)),
        "",
        "EnableHBONE false leaves label absent"
    );
    assert_eq!(
        tunnel(entry_from_group("we", &with("true"), &g(Some("other")), true)),
        "other",
        "explicit tunnel label not overwritten"
    );
}

/// upstream's `weB`: a WorkloadEntry made by hand, health-checkable.
fn manual_entry(health: &str) -> Json {
    json!({"apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
           "metadata": {"name": "we-without-auto-registration", "namespace": "b",
                        "annotations": {HEALTH_CHECKS: health}},
           "spec": {"address": "10.0.0.1", "network": "nw0"}})
}

/// upstream's `fakeProxySuitableForHealthChecks(weB)`.
fn health_proxy() -> (ProxyClass, Vec<String>) {
    let (mut p, _) = proxy("10.0.0.1", "b", "", "nw0", "my-sa");
    p.metadata =
        vec![("NETWORK".into(), "nw0".into()), ("WORKLOAD_ENTRY".into(), "we-without-auto-registration".into())];
    p.metadata.push((READINESS_PROBE.into(), "true".into()));
    p.metadata.sort();
    (p, vec!["spiffe://cluster.local/ns/b/sa/my-sa".to_owned()])
}

fn health(store: &Mem) -> Option<String> {
    let e = store.get("b", "we-without-auto-registration")?;
    let c = e["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Healthy")?.clone();
    c["status"].as_str().map(str::to_owned)
}

/// `TestNonAutoregisteredWorkloads_UnsuitableForHealthChecks_WorkloadEntryNotFound`
/// and `..._ShouldNotBeTreatedAsConnected`.
#[test]
fn non_autoregistered_workloads_unsuitable_for_health_checks() {
    rt().block_on(async {
        let store = setup();
        let mut c = Controller::new(store.clone(), settings("pilot-x"));
        let (mut p, ids) = health_proxy();
        for (k, v) in p.metadata.iter_mut() {
            if &**k == "WORKLOAD_ENTRY" {
                *v = "non-exisiting-workload-entry".into();
            }
        }
        assert!(c.on_connect("nf", Arc::new(p), &ids, SystemTime::now()).await.is_err(), "not found");

        // when proxy.Metadata.WorkloadEntry is not set
        let mut without_annotation = manual_entry("true");
        without_annotation["metadata"]["annotations"] = json!({});
        for (name, entry, unset) in
            [("WorkloadEntry not set", manual_entry("true"), true), ("annotation missing", without_annotation, false)]
        {
            store.put(entry.clone());
            let (mut p, ids) = health_proxy();
            if unset {
                p.metadata.retain(|(k, _)| &**k != "WORKLOAD_ENTRY");
            }
            c.on_connect(name, Arc::new(p), &ids, SystemTime::now()).await.unwrap();
            let got = store.get("b", "we-without-auto-registration").unwrap();
            assert_eq!(got["metadata"]["annotations"], entry["metadata"]["annotations"], "{name}");
        }
    });
}

/// `TestNonAutoregisteredWorkloads_SuitableForHealthChecks_ShouldBeTreatedAsConnected`.
#[test]
fn non_autoregistered_workloads_suitable_for_health_checks_are_connected() {
    rt().block_on(async {
        for value in ["", "false", "true"] {
            let store = setup();
            store.put(manual_entry(value));
            let mut c = Controller::new(store.clone(), settings("pilot-x"));
            let now = SystemTime::now();
            let (p, ids) = health_proxy();
            c.on_connect("c", Arc::new(p), &ids, now).await.unwrap();
            let e = store.get("b", "we-without-auto-registration").unwrap();
            assert_eq!(ann(&e, CONTROLLER).as_deref(), Some("pilot-x"), "{value:?}");
            assert_eq!(ann(&e, CONNECTED_AT), Some(rfc3339_nano(now)), "{value:?}");
        }
    });
}

/// `TestNonAutoregisteredWorkloads_SuitableForHealthChecks_ShouldSupportLifecycle`
/// and `..._ShouldUpdateHealthCondition`.
#[test]
fn non_autoregistered_workloads_lifecycle_and_health() {
    rt().block_on(async {
        let store = setup();
        store.put(manual_entry("true"));
        let mut c1 = Controller::new(store.clone(), settings("pilot-1"));
        let mut c2 = Controller::new(store.clone(), settings("pilot-2"));
        let (p, ids) = health_proxy();
        let p = Arc::new(p);
        let get = || store.get("b", "we-without-auto-registration").unwrap();
        let orig = SystemTime::now();
        // initial connect
        c1.on_connect("o1", p.clone(), &ids, orig).await.unwrap();
        assert_eq!(ann(&get(), CONTROLLER).as_deref(), Some("pilot-1"));
        // healthy / unhealthy
        c1.on_health("o1", true, "").await;
        assert_eq!(health(&store).as_deref(), Some("True"));
        c1.on_health("o1", false, "lol health bad").await;
        assert_eq!(health(&store).as_deref(), Some("False"));
        // reconnect/same instance: disconnect then connect
        c1.on_disconnect("o1", SystemTime::now()).await;
        assert!(ann(&get(), DISCONNECTED_AT).is_some());
        c1.on_connect("o2", p.clone(), &ids, SystemTime::now()).await.unwrap();
        assert!(ann(&get(), CONNECTED_AT).is_some() && ann(&get(), DISCONNECTED_AT).is_none());
        // reconnect/same instance: connect before disconnect
        c1.on_connect("o3", p.clone(), &ids, SystemTime::now()).await.unwrap();
        c1.on_disconnect("o2", SystemTime::now()).await;
        assert_eq!(ann(&get(), CONTROLLER).as_deref(), Some("pilot-1"));
        assert!(ann(&get(), CONNECTED_AT).is_some());
        // reconnect/different instance: disconnect then connect
        c1.on_disconnect("o3", SystemTime::now()).await;
        assert!(ann(&get(), DISCONNECTED_AT).is_some());
        c2.on_connect("o4", p.clone(), &ids, SystemTime::now()).await.unwrap();
        assert_eq!(ann(&get(), CONTROLLER).as_deref(), Some("pilot-2"));
        // reconnect/different instance: connect before disconnect
        let before = SystemTime::now();
        c2.on_connect("o5", p.clone(), &ids, SystemTime::now()).await.unwrap();
        c2.on_disconnect("o4", before).await;
        assert_eq!(ann(&get(), CONTROLLER).as_deref(), Some("pilot-2"));
        assert!(ann(&get(), CONNECTED_AT).is_some());
        // disconnect for longer than the grace period: the condition goes,
        // the entry stays.
        c2.on_health("o5", true, "").await;
        assert_eq!(health(&store).as_deref(), Some("True"));
        c2.on_disconnect("o5", SystemTime::now()).await;
        tokio::time::sleep(GRACE + Duration::from_millis(10)).await;
        c2.tick(Instant::now()).await;
        assert_eq!(health(&store), None, "the Healthy condition is removed");
        assert!(store.get("b", "we-without-auto-registration").is_some(), "the entry stays");
    });
}

#[test]
fn entry_names_as_istiod_forms_them() {
    let name = |ip: &str, network: &str| entry_name(&proxy(ip, "a", "wg-a", network, "sa").0);
    assert_eq!(name("1.2.3.4", "nw1").as_deref(), Some("wg-a-1.2.3.4-nw1"));
    assert_eq!(name("1.2.3.4", "").as_deref(), Some("wg-a-1.2.3.4"));
    assert_eq!(name("fd00::1", "").as_deref(), Some("wg-a-fd00--1"));
    let long = "g".repeat(300);
    let got = entry_name(&proxy("1.2.3.4", "a", &long, "", "sa").0).unwrap();
    assert_eq!(got.len(), 253);
    assert!(got.ends_with("-1.2.3.4"), "the last 253 characters");
}

/// A stream whose registration is refused is not the entry's: its health
/// reports change nothing (istiod ends such a stream), and names that are
/// not Kubernetes names never reach an API path.
#[test]
fn a_refused_stream_cannot_report_for_the_entry() {
    rt().block_on(async {
        let store = setup();
        let mut c = Controller::new(store.clone(), settings("pilot-1"));
        let (vm, ids) = proxy("1.2.3.4", "a", "wg-a", "nw1", "sa-a");
        c.on_connect("vm", Arc::new(vm), &ids, SystemTime::now()).await.unwrap();
        c.on_health("vm", true, "").await;
        let (impostor, other) = proxy("1.2.3.4", "a", "wg-a", "nw1", "other-sa");
        assert!(c.on_connect("impostor", Arc::new(impostor), &other, SystemTime::now()).await.is_err());
        c.on_health("impostor", false, "down").await;
        let e = store.get("a", "wg-a-1.2.3.4-nw1").unwrap();
        assert_eq!(e["status"]["conditions"][0]["status"], "True", "{e:#}");
        // The impostor's end does not mark the VM's entry disconnected.
        c.on_disconnect("impostor", SystemTime::now()).await;
        assert_eq!(ann(&store.get("a", "wg-a-1.2.3.4-nw1").unwrap(), DISCONNECTED_AT), None);
        let (bad, ids) = proxy("1.2.3.5", "a", "../workloadgroups/x", "", "sa-a");
        let err = c.on_connect("bad", Arc::new(bad), &ids, SystemTime::now()).await.unwrap_err();
        assert!(err.contains("is not a valid Kubernetes name"), "{err}");
    });
}

/// Events in bursts (as the controller's loop takes them): a burst's
/// different entries are written together, an entry's in order.
#[test]
fn bursts_of_events_keep_each_entrys_order() {
    use istiod_xds::ads::Lifecycle;
    rt().block_on(async {
        let store = setup();
        let mut c = Controller::new(store.clone(), settings("pilot-1"));
        let mut events = Vec::new();
        let t0 = SystemTime::now();
        for i in 0..50u32 {
            let (p, ids) = proxy(&format!("10.0.0.{i}"), "a", "wg-a", "", "sa-a");
            let class = Arc::new(p);
            events.push(Lifecycle::Connected {
                conn: format!("c{i}"),
                class: class.clone(),
                identities: ids.into(),
                at: t0,
            });
            if i % 2 == 0 {
                // The same entry again in the burst: connected, then gone.
                events.push(Lifecycle::Disconnected {
                    conn: format!("c{i}"),
                    class,
                    at: t0 + Duration::from_millis(1),
                });
            }
        }
        c.on_events(events).await;
        assert_eq!(store.count(), 50);
        for i in 0..50u32 {
            let e = store.get("a", &format!("wg-a-10.0.0.{i}")).unwrap();
            assert_eq!(ann(&e, DISCONNECTED_AT).is_some(), i % 2 == 0, "{i}: {e:#}");
        }
    });
}
