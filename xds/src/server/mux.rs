//! Two services on one port: calls whose `:path` is one of the second
//! service's go to it, every other call to the first (so the first answers
//! UNIMPLEMENTED for unknown paths). istiod serves ADS and the CA's
//! `IstioCertificateService` on the same port this way.

use std::cell::RefCell;
use std::collections::HashSet;
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
    /// Calls the second service owns, by (connection, stream).
    b_calls: HashSet<(u64, u32)>,
}

impl<A, B> Mux<A, B> {
    fn side(&self, conn: &GrpcConnection, stream: u32) -> Side {
        if self.b_calls.contains(&(conn.info.id, stream)) { Side::B } else { Side::A }
    }
}

impl<A: Service, B: Service> Service for Mux<A, B> {
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        if self.b_paths.iter().any(|p| p.as_bytes() == &call.request.path[..]) {
            self.b.borrow_mut().open(conn, call)?;
            self.b_calls.insert((conn.info.id, call.stream));
            return Ok(());
        }
        self.a.borrow_mut().open(conn, call)
    }

    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        match self.side(conn, stream) {
            Side::A => self.a.borrow_mut().message(conn, stream, msg),
            Side::B => self.b.borrow_mut().message(conn, stream, msg),
        }
    }

    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        match self.side(conn, stream) {
            Side::A => self.a.borrow_mut().half_close(conn, stream),
            Side::B => self.b.borrow_mut().half_close(conn, stream),
        }
    }

    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32) {
        match self.b_calls.remove(&(conn.info.id, stream)) {
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
            b: Rc::new(RefCell::new(self.b.make(core, registry))),
            b_paths: self.b_paths,
            b_calls: HashSet::new(),
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
