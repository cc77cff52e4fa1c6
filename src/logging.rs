//! Logging with istiod's flags: per-scope levels from `--log_output_level`,
//! console or JSON lines, written to `--log_target`. A scope is a `tracing`
//! target: code logs with `target: "ads"` for istiod's `ads` scope, and
//! anything else falls under `default`.

use std::fs::OpenOptions;
use std::io;
use std::sync::Mutex;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::prelude::*;

use crate::config::{LogConfig, LogLevel};

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::None => LevelFilter::OFF,
        // tracing has no fatal; fatal messages are logged as errors.
        LogLevel::Fatal | LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    }
}

/// The filter that `--log_output_level` describes.
pub fn targets(cfg: &LogConfig) -> Targets {
    cfg.scopes.iter().fold(Targets::new().with_default(filter(cfg.default)), |t, (scope, level)| {
        t.with_target(scope.clone(), filter(*level))
    })
}

/// Installs the global subscriber. Only the first `--log_target` is used;
/// an unopenable file is an error that names it.
pub fn init(cfg: &LogConfig) -> io::Result<()> {
    let writer = match cfg.targets.first().map(String::as_str) {
        None | Some("stdout") => BoxMakeWriter::new(io::stdout),
        Some("stderr") => BoxMakeWriter::new(io::stderr),
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| io::Error::new(e.kind(), format!("--log_target {path}: {e}")))?;
            BoxMakeWriter::new(Mutex::new(file))
        }
    };
    let format = IstioFormat { json: cfg.json, caller: !cfg.caller.is_empty() };
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer).event_format(format);
    let result = tracing_subscriber::registry().with(targets(cfg)).with(fmt).try_init();
    result.map_err(|e| io::Error::other(format!("logging already initialised: {e}")))
}

/// istiod's log lines (pkg/log: zap's console encoder with tabs, or its
/// JSON encoder): `<time>\t<level>\t<scope>\t<message>\t<k=v k=v>`, the
/// time in UTC with microseconds, the level in lower case, no scope for
/// `default`, labels after the message; as JSON `{"level", "time",
/// "scope", "msg", labels...}`. No colour: istiod writes none.
pub struct IstioFormat {
    /// `--log_as_json`.
    pub json: bool,
    /// `--log_caller`: the source location after the scope.
    pub caller: bool,
}

/// A scope is a short lower-case name (`ads`, `model`, `ca`); other
/// targets (module paths) are the default scope.
fn scope_of(target: &str) -> Option<&str> {
    let plain = !target.is_empty() && target.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-');
    (plain
        && target != "default"
        && !target.contains("::")
        && !target.starts_with("pilot_discovery")
        && !target.starts_with("istiod"))
    .then_some(target)
}

/// A field's value as istiod prints labels: durations and floats rounded
/// to what a reader needs.
#[derive(Default)]
struct Fields {
    message: String,
    labels: Vec<(String, serde_json::Value)>,
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.labels.push((field.name().to_owned(), serde_json::Value::String(text)));
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.labels.push((field.name().to_owned(), value.into()));
        }
    }
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        // Milliseconds and ratios: three decimal places at most.
        let rounded = (value * 1000.0).round() / 1000.0;
        self.labels.push((field.name().to_owned(), serde_json::json!(rounded)));
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.labels.push((field.name().to_owned(), value.into()));
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.labels.push((field.name().to_owned(), value.into()));
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.labels.push((field.name().to_owned(), value.into()));
    }
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for IstioFormat
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let level = match *meta.level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            _ => "debug",
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let time = istiod_proto::time::rfc3339(std::time::SystemTime::now());
        let scope = scope_of(meta.target());
        let caller = self.caller.then(|| format!("{}:{}", meta.file().unwrap_or("?"), meta.line().unwrap_or(0)));
        if self.json {
            let mut o = serde_json::Map::new();
            o.insert("level".into(), level.into());
            o.insert("time".into(), time.into());
            if let Some(s) = scope {
                o.insert("scope".into(), s.into());
            }
            if let Some(c) = caller {
                o.insert("caller".into(), c.into());
            }
            o.insert("msg".into(), fields.message.into());
            for (k, v) in fields.labels {
                // A label never replaces a core key.
                o.entry(k).or_insert(v);
            }
            return writeln!(writer, "{}", serde_json::Value::Object(o));
        }
        write!(writer, "{time}\t{level}")?;
        if let Some(s) = scope {
            write!(writer, "\t{s}")?;
        }
        if let Some(c) = caller {
            write!(writer, "\t{c}")?;
        }
        write!(writer, "\t{}", fields.message)?;
        for (i, (k, v)) in fields.labels.iter().enumerate() {
            let sep = if i == 0 { '\t' } else { ' ' };
            match v {
                serde_json::Value::String(s) => write!(writer, "{sep}{k}={s}")?,
                other => write!(writer, "{sep}{k}={other}")?,
            }
        }
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    /// A writer tests read back.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn lines(json: bool) -> Vec<String> {
        let buf = Buf::default();
        let out = buf.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || out.clone())
            .event_format(IstioFormat { json, caller: false });
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "ads", proxy = "web-1.shop", streams = 3u64, build_ms = 7.487776, "new connection for node");
            tracing::warn!(target: "default", "no mesh configuration file; using defaults");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    /// istiod's console lines (pkg/log/config.go: tab-separated time in
    /// UTC with microseconds, lower-case level, the scope unless default,
    /// the message, labels; scope.go emitWithTime) and its JSON keys.
    #[test]
    fn lines_are_istiods() {
        let l = lines(false);
        let (time, rest) = l[0].split_once('\t').unwrap();
        assert_eq!(time.len(), 27, "{time}");
        assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T' && time.as_bytes()[19] == b'.', "{time}");
        assert_eq!(rest, "info\tads\tnew connection for node\tproxy=web-1.shop streams=3 build_ms=7.488");
        assert!(l[1].ends_with("\twarn\tno mesh configuration file; using defaults"), "{}", l[1]);
        assert!(!l.iter().any(|x| x.contains('\u{1b}')), "no colour");
        let j: Vec<serde_json::Value> = lines(true).iter().map(|x| serde_json::from_str(x).unwrap()).collect();
        assert_eq!(j[0]["level"], "info");
        assert_eq!(j[0]["scope"], "ads");
        assert_eq!(j[0]["msg"], "new connection for node");
        assert_eq!(j[0]["proxy"], "web-1.shop");
        assert_eq!(j[0]["streams"], 3);
        assert!(j[0]["time"].as_str().unwrap().ends_with('Z'));
        assert!(j[1].get("scope").is_none(), "the default scope is not named");
    }

    #[test]
    fn scopes_become_targets() {
        let (default, scopes) = LogConfig::parse_levels("warn,ads:debug").unwrap();
        let cfg = LogConfig { default, scopes, json: false, targets: vec![], caller: vec![] };
        let t = targets(&cfg);
        assert!(t.would_enable("ads", &Level::DEBUG));
        assert!(!t.would_enable("model", &Level::INFO));
        assert!(t.would_enable("model", &Level::WARN));
        assert!(!t.would_enable("grpc", &Level::ERROR), "istiod's base turns grpc off");
    }
}
