//! istiod's IP auto-allocation controller
//! (`pilot/pkg/controllers/ipallocate`, `PILOT_ENABLE_IP_AUTOALLOCATE`):
//! the replica holding the `istio-ip-autoallocate` lease gives every
//! ServiceEntry host without addresses (resolution not NONE, not opted
//! out by `networking.istio.io/enable-autoallocate-ip: "false"`, a
//! wildcard only with DYNAMIC_DNS) an IPv4 and an IPv6 address from
//! `PILOT_IP_AUTOALLOCATE_IPV4_PREFIX` (240.240.0.0/16) and
//! `PILOT_IP_AUTOALLOCATE_IPV6_PREFIX` (2001:2::/48), written to the
//! entry's `status.addresses` (`{host, value}`): they survive restarts,
//! as the next leader first marks every address it finds as used. An
//! address two entries claim goes to the one that holds it in its spec,
//! else the older; the other is given new ones. Proxies that capture DNS
//! resolve the host to them (name tables) and have listeners on them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value as Json, json};
use tokio::sync::watch;

use istiod_config::istio::{IstioSpec, networking};
use istiod_kubewatch::kapi::{Api, Write};
use istiod_kubewatch::leader::{Elector, Leadership, Lock, Timings};

/// istiod's lease.
pub(super) const ELECTION: &str = "istio-ip-autoallocate";

/// What is read of a ServiceEntry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Entry {
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// `creationTimestamp` (RFC 3339: ordered as text).
    pub(crate) created: String,
    pub(crate) hosts: Vec<String>,
    pub(crate) addresses: Vec<String>,
    pub(crate) resolution: networking::Resolution,
    /// `networking.istio.io/enable-autoallocate-ip: "false"`.
    pub(crate) opted_out: bool,
    /// `status.addresses`: `(host, address)`.
    pub(crate) allocated: Vec<(String, String)>,
}

impl Entry {
    fn owner(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    /// istiod's `ShouldV2AutoAllocateIP` (the feature being on).
    fn allocates(&self) -> bool {
        self.resolution != networking::Resolution::None && !self.opted_out && self.addresses.is_empty()
    }

    /// istiod's `keepHost`: a wildcard host only with DYNAMIC_DNS.
    fn keeps(&self, host: &str) -> bool {
        !host.starts_with('*') || self.resolution == networking::Resolution::DynamicDns
    }

    fn auto(&self) -> Vec<IpAddr> {
        self.allocated.iter().filter_map(|(_, a)| a.parse().ok()).collect()
    }

    fn user(&self) -> Vec<IpAddr> {
        self.addresses.iter().filter_map(|a| a.parse().ok()).collect()
    }
}

/// The ServiceEntries of `objects`, by namespace and name.
pub(crate) fn entries(objects: &istiod_config::objects::Objects) -> Vec<Entry> {
    let mut out: Vec<Entry> = objects
        .istio
        .iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::ServiceEntry(se) => Some(Entry {
                namespace: o.meta.ns().to_owned(),
                name: o.meta.name.clone(),
                created: o.meta.creation_timestamp.clone().unwrap_or_default(),
                hosts: se.hosts.clone(),
                addresses: se.addresses.clone(),
                resolution: se.resolution,
                opted_out: o
                    .meta
                    .labels
                    .get("networking.istio.io/enable-autoallocate-ip")
                    .is_some_and(|v| v.eq_ignore_ascii_case("false")),
                allocated: se.allocated.clone(),
            }),
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// The addresses of one prefix in use, by owner (istiod's `prefixUse`).
#[derive(Debug, Clone)]
struct Prefix {
    base: u128,
    bits: u32,
    v6: bool,
    used: HashMap<u128, (String, String)>,
    next: u128,
}

impl Prefix {
    fn new(cidr: &str) -> Option<Prefix> {
        let (ip, bits) = cidr.split_once('/')?;
        let ip: IpAddr = ip.parse().ok()?;
        let bits: u32 = bits.parse().ok()?;
        let (v, width) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        };
        if bits > width {
            return None;
        }
        let host_bits = width - bits;
        let mask = if host_bits == 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
        let base = v & !mask;
        Some(Prefix { base, bits: host_bits, v6: width == 128, used: HashMap::new(), next: base + 1 })
    }

    fn contains(&self, n: u128) -> bool {
        let size = if self.bits == 128 { u128::MAX } else { 1u128 << self.bits };
        n >= self.base && n - self.base < size
    }

    fn value(&self, ip: IpAddr) -> Option<u128> {
        match (ip, self.v6) {
            (IpAddr::V4(a), false) => Some(u128::from(u32::from(a))),
            (IpAddr::V6(a), true) => match a.to_ipv4_mapped() {
                Some(_) => None,
                None => Some(u128::from(a)),
            },
            _ => None,
        }
    }

    fn ip(&self, n: u128) -> IpAddr {
        if self.v6 { IpAddr::V6(n.into()) } else { IpAddr::V4((n as u32).into()) }
    }

    /// istiod's `allocateNext`.
    fn allocate(&mut self, owner: &(String, String)) -> Option<IpAddr> {
        let first = self.base + 1;
        let mut n = self.next;
        let mut looped = false;
        if !self.contains(n) {
            looped = true;
            n = first;
        }
        while self.used.contains_key(&n) {
            n = n.wrapping_add(1);
            if !self.contains(n) {
                if looped {
                    return None;
                }
                looped = true;
                n = first;
            }
        }
        self.used.insert(n, owner.clone());
        self.next = n.wrapping_add(1);
        Some(self.ip(n))
    }

    /// istiod's `markUsed`: (in use before, by `owner`).
    fn mark(&mut self, n: u128, owner: &(String, String)) -> (bool, bool) {
        if !self.contains(n) {
            return (false, false);
        }
        match self.used.get(&n) {
            Some(o) => (true, o == owner),
            None => {
                self.used.insert(n, owner.clone());
                (false, false)
            }
        }
    }

    /// Frees every address of owners not in `live`.
    fn release_gone(&mut self, live: &BTreeSet<(String, String)>) {
        let gone: Vec<(u128, (String, String))> =
            self.used.iter().filter(|(_, o)| !live.contains(*o)).map(|(n, o)| (*n, o.clone())).collect();
        for (n, o) in gone {
            self.free(n, &o);
        }
    }

    /// istiod's `free`.
    fn free(&mut self, n: u128, owner: &(String, String)) {
        if self.used.get(&n) == Some(owner) {
            self.used.remove(&n);
            if !self.contains(self.next) || n < self.next {
                self.next = n;
            }
        }
    }
}

/// The allocator of one leader's term.
#[derive(Debug, Clone)]
pub(crate) struct Allocator {
    v4: Prefix,
    v6: Prefix,
    warmed: bool,
}

/// A status to write: the entry and its `status.addresses`.
pub(crate) type StatusWrite = ((String, String), Vec<(String, String)>);

impl Allocator {
    /// Over the two prefixes (`None` when one does not parse).
    pub(crate) fn new(v4: &str, v6: &str) -> Option<Allocator> {
        let (v4, v6) = (Prefix::new(v4)?, Prefix::new(v6)?);
        (!v4.v6 && v6.v6).then_some(Allocator { v4, v6, warmed: false })
    }

    fn prefix(&mut self, ip: IpAddr) -> Option<(&mut Prefix, u128)> {
        // An IPv4-mapped IPv6 address is its IPv4 one (Go's `Unmap`).
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let p = if ip.is_ipv4() { &mut self.v4 } else { &mut self.v6 };
        let n = p.value(ip)?;
        Some((p, n))
    }

    /// istiod's `markUsedOrQueueConflict`: the addresses another owner
    /// holds.
    fn mark(&mut self, addrs: &[IpAddr], owner: &(String, String)) -> Vec<IpAddr> {
        let mut conflicts = Vec::new();
        for &a in addrs {
            if let Some((p, n)) = self.prefix(a)
                && let (true, false) = p.mark(n, owner)
            {
                conflicts.push(a);
            }
        }
        conflicts
    }

    fn free(&mut self, addrs: &[IpAddr], owner: &(String, String)) {
        for &a in addrs {
            if let Some((p, n)) = self.prefix(a) {
                p.free(n, owner);
            }
        }
    }

    fn next_pair(&mut self, owner: &(String, String)) -> Vec<IpAddr> {
        let mut out = Vec::new();
        match self.v4.allocate(owner) {
            Some(a) => out.push(a),
            None => tracing::error!(target: "ip-autoallocate", "failed to allocate v4 address"),
        }
        match self.v6.allocate(owner) {
            Some(a) => out.push(a),
            None => tracing::error!(target: "ip-autoallocate", "failed to allocate v6 address"),
        }
        out
    }

    /// The status writes that bring `entries` (as the API server holds
    /// them) to what istiod's controller makes of them: allocations for
    /// hosts without, stale ones cleared, conflicts resolved.
    pub(crate) fn plan(&mut self, entries: &[Entry]) -> Vec<StatusWrite> {
        // Entries deleted: their addresses may be given again.
        let live: BTreeSet<(String, String)> = entries.iter().map(Entry::owner).collect();
        self.v4.release_gone(&live);
        self.v6.release_gone(&live);
        let mut conflicts: Vec<((String, String), Vec<IpAddr>)> = Vec::new();
        if !self.warmed {
            // Every address in use first: allocating before would hand
            // out addresses entries already hold.
            for e in entries {
                let owner = e.owner();
                let c = self.mark(&e.user(), &owner);
                if !c.is_empty() {
                    conflicts.push((owner.clone(), c));
                }
                let c = self.mark(&e.auto(), &owner);
                if !c.is_empty() {
                    conflicts.push((owner, c));
                }
            }
            self.warmed = true;
        }
        let mut writes: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
        for e in entries {
            let owner = e.owner();
            if !e.allocates() {
                let c = self.mark(&e.user(), &owner);
                if !c.is_empty() {
                    conflicts.push((owner.clone(), c));
                }
                if !e.allocated.is_empty() {
                    tracing::debug!(target: "ip-autoallocate", "allocation no longer required for {}/{}, clearing stale addresses", e.namespace, e.name);
                    writes.insert(owner.clone(), Vec::new());
                    self.free(&e.auto(), &owner);
                }
                continue;
            }
            let c = self.mark(&e.auto(), &owner);
            if !c.is_empty() {
                conflicts.push((owner.clone(), c));
            }
            if let Some(w) = self.assign(e, false) {
                writes.insert(owner, w);
            }
        }
        // Each contested address once (warming and the pass both find it),
        // and an entry moved once.
        let mut seen: BTreeSet<IpAddr> = BTreeSet::new();
        for (owner, addrs) in conflicts {
            let fresh: Vec<IpAddr> = addrs.into_iter().filter(|a| seen.insert(*a)).collect();
            if fresh.is_empty() {
                continue;
            }
            for (o, w) in self.resolve(entries, &owner, &fresh) {
                writes.insert(o, w);
            }
        }
        writes.into_iter().collect()
    }

    /// istiod's `statusPatchForAddresses`: the entry's new addresses, or
    /// `None` when its hosts all have theirs (and none is forced anew).
    fn assign(&mut self, e: &Entry, forced: bool) -> Option<Vec<(String, String)>> {
        let mut existing: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (h, a) in &e.allocated {
            if a.parse::<IpAddr>().is_ok() {
                existing.entry(h.as_str()).or_default().push(a.as_str());
            }
        }
        let in_spec: BTreeSet<&str> = e.hosts.iter().filter(|h| e.keeps(h)).map(String::as_str).collect();
        let with: BTreeSet<&str> = existing.keys().copied().collect();
        if in_spec == with && !forced {
            return None;
        }
        let owner = e.owner();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for host in e.hosts.iter().filter(|h| e.keeps(h)) {
            if !seen.insert(host.as_str()) {
                continue;
            }
            match existing.get(host.as_str()).filter(|_| !forced) {
                Some(addrs) => out.extend(addrs.iter().map(|a| (host.clone(), a.to_string()))),
                None => out.extend(self.next_pair(&owner).into_iter().map(|a| (host.clone(), a.to_string()))),
            }
        }
        Some(out)
    }

    /// istiod's `resolveConflict`: the entries holding `addrs`; the one
    /// that names them in its spec keeps them, else the oldest; the others
    /// are given new ones.
    fn resolve(&mut self, entries: &[Entry], _owner: &(String, String), addrs: &[IpAddr]) -> Vec<StatusWrite> {
        let holding: Vec<&Entry> =
            entries.iter().filter(|e| addrs.iter().any(|a| e.auto().contains(a) || e.user().contains(a))).collect();
        let mut auto: Vec<&Entry> =
            holding.iter().copied().filter(|e| addrs.iter().any(|a| e.auto().contains(a))).collect();
        let user = holding.iter().any(|e| addrs.iter().any(|a| e.user().contains(a)));
        auto.sort_by(|a, b| a.created.cmp(&b.created));
        auto.dedup_by(|a, b| a.owner() == b.owner());
        let start = if user { 0 } else { 1 };
        let mut out = Vec::new();
        for e in auto.into_iter().skip(start) {
            tracing::warn!(target: "ip-autoallocate", "reassigned {}/{} due to IP Address conflict", e.namespace, e.name);
            if let Some(w) = self.assign(e, true) {
                out.push((e.owner(), w));
            }
        }
        out
    }
}

/// The controller's settings.
pub(crate) struct Context {
    pub(crate) api: Api,
    pub(crate) leadership: Rc<Leadership>,
    pub(crate) v4: String,
    pub(crate) v6: String,
}

/// Runs the controller while this replica leads, writing what
/// [`Allocator::plan`] says as the ServiceEntries change.
pub(crate) async fn run(cx: Context, mut desired: watch::Receiver<Arc<Vec<Entry>>>) {
    let timings = Timings::istiod();
    // istiod's `NewLeaderElection`: not per revision, a ConfigMap lock.
    let lease = ELECTION;
    let mut elector = Elector::new(cx.api.clone(), lease, Lock::ConfigMap, &cx.leadership, timings);
    let mut allocator: Option<Allocator> = None;
    // Writes made and not yet seen in what the source lists: planned with
    // them in place (a stale listing must not allocate twice). Kept across
    // a new warming; forgotten with the entry, or with the term.
    let mut written: HashMap<(String, String), Vec<(String, String)>> = HashMap::new();
    loop {
        let (leading, changed) = elector.lead_paced().await;
        if changed {
            tracing::info!(target: "ip-autoallocate", lease, leading, "leader election for IP auto-allocation");
            allocator = None;
            written.clear();
        }
        if leading && allocator.is_none() {
            allocator = Allocator::new(&cx.v4, &cx.v6);
            if allocator.is_none() {
                tracing::error!(target: "ip-autoallocate", v4 = %cx.v4, v6 = %cx.v6, "the auto-allocation prefixes do not parse; nothing is allocated");
            }
        }
        if let Some(alloc) = allocator.as_mut().filter(|_| leading && elector.still_leading()) {
            let mut entries = (**desired.borrow_and_update()).clone();
            let live: BTreeSet<(String, String)> = entries.iter().map(Entry::owner).collect();
            written.retain(|o, _| live.contains(o));
            for e in &mut entries {
                if let Some(w) = written.get(&e.owner()) {
                    if *w == e.allocated {
                        written.remove(&e.owner());
                    } else {
                        e.allocated.clone_from(w);
                    }
                }
            }
            let mut failed = false;
            for (owner, addresses) in alloc.plan(&entries) {
                match write_status(&cx.api, &owner, &addresses).await {
                    Ok(true) => {
                        written.insert(owner, addresses);
                    }
                    Ok(false) => {} // gone meanwhile
                    Err(e) => {
                        tracing::warn!(target: "ip-autoallocate", entry = %format!("{}/{}", owner.0, owner.1), "cannot write the allocated addresses: {e}");
                        failed = true;
                        break;
                    }
                }
            }
            if failed {
                // Planned again from what entries hold, and what was
                // written, next time.
                allocator = None;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            r = desired.changed() => if r.is_err() { return },
        }
    }
}

/// Replaces the entry's `status.addresses`, keeping the rest of its status.
/// Whether it wrote (`false`: the entry is gone).
async fn write_status(
    api: &Api,
    (ns, name): &(String, String),
    addresses: &[(String, String)],
) -> Result<bool, String> {
    let path = format!("/apis/networking.istio.io/v1/namespaces/{ns}/serviceentries/{name}");
    let Some(mut se) = api.get(&path).await? else { return Ok(false) };
    if !se["status"].is_object() {
        se["status"] = json!({});
    }
    se["status"]["addresses"] = Json::Array(addresses.iter().map(|(h, v)| json!({"host": h, "value": v})).collect());
    match api.replace(&format!("{path}/status"), &se).await? {
        Write::Done(_) => Ok(true),
        Write::Conflict => Err("the ServiceEntry changed meanwhile".into()),
    }
}

#[cfg(test)]
mod tests;
