//! Per-connection limits and the rate limiters that defend against floods
//! (RFC 9113 §10.5: SETTINGS, PING, RST_STREAM, empty frames; the rapid
//! reset attack, CVE-2023-44487; CONTINUATION floods, CVE-2024-27316).

use std::time::{Duration, Instant};

/// Limits of one HTTP/2 server connection. Defaults follow istiod's
/// grpc-go server where it has one (noted per field) and are conservative
/// elsewhere.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS. istiod: `ISTIO_GPRC_MAXSTREAMS`
    /// (100000).
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: decoded header list bytes (name +
    /// value + 32 per field, §6.5.2). Larger requests get HTTP 431.
    pub max_header_list_size: u32,
    /// Largest compressed header block (HEADERS + CONTINUATIONs) buffered
    /// before decoding; beyond it the connection ends (ENHANCE_YOUR_CALM).
    pub max_header_block: usize,
    /// CONTINUATION frames allowed in one header block.
    pub max_continuation_frames: u32,
    /// SETTINGS_MAX_FRAME_SIZE we accept (16384 is every client's default).
    pub max_frame_size: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: per-stream receive window.
    pub stream_window: u32,
    /// Connection receive window (raised from 65535 at start).
    pub connection_window: u32,
    /// Application bytes queued on a connection and not yet sent (its
    /// peer's window may be closed); past it, sends are refused so a
    /// client that never reads costs bounded memory.
    pub max_queued_bytes: usize,
    /// Idle time before a keepalive PING. istiod: `--keepaliveInterval` (30s).
    pub keepalive_interval: Duration,
    /// Time a keepalive PING may go unanswered. istiod: `--keepaliveTimeout` (10s).
    pub keepalive_timeout: Duration,
    /// Lifetime before a graceful GOAWAY. istiod:
    /// `--keepaliveMaxServerConnectionAge` (unlimited).
    pub max_connection_age: Option<Duration>,
    /// Time streams may finish after the age GOAWAY (istiod: 10s).
    pub max_connection_age_grace: Duration,
    /// Time without open streams before a graceful GOAWAY (grpc-go
    /// MaxConnectionIdle; istiod: unlimited).
    pub idle_timeout: Option<Duration>,
    /// Time for the client preface and first SETTINGS to arrive.
    pub handshake_timeout: Duration,
    /// Time for the client to acknowledge our SETTINGS (§6.5.3).
    pub settings_timeout: Duration,
    /// Time a send may make no progress before the peer is taken to have
    /// stopped reading and the connection is closed.
    pub send_timeout: Duration,
    /// SETTINGS frames: burst and sustained rate per second.
    pub settings_rate: Rate,
    /// PING frames (not ACKs).
    pub ping_rate: Rate,
    /// RST_STREAM frames from the client (rapid reset).
    pub reset_rate: Rate,
    /// Streams the server had to reset because the client misbehaved (the
    /// "made you reset" variant of rapid reset).
    pub local_reset_rate: Rate,
    /// DATA frames that are empty and do not end the stream.
    pub empty_data_rate: Rate,
    /// Body pieces shorter than this are copied into the write buffer;
    /// longer ones are written from where they are
    /// ([`Segments`](super::Segments)).
    pub write_copy_below: usize,
}

/// A token bucket's shape: `burst` tokens, refilled at `per_sec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Bucket size.
    pub burst: u32,
    /// Tokens added per second.
    pub per_sec: u32,
}

impl Default for Limits {
    fn default() -> Self {
        let rate = |burst, per_sec| Rate { burst, per_sec };
        Self {
            max_concurrent_streams: 100_000,
            max_header_list_size: 64 * 1024,
            max_header_block: 64 * 1024,
            max_continuation_frames: 16,
            max_frame_size: super::frame::DEFAULT_MAX_FRAME_SIZE,
            stream_window: 1 << 20,
            connection_window: 4 << 20,
            max_queued_bytes: 16 << 20,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_connection_age: None,
            max_connection_age_grace: Duration::from_secs(10),
            idle_timeout: None,
            handshake_timeout: Duration::from_secs(10),
            settings_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(30),
            // gRPC clients send a few SETTINGS; BDP probing sends PINGs
            // during transfers, at most one outstanding.
            settings_rate: rate(50, 10),
            ping_rate: rate(200, 100),
            reset_rate: rate(200, 100),
            local_reset_rate: rate(100, 50),
            empty_data_rate: rate(200, 100),
            write_copy_below: super::out::COPY_BELOW,
        }
    }
}

/// A token bucket driven by the caller's clock.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate: Rate,
    /// Thousandths of a token, so refills are exact in integers.
    milli: u64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(rate: Rate, now: Instant) -> Self {
        Self { rate, milli: u64::from(rate.burst) * 1000, last: now }
    }

    /// Takes one token; `false` when the bucket is empty.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        let refill = elapsed.as_millis().min(u128::from(u32::MAX)) as u64 * u64::from(self.rate.per_sec);
        let cap = u64::from(self.rate.burst) * 1000;
        if refill > 0 {
            self.milli = (self.milli + refill).min(cap);
            self.last = now;
        }
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(Rate { burst: 3, per_sec: 10 }, t0);
        assert!(b.take(t0) && b.take(t0) && b.take(t0));
        assert!(!b.take(t0), "burst spent");
        assert!(!b.take(t0 + Duration::from_millis(99)), "a token takes 100ms");
        assert!(b.take(t0 + Duration::from_millis(100)));
        assert!(!b.take(t0 + Duration::from_millis(100)));
        // A long pause refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        assert!(b.take(later) && b.take(later) && b.take(later));
        assert!(!b.take(later));
    }
}
