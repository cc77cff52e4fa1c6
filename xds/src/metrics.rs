//! Counters of the serving layer, shared by every core: relaxed atomics,
//! the error counters touched only when something goes wrong, the push
//! counters and histograms a handful of adds per response. The monitoring
//! endpoint collects them with [`collect`] into an [`Exposition`].

use std::sync::atomic::{AtomicU64, Ordering};

use istiod_xds_api::Reasons;

use crate::h2::Reason;
use crate::h2::violations::{GOAWAYS, RESETS, VIOLATIONS, Violation, get};

/// A Prometheus histogram with fixed buckets (istiod's), shared by every
/// core: relaxed atomic adds, a handful per push.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: [AtomicU64; 12],
    /// Sum, in units of `1 / scale`.
    sum: AtomicU64,
    /// Units of the sum per unit observed (a million for seconds kept as
    /// microseconds, one for bytes).
    scale: f64,
    count: AtomicU64,
}

impl Histogram {
    /// With `bounds` (seconds, ascending, at most 12).
    pub const fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; 12],
            sum: AtomicU64::new(0),
            scale: 1e6,
            count: AtomicU64::new(0),
        }
    }

    /// Of sizes in bytes, with `bounds` (ascending, at most 12).
    pub const fn bytes(bounds: &'static [f64]) -> Histogram {
        Histogram { scale: 1.0, ..Histogram::new(bounds) }
    }

    /// Records one duration.
    pub fn record(&self, d: std::time::Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        // The count first: a scrape in between sees +Inf at least every
        // bucket (the exposition stays monotonic).
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add((v * self.scale) as u64, Ordering::Relaxed);
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Cumulative buckets, sum and count, for the exposition.
    fn snapshot(&self) -> prometheus::proto::Histogram {
        let mut cumulative = 0;
        let buckets = self.bounds.iter().zip(&self.counts).map(|(b, c)| {
            cumulative += c.load(Ordering::Relaxed);
            (*b, cumulative)
        });
        proto_histogram(buckets, self.sum.load(Ordering::Relaxed) as f64 / self.scale, self.count())
    }
}

/// A histogram's exposition from (upper bound, cumulative count) pairs.
fn proto_histogram(buckets: impl Iterator<Item = (f64, u64)>, sum: f64, count: u64) -> prometheus::proto::Histogram {
    let mut h = prometheus::proto::Histogram::default();
    h.set_bucket(
        buckets
            .map(|(b, n)| {
                let mut bucket = prometheus::proto::Bucket::default();
                bucket.set_upper_bound(b);
                bucket.set_cumulative_count(n);
                bucket
            })
            .collect(),
    );
    h.set_sample_count(count);
    h.set_sample_sum(sum);
    h
}

/// How many xDS types are served (the per-type arrays' length).
const KINDS: usize = istiod_xds_api::snapshot::Kind::ALL.len();

/// istiod's xDS type label (`model.GetMetricType`), by the index of
/// [`crate::ads::Kind`].
pub const KIND_LABELS: [&str; KINDS] = ["cds", "eds", "lds", "rds", "sds", "ecds", "wds", "wads", "nds", "pcds"];

/// NACKs by type (`pilot_total_xds_rejects{type}`).
pub static REJECTS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
/// Requests with an expired nonce, by type (`pilot_xds_expired_nonce{type}`).
pub static EXPIRED_NONCE: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];

/// Responses sent, by type (`pilot_xds_pushes{type}`).
pub static PUSHES: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
/// Time to build a response, by type (`pilot_xds_push_time{type}`).
pub static PUSH_TIME: [Histogram; KINDS] =
    [const { Histogram::new(&[0.01, 0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0]) }; KINDS];
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

/// istiod's series counted where something rare happens (a webhook
/// configuration patched, a key set fetched, a gateway server rejected):
/// (name, help, counter or gauge). A family shows once it has a series,
/// as istiod's exporter shows an instrument once it was recorded.
pub const EVENT_FAMILIES: [(&str, &str, bool); 9] = [
    ("webhook_patch_attempts_total", "Webhook patching attempts", true),
    ("webhook_patch_retries_total", "Webhook patching retries", true),
    ("webhook_patch_failures_total", "Webhook patching total failures", true),
    ("galley_validation_config_updates", "k8s webhook configuration updates", true),
    ("galley_validation_config_update_error", "k8s webhook configuration update error", true),
    ("galley_validation_config_load_error", "k8s webhook configuration (re)load error", true),
    (
        "pilot_jwks_resolver_network_fetch_success_total",
        "Total number of successfully network fetch by pilot jwks resolver",
        true,
    ),
    (
        "pilot_jwks_resolver_network_fetch_fail_total",
        "Total number of failed network fetch by pilot jwks resolver",
        true,
    ),
    ("pilot_total_rejected_configs", "Total number of configs that Pilot had to reject or ignore.", true),
];

/// The series of [`EVENT_FAMILIES`], by family index and labels.
static EVENTS: std::sync::Mutex<Vec<std::collections::BTreeMap<Labels, f64>>> = std::sync::Mutex::new(Vec::new());

/// Adds `n` to the series of `name` (one of [`EVENT_FAMILIES`]) with
/// `labels`; a name not in the table is a bug, counted nowhere.
pub fn add_event(name: &str, labels: Labels, n: f64) {
    let Some(i) = EVENT_FAMILIES.iter().position(|f| f.0 == name) else {
        debug_assert!(false, "{name} is not in EVENT_FAMILIES");
        return;
    };
    let mut all = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    if all.len() < EVENT_FAMILIES.len() {
        all.resize_with(EVENT_FAMILIES.len(), Default::default);
    }
    *all[i].entry(labels).or_default() += n;
}

/// [`add_event`] by one.
pub fn count_event(name: &str, labels: Labels) {
    add_event(name, labels, 1.0);
}

/// The largest request received so far (`pilot_xds_recv_max`, bytes).
static RECV_MAX: AtomicU64 = AtomicU64::new(0);

/// Notes a received message's size.
pub fn record_recv_size(bytes: usize) {
    // A read first: the largest is seldom beaten, and a shared line is
    // written only then.
    if bytes as u64 > RECV_MAX.load(Ordering::Relaxed) {
        RECV_MAX.fetch_max(bytes as u64, Ordering::Relaxed);
    }
}

/// The metrics of one scrape, encoded by the `prometheus` crate in the
/// classic text format (what istiod's exporter serves; counters keep
/// their names, without a `_total` suffix added). Families without a
/// series are left out, as istiod's exporter leaves them out.
#[derive(Default)]
pub struct Exposition {
    families: Vec<prometheus::proto::MetricFamily>,
}

/// A series' labels, in order: static names, values.
pub type Labels = Vec<(&'static str, String)>;

/// One label.
pub fn label(name: &'static str, value: impl Into<String>) -> Labels {
    vec![(name, value.into())]
}

fn labelled(labels: Labels) -> prometheus::proto::Metric {
    let pairs = labels
        .into_iter()
        .map(|(k, v)| {
            let mut l = prometheus::proto::LabelPair::default();
            l.set_name(k.to_owned());
            l.set_value(v);
            l
        })
        .collect();
    prometheus::proto::Metric::from_label(pairs)
}

impl Exposition {
    /// Nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, name: &str, help: &str, t: prometheus::proto::MetricType, m: Vec<prometheus::proto::Metric>) {
        if m.is_empty() {
            return;
        }
        let mut f = prometheus::proto::MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_help(help.to_owned());
        f.set_field_type(t);
        f.set_metric(m);
        self.families.push(f);
    }

    /// A counter or gauge family: each value set by `set`.
    fn scalars(
        &mut self,
        name: &str,
        help: &str,
        t: prometheus::proto::MetricType,
        series: impl IntoIterator<Item = (Labels, f64)>,
        set: fn(&mut prometheus::proto::Metric, f64),
    ) {
        let m = series
            .into_iter()
            .map(|(l, v)| {
                let mut m = labelled(l);
                set(&mut m, v);
                m
            })
            .collect();
        self.family(name, help, t, m);
    }

    /// A counter family.
    pub fn counter(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, f64)>) {
        self.scalars(name, help, prometheus::proto::MetricType::COUNTER, series, |m, v| {
            let mut c = prometheus::proto::Counter::default();
            c.set_value(v);
            m.set_counter(c);
        });
    }

    /// A gauge family.
    pub fn gauge(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, f64)>) {
        self.scalars(name, help, prometheus::proto::MetricType::GAUGE, series, |m, v| {
            let mut g = prometheus::proto::Gauge::default();
            g.set_value(v);
            m.set_gauge(g);
        });
    }

    /// A histogram family.
    pub fn histogram<'h>(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, &'h Histogram)>) {
        let m = series
            .into_iter()
            .map(|(l, h)| {
                let mut m = labelled(l);
                m.set_histogram(h.snapshot());
                m
            })
            .collect();
        self.family(name, help, prometheus::proto::MetricType::HISTOGRAM, m);
    }

    /// A histogram of one series kept elsewhere: `buckets` are (upper
    /// bound, cumulative count) pairs.
    pub fn histogram_of(
        &mut self,
        name: &str,
        help: &str,
        labels: Labels,
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        let h = proto_histogram(buckets.iter().copied(), sum, count);
        let mut m = labelled(labels);
        m.set_histogram(h);
        self.family(name, help, prometheus::proto::MetricType::HISTOGRAM, vec![m]);
    }

    /// Families collected elsewhere (the process collector).
    pub fn extend(&mut self, families: impl IntoIterator<Item = prometheus::proto::MetricFamily>) {
        self.families.extend(families.into_iter().filter(|f| !f.get_metric().is_empty() && !f.name().is_empty()));
    }

    /// The names of the families so far.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.families.iter().map(|f| f.name())
    }

    /// The text exposition (format 0.0.4).
    pub fn encode(&self) -> String {
        // Only empty or unnamed families fail to encode; neither is kept.
        prometheus::TextEncoder::new().encode_to_string(&self.families).unwrap_or_else(|e| {
            tracing::error!(target: "default", error = %e, "metrics exposition failed");
            String::new()
        })
    }
}

/// Go's `codes.Code.String()`: the `err` label of istiod's per-type reject
/// gauges.
pub fn grpc_code_name(code: i32) -> String {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    match usize::try_from(code).ok().and_then(|c| NAMES.get(c)) {
        Some(n) => (*n).to_owned(),
        None => format!("Code({code})"),
    }
}

/// Series kept per reject gauge: istiod labels them by proxy, which is
/// unbounded; past this many (proxy, code) pairs new ones are not added
/// (`pilot_total_xds_rejects` still counts every NACK).
pub const MAX_REJECT_SERIES: usize = 1000;

type RejectSeries = std::collections::BTreeMap<(String, String), u64>;

/// NACKs by proxy and code for CDS, EDS, LDS and RDS
/// (`pilot_xds_{cds,eds,lds,rds}_reject`, by the index of [`KIND_LABELS`]).
static REJECT_SERIES: std::sync::Mutex<[RejectSeries; 4]> = std::sync::Mutex::new([const { RejectSeries::new() }; 4]);

/// Counts a NACK of `kind` (an index of [`KIND_LABELS`]) from proxy `node`
/// (`pod.namespace`, istiod's proxy ID) with gRPC code `code`, as istiod's
/// `IncrementXDSRejects` counts it.
pub fn count_reject(kind: usize, node: &str, code: i32) {
    REJECTS[kind].fetch_add(1, Ordering::Relaxed);
    // istiod's per-type gauges exist for CDS, EDS, LDS and RDS only.
    if kind >= 4 {
        return;
    }
    // A proxy ID names a pod (at most 253 bytes); a longer one from a
    // hostile client is cut, so the series stay small.
    let mut end = node.len().min(253);
    while !node.is_char_boundary(end) {
        end -= 1;
    }
    let mut all = REJECT_SERIES.lock().unwrap_or_else(|e| e.into_inner());
    let series = &mut all[kind];
    let key = (node[..end].to_owned(), grpc_code_name(code));
    if let Some(n) = series.get_mut(&key) {
        *n += 1;
    } else if series.len() < MAX_REJECT_SERIES {
        series.insert(key, 1);
    }
}

/// Istio versions of the proxies seen so far: istiod's `pilot_xds{version}`
/// keeps a version's series, at 0 once none of its proxies is connected.
static VERSIONS_SEEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());
/// Versions remembered at most (proxies choose the label).
const MAX_VERSIONS: usize = 256;

/// A proxy of Istio version `v` connected (once per stream).
pub fn version_seen(v: &str) {
    let mut seen = VERSIONS_SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.len() < MAX_VERSIONS && !seen.contains(v) {
        seen.insert(v.to_owned());
    }
}

/// The versions seen so far.
pub fn versions_seen() -> Vec<String> {
    VERSIONS_SEEN.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
}

/// Responses that could not be built (`pilot_total_xds_internal_errors`).
pub static INTERNAL_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Sizes of the responses pushed, by type (`pilot_xds_config_size_bytes`).
pub static CONFIG_SIZE: [Histogram; KINDS] =
    [const { Histogram::bytes(&[1.0, 10000.0, 1000000.0, 4000000.0, 10000000.0, 40000000.0]) }; KINDS];

/// Adds the serving layer's series to `out`, with istiod's names, help
/// and buckets (`pkg/xds/monitoring.go`, `pilot/pkg/xds/monitoring.go`).
pub fn collect(out: &mut Exposition) {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
    out.counter(
        "istiod_rs_h2_violations_total",
        "Protocol violations by HTTP/2 and gRPC peers, by kind.",
        VIOLATIONS.iter().map(|(v, name)| (label("kind", *name), get(*v) as f64)),
    );
    for (metric, help, counts) in [
        ("istiod_rs_h2_rst_stream_sent_total", "Streams reset for a peer's fault, by error code.", &RESETS),
        ("istiod_rs_h2_goaway_sent_total", "Connections ended for a peer's fault, by error code.", &GOAWAYS),
    ] {
        out.counter(
            metric,
            help,
            counts
                .iter()
                .enumerate()
                .filter(|(_, c)| load(c) > 0.0)
                .map(|(code, c)| (label("code", Reason::name_of(code as u32)), load(c))),
        );
    }
    let by_kind = |counts: &'static [AtomicU64; KINDS], all: bool| {
        KIND_LABELS
            .iter()
            .zip(counts)
            .filter(move |(_, c)| all || c.load(Ordering::Relaxed) > 0)
            .map(|(t, c)| (label("type", *t), c.load(Ordering::Relaxed) as f64))
    };
    out.counter("pilot_xds_pushes", "Pilot build and send errors for lds, rds, cds and eds.", by_kind(&PUSHES, true));
    out.histogram(
        "pilot_xds_push_time",
        "Total time in seconds Pilot takes to push lds, rds, cds and eds.",
        KIND_LABELS.iter().zip(&PUSH_TIME).map(|(t, h)| (label("type", *t), h)),
    );
    out.histogram(
        "pilot_xds_config_size_bytes",
        "Distribution of configuration sizes pushed to clients",
        KIND_LABELS.iter().zip(&CONFIG_SIZE).filter(|(_, h)| h.count() > 0).map(|(t, h)| (label("type", *t), h)),
    );
    out.counter(
        "pilot_total_xds_rejects",
        "Total number of XDS responses from pilot rejected by proxy.",
        by_kind(&REJECTS, false),
    );
    out.counter(
        "pilot_xds_expired_nonce",
        "Total number of XDS requests with an expired nonce.",
        by_kind(&EXPIRED_NONCE, false),
    );
    {
        let all = REJECT_SERIES.lock().unwrap_or_else(|e| e.into_inner());
        for (series, (name, help)) in all.iter().zip([
            ("pilot_xds_cds_reject", "Pilot rejected CDS configs."),
            ("pilot_xds_eds_reject", "Pilot rejected EDS."),
            ("pilot_xds_lds_reject", "Pilot rejected LDS."),
            ("pilot_xds_rds_reject", "Pilot rejected RDS."),
        ]) {
            out.gauge(
                name,
                help,
                series.iter().map(|((node, err), n)| (vec![("node", node.clone()), ("err", err.clone())], *n as f64)),
            );
        }
    }
    out.counter(
        "pilot_total_xds_internal_errors",
        "Total number of internal XDS errors in pilot.",
        [(vec![], load(&INTERNAL_ERRORS))],
    );
    // Sends that made no progress for the send timeout: the proxy stopped
    // reading.
    out.counter(
        "pilot_xds_write_timeout",
        "Pilot XDS response write timeouts.",
        [(vec![], get(Violation::SendTimeout) as f64)],
    );
    out.counter(
        "pilot_push_triggers",
        "Total number of times a push was triggered, labeled by reason for the push.",
        TRIGGER_REASONS.iter().zip(&TRIGGERS).filter(|(_, c)| load(c) > 0.0).map(|(r, c)| (label("type", *r), load(c))),
    );
    out.histogram(
        "pilot_xds_send_time",
        "Total time in seconds Pilot takes to send generated configuration.",
        [(vec![], &SEND_TIME)],
    );
    out.histogram(
        "pilot_proxy_queue_time",
        "Time in seconds, a proxy is in the push queue before being dequeued.",
        [(vec![], &QUEUE_TIME)],
    );
    out.histogram(
        "pilot_proxy_convergence_time",
        "Delay in seconds between config change and a proxy receiving all required configuration.",
        [(vec![], &CONVERGENCE_TIME)],
    );
    let (entries, bytes) = cache_size();
    out.gauge("xds_cache_size", "Current size of xds cache", [(vec![], entries as f64)]);
    let recv_max = RECV_MAX.load(Ordering::Relaxed);
    if recv_max > 0 {
        out.gauge(
            "pilot_xds_recv_max",
            "The maximum size request we have received so far.",
            [(vec![], recv_max as f64)],
        );
    }
    {
        let all = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
        for ((name, help, counter), series) in EVENT_FAMILIES.iter().zip(all.iter()) {
            let series = series.iter().map(|(l, v)| (l.clone(), *v));
            if *counter {
                out.counter(name, help, series);
            } else {
                out.gauge(name, help, series);
            }
        }
    }
    out.gauge(
        "istiod_rs_xds_cache_bytes",
        "Bytes of encoded resources in the cores' caches.",
        [(vec![], bytes as f64)],
    );
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
    fn collect_names_every_kind() {
        crate::h2::violations::count(Violation::PingFlood);
        crate::h2::violations::count_goaway(Reason::EnhanceYourCalm);
        let mut e = Exposition::new();
        collect(&mut e);
        let text = e.encode();
        assert!(text.contains("istiod_rs_h2_violations_total{kind=\"ping_flood\"}"), "{text}");
        assert!(text.contains("istiod_rs_h2_goaway_sent_total{code=\"ENHANCE_YOUR_CALM\"}"), "{text}");
        assert_eq!(text.matches("istiod_rs_h2_violations_total{").count(), VIOLATIONS.len());
    }

    #[test]
    fn histograms_render_cumulative_buckets_as_prometheus() {
        static H: Histogram = Histogram::new(&[0.1, 1.0]);
        H.record(std::time::Duration::from_millis(50));
        H.record(std::time::Duration::from_millis(500));
        H.record(std::time::Duration::from_secs(5));
        static B: Histogram = Histogram::bytes(&[10.0]);
        B.observe(4.0);
        B.observe(4000.0);
        let mut e = Exposition::new();
        e.histogram("x", "X.", [(label("type", "eds"), &H)]);
        e.histogram("y", "Y.", [(vec![], &B)]);
        e.counter("z", "Has \\ and \n.", [(label("v", "a\"b"), 2.0)]);
        e.gauge("empty", "Left out.", []);
        assert_eq!(
            e.encode(),
            "# HELP x X.\n# TYPE x histogram\n\
             x_bucket{type=\"eds\",le=\"0.1\"} 1\nx_bucket{type=\"eds\",le=\"1\"} 2\nx_bucket{type=\"eds\",le=\"+Inf\"} 3\n\
             x_sum{type=\"eds\"} 5.55\nx_count{type=\"eds\"} 3\n\
             # HELP y Y.\n# TYPE y histogram\ny_bucket{le=\"10\"} 1\ny_bucket{le=\"+Inf\"} 2\ny_sum 4004\ny_count 2\n\
             # HELP z Has \\\\ and \\n.\n# TYPE z counter\nz{v=\"a\\\"b\"} 2\n"
        );
    }

    #[test]
    fn rejects_are_counted_by_proxy_and_code_within_a_bound() {
        count_reject(0, "a.ns", 13);
        count_reject(0, "a.ns", 13);
        count_reject(4, "a.ns", 3); // SDS: only the total
        assert_eq!(grpc_code_name(3), "InvalidArgument");
        assert_eq!(grpc_code_name(99), "Code(99)");
        for i in 0..MAX_REJECT_SERIES + 10 {
            count_reject(3, &format!("p{i}.ns"), 2);
        }
        let mut e = Exposition::new();
        collect(&mut e);
        let text = e.encode();
        assert!(text.contains("pilot_xds_cds_reject{node=\"a.ns\",err=\"Internal\"} 2"), "{text}");
        assert_eq!(text.matches("pilot_xds_rds_reject{").count(), MAX_REJECT_SERIES);
        assert!(REJECTS[4].load(Ordering::Relaxed) >= 1);
    }
}
