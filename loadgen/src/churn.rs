//! Churn: edits a scenario's config directory while the proxies run, one
//! service file at a time (written aside and renamed into place, so the
//! server never reads half a file), and stamps every change with the
//! instant it was made and what a proxy must see to have converged on it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::mesh::{self, Tweak};
use crate::scenario::{ChurnKind, Scenario};

/// What a proxy must find in a response to have converged on a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The load assignment `resource` holds this many endpoints.
    Endpoints(usize),
    /// Route configuration `resource` routes to `cluster` with `weight`.
    Weight {
        /// The v1 subset cluster.
        cluster: String,
        /// Its weight.
        weight: u32,
    },
}

/// One change to the mesh.
#[derive(Debug, Clone)]
pub struct Change {
    /// Its index in the run, from 0.
    pub id: u32,
    /// When it was made (just before the file was renamed into place).
    pub at: Instant,
    /// Endpoints or config.
    pub kind: ChurnKind,
    /// The service's cluster: a proxy that has it sees the change.
    pub cluster: String,
    /// The xDS resource that carries the change (a load assignment or a
    /// route configuration).
    pub resource: String,
    /// What the resource must say.
    pub expect: Expect,
}

/// The changes of a run, in order, shared with every proxy.
pub type Changes = Arc<Mutex<Vec<Arc<Change>>>>;

/// The cluster name of service `i`, subset `subset` (empty: none).
pub fn cluster(s: &Scenario, i: u32, subset: &str) -> String {
    let (n, name) = mesh::service(s, i);
    format!("outbound|{}|{subset}|{name}.{}.svc.cluster.local", mesh::PORT, mesh::namespace(n))
}

/// Something that changes the mesh the server serves, one change a step.
pub trait Stepper: Send {
    /// Makes the next change and returns it (registered in the run's
    /// changes before it can be seen).
    fn step(&mut self) -> std::io::Result<Arc<Change>>;
}

/// Makes a run's [`Stepper`] once its changes exist.
pub type MakeStepper = Box<dyn FnOnce(Changes) -> Box<dyn Stepper> + Send>;

impl Stepper for Driver {
    fn step(&mut self) -> std::io::Result<Arc<Change>> {
        Driver::step(self)
    }
}

/// Makes changes to the mesh in `dir`, which `mesh::write` wrote.
pub struct Driver {
    s: Scenario,
    dir: PathBuf,
    kind: ChurnKind,
    tweaks: BTreeMap<u32, Tweak>,
    stride: u32,
    next: u32,
    changes: Changes,
}

impl Driver {
    /// A driver of `kind` changes to the mesh in `dir`.
    pub fn new(s: &Scenario, dir: PathBuf, kind: ChurnKind, changes: Changes) -> Driver {
        // Visit the services in a scattered order that reaches them all
        // before one is changed again: a stride coprime with their count.
        let stride = [7919, 7907, 7901].into_iter().find(|p| !s.services.is_multiple_of(*p)).unwrap_or(1);
        Driver { s: s.clone(), dir, kind, tweaks: BTreeMap::new(), stride, next: 0, changes }
    }

    /// Makes the next change: picks a service that has at least two pods,
    /// toggles one of its endpoints or moves its v1 weight, and writes its
    /// file. Returns the change.
    pub fn step(&mut self) -> std::io::Result<Arc<Change>> {
        if self.kind == ChurnKind::Gateway {
            return self.step_gateway();
        }
        let mut i = 0;
        for _ in 0..self.s.services {
            i = ((u64::from(self.next) * u64::from(self.stride)) % u64::from(self.s.services)) as u32;
            self.next += 1;
            if mesh::pods_of(&self.s, i).nth(1).is_some() {
                break;
            }
        }
        let pods = mesh::pods_of(&self.s, i).count();
        let old = self.tweaks.get(&i).copied().unwrap_or_default();
        let id = self.changes.lock().map(|c| c.len() as u32).unwrap_or(0);
        let file = self.dir.join(mesh::service_file(&self.s, i));
        // What is on disk may not be what this driver last wrote (a run
        // before this one on the same directory): a write that leaves the
        // file as it is would change nothing, so take the other tweak.
        let on_disk = std::fs::read(&file).ok();
        let candidates = match self.kind {
            ChurnKind::Eds => {
                let dropped = 1 - old.dropped_endpoints.min(1);
                [Tweak { dropped_endpoints: dropped, ..old }, Tweak { dropped_endpoints: 1 - dropped, ..old }]
            }
            ChurnKind::Config | ChurnKind::Gateway => {
                let mut w = 50 + id % 45;
                if w == old.v1_weight {
                    w += 1;
                }
                [Tweak { v1_weight: w, ..old }, Tweak { v1_weight: if w == 95 { 50 } else { w + 1 }, ..old }]
            }
        };
        let (tweak, yaml) = candidates
            .into_iter()
            .map(|t| (t, mesh::service_yaml(&self.s, i, t)))
            .find(|(_, y)| on_disk.as_deref() != Some(y.as_bytes()))
            .unwrap_or_else(|| (candidates[0], mesh::service_yaml(&self.s, i, candidates[0])));
        let (resource, expect) = match self.kind {
            ChurnKind::Eds => (cluster(&self.s, i, ""), Expect::Endpoints(pods - tweak.dropped_endpoints as usize)),
            ChurnKind::Config | ChurnKind::Gateway => {
                (mesh::PORT.to_string(), Expect::Weight { cluster: cluster(&self.s, i, "v1"), weight: tweak.v1_weight })
            }
        };
        let change = Arc::new(Change {
            id,
            at: Instant::now(),
            kind: self.kind,
            cluster: cluster(&self.s, i, ""),
            resource,
            expect,
        });
        // Registered before the file lands, so that no proxy can see the
        // new state before the change is known.
        if let Ok(mut c) = self.changes.lock() {
            c.push(change.clone());
        }
        let tmp = file.with_extension("yaml.tmp");
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(&tmp, &file)?;
        self.tweaks.insert(i, tweak);
        Ok(change)
    }

    /// A gateway churn step: moves the v1 weight of the next gateway route.
    fn step_gateway(&mut self) -> std::io::Result<Arc<Change>> {
        let routes = self.s.gateway_routes.max(1);
        let k = ((u64::from(self.next) * u64::from(self.stride)) % u64::from(routes)) as u32;
        self.next += 1;
        let id = self.changes.lock().map(|c| c.len() as u32).unwrap_or(0);
        let old = self.tweaks.get(&k).copied().unwrap_or_default();
        let file = self.dir.join(mesh::gateway_route_file(k));
        let on_disk = std::fs::read(&file).ok();
        let mut w = 50 + id % 45;
        if w == old.v1_weight {
            w += 1;
        }
        let yaml = |w| mesh::gateway_route_yaml(&self.s, k, w);
        if on_disk.as_deref() == Some(yaml(w).as_bytes()) {
            w = if w == 95 { 50 } else { w + 1 };
        }
        let svc = mesh::gateway_route_service(&self.s, k);
        let change = Arc::new(Change {
            id,
            at: Instant::now(),
            kind: self.kind,
            cluster: cluster(&self.s, svc, ""),
            resource: "http.8080".into(),
            expect: Expect::Weight { cluster: cluster(&self.s, svc, "v1"), weight: w },
        });
        if let Ok(mut c) = self.changes.lock() {
            c.push(change.clone());
        }
        let tmp = file.with_extension("yaml.tmp");
        std::fs::write(&tmp, yaml(w))?;
        std::fs::rename(&tmp, &file)?;
        self.tweaks.insert(k, Tweak { v1_weight: w, ..old });
        Ok(change)
    }
}
