//! The control thread (tokio, current-thread): it owns the config store,
//! debounces changes, builds snapshots and publishes them with their delta
//! to every serving core; it also serves the debug and monitoring HTTP
//! endpoints, answering per-proxy questions by asking the cores.

pub mod debounce;
pub mod http;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use istiod_xds::ads::{Kind, Publisher, SimpleModel, Snapshot};
use tokio::sync::mpsc;

use crate::simple::Change;
use debounce::{Debouncer, Decision};

/// The config store and publisher.
pub struct Control {
    publisher: Publisher,
    model: SimpleModel,
    version: u64,
    debouncer: Debouncer,
    pending: Vec<Change>,
    /// When the oldest unpublished change arrived (convergence starts here).
    pending_since: Option<Instant>,
    ready: Arc<AtomicBool>,
}

impl Control {
    /// A store that publishes through `publisher`.
    pub fn new(publisher: Publisher, debouncer: Debouncer, ready: Arc<AtomicBool>) -> Self {
        Self {
            publisher,
            model: SimpleModel::default(),
            version: 0,
            debouncer,
            pending: Vec::new(),
            pending_since: None,
            ready,
        }
    }

    /// The current model.
    pub fn model(&self) -> &SimpleModel {
        &self.model
    }

    /// Takes changes seen at `now`; returns when to look again.
    pub fn submit(&mut self, changes: Vec<Change>, now: Instant) -> Decision {
        if changes.is_empty() {
            return self.debouncer.poll(now);
        }
        let endpoints_only = changes.iter().all(|(k, _, _)| *k == Kind::Endpoint);
        self.pending.extend(changes);
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
        self.version += 1;
        let (model, delta) = self.model.apply(self.version, changes);
        self.model = model;
        let snap = Arc::new(Snapshot { version: self.version, changed_at, model: Arc::new(self.model.clone()) });
        tracing::debug!(target: "ads", version = self.version, ?delta, "publish");
        self.publisher.publish(snap, delta);
        self.ready.store(true, Ordering::SeqCst);
    }
}

/// Runs the store: applies what arrives on `rx`, publishing as the
/// debouncer says, until `rx` closes.
pub async fn run(mut control: Control, mut rx: mpsc::UnboundedReceiver<Vec<Change>>) {
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
