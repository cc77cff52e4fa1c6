//! Per-stream state of a server connection (RFC 9113 §5.1), from the
//! server's side: whether the client still sends, what we have queued, and
//! the two flow-control windows.

use std::collections::VecDeque;

use bytes::Bytes;

/// The client's half of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recv {
    /// The client may send DATA.
    Open,
    /// The client sent END_STREAM ("half-closed (remote)").
    Closed,
}

/// The server's half of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Send {
    /// No response headers yet.
    Idle,
    /// Headers queued or sent; data may follow.
    Open,
    /// The response is complete (END_STREAM queued).
    Done,
}

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) recv: Recv,
    pub(super) send: Send,
    /// What the peer lets us send (§6.9); may go negative (§6.9.2).
    pub(super) send_window: i64,
    /// What we let the peer send.
    pub(super) recv_window: i64,
    /// Bytes consumed and not yet returned with WINDOW_UPDATE.
    pub(super) recv_unacked: u32,
    pub(super) pending_headers: Option<Bytes>,
    pub(super) data: VecDeque<Bytes>,
    pub(super) queued: usize,
    pub(super) trailers: Option<Bytes>,
    /// The response headers themselves end the stream.
    pub(super) end_stream_queued: bool,
    /// END_STREAM went out.
    pub(super) sent_end: bool,
    /// Present in the connection's ready queue.
    pub(super) in_ready: bool,
}

impl Stream {
    pub(super) fn new(send_window: i64, recv_window: i64, end_stream: bool) -> Self {
        Self {
            recv: if end_stream { Recv::Closed } else { Recv::Open },
            send: Send::Idle,
            send_window,
            recv_window,
            recv_unacked: 0,
            pending_headers: None,
            data: VecDeque::new(),
            queued: 0,
            trailers: None,
            end_stream_queued: false,
            sent_end: false,
            in_ready: false,
        }
    }

    /// Something is waiting for window.
    pub(super) fn wants_send(&self) -> bool {
        !self.data.is_empty()
    }
}
