//! A test gRPC service on the real server: `istiod.test.Echo` with
//! - `Unary`: answers the request message and finishes;
//! - `Bidi`: answers each message, finishes when the client half-closes;
//! - `Push`: a request of two big-endian u32 (count, size) makes the
//!   server stream `count` messages of `size` bytes, then finish (flow
//!   control and slow readers).

#![allow(dead_code, reason = "each test binary uses part of the support code")]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use istiod_xds::grpc::{Call, Code, GrpcConnection, GrpcLimits, Router, Service, Status};
use istiod_xds::h2::{Limits, SendError};
use istiod_xds::server::{self, ListenerConfig, Registry, ServerConfig, ServerHandle, ServiceFactory};

pub(crate) const UNARY: &str = "/istiod.test.Echo/Unary";
pub(crate) const BIDI: &str = "/istiod.test.Echo/Bidi";
pub(crate) const PUSH: &str = "/istiod.test.Echo/Push";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Unary,
    Bidi,
    Push,
}

pub(crate) struct Echo {
    router: Router<Method>,
    calls: HashMap<(u64, u32), Method>,
    /// Push calls waiting for the queue to drain: (count left, size).
    pushes: HashMap<(u64, u32), (u32, u32)>,
    /// Bidi echoes waiting for the queue to drain, and whether the client
    /// has half-closed (the call finishes once they are sent).
    echoes: HashMap<(u64, u32), (VecDeque<Bytes>, bool)>,
}

impl Echo {
    fn push(&mut self, conn: &mut GrpcConnection, stream: u32) {
        let key = (conn.info.id, stream);
        let Some((left, size)) = self.pushes.get_mut(&key) else { return };
        while *left > 0 {
            let body = Bytes::from(vec![(*left % 251) as u8; *size as usize]);
            match conn.send(stream, body) {
                Ok(()) => *left -= 1,
                Err(SendError::QueueFull) => return, // resumes in drained()
                Err(_) => {
                    self.pushes.remove(&key);
                    return;
                }
            }
        }
        self.pushes.remove(&key);
        conn.finish(stream, &Status::ok());
    }

    /// Sends what a Bidi call owes while the queue takes it (backpressure
    /// as `push`); finishes the call when it is all sent after a half-close.
    fn echo(&mut self, conn: &mut GrpcConnection, stream: u32) {
        let key = (conn.info.id, stream);
        let Some((owed, half_closed)) = self.echoes.get_mut(&key) else { return };
        while let Some(msg) = owed.pop_front() {
            match conn.send(stream, msg.clone()) {
                Ok(()) => {}
                Err(SendError::QueueFull) => {
                    owed.push_front(msg); // resumes in drained()
                    return;
                }
                Err(_) => {
                    self.echoes.remove(&key);
                    return;
                }
            }
        }
        if *half_closed {
            self.echoes.remove(&key);
            conn.finish(stream, &Status::ok());
        }
    }
}

impl Service for Echo {
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        let m = self.router.lookup(&call.request.path)?;
        self.calls.insert((conn.info.id, call.stream), m);
        Ok(())
    }

    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        match self.calls.get(&(conn.info.id, stream)) {
            Some(Method::Unary) => {
                conn.send(stream, msg).map_err(|e| Status::new(Code::Internal, e.to_string()))?;
                conn.finish(stream, &Status::ok());
            }
            Some(Method::Bidi) => {
                self.echoes.entry((conn.info.id, stream)).or_default().0.push_back(msg);
                self.echo(conn, stream);
            }
            Some(Method::Push) => {
                if msg.len() != 8 {
                    return Err(Status::new(Code::InvalidArgument, "push wants count and size"));
                }
                let count = u32::from_be_bytes(msg[..4].try_into().unwrap());
                let size = u32::from_be_bytes(msg[4..].try_into().unwrap());
                self.pushes.insert((conn.info.id, stream), (count, size));
                self.push(conn, stream);
            }
            None => {}
        }
        Ok(())
    }

    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        if self.calls.get(&(conn.info.id, stream)) == Some(&Method::Bidi) {
            self.echoes.entry((conn.info.id, stream)).or_default().1 = true;
            self.echo(conn, stream);
        }
    }

    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32) {
        self.calls.remove(&(conn.info.id, stream));
        self.pushes.remove(&(conn.info.id, stream));
        self.echoes.remove(&(conn.info.id, stream));
    }

    fn drained(&mut self, conn: &mut GrpcConnection) {
        let id = conn.info.id;
        let streams: Vec<u32> = self.pushes.keys().filter(|(c, _)| *c == id).map(|(_, s)| *s).collect();
        for s in streams {
            self.push(conn, s);
        }
        let streams: Vec<u32> = self.echoes.keys().filter(|(c, _)| *c == id).map(|(_, s)| *s).collect();
        for s in streams {
            self.echo(conn, s);
        }
    }
}

pub(crate) struct EchoFactory;

impl ServiceFactory for EchoFactory {
    type Service = Echo;
    fn make(&self, _core: usize, _registry: Rc<Registry>) -> Echo {
        Echo {
            router: Router::new().route(UNARY, Method::Unary).route(BIDI, Method::Bidi).route(PUSH, Method::Push),
            calls: HashMap::new(),
            pushes: HashMap::new(),
            echoes: HashMap::new(),
        }
    }
}

/// Starts the echo server on loopback: listener 0 plaintext, listener 1
/// TLS when `tls` is given.
pub(crate) fn start(cores: usize, limits: Limits, tls: Option<Arc<rustls::ServerConfig>>) -> ServerHandle {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut listeners = vec![ListenerConfig { addr: any, tls: None }];
    if let Some(tls) = tls {
        listeners.push(ListenerConfig { addr: any, tls: Some(tls.into()) });
    }
    let cfg = ServerConfig {
        cores,
        pin: false,
        listeners,
        limits,
        grpc: GrpcLimits::default(),
        shutdown: std::time::Duration::from_secs(10),
        handoff: None,
        ring_depth: istiod_xds::server::RING_DEPTH,
    };
    server::start(cfg, EchoFactory).expect("server starts")
}

/// A self-signed certificate for `localhost`: (cert PEM, key PEM).
pub(crate) fn self_signed() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Frames a gRPC message.
pub(crate) fn grpc_frame(body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(0);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    Bytes::from(out)
}
