//! Upstream's `pilot/pkg/controllers/ipallocate/ipallocate_test.go`
//! (`TestIPAllocate`, `TestIPAllocateWithEnvCIDR`) as a sequence of
//! states of the ServiceEntries, each run to a fixed point as the
//! controller's queue runs; the expected addresses are upstream's.

use super::*;

const V4: &str = "240.240.0.";
const V6: &str = "2001:2::";

fn v4(i: u32) -> String {
    format!("{V4}{i}")
}
fn v6(i: u32) -> String {
    format!("{V6}{i:x}")
}

fn se(ns: &str, name: &str, hosts: &[&str], resolution: networking::Resolution) -> Entry {
    Entry {
        namespace: ns.into(),
        name: name.into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        resolution,
        ..Default::default()
    }
}

/// The API server's entries and the controller, run until it writes
/// nothing more.
struct Rig {
    entries: Vec<Entry>,
    alloc: Allocator,
}

impl Rig {
    fn new(v4_cidr: &str, v6_cidr: &str, v4_prefix: &str, v6_prefix: &str) -> Rig {
        let mut pre = se("default", "pre-existing", &["test.testing.io"], networking::Resolution::Dns);
        pre.allocated = vec![
            ("test.testing.io".into(), format!("{v4_prefix}1")),
            ("test.testing.io".into(), format!("{v6_prefix}1")),
        ];
        let mut r = Rig { entries: vec![pre], alloc: Allocator::new(v4_cidr, v6_cidr).unwrap() };
        r.settle();
        r
    }

    fn settle(&mut self) {
        for _ in 0..10 {
            self.entries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let writes = self.alloc.plan(&self.entries);
            if writes.is_empty() {
                return;
            }
            for ((ns, name), addrs) in writes {
                let e = self.entries.iter_mut().find(|e| e.namespace == ns && e.name == name).unwrap();
                e.allocated = addrs;
            }
        }
        panic!("the controller does not settle");
    }

    fn add(&mut self, e: Entry) {
        self.entries.push(e);
        self.settle();
    }

    fn get(&mut self, name: &str) -> &mut Entry {
        self.entries.iter_mut().find(|e| e.name == name).unwrap()
    }

    fn addrs(&self, name: &str) -> Vec<String> {
        self.entries.iter().find(|e| e.name == name).unwrap().allocated.iter().map(|(_, a)| a.clone()).collect()
    }

    fn by_host(&self, name: &str) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (h, a) in &self.entries.iter().find(|e| e.name == name).unwrap().allocated {
            out.entry(h.clone()).or_default().push(a.clone());
        }
        out
    }

    fn update(&mut self, name: &str, f: impl FnOnce(&mut Entry)) {
        f(self.get(name));
        self.settle();
    }
}

fn map(rows: &[(&str, &[String])]) -> BTreeMap<String, Vec<String>> {
    rows.iter().map(|(h, a)| (h.to_string(), a.to_vec())).collect()
}

#[test]
fn upstream_ip_allocate() {
    use networking::Resolution::{Dns, DynamicDns};
    let mut rig = Rig::new("240.240.0.0/16", "2001:2::/48", V4, V6);
    let mut with_v4 = se("boop", "with-v4-address", &["wa-v4.boop.testing.io"], Dns);
    with_v4.addresses = vec!["1.2.3.4".into()];
    rig.add(with_v4);
    let mut with_v6 = se("boop", "with-v6-address", &["wa-v6.boop.testing.io"], Dns);
    with_v6.addresses = vec!["1:2::3::4".into()];
    rig.add(with_v6);
    let mut opt_out = se("boop", "opt-out", &["nope.boop.testing.io"], Dns);
    opt_out.opted_out = true;
    rig.add(opt_out);
    let mut existing = se("boop", "with-existing-status", &["with-existing-status.boop.testing.io"], Dns);
    existing.created = "2026-12-04T10:00:00Z".into();
    rig.add(existing);
    // Allocation worked (the warmed pre-existing .1 skipped); the others got none.
    assert_eq!(rig.addrs("with-existing-status"), [v4(2), v6(2)]);
    assert!(rig.addrs("opt-out").is_empty(), "opted out");
    assert!(rig.addrs("with-v4-address").is_empty(), "the user supplied their own");
    assert!(rig.addrs("with-v6-address").is_empty(), "the user supplied their own");

    // A user-assigned conflict: the auto-assigned side moves.
    let mut user = se("boop", "user-assigned conflict", &["in-conflict.boop.testing.io"], Dns);
    user.addresses = vec![v4(2)];
    rig.add(user);
    assert_eq!(rig.addrs("with-existing-status"), [v4(3), v6(3)]);
    assert_eq!(rig.get("user-assigned conflict").addresses, [v4(2)], "the spec is not touched");

    // An auto-assigned conflict: the newer entry moves.
    let mut conflict = se("boop", "status-conflict", &["status-conflict.boop.testing.io"], Dns);
    conflict.created = "2026-12-04T11:00:00Z".into();
    conflict.allocated =
        rig.addrs("with-existing-status").into_iter().map(|a| ("status-conflict.boop.testing.io".into(), a)).collect();
    rig.add(conflict);
    assert_eq!(rig.addrs("status-conflict"), [v4(4), v6(4)]);
    assert_eq!(rig.addrs("with-existing-status"), [v4(3), v6(3)], "the elder keeps its addresses");

    // A host added: the next addresses.
    rig.update("pre-existing", |e| e.hosts.push("added.testing.io".into()));
    let added5 = map(&[("test.testing.io", &[v4(1), v6(1)]), ("added.testing.io", &[v4(5), v6(5)])]);
    assert_eq!(rig.by_host("pre-existing"), added5);
    // A wildcard host gets none.
    rig.update("pre-existing", |e| e.hosts.push("*.bad-wildcard.testing.io".into()));
    assert_eq!(rig.by_host("pre-existing"), added5);
    // Back to one host.
    rig.update("pre-existing", |e| e.hosts = vec!["test.testing.io".into()]);
    assert_eq!(rig.addrs("pre-existing").len(), 2);
    // Many duplicates of a host: one allocation.
    rig.update("pre-existing", |e| e.hosts.extend(["added.testing.io"; 4].map(String::from)));
    assert_eq!(
        rig.by_host("pre-existing"),
        map(&[("test.testing.io", &[v4(1), v6(1)]), ("added.testing.io", &[v4(6), v6(6)])])
    );
    // A host removed.
    rig.update("pre-existing", |e| e.hosts = vec!["added.testing.io".into()]);
    assert_eq!(rig.by_host("pre-existing"), map(&[("added.testing.io", &[v4(6), v6(6)])]));
    // A big add and remove.
    rig.update("pre-existing", |e| {
        e.hosts = ["seven.testing.io", "eight.testing.io", "nine.testing.io", "A.testing.io"].map(String::from).to_vec()
    });
    assert_eq!(
        rig.by_host("pre-existing"),
        map(&[
            ("seven.testing.io", &[v4(7), v6(7)]),
            ("eight.testing.io", &[v4(8), v6(8)]),
            ("nine.testing.io", &[v4(9), v6(9)]),
            ("A.testing.io", &[v4(10), v6(10)]),
        ])
    );
    // A wildcard host with DYNAMIC_DNS gets addresses.
    rig.update("pre-existing", |e| {
        e.hosts = vec!["*.wildcard.testing.io".into()];
        e.resolution = DynamicDns;
    });
    assert_eq!(rig.by_host("pre-existing"), map(&[("*.wildcard.testing.io", &[v4(11), v6(11)])]));
    // No hosts, none.
    rig.update("pre-existing", |e| {
        e.hosts = vec![];
        e.resolution = Dns;
    });
    assert!(rig.addrs("pre-existing").is_empty());
}

#[test]
fn upstream_ip_allocate_with_env_cidr() {
    let mut rig = Rig::new("240.240.2.0/24", "2001:2:0:2::/64", "240.240.2.", "2001:2:0:2::");
    assert_eq!(rig.addrs("pre-existing").len(), 2);
    rig.update("pre-existing", |e| e.hosts.push("added.testing.io".into()));
    assert_eq!(
        rig.by_host("pre-existing"),
        map(&[
            ("test.testing.io", &["240.240.2.1".to_owned(), "2001:2:0:2::1".to_owned()]),
            ("added.testing.io", &["240.240.2.2".to_owned(), "2001:2:0:2::2".to_owned()]),
        ]),
        "the next address in the range"
    );
}

/// Beyond upstream: stale addresses are cleared when the entry no longer
/// takes them, and a restarted controller (a new term) keeps every
/// address as it was.
#[test]
fn stale_addresses_are_cleared_and_a_new_term_keeps_the_rest() {
    use networking::Resolution::{Dns, None as NoneRes};
    let mut rig = Rig::new("240.240.0.0/16", "2001:2::/48", V4, V6);
    rig.add(se("ns", "a", &["a.example"], Dns));
    rig.add(se("ns", "b", &["b.example"], Dns));
    assert_eq!(rig.addrs("a"), [v4(2), v6(2)]);
    assert_eq!(rig.addrs("b"), [v4(3), v6(3)]);
    rig.update("a", |e| e.resolution = NoneRes);
    assert!(rig.addrs("a").is_empty(), "resolution NONE takes none");
    let before: Vec<Vec<String>> = ["pre-existing", "b"].iter().map(|n| rig.addrs(n)).collect();
    rig.alloc = Allocator::new("240.240.0.0/16", "2001:2::/48").unwrap();
    rig.settle();
    let after: Vec<Vec<String>> = ["pre-existing", "b"].iter().map(|n| rig.addrs(n)).collect();
    assert_eq!(before, after, "stable across restarts");
    rig.add(se("ns", "c", &["c.example"], Dns));
    assert_eq!(rig.addrs("c"), [v4(2), v6(2)], "the cleared addresses are free again");
}
