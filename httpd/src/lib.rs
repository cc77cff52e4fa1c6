//! What the control thread's HTTP servers (debug, monitoring, webhooks) share: the connection registry that bounds silent and idle connections, and the executor hyper runs their streams on; and the HTTP/1.1 response reader of the `whatif` command.
#![forbid(unsafe_code)]

pub mod conns;
pub mod response;

/// hyper's executor for the h2 streams of a connection: tasks on this
/// thread (the handlers hold `Rc`s).
#[derive(Clone, Copy)]
pub struct LocalExec;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for LocalExec {
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}
