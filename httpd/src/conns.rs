//! The connections of one of the control thread's HTTP listeners (debug,
//! monitoring, webhooks): a connection must start a request within
//! [`Limits::first_request`] and is closed after [`Limits::idle`] without
//! one, and when the cap is reached one connection makes room for the
//! newcomer: one that never made a request first, then the one idle the
//! longest, and only when every one has a request in flight the one whose
//! request began first. So neither silent sockets nor requests held open
//! can keep a kubelet probe or an API server call out.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

/// A listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections at once.
    pub max: usize,
    /// From accept to the first request (TLS handshake included).
    pub first_request: Duration,
    /// Between two requests.
    pub idle: Duration,
}

/// Why a connection was told to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// No request within the first-request or idle time.
    Idle,
    /// Chosen when a newcomer needed its place.
    Evicted,
}

struct State {
    /// Requests in flight.
    busy: Cell<usize>,
    /// Since when nothing is in flight, or since the first request in
    /// flight began.
    since: Cell<Instant>,
    /// Whether a request was ever made.
    served: Cell<bool>,
    evict: tokio::sync::Notify,
}

/// The connections of one listener.
pub struct Registry {
    limits: Limits,
    conns: RefCell<BTreeMap<u64, Rc<State>>>,
    next: Cell<u64>,
}

impl Registry {
    /// An empty registry.
    pub fn new(limits: Limits) -> Rc<Registry> {
        Rc::new(Registry { limits, conns: RefCell::default(), next: Cell::new(0) })
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.conns.borrow().len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.conns.borrow().is_empty()
    }

    /// A place for a new connection; at the cap another is told to end:
    /// an idle one before a busy one, one that never made a request before
    /// one that did, then the one in its state the longest.
    pub fn admit(self: &Rc<Self>) -> Conn {
        let mut conns = self.conns.borrow_mut();
        if conns.len() >= self.limits.max {
            let victim =
                conns.iter().min_by_key(|(_, s)| (s.busy.get() > 0, s.served.get(), s.since.get())).map(|(id, _)| *id);
            if let Some(s) = victim.and_then(|id| conns.remove(&id)) {
                s.evict.notify_one();
            }
        }
        let id = self.next.get();
        self.next.set(id + 1);
        let state = Rc::new(State {
            busy: Cell::new(0),
            since: Cell::new(Instant::now()),
            served: Cell::new(false),
            evict: tokio::sync::Notify::new(),
        });
        conns.insert(id, state.clone());
        Conn { registry: self.clone(), id, state }
    }
}

/// A connection's place in its [`Registry`], given back on drop.
pub struct Conn {
    registry: Rc<Registry>,
    id: u64,
    state: Rc<State>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.registry.conns.borrow_mut().remove(&self.id);
    }
}

/// A request in flight; the connection is idle again when it drops.
pub struct Busy(Rc<State>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.set(self.0.busy.get() - 1);
        if self.0.busy.get() == 0 {
            self.0.since.set(Instant::now());
        }
    }
}

impl Conn {
    /// A handle for the connection's service (which hyper may keep past
    /// the connection).
    pub fn requests(&self) -> Requests {
        Requests(self.state.clone())
    }

    /// Resolves when the connection should end: idle past its time, or
    /// evicted for a newcomer. Requests in flight keep it alive.
    pub async fn closing(&self) -> Closing {
        let limits = self.registry.limits;
        loop {
            let s = &self.state;
            let wait = if s.served.get() { limits.idle } else { limits.first_request };
            let at = if s.busy.get() == 0 { s.since.get() + wait } else { Instant::now() + wait };
            tokio::select! {
                biased;
                _ = s.evict.notified() => return Closing::Evicted,
                _ = tokio::time::sleep_until(at) => {
                    // Read again: a request may have begun meanwhile, and
                    // then the idle time counts, not the first request's
                    // (a timer that fired late must not close it).
                    let wait = if s.served.get() { limits.idle } else { limits.first_request };
                    if s.busy.get() == 0 && Instant::now() >= s.since.get() + wait {
                        return Closing::Idle;
                    }
                }
            }
        }
    }
}

/// Marks requests of one connection (see [`Conn::requests`]).
#[derive(Clone)]
pub struct Requests(Rc<State>);

impl Requests {
    /// Marks a request in flight (from when it costs the server work: a
    /// body still arriving is not).
    pub fn start(&self) -> Busy {
        if self.0.busy.get() == 0 {
            self.0.since.set(Instant::now());
        }
        self.0.busy.set(self.0.busy.get() + 1);
        self.seen();
        Busy(self.0.clone())
    }

    /// Marks a request begun (its head arrived): the connection is past
    /// its first-request time, and idle time counts from now.
    pub fn seen(&self) {
        self.0.served.set(true);
        if self.0.busy.get() == 0 {
            self.0.since.set(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> Limits {
        Limits { max, first_request: Duration::from_millis(100), idle: Duration::from_millis(300) }
    }

    #[tokio::test]
    async fn the_newcomer_always_gets_a_place() {
        let r = Registry::new(limits(3));
        let served = r.admit();
        served.requests().seen();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let silent = r.admit();
        let busy = r.admit();
        let held = busy.requests().start();
        // A connection that never made a request goes first, even if
        // another was idle longer.
        let c = r.admit();
        assert_eq!(silent.closing().await, Closing::Evicted);
        drop(silent);
        assert_eq!(r.len(), 3, "an evicted connection's drop leaves the newcomer's place");
        // Then the idlest of those that made one (c has none yet: it goes).
        let d = r.admit();
        assert_eq!(c.closing().await, Closing::Evicted);
        drop(c);
        let _d_held = d.requests().start();
        let e = r.admit();
        assert_eq!(served.closing().await, Closing::Evicted);
        drop(served);
        // All busy but e: e goes (never served); then, all busy, the one
        // whose request began first.
        let _e_held = e.requests().start();
        let _f = r.admit();
        assert_eq!(busy.closing().await, Closing::Evicted);
        drop(held);
    }

    /// A request that begins just before the first-request time, seen by a
    /// timer that fires late (a busy thread), keeps the connection for the
    /// idle time: the webhook's slow-body client was once cut at 10 s.
    #[tokio::test]
    async fn a_request_begun_before_a_late_timer_keeps_the_connection() {
        let r = Registry::new(limits(4));
        let a = r.admit();
        let closing = a.closing();
        tokio::pin!(closing);
        // It now sleeps until the first-request time (100 ms).
        assert!(tokio::time::timeout(Duration::from_millis(5), closing.as_mut()).await.is_err());
        a.requests().seen();
        let seen = Instant::now();
        // The thread is busy past the first-request time.
        std::thread::sleep(Duration::from_millis(150));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), closing.as_mut()).await.is_err(),
            "a connection with a request begun waits for the idle time"
        );
        assert_eq!(closing.await, Closing::Idle);
        assert!(seen.elapsed() >= Duration::from_millis(300), "idle time counted from the request");
    }

    #[tokio::test]
    async fn silence_ends_a_connection_and_requests_keep_it() {
        let r = Registry::new(limits(4));
        let a = r.admit();
        let start = Instant::now();
        assert_eq!(a.closing().await, Closing::Idle);
        assert!(start.elapsed() >= Duration::from_millis(100), "first request timeout");
        let b = r.admit();
        let busy = b.requests().start();
        let closing = b.closing();
        tokio::pin!(closing);
        assert!(tokio::time::timeout(Duration::from_millis(700), closing.as_mut()).await.is_err(), "busy stays");
        drop(busy);
        let idle = Instant::now();
        assert_eq!(closing.await, Closing::Idle);
        assert!(idle.elapsed() >= Duration::from_millis(300), "idle timeout after a request");
    }
}
