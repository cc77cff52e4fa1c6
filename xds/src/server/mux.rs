//! Two services on one port: calls whose `:path` is one of the second
//! service's go to it, every other call to the first (so the first answers
//! UNIMPLEMENTED for unknown paths). istiod serves ADS and the CA's
//! `IstioCertificateService` on the same port this way.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use bytes::Bytes;

use super::{Registry, ServiceFactory};
use crate::grpc::{Call, GrpcConnection, Service, Status};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// The per-core service of a [`MuxFactory`].
pub struct Mux<A, B> {
    a: Rc<RefCell<A>>,
    b: Rc<RefCell<B>>,
    b_paths: &'static [&'static str],
    /// Calls the second service owns, by connection. A service may finish
    /// a call itself (then `closed` is never called for it), so entries of
    /// calls no longer open are dropped as the connection opens others,
    /// and those of gone connections every [`PRUNE_EVERY`] calls.
    b_calls: HashMap<u64, HashSet<u32>>,
    registry: Rc<Registry>,
    opened: u64,
}

/// How many of the second service's calls between sweeps of connections
/// that are gone.
const PRUNE_EVERY: u64 = 256;

impl<A, B> Mux<A, B> {
    fn side(&self, conn: &GrpcConnection, stream: u32) -> Side {
        match self.b_calls.get(&conn.info.id) {
            Some(s) if s.contains(&stream) => Side::B,
            _ => Side::A,
        }
    }

    /// Forgets `stream` of `conn` once the call is over.
    fn settle(&mut self, conn: &GrpcConnection, stream: u32) {
        if !conn.is_open(stream)
            && let Some(s) = self.b_calls.get_mut(&conn.info.id)
        {
            s.remove(&stream);
            if s.is_empty() {
                self.b_calls.remove(&conn.info.id);
            }
        }
    }
}

impl<A: Service, B: Service> Service for Mux<A, B> {
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        if self.b_paths.iter().any(|p| p.as_bytes() == &call.request.path[..]) {
            self.b.borrow_mut().open(conn, call)?;
            self.opened += 1;
            if self.opened.is_multiple_of(PRUNE_EVERY) {
                let registry = &self.registry;
                self.b_calls.retain(|id, _| registry.get(*id).is_some());
            }
            let calls = self.b_calls.entry(conn.info.id).or_default();
            calls.retain(|s| conn.is_open(*s));
            calls.insert(call.stream);
            return Ok(());
        }
        self.a.borrow_mut().open(conn, call)
    }

    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        match self.side(conn, stream) {
            Side::A => self.a.borrow_mut().message(conn, stream, msg),
            Side::B => {
                let r = self.b.borrow_mut().message(conn, stream, msg);
                self.settle(conn, stream);
                r
            }
        }
    }

    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        match self.side(conn, stream) {
            Side::A => self.a.borrow_mut().half_close(conn, stream),
            Side::B => {
                self.b.borrow_mut().half_close(conn, stream);
                self.settle(conn, stream);
            }
        }
    }

    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32) {
        let ours = self.b_calls.get_mut(&conn.info.id).is_some_and(|s| s.remove(&stream));
        if self.b_calls.get(&conn.info.id).is_some_and(HashSet::is_empty) {
            self.b_calls.remove(&conn.info.id);
        }
        match ours {
            false => self.a.borrow_mut().closed(conn, stream),
            true => self.b.borrow_mut().closed(conn, stream),
        }
    }

    fn drained(&mut self, conn: &mut GrpcConnection) {
        self.a.borrow_mut().drained(conn);
        self.b.borrow_mut().drained(conn);
    }
}

/// Serves `a`'s service and, for the paths `b_paths`, `b`'s.
pub struct MuxFactory<FA, FB> {
    a: FA,
    b: FB,
    b_paths: &'static [&'static str],
}

impl<FA, FB> MuxFactory<FA, FB> {
    /// `a` for every call but those to `b_paths`, which `b` serves.
    pub fn new(a: FA, b: FB, b_paths: &'static [&'static str]) -> Self {
        Self { a, b, b_paths }
    }
}

impl<FA: ServiceFactory, FB: ServiceFactory> ServiceFactory for MuxFactory<FA, FB> {
    type Service = Mux<FA::Service, FB::Service>;

    fn make(&self, core: usize, registry: Rc<Registry>) -> Self::Service {
        Mux {
            a: Rc::new(RefCell::new(self.a.make(core, registry.clone()))),
            b: Rc::new(RefCell::new(self.b.make(core, registry.clone()))),
            b_paths: self.b_paths,
            b_calls: HashMap::new(),
            registry,
            opened: 0,
        }
    }

    fn start(&self, core: usize, svc: Rc<RefCell<Self::Service>>) {
        let (a, b) = {
            let m = svc.borrow();
            (m.a.clone(), m.b.clone())
        };
        self.a.start(core, a);
        self.b.start(core, b);
    }
}
