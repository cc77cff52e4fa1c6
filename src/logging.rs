//! Logging with istiod's flags: per-scope levels from `--log_output_level`,
//! console or JSON lines, written to `--log_target`. A scope is a `tracing`
//! target: code logs with `target: "ads"` for istiod's `ads` scope, and
//! anything else falls under `default`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Registry, reload};

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

/// The scopes istiod-rs logs under, with istiod's descriptions where
/// istiod has the scope (ControlZ lists them; a test checks that every
/// `target:` in the sources is here).
pub const SCOPES: &[(&str, &str)] = &[
    ("ads", "ads debugging"),
    ("ambient", "ambient mesh controllers"),
    ("analysis", "In-cluster analysis"),
    ("authn", "authn debugging"),
    ("authorization", "Istio Authorization Policy"),
    ("ca", "ca client"),
    ("debug", "debug endpoints"),
    ("default", "Unscoped logging messages."),
    ("grpc", "logs from gRPC"),
    ("injection", "sidecar injection"),
    ("ip-autoallocate", "IP autoallocate controller"),
    ("model", "model debugging"),
    ("multicluster", "multicluster secret controller"),
    ("pkira", "Istiod RA log"),
    ("untaint", "CNI node-untaint controller"),
    ("validation", "CRD validation debugging"),
    ("webhook", "webhook patching"),
    ("wle", "workload entry auto-registration"),
];

/// One scope's settings, as ControlZ shows and changes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// Lines below this level are dropped.
    pub output: LogLevel,
    /// Lines at this level or above carry a stack trace (`None`: never).
    pub stack: LogLevel,
    /// Lines carry their source location.
    pub caller: bool,
}

/// The scopes' settings, changed at run time through ControlZ: each scope
/// has its own, as in istiod (changing `default` changes unscoped lines
/// only).
pub struct Scopes {
    table: RwLock<BTreeMap<String, Scope>>,
    reload: OnceLock<reload::Handle<Targets, Registry>>,
}

impl Scopes {
    /// Every known scope, and any scope the flags name, with the flags'
    /// settings (a scope not named takes `default`'s).
    pub fn new(cfg: &LogConfig) -> Arc<Self> {
        let mut names: Vec<String> = SCOPES.iter().map(|(n, _)| (*n).to_owned()).collect();
        names.extend(cfg.scopes.keys().chain(cfg.stack_scopes.keys()).chain(cfg.caller.iter()).cloned());
        let table = names
            .into_iter()
            .filter(|n| n != "all")
            .map(|name| {
                let scope = Scope {
                    output: if name == "default" {
                        cfg.default
                    } else {
                        *cfg.scopes.get(&name).unwrap_or(&cfg.default)
                    },
                    stack: if name == "default" {
                        cfg.stack_default
                    } else {
                        *cfg.stack_scopes.get(&name).unwrap_or(&cfg.stack_default)
                    },
                    caller: cfg.caller.iter().any(|c| c == &name || c == "all"),
                };
                (name, scope)
            })
            .collect();
        Arc::new(Self { table: RwLock::new(table), reload: OnceLock::new() })
    }

    /// Every scope's settings, by name.
    pub fn all(&self) -> BTreeMap<String, Scope> {
        self.table.read().map(|t| t.clone()).unwrap_or_default()
    }

    /// One scope's settings.
    pub fn get(&self, name: &str) -> Option<Scope> {
        self.table.read().ok()?.get(name).copied()
    }

    /// Changes a scope's settings; `false` for a scope that does not exist.
    pub fn set(&self, name: &str, scope: Scope) -> bool {
        {
            let Ok(mut t) = self.table.write() else { return false };
            match t.get_mut(name) {
                Some(s) => *s = scope,
                None => return false,
            }
        }
        if let Some(h) = self.reload.get() {
            let _ = h.reload(self.targets());
        }
        true
    }

    /// The filter the scopes' output levels describe.
    pub fn targets(&self) -> Targets {
        let t = self.all();
        let default = t.get("default").map_or(LogLevel::Info, |s| s.output);
        t.iter()
            .filter(|(name, _)| *name != "default")
            .fold(Targets::new().with_default(filter(default)), |acc, (name, s)| {
                acc.with_target(name.clone(), filter(s.output))
            })
    }

    /// The settings that apply to a line of `target`.
    fn of(&self, target: &str) -> Option<Scope> {
        let t = self.table.read().ok()?;
        t.get(scope_of(target).unwrap_or("default")).or_else(|| t.get("default")).copied()
    }
}

static SCOPES_IN_USE: OnceLock<Arc<Scopes>> = OnceLock::new();

/// The running process's scopes (`None` before [`init`]).
pub fn scopes() -> Option<Arc<Scopes>> {
    SCOPES_IN_USE.get().cloned()
}

/// The filter that `--log_output_level` describes.
pub fn targets(cfg: &LogConfig) -> Targets {
    Scopes::new(cfg).targets()
}

/// Where lines go: every `--log_target`, in order.
enum Sink {
    Stdout,
    Stderr,
    File(Mutex<File>),
}

/// Writes each line to every target; a target that fails does not keep
/// the line from the others.
#[derive(Clone)]
struct Sinks(Arc<Vec<Sink>>);

impl Sinks {
    fn open(targets: &[String]) -> io::Result<Self> {
        let mut out = Vec::new();
        for t in targets {
            out.push(match t.as_str() {
                "stdout" => Sink::Stdout,
                "stderr" => Sink::Stderr,
                path => Sink::File(Mutex::new(
                    OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .map_err(|e| io::Error::new(e.kind(), format!("--log_target {path}: {e}")))?,
                )),
            });
        }
        if out.is_empty() {
            out.push(Sink::Stdout);
        }
        Ok(Self(Arc::new(out)))
    }
}

struct SinkWriter<'a>(&'a [Sink]);

impl io::Write for SinkWriter<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        for sink in self.0 {
            let _ = match sink {
                Sink::Stdout => io::stdout().lock().write_all(b),
                Sink::Stderr => io::stderr().lock().write_all(b),
                Sink::File(f) => f.lock().map_or(Ok(()), |mut f| f.write_all(b)),
            };
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sinks {
    type Writer = SinkWriter<'a>;
    fn make_writer(&'a self) -> SinkWriter<'a> {
        SinkWriter(&self.0)
    }
}

/// Installs the global subscriber: lines go to every `--log_target`; an
/// unopenable file is an error that names it. The scopes' levels can be
/// changed afterwards through [`scopes`].
pub fn init(cfg: &LogConfig) -> io::Result<()> {
    let sinks = Sinks::open(&cfg.targets)?;
    let scopes = Scopes::new(cfg);
    let (filter, handle) = reload::Layer::new(scopes.targets());
    let format = IstioFormat { json: cfg.json, scopes: scopes.clone() };
    let fmt = tracing_subscriber::fmt::layer().with_writer(sinks).event_format(format);
    let result = tracing_subscriber::registry().with(filter).with(fmt).try_init();
    result.map_err(|e| io::Error::other(format!("logging already initialised: {e}")))?;
    let _ = scopes.reload.set(handle);
    let _ = SCOPES_IN_USE.set(scopes);
    Ok(())
}

/// istiod's log lines (pkg/log: zap's console encoder with tabs, or its
/// JSON encoder): `<time>\t<level>\t<scope>\t<message>\t<k=v k=v>`, the
/// time in UTC with microseconds, the level in lower case, no scope for
/// `default`, labels after the message; as JSON `{"level", "time",
/// "scope", "msg", labels...}`. No colour: istiod writes none.
pub struct IstioFormat {
    /// `--log_as_json`.
    pub json: bool,
    /// Per scope: the caller (`--log_caller`: the source location after
    /// the scope) and the stack trace level (`--log_stacktrace_level`).
    pub scopes: Arc<Scopes>,
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
        let settings = self.scopes.of(meta.target());
        let caller = settings
            .is_some_and(|s| s.caller)
            .then(|| format!("{}:{}", meta.file().unwrap_or("?"), meta.line().unwrap_or(0)));
        // zap's stack traces: lines at the scope's stack level or above.
        let stack = settings
            .filter(|s| s.stack != LogLevel::None && filter(s.stack) >= *meta.level())
            .map(|_| std::backtrace::Backtrace::force_capture().to_string());
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
            if let Some(st) = stack {
                o.insert("stack".into(), st.into());
            }
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
        if let Some(st) = stack {
            write!(writer, "\n{}", st.trim_end())?;
        }
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

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

    fn config(levels: &str, stack: &str, caller: &[&str]) -> LogConfig {
        let (default, scopes) = LogConfig::parse_levels(levels).unwrap();
        let (stack_default, stack_scopes) = LogConfig::parse_levels_on(stack, LogLevel::None, BTreeMap::new()).unwrap();
        LogConfig {
            default,
            scopes,
            json: false,
            targets: vec![],
            caller: caller.iter().map(|c| (*c).to_owned()).collect(),
            stack_default,
            stack_scopes,
        }
    }

    fn lines(json: bool) -> Vec<String> {
        let buf = Buf::default();
        let out = buf.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || out.clone())
            .event_format(IstioFormat { json, scopes: Scopes::new(&config("", "", &[])) });
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
        let t = targets(&config("warn,ads:debug", "", &[]));
        assert!(t.would_enable("ads", &Level::DEBUG));
        assert!(!t.would_enable("model", &Level::INFO));
        assert!(t.would_enable("model", &Level::WARN));
        assert!(!t.would_enable("grpc", &Level::ERROR), "istiod's base turns grpc off");
    }

    /// A level changed at run time (what ControlZ's PUT does) takes effect
    /// on the next line; scopes are independent, as in istiod; a scope
    /// that does not exist is refused; caller and stack trace follow the
    /// scope's settings.
    #[test]
    fn scopes_change_at_run_time() {
        let scopes = Scopes::new(&config("", "ads:error", &["model"]));
        let (filter, handle) = reload::Layer::new(scopes.targets());
        let _ = scopes.reload.set(handle);
        let buf = Buf::default();
        let out = buf.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(move || out.clone())
            .event_format(IstioFormat { json: false, scopes: scopes.clone() });
        let subscriber = tracing_subscriber::registry().with(filter).with(fmt);
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "ads", "first debug line");
            let mut ads = scopes.get("ads").unwrap();
            assert_eq!(ads.output, LogLevel::Info);
            ads.output = LogLevel::Debug;
            assert!(scopes.set("ads", ads));
            tracing::debug!(target: "ads", "second debug line");
            tracing::debug!(target: "model", "model stays at info");
            tracing::info!(target: "model", "model line");
            tracing::error!(target: "ads", "ads error");
            assert!(!scopes.set("no-such-scope", ads));
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("first debug line"), "{text}");
        assert!(text.contains("\tdebug\tads\tsecond debug line"), "{text}");
        assert!(!text.contains("model stays at info"), "{text}");
        assert!(text.contains("\tinfo\tmodel\tsrc/logging.rs:"), "the caller of model's lines: {text}");
        let error = text.split("ads error").nth(1).unwrap();
        assert!(error.contains("scopes_change_at_run_time"), "ads errors carry a stack trace: {text}");
        let after_model = text.split("model line\n").nth(1).unwrap();
        assert!(after_model.starts_with("20"), "no stack trace below the stack level: {text}");
    }

    /// Lines go to every `--log_target`.
    #[test]
    fn every_target_gets_each_line() {
        let dir = std::env::temp_dir().join(format!("istiod-log-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.log"), dir.join("b.log"));
        let sinks = Sinks::open(&[a.display().to_string(), b.display().to_string()]).unwrap();
        sinks.make_writer().write_all(b"one line\n").unwrap();
        for f in [&a, &b] {
            assert_eq!(std::fs::read_to_string(f).unwrap(), "one line\n");
        }
        let err = Sinks::open(&[dir.join("missing/c.log").display().to_string()]).err().unwrap();
        assert!(err.to_string().contains("--log_target"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every scope the sources log under is one ControlZ lists.
    #[test]
    fn every_scope_in_the_sources_is_known() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut dirs = vec![root.to_path_buf()];
        let mut unknown = Vec::new();
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                let name = e.file_name();
                if p.is_dir() {
                    if !matches!(name.to_str(), Some("target" | ".git" | ".venv" | "tests" | "fuzz")) {
                        dirs.push(p);
                    }
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for part in text.split("target: \"").skip(1) {
                        let scope = part.split('"').next().unwrap();
                        if scope_of(scope).is_some() && !SCOPES.iter().any(|(n, _)| *n == scope) {
                            unknown.push(format!("{}: {scope}", p.display()));
                        }
                    }
                }
            }
        }
        assert!(unknown.is_empty(), "scopes missing from logging::SCOPES: {unknown:?}");
    }
}
