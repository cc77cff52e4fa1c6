//! The connections of one of the control thread's HTTP listeners (debug,
//! monitoring, webhooks): a connection must start a request within
//! [`Limits::first_request`] and is closed after [`Limits::idle`] without
//! one, and when the cap is reached the connection idle the longest makes
//! room for the newcomer. So silent sockets cannot hold every place: a
//! kubelet probe or an API server call always gets in, and what waits on
//! a request in flight is never cut.

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
    /// Idle when a newcomer needed its place.
    Evicted,
}

struct State {
    /// Requests in flight.
    busy: Cell<usize>,
    /// Since when nothing is in flight.
    idle_since: Cell<Instant>,
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

    /// A place for a new connection: at the cap, the one idle the longest
    /// is told to end; `None` when every connection has a request in
    /// flight.
    pub fn admit(self: &Rc<Self>) -> Option<Conn> {
        let mut conns = self.conns.borrow_mut();
        if conns.len() >= self.limits.max {
            let idlest = conns
                .iter()
                .filter(|(_, s)| s.busy.get() == 0)
                .min_by_key(|(_, s)| s.idle_since.get())
                .map(|(id, _)| *id)?;
            if let Some(s) = conns.remove(&idlest) {
                s.evict.notify_one();
            }
        }
        let id = self.next.get();
        self.next.set(id + 1);
        let state = Rc::new(State {
            busy: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
            served: Cell::new(false),
            evict: tokio::sync::Notify::new(),
        });
        conns.insert(id, state.clone());
        Some(Conn { registry: self.clone(), id, state })
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
        self.0.idle_since.set(Instant::now());
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
            let at = if s.busy.get() == 0 { s.idle_since.get() + wait } else { Instant::now() + wait };
            tokio::select! {
                _ = s.evict.notified() => return Closing::Evicted,
                _ = tokio::time::sleep_until(at) => {
                    if s.busy.get() == 0 && Instant::now() >= s.idle_since.get() + wait {
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
    /// Marks a request in flight.
    pub fn start(&self) -> Busy {
        self.0.busy.set(self.0.busy.get() + 1);
        self.0.served.set(true);
        Busy(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> Limits {
        Limits { max, first_request: Duration::from_millis(100), idle: Duration::from_millis(300) }
    }

    #[tokio::test]
    async fn the_idlest_makes_room_and_busy_ones_stay() {
        let r = Registry::new(limits(2));
        let a = r.admit().unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let b = r.admit().unwrap();
        let busy = b.requests().start();
        // a is idle the longest: it is told to go, at once.
        let c = r.admit().unwrap();
        assert_eq!(a.closing().await, Closing::Evicted);
        assert_eq!(r.len(), 2);
        drop(a);
        assert_eq!(r.len(), 2, "an evicted connection's drop leaves the newcomer's place");
        // Now c is idle and b busy: c goes for the next.
        let d = r.admit().unwrap();
        assert_eq!(c.closing().await, Closing::Evicted);
        drop(c);
        // Both busy: no place.
        let _busy_d = d.requests().start();
        assert!(r.admit().is_none());
        drop(busy);
        assert!(r.admit().is_some(), "b is idle again");
    }

    #[tokio::test]
    async fn silence_ends_a_connection_and_requests_keep_it() {
        let r = Registry::new(limits(4));
        let a = r.admit().unwrap();
        let start = Instant::now();
        assert_eq!(a.closing().await, Closing::Idle);
        assert!(start.elapsed() >= Duration::from_millis(100), "first request timeout");
        let b = r.admit().unwrap();
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
