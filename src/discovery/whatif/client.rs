//! `pilot-discovery whatif -f change.yaml`: asks a running server's
//! `/debug/whatif` and prints the answer for people (a table of the
//! classes reached, the diffs, the warnings) or as JSON, with an exit
//! status CI can use.

use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::Duration;

use serde_json::Value;

use crate::cli::{WhatifArgs, WhatifOutput};

/// Exit statuses.
const INVALID: u8 = 1;
const OUTSIDE: u8 = 2;
const UNASKED: u8 = 3;

/// Changes printed, at most.
const MAX_CHANGES_SHOWN: usize = 200;

/// Questions asked at most while the server says to retry, and the pause
/// between them.
const RETRIES: usize = 20;
const RETRY_AFTER: Duration = Duration::from_millis(250);

/// Whether a 503's text asks to retry.
fn is_retry(body: &[u8]) -> bool {
    String::from_utf8_lossy(body).trim_end().ends_with("retry")
}

/// How long the server may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the command; the exit status.
pub fn run(args: &WhatifArgs) -> u8 {
    let mut text = String::new();
    for f in &args.files {
        let read = if f == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map(|_| s)
        } else {
            std::fs::read_to_string(f)
        };
        match read {
            Ok(s) => {
                text.push_str("\n---\n");
                text.push_str(&s);
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "pilot-discovery whatif: {f}: {e}");
                return UNASKED;
            }
        }
    }
    let mut path = format!("{}?page={}", crate::control::http::WHATIF_PATH, args.page);
    if args.delete {
        path.push_str("&delete=true");
    }
    if args.no_diff {
        path.push_str("&diff=false");
    }
    // While a change is on its way to the cores, or another question is
    // answered, the server asks to retry: a few times, a moment apart.
    let mut tries = 0;
    let (status, body) = loop {
        tries += 1;
        match post(&args.server, &path, text.as_bytes()) {
            Ok((503, body)) if tries < RETRIES && is_retry(&body) => std::thread::sleep(RETRY_AFTER),
            Ok(r) => break r,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "pilot-discovery whatif: cannot ask {}: {e}", args.server);
                return UNASKED;
            }
        }
    };
    let answer: Value = match serde_json::from_slice(&body) {
        Ok(v) if status == 200 || status == 400 => v,
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "pilot-discovery whatif: the server answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
            return UNASKED;
        }
    };
    let out = match args.output {
        WhatifOutput::Json => serde_json::to_string_pretty(&answer).unwrap_or_default() + "\n",
        WhatifOutput::Text => render(&answer, &args.allow_namespaces),
    };
    let _ = std::io::stdout().write_all(out.as_bytes());
    exit_status(&answer, &args.allow_namespaces)
}

/// 1 when an object was refused, 2 when the change reaches a namespace
/// outside `allowed` (when some are given), else 0.
pub fn exit_status(answer: &Value, allowed: &[String]) -> u8 {
    if answer["valid"] == false {
        return INVALID;
    }
    if outside(answer, allowed).is_empty() { 0 } else { OUTSIDE }
}

/// The namespaces reached that `allowed` does not name (none when it is
/// empty).
fn outside(answer: &Value, allowed: &[String]) -> Vec<String> {
    if allowed.is_empty() {
        return Vec::new();
    }
    answer["summary"]["namespacesReached"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|ns| !allowed.iter().any(|a| a == ns))
        .map(str::to_owned)
        .collect()
}

/// The answer for people.
pub fn render(answer: &Value, allowed: &[String]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let _ = writeln!(out, "OBJECT{:<50}RESULT", "");
    for o in answer["objects"].as_array().into_iter().flatten() {
        let name = format!("{} {}/{}", s(&o["kind"]), s(&o["namespace"]), s(&o["name"]));
        let result = match o.get("error").and_then(Value::as_str) {
            Some(e) => format!("refused: {e}"),
            None => s(&o["operation"]),
        };
        let _ = writeln!(out, "{name:<56}{result}");
        for w in o["warnings"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  warning: {}", s(w));
        }
    }
    if answer["valid"] == false {
        return out;
    }
    let sum = &answer["summary"];
    let n = |k: &str| sum[k].as_u64().unwrap_or(0);
    let _ = writeln!(
        out,
        "\nreaches {} of {} classes: {} connected proxies, {} pods not connected; namespaces: {}",
        n("classesReached"),
        n("classesConsidered"),
        n("proxiesReached"),
        n("podsReached"),
        sum["namespacesReached"].as_array().map(|a| a.iter().map(s).collect::<Vec<_>>().join(", ")).unwrap_or_default()
    );
    // Every type the server compares, as the answer names them.
    let types = super::KINDS.map(|k| k.short());
    let classes = answer["classes"].as_array().cloned().unwrap_or_default();
    // A class by its first proxy (`pod.namespace` of its node id) or pod.
    let who = |c: &Value| {
        let first = c["proxies"][0].as_str().map(|p| p.split('~').nth(2).unwrap_or(p).to_owned());
        first.or_else(|| c["pods"][0].as_str().map(str::to_owned)).unwrap_or_default()
    };
    // ... with its type and namespace, and the labels people name
    // workloads by.
    let describe = |c: &Value| {
        let class = &c["class"];
        let who = who(c);
        let more = c["proxies"].as_array().map_or(0, Vec::len) + c["pods"].as_array().map_or(0, Vec::len);
        let more = if more > 1 { format!(" (+{})", more - 1) } else { String::new() };
        let labels: Vec<String> = ["app", "version", "istio"]
            .iter()
            .filter_map(|k| class["labels"][k].as_str().map(|v| format!("{k}={v}")))
            .collect();
        let mut d = format!("{} {}{more} {}", s(&class["nodeType"]), who, labels.join(","));
        if d.len() > 58 {
            d = d.chars().take(55).collect::<String>() + "...";
        }
        d
    };
    if !classes.is_empty() {
        let _ = write!(out, "\n{:<60}{:>8}{:>6}", "CLASS", "PROXIES", "PODS");
        for t in types {
            let _ = write!(out, "{t:>6}");
        }
        out.push('\n');
        for c in &classes {
            let count = |v: &Value| v.as_array().map_or(0, Vec::len);
            let _ = write!(out, "{:<60}{:>8}{:>6}", describe(c), count(&c["proxies"]), count(&c["pods"]));
            for t in types {
                let k = &c["changes"][t];
                let n = |what: &str| k["counts"][what].as_u64().map_or_else(|| count(&k[what]), |n| n as usize);
                let _ = write!(out, "{:>6}", n("added") + n("removed") + n("changed"));
            }
            out.push('\n');
        }
        let (page, pages) = (answer["page"].as_u64().unwrap_or(0), answer["pages"].as_u64().unwrap_or(1));
        if pages > 1 {
            let _ = writeln!(out, "(page {page} of 0..{}: --page N for the others)", pages - 1);
        }
    }
    // Each change once, with the classes it reaches.
    let mut listed: Vec<(String, Vec<String>)> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut note = |line: String, class: String| match index.get(&line) {
        Some(i) => listed[*i].1.push(class),
        None => {
            index.insert(line.clone(), listed.len());
            listed.push((line, vec![class]));
        }
    };
    for c in &classes {
        for t in types {
            let k = &c["changes"][t];
            for (what, list) in [("added", &k["added"]), ("removed", &k["removed"])] {
                let names = list.as_array().map_or(&[][..], Vec::as_slice);
                for name in names {
                    note(format!("{t} {what}: {}", s(name)), who(c));
                }
                // The server lists 100 of each.
                let unlisted = k["counts"][what].as_u64().unwrap_or(0).saturating_sub(names.len() as u64);
                if unlisted > 0 {
                    note(format!("{t} {what}: {unlisted} more not listed"), who(c));
                }
            }
            for ch in k["changed"].as_array().into_iter().flatten() {
                let diff = ch["diff"].as_u64().and_then(|id| {
                    answer["diffs"].as_array()?.iter().find(|d| d["id"].as_u64() == Some(id))?["diff"].as_str()
                });
                note(format!("{t} changed: {}\n{}", s(&ch["name"]), diff.unwrap_or_default()), who(c));
            }
        }
    }
    // (Every change is in `-o json`.)
    let more = listed.len().saturating_sub(MAX_CHANGES_SHOWN);
    for (line, classes) in listed.iter().take(MAX_CHANGES_SHOWN) {
        let (head, rest) = line.split_once('\n').unwrap_or((line, ""));
        let shown = match classes.len() {
            1..=3 => classes.join(", "),
            n => format!("{}, ... ({n} classes)", classes[..2].join(", ")),
        };
        let _ = writeln!(out, "\n{head}  [{shown}]");
        out.push_str(rest);
    }
    if more > 0 {
        let _ = writeln!(out, "\n... and {more} more changes (-o json lists them)");
    }
    let warnings = answer["warnings"].as_array().cloned().unwrap_or_default();
    if !warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for w in &warnings {
            let _ = writeln!(out, "  {}", s(w));
        }
    }
    let outside = outside(answer, allowed);
    if !outside.is_empty() {
        let _ = writeln!(out, "\nreaches namespaces not allowed: {}", outside.join(", "));
    }
    out
}

/// POSTs `body` to `path` of `server` (`http://host:port`) over HTTP/1.1;
/// the status and the body.
fn post(server: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let authority = server.strip_prefix("http://").unwrap_or(server).trim_end_matches('/');
    if authority.contains('/') || server.starts_with("https://") {
        return Err("the server is named http://host:port".into());
    }
    let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(|e| e.to_string())?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/yaml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    istiod_httpd::response::parse(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_exit_status_says_invalid_or_outside() {
        let ok = json!({"valid": true, "summary": {"namespacesReached": ["shop"]}});
        assert_eq!(exit_status(&ok, &[]), 0);
        assert_eq!(exit_status(&ok, &["shop".into()]), 0);
        assert_eq!(exit_status(&ok, &["bank".into()]), OUTSIDE);
        assert_eq!(exit_status(&json!({"valid": false}), &[]), INVALID);
        assert!(render(&ok, &["bank".into()]).contains("reaches namespaces not allowed: shop"));
    }

    /// Every type the server compares has its column and its changes
    /// listed (a rotated credential is an SDS change, a Wasm plugin an
    /// ECDS one).
    #[test]
    fn secrets_and_extension_configs_are_shown_too() {
        let answer = json!({"valid": true, "summary": {"namespacesReached": ["istio-system"]},
            "classes": [{"class": {"nodeType": "router", "labels": {}}, "proxies": [], "pods": ["ingress-1.istio-system"],
                "changes": {
                    "SDS": {"added": [], "removed": [], "changed": [{"name": "kubernetes://shop-cert", "diff": 0}]},
                    "ECDS": {"added": ["extensions.istio.io/trafficextension/a.b"], "removed": [], "changed": []}}}],
            "diffs": [{"id": 0, "diff": "-old\n+new\n"}]});
        let text = render(&answer, &[]);
        let header = text.lines().find(|l| l.starts_with("CLASS")).unwrap();
        assert!(header.contains(" SDS") && header.contains(" ECDS"), "{text}");
        assert!(text.contains("SDS changed: kubernetes://shop-cert"), "{text}");
        assert!(text.contains("+new"), "{text}");
        assert!(text.contains("ECDS added: extensions.istio.io/trafficextension/a.b"), "{text}");
    }
}
