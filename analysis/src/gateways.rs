//! The analyzers of Gateways against the workloads and Secrets they
//! select (istiod's `gateway.IngressGatewayPortAnalyzer`,
//! `gateway.SecretAnalyzer`, `gateway.ConflictingGatewayAnalyzer`).

use std::collections::BTreeMap;

use super::{Message, MessageType};
use istiod_config::istio::networking::Gateway;
use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_config::objects::{IntOrString, Objects, Pod};

/// `GatewayPortNotDefinedOnService`.
pub const GATEWAY_PORT_NOT_ON_SERVICE: MessageType = MessageType { code: "IST0162", level: "Warning" };
/// `InvalidGatewayCredential`.
pub const INVALID_GATEWAY_CREDENTIAL: MessageType = MessageType { code: "IST0161", level: "Error" };
/// `ConflictingGateways`.
pub const CONFLICTING_GATEWAYS: MessageType = MessageType { code: "IST0145", level: "Error" };

fn gateways(istio: &[IstioObject]) -> impl Iterator<Item = (&IstioObject, &Gateway)> {
    istio.iter().filter_map(|o| match &o.spec {
        IstioSpec::Gateway(g) => Some((o, g)),
        _ => None,
    })
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// istiod's `labels.SelectorFromSet(...).String()`.
fn selector_text(selector: &BTreeMap<String, String>) -> String {
    selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn selector_not_found(o: &IstioObject, selector: &BTreeMap<String, String>) -> Message {
    let text = super::not_found("selector", &selector_text(selector));
    Message::new(o, "Gateway", super::REFERENCED_RESOURCE_NOT_FOUND, text)
}

/// istiod's `gateway.IngressGatewayPortAnalyzer`: a Gateway whose
/// selector matches no pod, and a server port that no TCP port (or target
/// port) of the Services selecting those pods exposes.
pub(super) fn ingress_gateway_ports(objects: &Objects, out: &mut Vec<Message>) {
    for (o, gw) in gateways(&objects.istio) {
        let pods: Vec<&Pod> = objects.pods.iter().filter(|p| selects(&gw.selector, &p.metadata.labels)).collect();
        if pods.is_empty() {
            out.push(selector_not_found(o, &gw.selector));
            continue;
        }
        // Target ports (a numeric target, else the port) and service
        // ports that map to a target.
        let (mut targets, mut mapped) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
        for pod in pods {
            let services = objects
                .services
                .iter()
                .filter(|s| s.metadata.ns() == pod.metadata.ns() && selects(&s.spec.selector, &pod.metadata.labels));
            // (The API server defaults a port's protocol to TCP.)
            for p in services.flat_map(|s| &s.spec.ports).filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP") {
                // (Go's IntValue: a string target port that is a number
                // counts as one.)
                let target = match &p.target_port {
                    Some(IntOrString::Int(t)) => *t,
                    Some(IntOrString::String(s)) => s.parse().unwrap_or(0),
                    None => 0,
                };
                match Some(IntOrString::Int(target)).as_ref() {
                    Some(IntOrString::Int(t)) if *t != 0 => {
                        targets.insert(*t as u32);
                        mapped.insert(u32::from(p.port));
                    }
                    _ => {
                        targets.insert(u32::from(p.port));
                    }
                }
            }
        }
        for number in gw.servers.iter().filter_map(|s| s.port.as_ref()).map(|p| p.number) {
            if !targets.contains(&number) && !mapped.contains(&number) {
                let text = format!(
                    "The gateway is listening on a target port (port {number}) that is not defined in the Service associated with its workload instances (Pod selector {}). If you need to access the gateway port through the gateway Service, it will not be available.",
                    selector_text(&gw.selector)
                );
                out.push(Message::new(o, "Gateway", GATEWAY_PORT_NOT_ON_SERVICE, text));
            }
        }
    }
}

/// A DER element at `at`: (tag, content start, content end).
fn der(b: &[u8], at: usize) -> Option<(u8, usize, usize)> {
    let tag = *b.get(at)?;
    let first = *b.get(at + 1)?;
    let (len, start) = if first < 0x80 {
        (usize::from(first), at + 2)
    } else {
        let n = usize::from(first & 0x7f);
        let mut len = 0usize;
        for i in 0..n {
            len = len.checked_mul(256)? + usize::from(*b.get(at + 2 + i)?);
        }
        (len, at + 2 + n)
    };
    let end = start.checked_add(len).filter(|e| *e <= b.len())?;
    Some((tag, start, end))
}

/// An X.509 Time (UTCTime or GeneralizedTime, `Z`) as seconds since the
/// epoch.
fn der_time(tag: u8, s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let y: i64 = s.get(..2)?.parse().ok()?;
            (if y >= 50 { 1900 + y } else { 2000 + y }, s.get(2..)?)
        }
        0x18 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, min, sec) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3_600 + min * 60 + sec)
}

/// istiod's `ValidateCertificate`: the first PEM block holds a
/// certificate valid now.
fn valid_certificate(pem: &[u8], now: i64) -> bool {
    let text = String::from_utf8_lossy(pem);
    let mut lines = text.lines().skip_while(|l| !l.starts_with("-----BEGIN "));
    if lines.next().is_none() {
        return false;
    }
    let body: String = lines.take_while(|l| !l.starts_with("-----END ")).collect();
    let Some(der_bytes) = base64_decode(&body) else { return false };
    let validity = || -> Option<(i64, i64)> {
        let (_, cert, _) = der(&der_bytes, 0)?;
        let (_, tbs, _) = der(&der_bytes, cert)?;
        let mut at = tbs;
        // [0] version, when present.
        let (tag, _, end) = der(&der_bytes, at)?;
        if tag == 0xa0 {
            at = end;
        }
        for _ in 0..3 {
            // serialNumber, signature, issuer
            at = der(&der_bytes, at)?.2;
        }
        let (_, v, _) = der(&der_bytes, at)?;
        let (t1, s1, e1) = der(&der_bytes, v)?;
        let (t2, s2, e2) = der(&der_bytes, e1)?;
        Some((der_time(t1, &der_bytes[s1..e1])?, der_time(t2, &der_bytes[s2..e2])?))
    };
    validity().is_some_and(|(not_before, not_after)| not_before <= now && now <= not_after)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// istiod's `gateway.SecretAnalyzer`: a TLS server's `credentialName` no
/// Secret of the gateway workload's namespace has (IST0101 on the
/// Gateway), or one that holds no currently valid certificate (IST0161,
/// on the Gateway too); a selector matching no pod (IST0101).
pub(super) fn gateway_secrets(objects: &Objects, now: i64, out: &mut Vec<Message>) {
    for (o, gw) in gateways(&objects.istio) {
        // The namespace of the first pod the selector matches.
        let Some(ns) = objects.pods.iter().find(|p| selects(&gw.selector, &p.metadata.labels)).map(|p| p.metadata.ns())
        else {
            out.push(selector_not_found(o, &gw.selector));
            continue;
        };
        for cn in gw.servers.iter().filter_map(|s| s.tls.as_ref()).map(|t| t.credential_name.as_str()) {
            if cn.is_empty() {
                continue;
            }
            let Some(secret) = objects.secrets.iter().find(|s| s.metadata.ns() == ns && s.metadata.name == cn) else {
                let text = super::not_found("credentialName", cn);
                out.push(Message::new(o, "Gateway", super::REFERENCED_RESOURCE_NOT_FOUND, text));
                continue;
            };
            let data: istiod_config::credentials::SecretData =
                secret.data.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect();
            let valid = istiod_config::credentials::cert_info(&data).is_ok_and(|c| valid_certificate(&c.cert, now));
            if !valid {
                let text = format!(
                    "The credential referenced by the Gateway {} in namespace {ns} is invalid, which can cause the traffic not to work as expected.",
                    o.meta.name
                );
                out.push(Message::new(o, "Gateway", INVALID_GATEWAY_CREDENTIAL, text));
            }
        }
    }
}

/// istiod's `gateway.ConflictingGatewayAnalyzer`: Gateways that select the
/// same workloads (the same selector, or overlapping selectors that share
/// a pod) and declare a host on the same port and bind.
pub(super) fn conflicting_gateways(objects: &Objects, out: &mut Vec<Message>) {
    let all: Vec<(&IstioObject, &Gateway)> = gateways(&objects.istio).collect();
    let name = |o: &IstioObject| format!("{}/{}", o.meta.ns(), o.meta.name);
    for (o, gw) in &all {
        let mine = selector_text(&gw.selector);
        // The Gateways whose selector meets this one's.
        // (Only Gateways with servers are in istiod's map.)
        let same: Vec<&(&IstioObject, &Gateway)> = all
            .iter()
            .filter(|(_, x)| !x.servers.is_empty())
            .filter(|(_, x)| {
                let theirs = selector_text(&x.selector);
                theirs == mine
                    || ((theirs.contains(&mine) || mine.contains(&theirs))
                        && objects.pods.iter().any(|p| {
                            selects(&gw.selector, &p.metadata.labels) && selects(&x.selector, &p.metadata.labels)
                        }))
            })
            .collect();
        if !mine.is_empty() && same.is_empty() {
            out.push(selector_not_found(o, &gw.selector));
            continue;
        }
        for server in &gw.servers {
            let number = server.port.as_ref().map_or(0, |p| p.number);
            let mut conflicting: Vec<String> = same
                .iter()
                .filter(|(x, _)| name(x) != name(o))
                .filter(|(_, g)| {
                    g.servers
                        .iter()
                        .filter(|s| s.port.as_ref().map_or(0, |p| p.number) == number)
                        .any(|s| s.bind == server.bind && server.hosts.iter().any(|h| s.hosts.contains(h)))
                })
                .map(|(x, _)| name(x))
                .collect();
            if conflicting.is_empty() {
                continue;
            }
            conflicting.sort();
            conflicting.dedup();
            let text = format!(
                "Conflict with gateways {} (workload selector {mine}, port {number}, hosts {}).",
                conflicting.join(","),
                server.hosts.join(",")
            );
            out.push(Message::new(o, "Gateway", CONFLICTING_GATEWAYS, text));
        }
    }
}

#[cfg(test)]
pub(super) fn der_time_for_test(tag: u8, s: &[u8]) -> Option<i64> {
    der_time(tag, s)
}
