//! Counters of the serving layer, shared by every core. They are touched
//! only when something goes wrong (a protocol violation, a reset), so
//! relaxed atomics cost nothing on the hot path. The monitoring endpoint
//! renders them with [`render`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::h2::Reason;

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

const VIOLATIONS: [(Violation, &str); 20] = [
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
static RESETS: [AtomicU64; 14] = [const { AtomicU64::new(0) }; 14];
static GOAWAYS: [AtomicU64; 14] = [const { AtomicU64::new(0) }; 14];

/// A Prometheus histogram with fixed buckets (istiod's), shared by every
/// core: relaxed atomic adds, a handful per push.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: [AtomicU64; 12],
    /// Sum, in microseconds.
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// With `bounds` (seconds, ascending, at most 12).
    pub const fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; 12],
            sum_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn record(&self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        // The count first: a scrape in between sees +Inf at least every
        // bucket (the exposition stays monotonic).
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The exposition lines of this histogram as `name` with `labels`
    /// (`type="eds"`, or empty): cumulative buckets, sum, count.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// istiod's xDS type label (`model.GetMetricType`), by the index of
/// [`crate::ads::Kind`].
pub const KIND_LABELS: [&str; 5] = ["cds", "eds", "lds", "rds", "sds"];

/// NACKs by type (`pilot_total_xds_rejects{type}`).
pub static REJECTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
/// Requests with an expired nonce, by type (`pilot_xds_expired_nonce{type}`).
pub static EXPIRED_NONCE: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Responses sent, by type (`pilot_xds_pushes{type}`).
pub static PUSHES: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
/// Time to build a response, by type (`pilot_xds_push_time{type}`).
pub static PUSH_TIME: [Histogram; 5] =
    [const { Histogram::new(&[0.01, 0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0]) }; 5];
/// From a snapshot reaching a core to a proxy's push starting
/// (`pilot_proxy_queue_time`).
pub static QUEUE_TIME: Histogram = Histogram::new(&[0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0]);
/// From a response being queued to its last byte framed for the socket
/// (`pilot_xds_send_time`).
pub static SEND_TIME: Histogram = Histogram::new(&[0.01, 0.1, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0]);
/// From a change to a proxy's ACK of it (`pilot_proxy_convergence_time`).
pub static CONVERGENCE_TIME: Histogram = Histogram::new(&[0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0]);

/// istiod's push trigger reasons (`model.TriggerReason`), the labels of
/// `pilot_push_triggers`.
pub const TRIGGER_REASONS: [&str; 16] = [
    "endpoint",
    "headlessendpoint",
    "config",
    "service",
    "proxy",
    "global",
    "ambient",
    "unknown",
    "debug",
    "secret",
    "networks",
    "proxyrequest",
    "depdendentresource",
    "namespace",
    "cluster",
    "tag",
];

/// Push trigger counts by the index of [`TRIGGER_REASONS`].
static TRIGGERS: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

/// Reasons for a push with their event counts (istiod's `ReasonStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasons(Vec<(&'static str, u32)>);

impl Reasons {
    /// One event of `reason`.
    pub fn one(reason: &'static str) -> Self {
        Reasons(vec![(reason, 1)])
    }

    /// Adds `n` events of `reason`.
    pub fn add(&mut self, reason: &'static str, n: u32) {
        match self.0.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c = c.saturating_add(n),
            None => self.0.push((reason, n)),
        }
    }

    /// Adds another push's reasons (istiod's `PushRequest.Merge`).
    pub fn merge(&mut self, other: &Reasons) {
        for (r, n) in &other.0 {
            self.add(r, *n);
        }
    }

    /// No reason recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The reasons and counts.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u32)> + '_ {
        self.0.iter().copied()
    }
}

/// Counts one proxy's push for `reasons` (istiod's `recordPushTriggers`,
/// called for every proxy it dequeues): each reason by its event count.
/// A reason istiod does not know counts as `unknown`.
pub fn record_push_triggers(reasons: &Reasons) {
    for (r, n) in reasons.iter() {
        let i = TRIGGER_REASONS.iter().position(|k| *k == r).unwrap_or(7);
        TRIGGERS[i].fetch_add(u64::from(n), Ordering::Relaxed);
    }
}

/// The count of a push trigger reason.
pub fn push_triggers(reason: &str) -> u64 {
    TRIGGER_REASONS.iter().position(|k| *k == reason).map_or(0, |i| TRIGGERS[i].load(Ordering::Relaxed))
}

/// Entries and bytes of the cores' caches of encoded resources (the
/// cores add and subtract what they hold).
static CACHE_ENTRIES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
static CACHE_BYTES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// A core's cache grew (or shrank) by `entries` holding `bytes`.
pub fn cache_delta(entries: i64, bytes: i64) {
    CACHE_ENTRIES.fetch_add(entries, Ordering::Relaxed);
    CACHE_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Entries and bytes in the cores' caches.
pub fn cache_size() -> (i64, i64) {
    (CACHE_ENTRIES.load(Ordering::Relaxed), CACHE_BYTES.load(Ordering::Relaxed))
}

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

/// Prometheus text exposition of these counters.
pub fn render() -> String {
    let mut out = String::new();
    out.push_str("# HELP istiod_rs_h2_violations_total Protocol violations by HTTP/2 and gRPC peers, by kind.\n");
    out.push_str("# TYPE istiod_rs_h2_violations_total counter\n");
    for (v, name) in VIOLATIONS {
        let _ = writeln!(out, "istiod_rs_h2_violations_total{{kind=\"{name}\"}} {}", get(v));
    }
    for (metric, help, counts) in [
        ("istiod_rs_h2_rst_stream_sent_total", "Streams reset for a peer's fault, by error code.", &RESETS),
        ("istiod_rs_h2_goaway_sent_total", "Connections ended for a peer's fault, by error code.", &GOAWAYS),
    ] {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
        for (code, c) in counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(out, "{metric}{{code=\"{}\"}} {n}", Reason::name_of(code as u32));
            }
        }
    }
    out.push_str("# HELP pilot_xds_pushes Pilot build and send errors for lds, rds, cds and eds.\n# TYPE pilot_xds_pushes counter\n");
    for (i, t) in KIND_LABELS.iter().enumerate() {
        let _ = writeln!(out, "pilot_xds_pushes{{type=\"{t}\"}} {}", PUSHES[i].load(Ordering::Relaxed));
    }
    out.push_str("# HELP pilot_xds_push_time Total time in seconds Pilot takes to push lds, rds, cds and eds.\n# TYPE pilot_xds_push_time histogram\n");
    for (i, t) in KIND_LABELS.iter().enumerate() {
        PUSH_TIME[i].render(&mut out, "pilot_xds_push_time", &format!("type=\"{t}\""));
    }
    // istiod's pkg/xds/monitoring.go: sums by xDS type, shown once counted.
    for (metric, help, counts) in [
        ("pilot_total_xds_rejects", "Total number of XDS responses from pilot rejected by proxy.", &REJECTS),
        ("pilot_xds_expired_nonce", "Total number of XDS requests with an expired nonce.", &EXPIRED_NONCE),
    ] {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
        for (i, t) in KIND_LABELS.iter().enumerate() {
            let n = counts[i].load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(out, "{metric}{{type=\"{t}\"}} {n}");
            }
        }
    }
    out.push_str("# HELP pilot_push_triggers Total number of times a push was triggered, labeled by reason for the push.\n# TYPE pilot_push_triggers counter\n");
    for (i, r) in TRIGGER_REASONS.iter().enumerate() {
        let n = TRIGGERS[i].load(Ordering::Relaxed);
        if n > 0 {
            let _ = writeln!(out, "pilot_push_triggers{{type=\"{r}\"}} {n}");
        }
    }
    out.push_str("# HELP pilot_xds_send_time Total time in seconds Pilot takes to send generated configuration.\n# TYPE pilot_xds_send_time histogram\n");
    SEND_TIME.render(&mut out, "pilot_xds_send_time", "");
    out.push_str("# HELP pilot_proxy_queue_time Time in seconds, a proxy is in the push queue before being dequeued.\n# TYPE pilot_proxy_queue_time histogram\n");
    QUEUE_TIME.render(&mut out, "pilot_proxy_queue_time", "");
    out.push_str("# HELP pilot_proxy_convergence_time Delay in seconds between config change and a proxy receiving all required configuration.\n# TYPE pilot_proxy_convergence_time histogram\n");
    CONVERGENCE_TIME.render(&mut out, "pilot_proxy_convergence_time", "");
    let (entries, bytes) = cache_size();
    let _ = writeln!(
        out,
        "# HELP xds_cache_size Current size of xds cache\n# TYPE xds_cache_size gauge\nxds_cache_size {entries}"
    );
    let _ = writeln!(
        out,
        "# HELP istiod_rs_xds_cache_bytes Bytes of encoded resources in the cores' caches.\n# TYPE istiod_rs_xds_cache_bytes gauge\nistiod_rs_xds_cache_bytes {bytes}"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_enum_order() {
        for (i, (v, _)) in VIOLATIONS.iter().enumerate() {
            assert_eq!(*v as usize, i);
        }
    }

    #[test]
    fn render_names_every_kind() {
        count(Violation::PingFlood);
        count_goaway(Reason::EnhanceYourCalm);
        let text = render();
        assert!(text.contains("istiod_rs_h2_violations_total{kind=\"ping_flood\"}"));
        assert!(text.contains("istiod_rs_h2_goaway_sent_total{code=\"ENHANCE_YOUR_CALM\"}"));
        assert_eq!(text.matches("istiod_rs_h2_violations_total{").count(), VIOLATIONS.len());
    }

    #[test]
    fn histograms_render_cumulative_buckets_as_prometheus() {
        static H: Histogram = Histogram::new(&[0.1, 1.0]);
        H.record(std::time::Duration::from_millis(50));
        H.record(std::time::Duration::from_millis(500));
        H.record(std::time::Duration::from_secs(5));
        let mut out = String::new();
        H.render(&mut out, "x", "type=\"eds\"");
        assert_eq!(
            out,
            "x_bucket{type=\"eds\",le=\"0.1\"} 1\nx_bucket{type=\"eds\",le=\"1\"} 2\nx_bucket{type=\"eds\",le=\"+Inf\"} 3\n\
             x_sum{type=\"eds\"} 5.55\nx_count{type=\"eds\"} 3\n"
        );
    }
}
