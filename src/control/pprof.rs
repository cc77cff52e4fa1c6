//! `/debug/pprof/`: CPU profiles in pprof's format, as Go's
//! `net/http/pprof` serves them for istiod (`--profile`, on by default):
//! `profile?seconds=N` samples every thread at 100 Hz for N seconds (30
//! by default) and answers a gzipped `perftools.profiles.Profile` that
//! `go tool pprof` and `pprof` read; `cmdline` is the command line. The
//! sampling is pprof-rs's (a SIGPROF timer and an unwinder); the encoding
//! is ours, after pprof's `profile.proto`. `heap` is the live heap
//! jemalloc sampled (one allocation per 512 KiB allocated, as Go's
//! `MemProfileRate`): `inuse_space` by allocating stack, addresses with
//! the binary's mappings for pprof to symbolize (`go tool pprof
//! pilot-discovery heap.pb.gz`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::http::{MAX_PROFILE_SECONDS as MAX_SECONDS, Request, Response};

/// Samples per second (Go's `runtime.SetCPUProfileRate` default).
const HZ: i32 = 100;

/// One profile at a time, as Go allows.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Answers `/debug/pprof/...`; `None` for other paths.
pub async fn serve(req: &Request) -> Option<Response> {
    let name = req.path.strip_prefix("/debug/pprof")?;
    Some(match name.trim_start_matches('/') {
        "" => index(),
        "cmdline" => {
            let args: Vec<String> = std::env::args().collect();
            Response::text(200, args.join("\0"))
        }
        "profile" => profile(req).await,
        "heap" | "allocs" => heap().await,
        _ => Response::text(404, "Unknown profile\n"),
    })
}

fn index() -> Response {
    Response::text(
        200,
        "/debug/pprof/\n\n\
         profile: CPU profile (?seconds=N, 30 by default, at most 45), in pprof's format\n\
         heap: the live heap, sampled every 512 KiB allocated, in pprof's format (allocs: the same)\n\
         cmdline: the command line of this program\n\n\
         Goroutine, block, mutex and trace profiles are Go runtime profiles: istiod-rs serves none.\n",
    )
}

/// Clears [`RUNNING`] however the profile ends (a panic included).
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}

async fn profile(req: &Request) -> Response {
    let seconds = super::http::profile_seconds(req);
    if seconds > MAX_SECONDS {
        return Response::text(400, "profile duration exceeds server's WriteTimeout\n");
    }
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Response::text(500, "Could not enable CPU profiling: cpu profiling already in use\n");
    }
    let running = Running;
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Sampled, symbolized and encoded off the control thread.
    let spawned = std::thread::Builder::new().name("istiod-pprof".into()).spawn(move || {
        let _running = running;
        let _ = tx.send(run(Duration::from_secs(seconds)));
    });
    if let Err(e) = spawned {
        return Response::text(500, format!("Could not enable CPU profiling: {e}\n"));
    }
    match rx.await {
        Ok(Ok(body)) => Response { status: 200, content_type: "application/octet-stream", body },
        Ok(Err(e)) => Response::text(500, format!("Could not enable CPU profiling: {e}\n")),
        Err(_) => Response::text(500, "Could not enable CPU profiling: the profiler stopped\n"),
    }
}

/// The sampled live heap, gzipped pprof (jemalloc's dump, converted by
/// jemalloc_pprof), made off the control thread (jemalloc writes its dump
/// to a file under `TMPDIR`, which must be writable); refused when the
/// allocator does not sample (a build without the sampling configuration).
async fn heap() -> Response {
    let Some(ctl) = jemalloc_pprof::PROF_CTL.as_ref().cloned() else {
        return Response::text(500, "Could not dump heap profile: jemalloc profiling is not available\n");
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new().name("istiod-heap".into()).spawn(move || {
        let mut ctl = ctl.blocking_lock();
        let dumped = match ctl.activated() {
            true => ctl.dump_pprof().map_err(|e| e.to_string()),
            false => Err("jemalloc profiling is not active".to_owned()),
        };
        let _ = tx.send(dumped);
    });
    if let Err(e) = spawned {
        return Response::text(500, format!("Could not dump heap profile: {e}\n"));
    }
    match rx.await {
        Ok(Ok(body)) => Response { status: 200, content_type: "application/octet-stream", body: Bytes::from(body) },
        Ok(Err(e)) => Response::text(500, format!("Could not dump heap profile: {e}\n")),
        Err(_) => Response::text(500, "Could not dump heap profile: the dump stopped\n"),
    }
}

/// Samples for `d`, then encodes and gzips the profile.
fn run(d: Duration) -> Result<Bytes, String> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(HZ)
        // Unwinding through these can deadlock (pprof-rs's advice).
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| e.to_string())?;
    let start = SystemTime::now();
    std::thread::sleep(d);
    let report = guard.report().build().map_err(|e| e.to_string())?;
    drop(guard);
    let samples = report.data.iter().map(|(frames, count)| {
        let stack = frames
            .frames
            .iter()
            .flat_map(|inlined| inlined.iter())
            .map(|s| Frame { name: s.name(), file: s.filename().into_owned(), line: i64::from(s.lineno()) })
            .collect();
        (stack, frames.thread_name_or_id(), *count as i64)
    });
    let encoded = encode(samples, start, d);
    gzip(&encoded).map_err(|e| e.to_string())
}

fn gzip(b: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::with_capacity(b.len() / 3), flate2::Compression::default());
    e.write_all(b)?;
    Ok(Bytes::from(e.finish()?))
}

/// A frame of a sampled stack, leaf first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled.
    pub name: String,
    /// Its source file.
    pub file: String,
    /// The line sampled.
    pub line: i64,
}

/// Builds a CPU profile: samples (stack, thread, count) at [`HZ`], the
/// value types Go's CPU profiles have (`samples/count`, `cpu/nanoseconds`),
/// a function per name and file, a location per function and line.
pub fn encode(samples: impl Iterator<Item = (Vec<Frame>, String, i64)>, start: SystemTime, d: Duration) -> Vec<u8> {
    let mut strings = Strings::default();
    let period = 1_000_000_000 / i64::from(HZ);
    let samples_count = ValueType { r#type: strings.id("samples"), unit: strings.id("count") };
    let cpu = ValueType { r#type: strings.id("cpu"), unit: strings.id("nanoseconds") };
    let thread = strings.id("thread");
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: HashMap<(u64, i64), u64> = HashMap::new();
    let mut profile = Profile {
        sample_type: vec![samples_count, cpu],
        period_type: Some(cpu),
        period,
        time_nanos: start.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |t| t.as_nanos() as i64),
        duration_nanos: d.as_nanos() as i64,
        ..Profile::default()
    };
    for (stack, thread_name, count) in samples {
        let mut location_id = Vec::with_capacity(stack.len());
        for f in stack {
            let key = (f.name, f.file);
            let function_id = match functions.get(&key) {
                Some(id) => *id,
                None => {
                    let id = profile.function.len() as u64 + 1;
                    let name = strings.id(&key.0);
                    profile.function.push(Function {
                        id,
                        name,
                        system_name: name,
                        filename: strings.id(&key.1),
                        start_line: 0,
                    });
                    functions.insert(key, id);
                    id
                }
            };
            let id = *locations.entry((function_id, f.line)).or_insert_with(|| {
                let id = profile.location.len() as u64 + 1;
                profile.location.push(Location {
                    id,
                    mapping_id: 0,
                    address: 0,
                    line: vec![Line { function_id, line: f.line }],
                    is_folded: false,
                });
                id
            });
            location_id.push(id);
        }
        profile.sample.push(Sample {
            location_id,
            value: vec![count, count * period],
            label: vec![Label { key: thread, str: strings.id(&thread_name), num: 0, num_unit: 0 }],
        });
    }
    profile.string_table = strings.table;
    prost::Message::encode_to_vec(&profile)
}

/// The string table: index 0 is the empty string.
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Self {
        Self { table: vec![String::new()], ids: HashMap::from([(String::new(), 0)]) }
    }
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if let Some(id) = self.ids.get(s) {
            return *id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }
}

// perftools.profiles (github.com/google/pprof, proto/profile.proto): the
// fields a CPU profile uses, with their numbers.

/// `Profile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
}

/// `ValueType`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

/// `Sample`.
#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

/// `Label`.
#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
    #[prost(int64, tag = "3")]
    num: i64,
    #[prost(int64, tag = "4")]
    num_unit: i64,
}

/// `Location`.
#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    mapping_id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
    #[prost(bool, tag = "5")]
    is_folded: bool,
}

/// `Line`.
#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
    #[prost(int64, tag = "2")]
    line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
    #[prost(int64, tag = "5")]
    start_line: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Functions and locations are shared between samples; string 0 is
    /// empty; values are (count, count × period).
    #[test]
    fn samples_share_functions_and_locations() {
        let f = |name: &str, line| Frame { name: name.into(), file: "src/x.rs".into(), line };
        let samples = vec![
            (vec![f("leaf", 3), f("root", 10)], "core-0".to_owned(), 2),
            (vec![f("leaf", 4), f("root", 10)], "core-1".to_owned(), 1),
        ];
        let bytes = encode(samples.into_iter(), SystemTime::UNIX_EPOCH, Duration::from_secs(1));
        let p: Profile = prost::Message::decode(bytes.as_slice()).unwrap();
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.function.len(), 2);
        assert_eq!(p.location.len(), 3, "leaf:3, leaf:4, root:10");
        assert_eq!(p.sample[0].location_id.len(), 2);
        assert_eq!(p.sample[0].location_id[1], p.sample[1].location_id[1], "root:10 is one location");
        assert_eq!(p.sample[0].value, vec![2, 20_000_000]);
        assert_eq!(p.period, 10_000_000);
        let name = |id: i64| p.string_table[id as usize].as_str();
        assert_eq!(name(p.sample_type[1].r#type), "cpu");
        assert_eq!(name(p.sample[1].label[0].str), "core-1");
    }
}
