//! The control thread (tokio, current-thread): it owns the config store,
//! debounces changes, builds snapshots and publishes them with their delta
//! to every serving core; it also serves the debug and monitoring HTTP
//! endpoints, answering per-proxy questions by asking the cores.

pub mod ctrlz;
pub mod debounce;
pub mod http;
pub mod pprof;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use istiod_xds::ads::{Kind, Publisher, SimpleModel, Snapshot};
use tokio::sync::mpsc;

use debounce::{Debouncer, Decision};
use istiod_mesh::generator::MeshInput;
use istiod_mesh::translate::Change;

/// What a source hands the store.
#[derive(Default)]
pub struct Input {
    /// Shared resources that changed.
    pub changes: Vec<Change>,
    /// The translation input for per-class generation, when it changed.
    pub mesh: Option<Arc<MeshInput>>,
    /// Per-class resources whose inputs changed (they are generated on the
    /// cores, so only their names are known here).
    pub touched: Vec<(Kind, Arc<str>)>,
    /// Why (istiod's push trigger reasons: `endpoint`, `service`,
    /// `config`, `secret`, `namespace`, ...) with event counts; the cores
    /// count them in `pilot_push_triggers` for each proxy they push.
    pub reasons: istiod_xds_api::Reasons,
    /// Push everything to every proxy now (`/debug/adsz?push=true`,
    /// istiod's `AdsPushAll`).
    pub full: bool,
}

/// The control thread's metrics, with istiod's names and buckets
/// (`pilot/pkg/xds/monitoring.go`).
pub mod metrics {
    use istiod_xds::metrics::Histogram;

    /// From the first change of a publish reaching the debouncer to the
    /// publish (`pilot_debounce_time`; istiod's also covers building the
    /// push context, which here happens before, in
    /// `pilot_pushcontext_init_seconds`).
    pub static DEBOUNCE_TIME: Histogram = Histogram::new(&[0.01, 0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0]);
    /// Building the model and translation of a change
    /// (`pilot_pushcontext_init_seconds`).
    pub static PUSHCONTEXT_INIT: Histogram = Histogram::new(&[0.01, 0.1, 0.5, 1.0, 3.0, 5.0]);

    /// Updates received, by istiod's kind (`pilot_inbound_updates{type}`:
    /// `config`, `eds`, `svc`, `svcdelete`).
    pub static INBOUND_UPDATES: [std::sync::atomic::AtomicU64; 4] = [const { std::sync::atomic::AtomicU64::new(0) }; 4];
    /// The labels of [`INBOUND_UPDATES`].
    pub const INBOUND_KINDS: [&str; 4] = ["config", "eds", "svc", "svcdelete"];

    /// Counts an update of `kind` (one of [`INBOUND_KINDS`]).
    pub fn inbound_update(kind: &str) {
        if let Some(i) = INBOUND_KINDS.iter().position(|k| *k == kind) {
            INBOUND_UPDATES[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Adds the push context's counts of model `m` (its status gauges are
    /// the debug handlers', `discovery/debugz.rs` `PROXY_STATUS`).
    pub fn collect_mesh(m: &istiod_mesh::model::MeshStats, out: &mut istiod_xds::metrics::Exposition) {
        for (name, help, v) in [
            ("pilot_services", "Total services known to pilot.", m.services),
            ("pilot_virt_services", "Total virtual services known to pilot.", m.virtual_services),
        ] {
            out.gauge(name, help, [(vec![], v as f64)]);
        }
    }

    /// Counts, as events, what the generators noted since the last
    /// scrape: Gateways strict merging left out as routers' resources were
    /// generated (istiod's `RecordRejectedConfig`). Before the events are
    /// collected.
    pub fn count_noted() {
        for name in istiod_mesh::counters::take_rejected_gateways() {
            istiod_xds::metrics::count_event(
                "pilot_total_rejected_configs",
                vec![("type", "gateway".to_owned()), ("name", name)],
            );
        }
    }

    /// Adds the control thread's series.
    pub fn collect(out: &mut istiod_xds::metrics::Exposition) {
        out.counter(
            "pilot_inbound_updates",
            "Total number of updates received by pilot.",
            INBOUND_KINDS.iter().zip(&INBOUND_UPDATES).map(|(k, n)| {
                (istiod_xds::metrics::label("type", *k), n.load(std::sync::atomic::Ordering::Relaxed) as f64)
            }),
        );
        for (name, help, events) in [
            ("pilot_k8s_cfg_events", "Events from k8s config.", istiod_kubewatch::events::config()),
            ("pilot_k8s_reg_events", "Events from k8s registry.", istiod_kubewatch::events::registry()),
        ] {
            out.counter(
                name,
                help,
                events.into_iter().map(|(t, e, n)| (vec![("type", t.to_owned()), ("event", e.to_owned())], n as f64)),
            );
        }
        out.counter(
            "controller_sync_errors_total",
            "Total number of errorMetric syncing controllers.",
            istiod_kubewatch::events::sync_errors()
                .into_iter()
                .map(|(c, n)| (istiod_xds::metrics::label("cluster", c), n as f64)),
        );
        let sds = istiod_mesh::counters::sds_errors();
        if sds > 0 {
            out.counter(
                "pilot_sds_certificate_errors_total",
                "Total number of failures to fetch SDS key and certificate.",
                [(vec![], sds as f64)],
            );
        }
        out.counter(
            "provider_lookup_cluster_failures",
            "Number of times a cluster lookup failed",
            istiod_mesh::counters::provider_lookup_failures()
                .into_iter()
                .map(|(t, n)| (istiod_xds::metrics::label("type", t), n as f64)),
        );
        out.counter(
            "pilot_k8s_proxies_with_no_service_targets",
            "Number of proxies that do not have any corresponding service targets.",
            istiod_mesh::counters::no_service_targets_counted()
                .into_iter()
                .map(|(r, n)| (istiod_xds::metrics::label("reason", r), n as f64)),
        );
        // istiod's gauge, when PILOT_ENVOY_FILTER_STATS is on.
        let status = istiod_envoyfilter::status::collect();
        if !status.is_empty() {
            out.gauge(
                "pilot_envoy_filter_status",
                "Status of Envoy filters whether it was applied or errored.",
                status.into_iter().map(|(name, patch, result, v)| {
                    let mut labels = Vec::new();
                    if let Some(n) = name {
                        labels.push(("name", n));
                    }
                    labels.push(("patch", patch.to_owned()));
                    labels.push(("result", result.to_owned()));
                    (labels, v)
                }),
            );
        }
        out.histogram(
            "pilot_debounce_time",
            "Delay in seconds between the first config enters debouncing and the merged push request is pushed into the push queue (includes pushcontext_init_seconds).",
            [(vec![], &DEBOUNCE_TIME)],
        );
        out.histogram(
            "pilot_pushcontext_init_seconds",
            "Total time in seconds Pilot takes to init pushContext.",
            [(vec![], &PUSHCONTEXT_INIT)],
        );
    }
}

impl From<Vec<Change>> for Input {
    fn from(changes: Vec<Change>) -> Self {
        Input { changes, ..Input::default() }
    }
}

/// The config store and publisher.
pub struct Control {
    publisher: Publisher<MeshInput>,
    model: SimpleModel,
    version: u64,
    debouncer: Debouncer,
    pending: Vec<Change>,
    pending_touched: Vec<(Kind, Arc<str>)>,
    mesh: Option<Arc<MeshInput>>,
    /// When the oldest unpublished change arrived (convergence starts here).
    pending_since: Option<Instant>,
    /// The reasons of the unpublished changes.
    pending_reasons: istiod_xds_api::Reasons,
    /// The next publish pushes everything.
    pending_full: bool,
    ready: Arc<AtomicBool>,
}

impl Control {
    /// A store that publishes through `publisher`.
    pub fn new(publisher: Publisher<MeshInput>, debouncer: Debouncer, ready: Arc<AtomicBool>) -> Self {
        Self {
            publisher,
            model: SimpleModel::default(),
            version: 0,
            debouncer,
            pending: Vec::new(),
            pending_touched: Vec::new(),
            mesh: None,
            pending_since: None,
            pending_reasons: Default::default(),
            pending_full: false,
            ready,
        }
    }

    /// The current model.
    pub fn model(&self) -> &SimpleModel {
        &self.model
    }

    /// Takes changes seen at `now`; returns when to look again.
    pub fn submit(&mut self, input: impl Into<Input>, now: Instant) -> Decision {
        let Input { changes, mesh, touched, reasons, full } = input.into();
        if let Some(m) = mesh {
            self.mesh = Some(m);
        }
        if full && self.version == 0 {
            // Nothing published yet: a forced push must not publish an
            // empty model (and make the server ready) before the sources'.
            return self.tick(now);
        }
        if full {
            // Forced: no debounce, every proxy, every type.
            self.pending_reasons.merge(&reasons);
            self.pending.extend(changes);
            self.pending_touched.extend(touched);
            self.pending_full = true;
            self.publish();
            return Decision::Idle;
        }
        // The very first input is published even when empty: it makes the
        // server ready.
        if changes.is_empty() && touched.is_empty() && self.version > 0 {
            // Nothing new; but a publish that fell due meanwhile happens
            // now (the caller only waits when told to).
            return self.tick(now);
        }
        // Counted only for what is pushed (an input that changes nothing
        // triggers no push).
        self.pending_reasons.merge(&reasons);
        let endpoints_only = touched.is_empty() && changes.iter().all(|(k, _, _)| *k == Kind::Endpoint);
        self.pending.extend(changes);
        self.pending_touched.extend(touched);
        self.pending_since.get_or_insert(now);
        match self.debouncer.on_change(now, endpoints_only) {
            Decision::Publish => {
                self.publish();
                Decision::Idle
            }
            d => d,
        }
    }

    /// Runs a due publish.
    pub fn tick(&mut self, now: Instant) -> Decision {
        match self.debouncer.poll(now) {
            Decision::Publish => {
                self.publish();
                Decision::Idle
            }
            d => d,
        }
    }

    /// Publishes everything pending as one snapshot.
    pub fn publish(&mut self) {
        self.debouncer.published();
        let changes = std::mem::take(&mut self.pending);
        let changed_at = self.pending_since.take().unwrap_or_else(Instant::now);
        metrics::DEBOUNCE_TIME.record(changed_at.elapsed());
        self.version += 1;
        let (model, mut delta) = self.model.apply(self.version, changes);
        let touched = std::mem::take(&mut self.pending_touched);
        if let istiod_xds::ads::Delta::Resources(r) = &mut delta
            && !touched.is_empty()
        {
            r.extend(touched);
            r.sort();
            r.dedup();
        }
        let forced = std::mem::take(&mut self.pending_full);
        if forced {
            delta = istiod_xds::ads::Delta::Full;
        }
        self.model = model;
        let mut snap = Snapshot::new(self.version, changed_at, Arc::new(self.model.clone()));
        snap.forced = forced;
        snap.mesh = self.mesh.clone();
        snap.reasons = std::mem::take(&mut self.pending_reasons);
        let snap = Arc::new(snap);
        tracing::debug!(target: "ads", version = self.version, ?delta, "publish");
        self.publisher.publish(snap, delta);
        self.ready.store(true, Ordering::SeqCst);
    }
}

/// Runs the store: applies what arrives on `rx`, publishing as the
/// debouncer says, until `rx` closes.
pub async fn run(mut control: Control, mut rx: mpsc::UnboundedReceiver<Input>) {
    let mut wake: Option<Instant> = None;
    loop {
        let next = tokio::select! {
            msg = rx.recv() => match msg {
                Some(changes) => control.submit(changes, Instant::now()),
                None => return,
            },
            _ = sleep_until(wake) => control.tick(Instant::now()),
        };
        wake = match next {
            Decision::WaitUntil(t) => Some(t),
            _ => None,
        };
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use istiod_xds::ads::{self, Update};

    use super::*;

    #[test]
    fn burst_becomes_one_snapshot_after_the_leading_one() {
        let (publisher, receivers) = ads::channels(1);
        let ready = Arc::new(AtomicBool::new(false));
        let mut c = Control::new(
            publisher,
            Debouncer::new(Duration::from_millis(100), Duration::from_secs(10), true),
            ready.clone(),
        );
        let t = Instant::now();
        let ch = |i: u32| vec![(Kind::Endpoint, Arc::<str>::from("e"), Some(Bytes::from(i.to_string())))];
        assert_eq!(c.submit(ch(0), t), Decision::Idle, "first change: published at once");
        assert!(ready.load(Ordering::SeqCst));
        for i in 1..1000 {
            assert!(matches!(c.submit(ch(i), t + Duration::from_micros(u64::from(i))), Decision::WaitUntil(_)));
        }
        assert_eq!(c.tick(t + Duration::from_millis(200)), Decision::Idle);
        // Two snapshots reached the core: the lone first change and the
        // coalesced burst, whose content is the newest.
        let rx = receivers.take(0).expect("core 0 receiver");
        let mut versions = Vec::new();
        while let Ok(Update::Snapshot(s, _)) = rx.try_recv() {
            versions.push(s.version);
            if s.version == 2 {
                assert_eq!(s.model.resources[Kind::Endpoint as usize]["e"].body, Bytes::from("999"));
            }
        }
        assert_eq!(versions, vec![1, 2]);
    }
}
