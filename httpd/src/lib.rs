//! What the control thread's HTTP servers (debug, monitoring, webhooks) share: the connection registry that bounds silent and idle connections, and the executor hyper runs their streams on.
#![forbid(unsafe_code)]

pub mod conns;

/// hyper's executor for the h2 streams of a connection: tasks on this
/// thread (the handlers hold `Rc`s).
#[derive(Clone, Copy)]
pub struct LocalExec;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for LocalExec {
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}
