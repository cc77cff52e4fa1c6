//! ControlZ (`--ctrlz_port` 9876 on `--ctrlz_address` localhost), istiod's
//! introspection port (`pkg/ctrlz`) that `istioctl dashboard controlz`
//! opens and `istioctl admin log` drives: its topics as JSON under
//! `/<topic>j/` and as pages under `/<topic>z/`. Logging scopes are read
//! and changed at run time (`PUT /scopej/<scope>`); the environment, the
//! command line, the process and the version are shown. Everything is
//! answered on the port's own thread, so ControlZ works while the control
//! thread is busy. Go's memory statistics (`memz`), signals and the
//! `exit` button are not offered.

use std::sync::Arc;

use serde_json::{Value, json};

use super::http::{Request, Response};
use crate::config::LogLevel;
use crate::logging::{SCOPES, Scope, Scopes};

/// The topics: (title, prefix).
const TOPICS: [(&str, &str); 5] = [
    ("Logging Scopes", "scope"),
    ("Environment Variables", "env"),
    ("Process Info", "proc"),
    ("Command-Line Arguments", "args"),
    ("Version Info", "version"),
];

fn level_name(l: LogLevel) -> &'static str {
    match l {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
        LogLevel::Fatal => "fatal",
        LogLevel::None => "none",
    }
}

/// The levels ControlZ sets (istiod's `stringToLevel`: no fatal).
fn level_of(s: &str) -> Option<LogLevel> {
    Some(match s {
        "debug" => LogLevel::Debug,
        "info" => LogLevel::Info,
        "warn" => LogLevel::Warn,
        "error" => LogLevel::Error,
        "none" => LogLevel::None,
        _ => return None,
    })
}

fn scope_info(name: &str, s: &Scope) -> Value {
    let description = SCOPES.iter().find(|(n, _)| *n == name).map_or("", |(_, d)| d);
    json!({
        "name": name,
        "description": description,
        "output_level": level_name(s.output),
        "stack_trace_level": level_name(s.stack),
        "log_callers": s.caller,
    })
}

/// istiod's `fw.RenderError`: the status and the message as plain text.
fn error(status: u16, msg: impl Into<String>) -> Response {
    Response::text(status, msg)
}

/// Answers a ControlZ request.
pub fn answer(req: &Request, scopes: &Arc<Scopes>) -> Response {
    let path = req.path.as_str();
    let put = req.method == http::Method::PUT;
    // Routes are strict-slash: `/scopej` and `/scopej/` are one.
    match path.trim_end_matches('/') {
        "" if !put => home(),
        "/homej" if !put => Response::json(&home_info()),
        "/scopej" if !put => {
            Response::json(&Value::Array(scopes.all().iter().map(|(n, s)| scope_info(n, s)).collect()))
        }
        "/scopez" if !put => page("Logging Scopes", &scopes_table(scopes)),
        "/envj" if !put => {
            Response::json(&Value::Array(env().into_iter().map(|(n, v)| json!({"name": n, "value": v})).collect()))
        }
        "/envz" if !put => {
            page("Environment Variables", &table(&["Name", "Value"], env().into_iter().map(|(n, v)| vec![n, v])))
        }
        "/procj" if !put => Response::json(&proc_info()),
        "/procz" if !put => page("Process Info", &kv_table(&proc_info())),
        "/argsj" if !put => Response::json(&json!(std::env::args().collect::<Vec<_>>())),
        "/argsz" if !put => page("Command-Line Arguments", &table(&["Argument"], std::env::args().map(|a| vec![a]))),
        "/versionj" if !put => Response::json(&version_info()),
        "/versionz" if !put => page("Version Info", &kv_table(&version_info())),
        p => match p.strip_prefix("/scopej/") {
            Some(name) if !put => match scopes.get(name) {
                Some(s) => Response::json(&scope_info(name, &s)),
                None => error(400, format!("unknown scope name: {name}")),
            },
            Some(name) => put_scope(name, &req.body, scopes),
            None if put => error(405, "405 method not allowed\n"),
            None => error(404, "404 page not found\n"),
        },
    }
}

/// istiod's `putScope`: the output and stack trace levels when they name a
/// level, the caller flag always.
fn put_scope(name: &str, body: &[u8], scopes: &Arc<Scopes>) -> Response {
    let info: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return error(400, "unable to decode request: expected a JSON object"),
        Err(e) => return error(400, format!("unable to decode request: {e}")),
    };
    let Some(mut s) = scopes.get(name) else { return error(400, format!("unknown scope name: {name}")) };
    if let Some(l) = info["output_level"].as_str().and_then(level_of) {
        s.output = l;
    }
    if let Some(l) = info["stack_trace_level"].as_str().and_then(level_of) {
        s.stack = l;
    }
    s.caller = info["log_callers"].as_bool().unwrap_or(false);
    if !scopes.set(name, s) {
        return error(400, format!("unknown scope name: {name}"));
    }
    tracing::info!(target: "default", scope = name, output_level = level_name(s.output), "ControlZ: scope changed");
    Response::text(202, "")
}

fn env() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default()
}

/// `/proc/self/status`'s fields.
fn status_field(status: &str, name: &str) -> Vec<i64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
        .map(|r| r.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

/// istiod's `procInfo` (Go's goroutines: 0 here, there are none).
fn proc_info() -> Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status_field(&status, "Uid");
    let gid = status_field(&status, "Gid");
    json!({
        "egid": gid.get(1).copied().unwrap_or(-1),
        "euid": uid.get(1).copied().unwrap_or(-1),
        "gid": gid.first().copied().unwrap_or(-1),
        "groups": status_field(&status, "Groups"),
        "pid": std::process::id(),
        "ppid": status_field(&status, "PPid").first().copied().unwrap_or(0),
        "uid": uid.first().copied().unwrap_or(-1),
        "wd": std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
        "hostname": hostname(),
        "tempdir": std::env::temp_dir().display().to_string(),
        "threads": status_field(&status, "Threads").first().copied().unwrap_or(0),
        "goroutines": 0,
    })
}

fn version_info() -> Value {
    let b = &crate::version::BUILD;
    json!({
        "version": b.version,
        "revision": b.git_revision,
        "golang_version": b.golang_version,
        "status": b.build_status,
        "tag": b.git_tag,
    })
}

/// istiod's `homeInfo`; `HeapSize` is the resident set here.
fn home_info() -> Value {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let resident_pages: u64 = statm.split_whitespace().nth(1).and_then(|x| x.parse().ok()).unwrap_or(0);
    json!({
        "ProcessName": std::env::args().next().unwrap_or_default(),
        "HeapSize": resident_pages * 4096,
        "NumGC": 0,
        "CurrentTime": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        "Hostname": hostname(),
        "IP": "",
    })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn table(head: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let mut out = String::from("<table>\n<tr>");
    for h in head {
        out.push_str(&format!("<th>{h}</th>"));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            out.push_str(&format!("<td>{}</td>", escape(&cell)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

fn kv_table(v: &Value) -> String {
    let rows = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| vec![k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)]);
    table(&["Name", "Value"], rows)
}

fn scopes_table(scopes: &Scopes) -> String {
    let rows = scopes.all().into_iter().map(|(name, s)| {
        let description = SCOPES.iter().find(|(n, _)| *n == name).map_or("", |(_, d)| d).to_owned();
        vec![name, description, level_name(s.output).into(), level_name(s.stack).into(), s.caller.to_string()]
    });
    table(&["Name", "Description", "Output Level", "Stack Trace Level", "Log Callers"], rows)
        + "<p>Change a scope with <code>PUT /scopej/&lt;name&gt;</code> and a JSON body: \
           <code>{\"output_level\": \"debug\", \"stack_trace_level\": \"none\", \"log_callers\": false}</code>.</p>\n"
}

fn page(title: &str, body: &str) -> Response {
    let nav: String = TOPICS.iter().map(|(t, p)| format!("<li><a href=\"/{p}z/\">{t}</a></li>")).collect();
    Response {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: format!(
            "<html>\n<head><title>ControlZ: {title}</title></head>\n<body>\n<ul>{nav}</ul>\n<h1>{title}</h1>\n{body}</body>\n</html>\n"
        )
        .into(),
    }
}

fn home() -> Response {
    page("ControlZ", &kv_table(&home_info()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogConfig;

    fn scopes() -> Arc<Scopes> {
        let (default, scopes) = LogConfig::parse_levels("").unwrap();
        Scopes::new(&LogConfig {
            default,
            scopes,
            json: false,
            targets: vec![],
            caller: vec![],
            stack_default: LogLevel::None,
            stack_scopes: Default::default(),
        })
    }

    fn req(method: http::Method, path: &str, body: &str) -> Request {
        Request { method, body: body.to_owned().into(), ..crate::control::http::parse_target(path) }
    }

    /// istiod's scope topic: the list, one scope, PUT's partial update
    /// (unknown levels left as they are, the caller flag always set), and
    /// its refusals in istiod's words.
    #[test]
    fn scopes_are_read_and_changed() {
        let s = scopes();
        let all: Value = serde_json::from_slice(&answer(&req(http::Method::GET, "/scopej/", ""), &s).body).unwrap();
        let names: Vec<&str> = all.as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"ads") && names.contains(&"default"), "{names:?}");
        let grpc: Value =
            serde_json::from_slice(&answer(&req(http::Method::GET, "/scopej/grpc", ""), &s).body).unwrap();
        assert_eq!(grpc["output_level"], "none", "istiod's base turns grpc off");
        let body = r#"{"output_level":"debug","stack_trace_level":"bogus","log_callers":true}"#;
        assert_eq!(answer(&req(http::Method::PUT, "/scopej/ads", body), &s).status, 202);
        let ads = s.get("ads").unwrap();
        assert_eq!((ads.output, ads.stack, ads.caller), (LogLevel::Debug, LogLevel::None, true));
        let r = answer(&req(http::Method::PUT, "/scopej/nope", body), &s);
        assert_eq!((r.status, &r.body[..]), (400, &b"unknown scope name: nope"[..]));
        let r = answer(&req(http::Method::PUT, "/scopej/ads", "{not json"), &s);
        assert_eq!(r.status, 400);
        assert!(String::from_utf8_lossy(&r.body).starts_with("unable to decode request:"));
        assert_eq!(answer(&req(http::Method::PUT, "/envj/", ""), &s).status, 405);
    }
}
