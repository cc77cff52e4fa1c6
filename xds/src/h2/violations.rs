//! What peers did wrong, counted where the protocol layers see it (this
//! HTTP/2 layer, gRPC framing, the socket adapter): relaxed atomics shared
//! by every core, touched only when something goes wrong. The monitoring
//! endpoint reads them (`metrics::collect`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::Reason;

/// What a peer did wrong, or what the server had to do about a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Violation {
    /// The bytes did not start with the HTTP/2 client preface.
    BadPreface,
    /// A frame above our SETTINGS_MAX_FRAME_SIZE.
    FrameTooLarge,
    /// Any other connection error (see `h2_goaway_sent_total`).
    ConnectionError,
    /// A stream error (see `h2_rst_stream_sent_total`).
    StreamError,
    /// More CONTINUATION frames than allowed in one header block.
    ContinuationFlood,
    /// A compressed header block above the limit.
    HeaderBlockTooLarge,
    /// A decoded header list above SETTINGS_MAX_HEADER_LIST_SIZE (HTTP 431).
    HeaderListTooLarge,
    /// RST_STREAM frames faster than allowed (rapid reset).
    ResetFlood,
    /// Stream errors caused faster than allowed.
    LocalResetFlood,
    /// SETTINGS frames faster than allowed.
    SettingsFlood,
    /// PING frames faster than allowed.
    PingFlood,
    /// Empty DATA frames faster than allowed.
    EmptyDataFlood,
    /// A stream beyond SETTINGS_MAX_CONCURRENT_STREAMS (REFUSED_STREAM).
    TooManyStreams,
    /// A send refused because the connection's queue was full.
    SendQueueFull,
    /// No preface and SETTINGS in time.
    HandshakeTimeout,
    /// Our SETTINGS were not acknowledged in time.
    SettingsTimeout,
    /// A keepalive PING went unanswered.
    KeepaliveTimeout,
    /// Writes made no progress for the send timeout: the peer stopped reading.
    SendTimeout,
    /// A gRPC message above the receive limit.
    MessageTooLarge,
    /// Buffered partial gRPC messages above the connection's limit.
    ReceiveBufferFull,
}

pub(crate) const VIOLATIONS: [(Violation, &str); 20] = [
    (Violation::BadPreface, "bad_preface"),
    (Violation::FrameTooLarge, "frame_too_large"),
    (Violation::ConnectionError, "connection_error"),
    (Violation::StreamError, "stream_error"),
    (Violation::ContinuationFlood, "continuation_flood"),
    (Violation::HeaderBlockTooLarge, "header_block_too_large"),
    (Violation::HeaderListTooLarge, "header_list_too_large"),
    (Violation::ResetFlood, "rst_stream_flood"),
    (Violation::LocalResetFlood, "local_reset_flood"),
    (Violation::SettingsFlood, "settings_flood"),
    (Violation::PingFlood, "ping_flood"),
    (Violation::EmptyDataFlood, "empty_data_flood"),
    (Violation::TooManyStreams, "too_many_streams"),
    (Violation::SendQueueFull, "send_queue_full"),
    (Violation::HandshakeTimeout, "handshake_timeout"),
    (Violation::SettingsTimeout, "settings_timeout"),
    (Violation::KeepaliveTimeout, "keepalive_timeout"),
    (Violation::SendTimeout, "send_timeout"),
    (Violation::MessageTooLarge, "message_too_large"),
    (Violation::ReceiveBufferFull, "receive_buffer_full"),
];

static COUNTS: [AtomicU64; 20] = [const { AtomicU64::new(0) }; 20];
pub(crate) static RESETS: [AtomicU64; 14] = [const { AtomicU64::new(0) }; 14];
pub(crate) static GOAWAYS: [AtomicU64; 14] = [const { AtomicU64::new(0) }; 14];

/// Counts one violation.
pub fn count(v: Violation) {
    COUNTS[v as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts an RST_STREAM the server sent for a peer's fault.
pub fn count_reset(r: Reason) {
    RESETS[r.code() as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts a GOAWAY sent for a connection error.
pub fn count_goaway(r: Reason) {
    GOAWAYS[r.code() as usize].fetch_add(1, Ordering::Relaxed);
}

/// The current count of a violation.
pub fn get(v: Violation) -> u64 {
    COUNTS[v as usize].load(Ordering::Relaxed)
}
