//! One connection's task, and the per-core registry of live connections
//! (for pushes and for GOAWAY at shutdown).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt, Future};
use glommio::timer::Timer;

use crate::grpc::{ConnInfo, GrpcConnection, GrpcLimits, Service};
use crate::h2::Limits;
use crate::h2::out::{MAX_IOV, Segments};
use crate::h2::violations::{self, Violation};

/// Bytes read per `recv`.
const READ_BUF: usize = 16 * 1024;

thread_local! {
    /// The core's read buffer, shared by its connections: a read fills it
    /// and the connection consumes it before the task yields (glommio and
    /// rustls copy into the caller's buffer during the poll), so no read
    /// buffer is kept per connection (16 KiB each at 10,000 proxies would
    /// be 160 MiB).
    static READ: RefCell<Vec<u8>> = RefCell::new(vec![0u8; READ_BUF]);
}
/// About this much is framed per write.
const WRITE_BUDGET: usize = 256 * 1024;
/// Gathering buffer capacity an idle connection may keep (a push's is
/// given back once written: thousands of idle proxies must cost little).
const IDLE_WBUF: usize = 1024;

/// A live connection, shared between its task and the core's service.
pub struct ConnShared {
    /// The connection state. Borrowed by its task while it processes
    /// input; a service may borrow it from elsewhere on the core (pushes)
    /// and then call [`ConnShared::wake`].
    pub conn: RefCell<GrpcConnection>,
    woken: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl std::fmt::Debug for ConnShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnShared").field("woken", &self.woken.get()).finish_non_exhaustive()
    }
}

/// A handle to a live connection.
pub type ConnHandle = Rc<ConnShared>;

impl ConnShared {
    /// Asks the connection's task to flush what was queued from outside it.
    pub fn wake(&self) {
        self.woken.set(true);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// The live connections of one core.
#[derive(Debug)]
pub struct Registry {
    limits: Limits,
    grpc: GrpcLimits,
    next_id: Cell<u64>,
    conns: RefCell<crate::hash::IdMap<u64, Weak<ConnShared>>>,
}

impl Registry {
    pub(super) fn new(limits: Limits, grpc: GrpcLimits) -> Self {
        Self { limits, grpc, next_id: Cell::new(1), conns: RefCell::new(Default::default()) }
    }

    /// The connection limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A live connection by id.
    pub fn get(&self, id: u64) -> Option<ConnHandle> {
        self.conns.borrow().get(&id).and_then(Weak::upgrade)
    }

    /// Live connections.
    pub fn len(&self) -> usize {
        self.conns.borrow().len()
    }

    /// No live connections.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&self, peer: Option<SocketAddr>, secure: bool, peer_certificate: Option<bytes::Bytes>) -> ConnHandle {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let mut conn = GrpcConnection::new(self.limits.clone(), self.grpc.clone(), Instant::now());
        conn.info = ConnInfo { id, peer, secure, peer_certificate };
        let shared = Rc::new(ConnShared { conn: RefCell::new(conn), woken: Cell::new(false), waker: Cell::new(None) });
        self.conns.borrow_mut().insert(id, Rc::downgrade(&shared));
        shared
    }

    fn remove(&self, id: u64) {
        self.conns.borrow_mut().remove(&id);
    }

    /// Sends every connection a GOAWAY now and ends them one after another
    /// over `within` (istiod's `--shutdownDuration`): the i-th of n closes
    /// at `within * (i + 1) / n`, so their proxies reconnect to another
    /// replica spread over the period rather than all at the same instant.
    pub(super) fn go_away_all(&self, within: Duration) {
        let now = Instant::now();
        let mut conns: Vec<(u64, ConnHandle)> =
            self.conns.borrow().iter().filter_map(|(id, c)| Some((*id, c.upgrade()?))).collect();
        conns.sort_by_key(|(id, _)| *id);
        let n = conns.len().max(1) as u32;
        for (i, (_, c)) in conns.into_iter().enumerate() {
            if let Ok(mut conn) = c.conn.try_borrow_mut() {
                conn.go_away_within(now, within * (i as u32 + 1) / n);
            }
            c.wake();
        }
    }
}

/// The connection's timer, armed for `at`.
struct Armed {
    at: Instant,
    timer: Timer,
    /// The waker the reactor holds for it, once polled.
    waker: Option<Waker>,
}

impl Armed {
    /// Whether the timer is due. glommio's timer takes itself out of the
    /// reactor's tree and puts itself back each time it is polled (a
    /// removal, an insertion and a waker cloned, per wake of the task:
    /// 3.5% of a serving core pushing to 1,000 proxies); it is polled
    /// once to register, then again only should the task's waker change,
    /// and in between the clock says whether it is due (the reactor wakes
    /// the task once `at` has passed).
    fn due(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        if self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Instant::now() >= self.at;
        }
        if Pin::new(&mut self.timer).poll(cx).is_ready() {
            return true;
        }
        self.waker = Some(cx.waker().clone());
        false
    }
}

enum Ev {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Flushed(std::io::Result<()>),
    Timer,
    Wake,
}

/// Serves one connection until it ends.
pub(super) async fn serve<IO, S>(
    mut io: IO,
    peer: Option<SocketAddr>,
    secure: bool,
    peer_certificate: Option<bytes::Bytes>,
    registry: &Rc<Registry>,
    svc: &Rc<RefCell<S>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Service + ?Sized,
{
    let shared = registry.insert(peer, secure, peer_certificate);
    let send_timeout = registry.limits.send_timeout;
    // What is framed and not yet written: frame heads and small pieces
    // gathered, response pieces referenced where the core's cache holds
    // them (written with one vectored call, never copied per connection).
    let mut out = Segments::new(registry.limits.write_copy_below);
    // Bytes a write took that the stream may still hold (rustls keeps the
    // records a full socket did not take, and says the write succeeded):
    // flushed before the connection counts as idle.
    let mut unflushed = false;
    let mut last_progress = Instant::now();
    let mut timer: Option<Armed> = None;
    loop {
        let now = Instant::now();
        let (closed, mut deadline) = {
            let mut c = shared.conn.borrow_mut();
            if out.is_empty() {
                c.poll_transmit(&mut out, WRITE_BUDGET, &mut *svc.borrow_mut());
                if out.is_empty() {
                    // Idle: give back a burst's memory. Thousands of idle
                    // proxies must cost kilobytes each, not a push's size.
                    out.shrink(IDLE_WBUF);
                } else {
                    last_progress = now;
                }
            }
            (c.h2().is_closed(), c.poll_timeout())
        };
        if closed && out.is_empty() && !unflushed {
            break;
        }
        if !out.is_empty() || unflushed {
            let d = last_progress + send_timeout;
            deadline = Some(deadline.map_or(d, |x| x.min(d)));
        }
        // A timer armed for no later than what is due is kept: it fires
        // early, finds nothing due (every check compares with the clock),
        // and the next is armed for what is due then. Re-arming whenever
        // the deadline moved cost a timer inserted and removed per frame
        // (each ACK moves the keepalive, each write the send deadline),
        // about 4% of a serving core pushing to 1,000 proxies.
        if let Some(at) = deadline
            && timer.as_ref().is_none_or(|armed| armed.at > at)
        {
            timer = Some(Armed { at, timer: Timer::new(at.saturating_duration_since(now)), waker: None });
        }
        let ev = poll_fn(|cx| {
            if !out.is_empty() {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let n = out.slices(&mut iov);
                if let Poll::Ready(r) = Pin::new(&mut io).poll_write_vectored(cx, &iov[..n]) {
                    return Poll::Ready(Ev::Wrote(r));
                }
            } else if unflushed {
                // A flush that is done at once (a plaintext socket's always
                // is: `sendmsg` keeps nothing back) goes on to the read in
                // the same turn instead of taking a turn of the loop for
                // itself (a turn per push per proxy).
                match Pin::new(&mut io).poll_flush(cx) {
                    Poll::Ready(Ok(())) if !closed => {
                        unflushed = false;
                        last_progress = now;
                    }
                    Poll::Ready(r) => return Poll::Ready(Ev::Flushed(r)),
                    Poll::Pending => {}
                }
            }
            if !closed && let Poll::Ready(r) = READ.with(|b| Pin::new(&mut io).poll_read(cx, &mut b.borrow_mut()[..])) {
                return Poll::Ready(Ev::Read(r));
            }
            if let Some(armed) = timer.as_mut()
                && armed.due(cx)
            {
                return Poll::Ready(Ev::Timer);
            }
            if shared.woken.replace(false) {
                return Poll::Ready(Ev::Wake);
            }
            // The task's waker is kept until a push takes it: cloned only
            // when it is not there already.
            let kept = shared.waker.take().filter(|w| w.will_wake(cx.waker()));
            shared.waker.set(Some(kept.unwrap_or_else(|| cx.waker().clone())));
            Poll::Pending
        })
        .await;
        let now = Instant::now();
        match ev {
            Ev::Wrote(Ok(n)) => {
                out.advance(n);
                unflushed = true;
                last_progress = now;
            }
            Ev::Flushed(Ok(())) => {
                unflushed = false;
                last_progress = now;
            }
            Ev::Read(Ok(0)) | Ev::Read(Err(_)) | Ev::Wrote(Err(_)) | Ev::Flushed(Err(_)) => break,
            Ev::Read(Ok(n)) => {
                // Consumed before this task yields: no other connection
                // of the core reads meanwhile.
                let mut c = shared.conn.borrow_mut();
                READ.with(|b| c.recv(&b.borrow()[..n], now, &mut *svc.borrow_mut()));
            }
            Ev::Timer => {
                timer = None;
                if (!out.is_empty() || unflushed) && now >= last_progress + send_timeout {
                    violations::count(Violation::SendTimeout);
                    tracing::debug!(target: "grpc", ?peer, "peer stopped reading; closing");
                    break;
                }
                shared.conn.borrow_mut().handle_timeout(now, &mut *svc.borrow_mut());
            }
            Ev::Wake => {}
        }
    }
    shared.conn.borrow_mut().abort(&mut *svc.borrow_mut());
    registry.remove(shared.conn.borrow().info.id);
    // Best effort: TLS close_notify, then FIN. A peer that does not read
    // cannot hold this up for long.
    let _ = glommio::timer::timeout(std::time::Duration::from_secs(1), async {
        io.close().await.map_err(glommio::GlommioError::IoError)
    })
    .await;
}
