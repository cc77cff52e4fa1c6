//! Which listener, filter chain, virtual host, route and cluster a request
//! reaches in what a proxy is served: Envoy's matching as istio's
//! simulation harness (`pilot/pkg/simulation/traffic.go`) models it, so
//! that the upstream simulation cases can judge our output. Our own code;
//! the rules (the filter chain sieve, virtual host precedence, the errors)
//! are upstream's, and each is cited where it is implemented.

use std::collections::BTreeMap;
use std::net::IpAddr;

use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::core::v3::{Address, address, socket_address};
use istiod_proto::envoy::config::listener::v3::{
    FilterChain, FilterChainMatch, Listener, ListenerFilterChainMatchPredicate,
    listener_filter_chain_match_predicate::Rule,
};
use istiod_proto::envoy::config::route::v3::{
    Route, RouteConfiguration, VirtualHost, route, route_match::PathSpecifier, virtual_host::TlsRequirementType,
};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};
use istiod_proto::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext;
use istiod_proto::prost::Message;
use serde::Deserialize;

/// `simulation.Protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Protocol {
    #[default]
    Http,
    Http2,
    Tcp,
}

/// `simulation.TLSMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TlsMode {
    #[default]
    Plaintext,
    Tls,
    Mtls,
}

/// `simulation.CallMode` (none behaves as outbound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CallMode {
    Gateway,
    Outbound,
    Inbound,
}

/// `simulation.Call`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Call {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub port: u32,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(default)]
    pub tls: TlsMode,
    #[serde(default)]
    pub alpn: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub sni: String,
    #[serde(default)]
    pub mode: Option<CallMode>,
    #[serde(default)]
    pub mtls_secret: String,
    /// `CustomListenerValidations`, as data: what the matched chain's
    /// DownstreamTlsContext must hold.
    #[serde(default)]
    pub tls_context: Option<TlsContextCheck>,
}

/// The one CustomFilterChainValidation upstream uses
/// (`TestInboundSidecarTLSModes`'s `expectedTLSContext`): the first SDS
/// certificate's name and `require_client_certificate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsContextCheck {
    pub sds: String,
    pub require_client_certificate: bool,
}

/// `simulation.Err*`, by the names the data files use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SimError {
    NoListener,
    NoFilterChain,
    NoRoute,
    TlsRedirect,
    NoVirtualHost,
    MultipleFilterChain,
    ProtocolError,
    TlsError,
    MtlsError,
    /// A call the harness cannot make (ALPN on plaintext).
    InvalidCall,
    /// The call's `tls_context` check failed (upstream: the validation's
    /// own error).
    TlsContextMismatch,
}

/// `simulation.Result`: what a call reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Outcome {
    #[serde(default)]
    pub error: Option<SimError>,
    #[serde(default)]
    pub listener: String,
    #[serde(default)]
    pub filter_chain: String,
    #[serde(default)]
    pub route_config: String,
    #[serde(default)]
    pub virtual_host: String,
    #[serde(default)]
    pub route: String,
    #[serde(default)]
    pub cluster: String,
    #[serde(default)]
    pub strict: bool,
    #[serde(default)]
    pub skip: String,
}

impl Outcome {
    /// `Result.Matches`: the fields `want` sets (all of them when strict)
    /// equal; the error always. The differences, empty when it matches.
    pub(crate) fn mismatches(&self, want: &Outcome) -> Vec<String> {
        let mut out = Vec::new();
        if want.error != self.error {
            out.push(format!("error: want {:?} got {:?}", want.error, self.error));
        }
        let fields = [
            ("listener", &want.listener, &self.listener),
            ("filter_chain", &want.filter_chain, &self.filter_chain),
            ("route_config", &want.route_config, &self.route_config),
            ("virtual_host", &want.virtual_host, &self.virtual_host),
            ("route", &want.route, &self.route),
            ("cluster", &want.cluster, &self.cluster),
        ];
        for (name, w, g) in fields {
            if (want.strict || !w.is_empty()) && w != g {
                out.push(format!("{name}: want {w:?} got {g:?}"));
            }
        }
        out
    }
}

/// What one proxy is served.
pub(crate) struct Simulation {
    pub listeners: Vec<Listener>,
    pub clusters: Vec<Cluster>,
    pub routes: Vec<RouteConfiguration>,
}

const TLS_INSPECTOR: &str = "envoy.filters.listener.tls_inspector";
const HTTP_INSPECTOR: &str = "envoy.filters.listener.http_inspector";
const HCM: &str = "envoy.filters.network.http_connection_manager";
const TCP_PROXY: &str = "envoy.filters.network.tcp_proxy";

impl Call {
    /// `Call.FillDefaults`.
    fn fill_defaults(mut self) -> Call {
        if !self.host.is_empty() {
            self.headers.insert("Host".into(), self.host.clone());
        }
        if self.sni.is_empty() && self.tls == TlsMode::Tls {
            self.sni = self.host.clone();
        }
        if self.path.is_empty() {
            self.path = "/".into();
        }
        if self.address.is_empty() {
            self.address = "1.3.3.7".into();
        }
        if self.tls == TlsMode::Mtls && self.alpn.is_empty() {
            self.alpn = match self.protocol {
                Protocol::Http => "istio-http/1.1",
                Protocol::Http2 => "istio-h2",
                Protocol::Tcp => "istio",
            }
            .into();
        }
        if self.tls == TlsMode::Tls && self.alpn.is_empty() {
            self.alpn = match self.protocol {
                Protocol::Http => "http/1.1",
                Protocol::Http2 => "h2",
                Protocol::Tcp => "",
            }
            .into();
        }
        self
    }
}

impl Simulation {
    /// `Simulation.Run`.
    pub(crate) fn run(&self, call: &Call) -> Result<Outcome, String> {
        let mut input = call.clone().fill_defaults();
        let mut result = Outcome::default();
        if !input.alpn.is_empty() && input.tls == TlsMode::Plaintext {
            result.error = Some(SimError::InvalidCall);
            return Ok(result);
        }
        let Some(l) = self.match_listener(&input) else {
            result.error = Some(SimError::NoListener);
            return Ok(result);
        };
        result.listener = l.name.clone();
        let has_tls_inspector = has_filter_on_port(l, TLS_INSPECTOR, input.port);
        if !has_tls_inspector {
            // Without the TLS inspector Envoy never reads the handshake's ALPN.
            input.alpn.clear();
        }
        if has_filter_on_port(l, HTTP_INSPECTOR, input.port) && input.tls == TlsMode::Plaintext {
            match input.protocol {
                Protocol::Http => input.alpn = "http/1.1".into(),
                Protocol::Http2 => input.alpn = "h2c".into(),
                Protocol::Tcp => {}
            }
        }
        let fc = match match_filter_chain(&l.filter_chains, l.default_filter_chain.as_ref(), &input, has_tls_inspector)?
        {
            Ok(fc) => fc,
            Err(e) => {
                result.error = Some(e);
                return Ok(result);
            }
        };
        result.filter_chain = fc.name.clone();
        if fc.transport_socket.is_some() && input.tls == TlsMode::Plaintext {
            result.error = Some(SimError::TlsError);
            return Ok(result);
        }
        let secret = if input.mtls_secret.is_empty() { "default" } else { &input.mtls_secret };
        if fc.transport_socket.is_some() && requires_mtls(fc, secret)? != (input.tls == TlsMode::Mtls) {
            result.error = Some(SimError::MtlsError);
            return Ok(result);
        }
        if let Some(want) = &input.tls_context
            && !tls_context_is(fc, want)?
        {
            result.error = Some(SimError::TlsContextMismatch);
        }
        if let Some(hcm) = network_filter::<HttpConnectionManager>(fc, HCM)? {
            if input.tls != TlsMode::Plaintext && fc.transport_socket.is_none() {
                result.error = Some(SimError::ProtocolError);
                return Ok(result);
            }
            if input.protocol == Protocol::Tcp {
                result.error = Some(SimError::ProtocolError);
                return Ok(result);
            }
            let rc = match &hcm.route_specifier {
                Some(RouteSpecifier::RouteConfig(rc)) => Some(rc),
                Some(RouteSpecifier::Rds(rds)) => {
                    result.route_config = rds.route_config_name.clone();
                    self.routes.iter().find(|r| r.name == rds.route_config_name)
                }
                _ => None,
            };
            let host = input.headers.get("Host").cloned().unwrap_or_default();
            let Some(vh) = rc.and_then(|rc| match_virtual_host(rc, &host)) else {
                result.error = Some(SimError::NoVirtualHost);
                return Ok(result);
            };
            result.virtual_host = vh.name.clone();
            if vh.require_tls == TlsRequirementType::All as i32 && input.tls == TlsMode::Plaintext {
                result.error = Some(SimError::TlsRedirect);
                return Ok(result);
            }
            let Some(r) = match_route(vh, &input)? else {
                result.error = Some(SimError::NoRoute);
                return Ok(result);
            };
            result.route = r.name.clone();
            if let Some(route::Action::Route(action)) = &r.action
                && let Some(istiod_proto::envoy::config::route::v3::route_action::ClusterSpecifier::Cluster(c)) =
                    &action.cluster_specifier
            {
                result.cluster = c.clone();
            }
        } else if let Some(tcp) = network_filter::<TcpProxy>(fc, TCP_PROXY)?
            && let Some(tcp_proxy::ClusterSpecifier::Cluster(c)) = &tcp.cluster_specifier
        {
            result.cluster = c.clone();
        }
        Ok(result)
    }

    /// `matchListener`: the inbound call reaches `virtualInbound`; others the
    /// listener on their address and port, else on 0.0.0.0 and the port,
    /// else `virtualOutbound`.
    fn match_listener(&self, input: &Call) -> Option<&Listener> {
        if input.mode == Some(CallMode::Inbound) {
            return self.listeners.iter().find(|l| l.name == "virtualInbound");
        }
        let on = |addr: &str| self.listeners.iter().find(|l| match_address(l.address.as_ref(), addr, input.port));
        on(&input.address)
            .or_else(|| on("0.0.0.0"))
            .or_else(|| self.listeners.iter().find(|l| l.name == "virtualOutbound"))
    }
}

fn match_address(a: Option<&Address>, address: &str, port: u32) -> bool {
    let Some(address::Address::SocketAddress(sa)) = a.and_then(|a| a.address.as_ref()) else {
        return false;
    };
    sa.address == address && matches!(sa.port_specifier, Some(socket_address::PortSpecifier::PortValue(p)) if p == port)
}

/// `hasFilterOnPort`: the listener filter is present and not disabled for
/// this port.
fn has_filter_on_port(l: &Listener, filter: &str, port: u32) -> bool {
    match l.listener_filters.iter().rev().find(|f| f.name == filter) {
        None => false,
        Some(f) => match &f.filter_disabled {
            None => true,
            Some(p) => !evaluate_predicate(p, port),
        },
    }
}

/// `xdstest.EvaluateListenerFilterPredicates`.
fn evaluate_predicate(p: &ListenerFilterChainMatchPredicate, port: u32) -> bool {
    match &p.rule {
        None => true,
        Some(Rule::NotMatch(inner)) => !evaluate_predicate(inner, port),
        Some(Rule::OrMatch(set)) => set.rules.iter().any(|r| evaluate_predicate(r, port)),
        Some(Rule::AndMatch(set)) => set.rules.iter().all(|r| evaluate_predicate(r, port)),
        Some(Rule::AnyMatch(b)) => *b,
        Some(Rule::DestinationPortRange(r)) => {
            i64::from(port) >= i64::from(r.start) && i64::from(port) < i64::from(r.end)
        }
    }
}

fn typed<M: Message + Default>(any: Option<&istiod_proto::prost_types::Any>) -> Result<Option<M>, String> {
    match any {
        None => Ok(Some(M::default())),
        Some(a) => M::decode(a.value.as_slice()).map(Some).map_err(|e| format!("decoding {}: {e}", a.type_url)),
    }
}

/// The first network filter named `name`, decoded.
fn network_filter<M: Message + Default>(fc: &FilterChain, name: &str) -> Result<Option<M>, String> {
    use istiod_proto::envoy::config::listener::v3::filter::ConfigType;
    match fc.filters.iter().find(|f| f.name == name) {
        None => Ok(None),
        Some(f) => typed(match &f.config_type {
            Some(ConfigType::TypedConfig(a)) => Some(a),
            _ => None,
        }),
    }
}

/// `requiresMTLS`: the chain terminates TLS with the workload certificate
/// (`default`, or the call's secret) and requires a client certificate.
fn requires_mtls(fc: &FilterChain, secret: &str) -> Result<bool, String> {
    use istiod_proto::envoy::config::core::v3::transport_socket::ConfigType;
    let Some(ts) = &fc.transport_socket else { return Ok(false) };
    let Some(ConfigType::TypedConfig(any)) = &ts.config_type else { return Ok(false) };
    let t = DownstreamTlsContext::decode(any.value.as_slice()).map_err(|e| format!("DownstreamTlsContext: {e}"))?;
    let sds = t.common_tls_context.as_ref().map(|c| c.tls_certificate_sds_secret_configs.as_slice()).unwrap_or(&[]);
    Ok(sds.first().is_some_and(|s| s.name == secret) && t.require_client_certificate == Some(true))
}

/// `expectedTLSContext`: the chain terminates TLS with `want.sds` as its
/// first certificate and requires a client certificate as `want` says.
fn tls_context_is(fc: &FilterChain, want: &TlsContextCheck) -> Result<bool, String> {
    use istiod_proto::envoy::config::core::v3::transport_socket::ConfigType;
    let Some(ts) = &fc.transport_socket else { return Ok(false) };
    let Some(ConfigType::TypedConfig(any)) = &ts.config_type else { return Ok(false) };
    let t = DownstreamTlsContext::decode(any.value.as_slice()).map_err(|e| format!("DownstreamTlsContext: {e}"))?;
    let sds = t.common_tls_context.as_ref().map(|c| c.tls_certificate_sds_secret_configs.as_slice()).unwrap_or(&[]);
    Ok(sds.first().is_some_and(|s| s.name == want.sds)
        && t.require_client_certificate.unwrap_or(false) == want.require_client_certificate)
}

/// `matchRoute`: the first route whose path matches (upstream checks the
/// path only).
fn match_route<'a>(vh: &'a VirtualHost, input: &Call) -> Result<Option<&'a Route>, String> {
    for r in &vh.routes {
        let path = r.r#match.as_ref().and_then(|m| m.path_specifier.as_ref());
        let ok = match path {
            Some(PathSpecifier::Prefix(p)) => input.path.starts_with(p.as_str()),
            Some(PathSpecifier::PathSeparatedPrefix(p)) => input.path.starts_with(p.as_str()),
            Some(PathSpecifier::Path(p)) => input.path == *p,
            Some(PathSpecifier::SafeRegex(re)) => {
                // Go's MatchString: unanchored.
                let re = regex::Regex::new(&re.regex).map_err(|e| format!("invalid regex {}: {e}", re.regex))?;
                re.is_match(&input.path)
            }
            other => return Err(format!("unknown route path type {other:?}")),
        };
        if ok {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// `matchVirtualHost`: exact domain, then the longest `*suffix`, then the
/// longest `prefix*`, then `*`.
fn match_virtual_host<'a>(rc: &'a RouteConfiguration, host: &str) -> Option<&'a VirtualHost> {
    let mut host = host.to_string();
    if rc.ignore_port_in_host_matching
        && let Some((h, p)) = host.clone().rsplit_once(':')
        && p.parse::<u16>().is_ok()
        && !h.is_empty()
    {
        host = h.trim_start_matches('[').trim_end_matches(']').to_string();
    }
    if let Some(vh) = rc.virtual_hosts.iter().find(|vh| vh.domains.contains(&host)) {
        return Some(vh);
    }
    let mut best: Option<&VirtualHost> = None;
    let mut longest = 0;
    for vh in &rc.virtual_hosts {
        for d in &vh.domains {
            if d.starts_with('*') && host.len() >= d.len() && host.ends_with(&d[1..]) && d.len() > longest {
                best = Some(vh);
                longest = d.len();
            }
        }
    }
    if best.is_some() {
        return best;
    }
    longest = 0;
    for vh in &rc.virtual_hosts {
        for d in &vh.domains {
            if d.ends_with('*') && host.len() >= d.len() && host.starts_with(&d[..d.len() - 1]) && d.len() > longest {
                best = Some(vh);
                longest = d.len();
            }
        }
    }
    if best.is_some() {
        return best;
    }
    rc.virtual_hosts.iter().find(|vh| vh.domains.iter().any(|d| d == "*"))
}

/// `host.Name.SubsetOf`.
fn host_subset_of(n: &str, o: &str) -> bool {
    let (nw, ow) = (n.starts_with('*'), o.starts_with('*'));
    match (nw, ow) {
        (true, true) => n[1..].ends_with(&o[1..]),
        (true, false) => false,
        (false, true) => n.ends_with(&o[1..]),
        (false, false) => n == o,
    }
}

/// One step of the sieve (`filterRank`): the chains ranked best among those
/// that set the field; when none matches, those that leave it unset; when no
/// chain sets it, all.
fn filter_rank<'a>(
    chains: Vec<&'a FilterChain>,
    is_set: impl Fn(&FilterChainMatch) -> bool,
    rank: impl Fn(&FilterChainMatch) -> Result<usize, String>,
) -> Result<Vec<&'a FilterChain>, String> {
    let empty = FilterChainMatch::default();
    let m = |c: &'a FilterChain| c.filter_chain_match.as_ref().unwrap_or(&empty).clone();
    if !chains.iter().any(|c| is_set(&m(c))) {
        return Ok(chains);
    }
    let mut by_rank: BTreeMap<usize, Vec<&'a FilterChain>> = BTreeMap::new();
    for c in &chains {
        let r = rank(&m(c))?;
        if r > 0 {
            by_rank.entry(r).or_default().push(c);
        }
    }
    if let Some((_, best)) = by_rank.into_iter().next_back() {
        return Ok(best);
    }
    Ok(chains.into_iter().filter(|c| !is_set(&m(c))).collect())
}

/// `matchFilterChain`: Envoy's filter chain match sieve, over the criteria
/// istiod uses (destination port, prefix ranges, server names, transport
/// and application protocols). The inner error is the simulated outcome.
fn match_filter_chain<'a>(
    chains: &'a [FilterChain],
    default: Option<&'a FilterChain>,
    input: &Call,
    has_tls_inspector: bool,
) -> Result<Result<&'a FilterChain, SimError>, String> {
    let mut chains: Vec<&FilterChain> = chains.iter().collect();
    chains = filter_rank(
        chains,
        |m| m.destination_port.is_some(),
        |m| Ok(usize::from(m.destination_port == Some(input.port))),
    )?;
    let addr: Option<IpAddr> = input.address.parse().ok();
    chains = filter_rank(
        chains,
        |m| !m.prefix_ranges.is_empty(),
        |m| {
            let mut best = 0;
            for r in &m.prefix_ranges {
                let net: IpAddr = r.address_prefix.parse().map_err(|e| format!("cidr {}: {e}", r.address_prefix))?;
                let bits = r.prefix_len.unwrap_or(0) as usize;
                if addr.is_some_and(|a| cidr_contains(net, bits, a)) {
                    best = best.max(bits);
                }
            }
            Ok(best)
        },
    )?;
    chains = filter_rank(
        chains,
        |m| !m.server_names.is_empty(),
        |m| {
            let mut best = 0;
            for s in &m.server_names {
                if input.sni == *s {
                    best = usize::MAX;
                } else if host_subset_of(&input.sni, s) {
                    best = best.max(s.len());
                }
            }
            Ok(best)
        },
    )?;
    chains = filter_rank(
        chains,
        |m| !m.transport_protocol.is_empty(),
        |m| {
            let ok = if !has_tls_inspector {
                m.transport_protocol == "raw_buffer"
            } else {
                match m.transport_protocol.as_str() {
                    "tls" => matches!(input.tls, TlsMode::Tls | TlsMode::Mtls),
                    "raw_buffer" => input.tls == TlsMode::Plaintext,
                    _ => false,
                }
            };
            Ok(usize::from(ok))
        },
    )?;
    chains = filter_rank(
        chains,
        |m| !m.application_protocols.is_empty(),
        |m| Ok(usize::from(m.application_protocols.contains(&input.alpn))),
    )?;
    Ok(match chains.len() {
        0 => default.ok_or(SimError::NoFilterChain),
        1 => Ok(chains[0]),
        _ => Err(SimError::MultipleFilterChain),
    })
}

fn cidr_contains(net: IpAddr, bits: usize, a: IpAddr) -> bool {
    match (net, a) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits.min(32)) };
            (u32::from(n) & mask) == (u32::from(a) & mask)
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits.min(128)) };
            (u128::from(n) & mask) == (u128::from(a) & mask)
        }
        _ => false,
    }
}

/// The endpoint addresses of a cluster's inline load assignment
/// (`host:port`, or a pipe's path).
pub(crate) fn cluster_endpoints(c: &Cluster) -> Vec<String> {
    use istiod_proto::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
    let mut out = Vec::new();
    for l in c.load_assignment.iter().flat_map(|a| &a.endpoints) {
        for e in &l.lb_endpoints {
            if let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier {
                match ep.address.as_ref().and_then(|a| a.address.as_ref()) {
                    Some(address::Address::SocketAddress(sa)) => {
                        let port = match sa.port_specifier {
                            Some(socket_address::PortSpecifier::PortValue(p)) => p,
                            _ => 0,
                        };
                        out.push(format!("{}:{port}", sa.address));
                    }
                    Some(address::Address::Pipe(p)) => out.push(p.path.clone()),
                    _ => {}
                }
            }
        }
    }
    out
}
