//! The debug views computed from the model last published, in the JSON
//! shapes of the istiod structs they stand for (each function names its
//! Go source). What istiod keeps internally and istiod-rs does not (its
//! push context's caches, a consolidated rule's merge state) is left out
//! or shown from what istiod-rs has instead, as each function says.

use std::collections::BTreeMap;

use istiod_config::istio::{IstioObject, IstioSpec};
use serde_json::{Map, Value, json};

use istiod_mesh::model::{Health, Model, Resolution, Service};
use istiod_mesh::node::ProxyClass;

/// A connected proxy: `pod.namespace`, its addresses, whether it is a
/// sidecar.
pub(super) struct Connected {
    pub(super) name: String,
    pub(super) addresses: Vec<String>,
    pub(super) sidecar: bool,
}

/// The object's spec as written (its Kubernetes JSON's `spec`).
fn spec(o: &IstioObject) -> Value {
    o.raw.value().and_then(|mut v| v.get_mut("spec").map(Value::take)).unwrap_or(Value::Null)
}

/// Objects by namespace, each as istiod's `AuthorizationPolicy` and
/// `Telemetry` structs marshal them: name, namespace, spec (and the
/// annotations, where the struct has them).
fn by_namespace<'a>(
    objects: impl Iterator<Item = &'a IstioObject>,
    annotations: bool,
) -> BTreeMap<&'a str, Vec<Value>> {
    let mut by_ns: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for o in objects {
        let mut v = json!({ "name": o.meta.name, "namespace": o.meta.ns(), "spec": spec(o) });
        if annotations {
            v["annotations"] = if o.meta.annotations.is_empty() { Value::Null } else { json!(o.meta.annotations) };
        }
        by_ns.entry(o.meta.ns()).or_default().push(v);
    }
    by_ns
}

/// `/debug/authorizationz`: istiod's `AuthorizationDebug`
/// (`pilot/pkg/xds/debug.go`) around `model.AuthorizationPolicies`
/// (`pilot/pkg/model/authorization.go`): policies by namespace, each with
/// name, namespace, annotations and spec, and the root namespace.
pub(super) fn authorizationz(model: &Model) -> Value {
    let policies = model.security.iter().filter(|o| matches!(o.spec, IstioSpec::AuthorizationPolicy(_)));
    json!({ "authorization_policies": {
        "namespace_to_policies": by_namespace(policies, true),
        "root_namespace": model.mesh.root_namespace,
    }})
}

/// `/debug/telemetryz`: istiod's `TelemetryDebug` around
/// `model.Telemetries` (`pilot/pkg/model/telemetry.go`): Telemetry objects
/// by namespace (name, namespace, spec) and the root namespace.
pub(super) fn telemetryz(model: &Model) -> Value {
    json!({ "telemetries": {
        "namespace_to_telemetries": by_namespace(model.telemetries.iter(), false),
        "root_namespace": model.mesh.root_namespace,
    }})
}

/// `/debug/telemetryz?proxyID=`: `Telemetries.Debug`, the Telemetry specs
/// that apply to the proxy (`applicableTelemetries`) split into their
/// metrics, access logging and tracing parts, as `computedTelemetries`
/// marshals them.
pub(super) fn telemetryz_for(model: &Model, class: &ProxyClass) -> Value {
    let specs = istiod_mesh::model::telemetry::applicable(model, &class.namespace, Some(&class.labels));
    let part = |key: &str| -> Vec<Value> {
        specs.iter().flat_map(|s| s[key].as_array().cloned().unwrap_or_default()).collect()
    };
    json!({ "Metrics": part("metrics"), "Logging": part("accessLogging"), "Tracing": part("tracing") })
}

/// A service as `/debug/registryz` shows it, without its endpoints.
fn service_json(s: &Service) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("endpoints");
    }
    v
}

/// The Sidecar object that applies to `class`, if any.
fn sidecar_object<'a>(model: &'a Model, class: &ProxyClass) -> Option<&'a IstioObject> {
    let chosen = istiod_mesh::translate::scope::sidecar(model, class)?;
    model.sidecars.iter().find(|o| matches!(&o.spec, IstioSpec::Sidecar(s) if std::ptr::eq(s, chosen)))
}

/// `/debug/sidecarz?proxyID=`: the proxy's `SidecarScope` as its
/// `MarshalJSON` writes it (`pilot/pkg/model/sidecar.go`): name (istiod's
/// `default-sidecar` when no Sidecar applies), namespace, outbound
/// traffic policy, the services it sees (by hostname too), the Sidecar's
/// spec, and the DestinationRules in force per host (istiod marshals its
/// consolidated rules as empty objects; here each names its rule).
pub(super) fn sidecarz(model: &Model, class: &ProxyClass) -> Value {
    let object = sidecar_object(model, class);
    let services: Vec<&Service> = model
        .services
        .values()
        .map(|s| &**s)
        .filter(|s| istiod_mesh::translate::scope::visible(model, class, s))
        .collect();
    let jsons: Vec<Value> = services.iter().map(|s| service_json(s)).collect();
    let by_host: Map<String, Value> =
        services.iter().zip(&jsons).map(|(s, j)| (s.hostname.to_string(), j.clone())).collect();
    let rules = model.destination_rules();
    let mut destination_rules = Map::new();
    for s in &services {
        if let Some(i) = model.rule_index_for(&class.namespace, &class.labels, &s.hostname) {
            let r = rules.get(i);
            destination_rules.insert(
                s.hostname.to_string(),
                json!([{ "names": r.names, "namespace": r.namespace, "host": r.host }]),
            );
        }
    }
    let mode = istiod_mesh::translate::scope::outbound_policy(model, class).as_str();
    json!({
        "name": object.map_or("default-sidecar", |o| o.meta.name.as_str()),
        "namespace": &*class.namespace,
        "version": "",
        "outboundTrafficPolicy": { "mode": mode },
        "services": jsons,
        "servicesByHostname": by_host,
        "sidecar": object.map(spec),
        "destinationRules": destination_rules,
    })
}

/// istiod's `/debug/networkz`: the east-west gateways (`AllGateways`, its
/// Go field names).
pub(super) fn networkz(m: &Model) -> Value {
    let gws = m.network_gateways.all.iter().map(|g| {
        json!({
            "Network": g.network,
            "Cluster": g.cluster,
            "Addr": g.addr,
            "Port": g.port,
            "HBONEPort": g.hbone_port,
            "ServiceAccount": {"Namespace": "", "Name": ""},
        })
    });
    Value::Array(gws.collect())
}

/// An endpoint's cluster (its label), else `local`.
fn cluster_of<'a>(e: &'a istiod_mesh::model::Endpoint, local: &'a str) -> &'a str {
    e.labels.get(istiod_mesh::model::network::CLUSTER_LABEL).map_or(local, String::as_str)
}

/// `/debug/endpointShardz` (and `/debug/endpointz`): istiod's
/// `EndpointIndex.Shardz` (`pilot/pkg/model/endpointshards.go`): by
/// hostname and namespace, the endpoints of each registry shard
/// (`Kubernetes/<cluster>` for Services, `External/<cluster>` for
/// ServiceEntries) as `IstioEndpoint`s (Go field names, no JSON tags), and
/// the service accounts seen. Only services whose endpoints the control
/// plane knows have shards.
pub(super) fn endpoint_shardz(model: &Model, cluster_id: &str) -> Value {
    let mut out: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for s in model.services.values().filter(|s| s.resolution == Resolution::ClientSideLb) {
        let provider = if s.kubernetes { "Kubernetes" } else { "External" };
        let mut shards: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (e, v) in s.endpoints.iter().map(|e| {
            let port_name = s.ports.iter().find(|p| p.port == e.service_port).map_or("", |p| p.name.as_str());
            let l = &e.locality;
            let label = [l.region.as_str(), &l.zone, &l.subzone].join("/");
            let v = json!({
                "Labels": e.labels,
                "Addresses": [e.address],
                "ServicePortName": port_name,
                "LegacyClusterPortKey": 0,
                "ServiceAccount": e.service_account,
                "Network": e.network,
                "Locality": { "Label": label.trim_end_matches('/'), "ClusterID": cluster_of(e, cluster_id) },
                "EndpointPort": e.port,
                "LbWeight": 0,
                "TLSMode": e.tls_mode,
                "Namespace": s.namespace,
                "WorkloadName": e.pod.as_deref().unwrap_or(""),
                "HostName": "",
                "SubDomain": "",
                // model.HealthStatus: Healthy 1, UnHealthy 2, Draining 3,
                // Terminating 4.
                "HealthStatus": e.health.istiod_number(s.keeps_draining(&model.mesh)),
                "SendUnhealthyEndpoints": s.supports_unhealthy(&model.mesh),
                "NodeName": "",
            });
            (e, v)
        }) {
            shards.entry(format!("{provider}/{}", cluster_of(e, cluster_id))).or_default().push(v);
        }
        if shards.is_empty() {
            shards.insert(format!("{provider}/{cluster_id}"), Vec::new());
        }
        let accounts: Map<String, Value> = s
            .endpoints
            .iter()
            .filter(|e| !e.service_account.is_empty())
            .map(|e| (e.service_account.clone(), json!({})))
            .collect();
        out.entry(s.hostname.to_string())
            .or_default()
            .insert(s.namespace.clone(), json!({ "Shards": shards, "ServiceAccounts": accounts }));
    }
    json!(out)
}

/// `/debug/instancesz`: istiod's map of proxy id to its `ServiceTarget`s
/// (`pilot/pkg/model/service.go`): the service ports whose endpoints are
/// the proxy's addresses, each with the service and the target port.
pub(super) fn instancesz(model: &Model, proxies: &[Connected]) -> Value {
    let mut out = Map::new();
    for Connected { name: id, addresses, .. } in proxies {
        let mut targets = Vec::new();
        for s in model.services.values() {
            for e in s.endpoints.iter().filter(|e| addresses.contains(&e.address)) {
                let Some(p) = s.ports.iter().find(|p| p.port == e.service_port) else { continue };
                targets.push(json!({
                    "Service": service_json(s),
                    "Port": {
                        "ServicePort": { "name": p.name, "port": p.port, "protocol": p.protocol },
                        "TargetPort": e.port,
                    },
                }));
            }
        }
        out.insert(id.clone(), Value::Array(targets));
    }
    Value::Object(out)
}

/// istiod's push-status metrics (`push_context.go`) istiod-rs records, in
/// the order `/debug/push_status` and `/metrics` list them, with their help.
pub(super) const PROXY_STATUS: [(&str, &str); 7] = [
    ("pilot_conflict_inbound_listener", "Number of conflicting inbound listeners."),
    (
        "pilot_conflict_outbound_listener_tcp_over_current_tcp",
        "Number of conflicting tcp listeners with current tcp listener.",
    ),
    ("pilot_destrule_subsets", "Duplicate subsets across destination rules for same host"),
    (
        "pilot_dns_cluster_without_endpoints",
        "DNS clusters without endpoints caused by the endpoint field in STRICT_DNS type cluster is not set or the corresponding subset cannot select any endpoint",
    ),
    ("pilot_eds_no_instances", "Number of clusters without instances."),
    ("pilot_endpoint_not_ready", "Endpoint found in unready state."),
    ("pilot_no_ip", "Pods not found in the endpoint table, possibly invalid."),
];

/// One entry of a push-status metric (istiod's `ProxyPushStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Status {
    pub(super) proxy: String,
    pub(super) message: String,
}

/// The last push context's `ProxyStatus` (`pilot/pkg/model/push_context.go`
/// AddMetric): per metric, the offending keys. From the model:
/// - `pilot_conflict_outbound_listener_tcp_over_current_tcp`: a TCP
///   service port whose address and port another service's already took
///   (`listener.go`, the later one by hostname);
/// - `pilot_conflict_inbound_listener`: a pod port two services select
///   with different protocols (`listener_inbound.go`);
/// - `pilot_eds_no_instances`, `pilot_destrule_subsets`;
/// - `pilot_endpoint_not_ready`: pods whose endpoints are not ready
///   (`endpointslice.go`);
///
/// and from the connected proxies:
/// - `pilot_no_ip`: sidecars no service's endpoint names
///   (`GetProxyServiceTargets`).
pub(super) fn proxy_status(model: &Model, proxies: &[Connected]) -> BTreeMap<&'static str, BTreeMap<String, Status>> {
    let mut out: BTreeMap<&'static str, BTreeMap<String, Status>> = BTreeMap::new();
    let mut add = |metric: &'static str, key: String, proxy: &str, message: String| {
        out.entry(metric).or_default().insert(key, Status { proxy: proxy.to_owned(), message });
    };
    let mut tcp: BTreeMap<(String, u16), &str> = BTreeMap::new();
    for s in model.services.values() {
        for p in &s.ports {
            if istiod_mesh::translate::listener::is_tcp_listener(s, p) {
                for vip in &s.vips {
                    match tcp.get(&(vip.clone(), p.port)) {
                        Some(first) => add(
                            "pilot_conflict_outbound_listener_tcp_over_current_tcp",
                            format!("{vip}:{}", p.port),
                            "",
                            format!("Listener={vip}:{} AcceptedTCP={first} RejectedTCP={}", p.port, s.hostname),
                        ),
                        None => {
                            tcp.insert((vip.clone(), p.port), &s.hostname);
                        }
                    }
                }
            }
        }
    }
    // Pod ports by (address, port): the pod, and the protocols the services
    // give the port (with a service of each).
    type PodPort<'a> = (Option<&'a str>, BTreeMap<String, &'a str>);
    let mut pod_ports: BTreeMap<(&str, u16), PodPort<'_>> = BTreeMap::new();
    for s in model.services.values() {
        for e in &s.endpoints {
            let Some(p) = s.ports.iter().find(|p| p.port == e.service_port) else { continue };
            let entry = pod_ports.entry((e.address.as_str(), e.port)).or_default();
            entry.0 = entry.0.or(e.pod.as_deref());
            entry.1.insert(format!("{:?}", p.protocol), &s.hostname);
            if e.health != Health::Healthy {
                let pod = format!("{}.{}", e.pod.as_deref().unwrap_or(&e.address), s.namespace);
                add("pilot_endpoint_not_ready", pod.clone(), &pod, String::new());
            }
        }
    }
    for ((address, port), (pod, protocols)) in &pod_ports {
        if protocols.len() > 1 {
            let services: Vec<&str> = protocols.values().copied().collect();
            add(
                "pilot_conflict_inbound_listener",
                format!("{}:{port}", pod.unwrap_or(address)),
                pod.unwrap_or(address),
                format!("Conflicting inbound listener:{port}. existing: {}, incoming: {}", services[0], services[1]),
            );
        }
    }
    for (port, s) in model.clusters_without_instances() {
        add("pilot_eds_no_instances", format!("outbound|{port}||{}", s.hostname), "", String::new());
    }
    // istiod's `cluster_builder.go`: a DNS cluster (or a subset of one)
    // with no endpoint to resolve.
    let rules = model.destination_rules();
    for svc in model.services.values().filter(|s| matches!(s.resolution, Resolution::Dns | Resolution::DnsRoundRobin)) {
        for p in &svc.ports {
            let on_port: Vec<&istiod_mesh::model::Endpoint> =
                svc.endpoints.iter().filter(|e| e.service_port == p.port).collect();
            if on_port.is_empty() {
                let cluster = format!("outbound|{}||{}", p.port, svc.hostname);
                add("pilot_dns_cluster_without_endpoints", cluster, "", String::new());
            }
            for i in rules.candidates(&svc.hostname) {
                for subset in &rules.get(i).rule.subsets {
                    let selects = |e: &&&istiod_mesh::model::Endpoint| {
                        subset.labels.iter().all(|(k, v)| e.labels.get(k) == Some(v))
                    };
                    if !on_port.iter().any(|e| selects(&e)) {
                        let cluster = format!("outbound|{}|{}|{}", p.port, subset.name, svc.hostname);
                        add("pilot_dns_cluster_without_endpoints", cluster, "", String::new());
                    }
                }
            }
        }
    }
    for h in &rules.duplicate_subsets {
        add(
            "pilot_destrule_subsets",
            h.clone(),
            "",
            format!("Duplicate subset found while merging destination rules for {h}"),
        );
    }
    let addresses: std::collections::HashSet<&str> =
        model.services.values().flat_map(|s| s.endpoints.iter().map(|e| e.address.as_str())).collect();
    for p in proxies.iter().filter(|p| p.sidecar) {
        if !p.addresses.iter().any(|ip| addresses.contains(ip.as_str())) {
            add("pilot_no_ip", p.name.clone(), &p.name, String::new());
        }
    }
    out
}

/// `/debug/push_status`: [`proxy_status`] as `StatusJSON` writes it, each
/// entry's `proxy` and `message` left out when empty.
pub(super) fn push_status(model: &Model, proxies: &[Connected]) -> Value {
    let status = proxy_status(model, proxies);
    json!(
        status
            .into_iter()
            .map(|(metric, entries)| {
                let entries: Map<String, Value> = entries
                    .into_iter()
                    .map(|(k, s)| {
                        let mut o = Map::new();
                        if !s.proxy.is_empty() {
                            o.insert("proxy".into(), json!(s.proxy));
                        }
                        if !s.message.is_empty() {
                            o.insert("message".into(), json!(s.message));
                        }
                        (k, Value::Object(o))
                    })
                    .collect();
                (metric.to_owned(), Value::Object(entries))
            })
            .collect::<Map<String, Value>>()
    )
}

/// An object a resource was built from, as `/debug/explain` names it:
/// kind, namespace, name, its `resourceVersion` when the source gave one,
/// and what it contributed.
fn source(o: &IstioObject, role: &str) -> Value {
    let version = o.raw.value().and_then(|v| v.pointer("/metadata/resourceVersion").cloned()).unwrap_or(Value::Null);
    json!({
        "kind": o.kind().name(),
        "namespace": o.meta.ns(),
        "name": o.meta.name,
        "resourceVersion": version,
        "role": role,
    })
}

/// The object behind a service: its ServiceEntry, or its Kubernetes
/// Service (named by the service's own fields).
fn service_source(config: &[IstioObject], s: &Service) -> Value {
    if !s.kubernetes {
        let entry = config.iter().find(|o| {
            o.meta.ns() == s.namespace
                && matches!(&o.spec, IstioSpec::ServiceEntry(se) if se.hosts.iter().any(|h| **h == *s.hostname))
        });
        if let Some(o) = entry {
            return source(o, "the service (its hosts, ports, endpoints)");
        }
    }
    json!({ "kind": "Service", "namespace": s.namespace, "name": s.name, "role": "the service (its ports; endpoints from its EndpointSlices)" })
}

/// Why `class` sees service `s`, or not: the Sidecar in force (istiod's
/// `default-sidecar` when none), the service's `exportTo`, the outcome.
fn visibility(model: &Model, class: &ProxyClass, s: &Service) -> Value {
    let sidecar = sidecar_object(model, class);
    let visible = istiod_mesh::translate::scope::visible(model, class, s);
    let export_to: Vec<&str> =
        if s.export_to.is_empty() { vec!["*"] } else { s.export_to.iter().map(String::as_str).collect() };
    let exported = istiod_mesh::translate::scope::exported(s, &class.namespace);
    let reason = match (visible, exported) {
        (true, _) => "exported to the proxy's namespace and imported by its Sidecar scope".to_owned(),
        (false, false) => format!("not exported to namespace {} (exportTo {:?})", class.namespace, export_to),
        (false, true) => format!(
            "exported, but the Sidecar {} does not import it (egress hosts)",
            sidecar.map_or("default-sidecar", |o| o.meta.name.as_str())
        ),
    };
    json!({
        "sidecar": sidecar.map_or_else(|| json!("default-sidecar"), |o| source(o, "the proxy's Sidecar scope")),
        "exportTo": export_to,
        "visible": visible,
        "reason": reason,
    })
}

/// The DestinationRules merged into the one in force for `class` and
/// `host`, as sources.
fn destination_rules(model: &Model, config: &[IstioObject], class: &ProxyClass, host: &str) -> Vec<Value> {
    let Some(i) = model.rule_index_for(&class.namespace, &class.labels, host) else { return Vec::new() };
    let rules = model.destination_rules();
    let r = rules.get(i);
    r.names
        .iter()
        .filter_map(|n| {
            config.iter().find(|o| {
                o.meta.ns() == r.namespace && o.meta.name == *n && matches!(o.spec, IstioSpec::DestinationRule(_))
            })
        })
        .map(|o| source(o, &format!("traffic policy and subsets for {}", r.host)))
        .collect()
}

/// `/debug/explain?proxyID=&type=&name=` (beyond istiod): which objects a
/// resource served to the proxy of `class` was built from, and why the
/// proxy sees it. `kind` is the resource's type; `config` the Istio objects
/// in force.
pub(super) fn explain(
    model: &Model,
    config: &[IstioObject],
    class: &ProxyClass,
    kind: istiod_xds::ads::Kind,
    name: &str,
) -> Value {
    use istiod_xds::ads::Kind;
    let mut sources: Vec<Value> = Vec::new();
    let mut visibility_of = Map::new();
    let note;
    let mut add_service = |sources: &mut Vec<Value>, s: &Service| {
        sources.push(service_source(config, s));
        visibility_of.insert(s.hostname.to_string(), visibility(model, class, s));
    };
    let outbound = name.strip_prefix("outbound|").map(|rest| rest.splitn(3, '|').collect::<Vec<_>>());
    match (kind, outbound.as_deref()) {
        (Kind::Cluster | Kind::Endpoint, Some([port, subset, host])) => match model.services.get(*host) {
            Some(s) => {
                add_service(&mut sources, s);
                sources.extend(destination_rules(model, config, class, host));
                note = format!(
                    "port {port}{} of {host}",
                    if subset.is_empty() { String::new() } else { format!(", subset {subset}") }
                );
            }
            None => note = format!("no service {host} in the registry"),
        },
        (Kind::Route, _) | (Kind::Listener, _) if name.parse::<u16>().is_ok() || name.starts_with("0.0.0.0_") => {
            let port: u16 = name.trim_start_matches("0.0.0.0_").parse().unwrap_or(0);
            for s in model.services.values().filter(|s| s.ports.iter().any(|p| p.port == port)) {
                if !istiod_mesh::translate::scope::visible(model, class, s) {
                    continue;
                }
                add_service(&mut sources, s);
                if let Some((o, _)) = model.virtual_service(&s.hostname) {
                    sources.push(source(o, &format!("routes for {}", s.hostname)));
                }
            }
            note = format!("the HTTP routes of port {port}: every service with the port the proxy sees");
        }
        (Kind::Listener, _) if name == "virtualInbound" => {
            for o in model.security.iter().chain(model.telemetries.iter()) {
                let ns = o.meta.ns();
                if ns == &*class.namespace || ns == model.mesh.root_namespace {
                    sources.push(source(
                        o,
                        "policy of the workload's namespace or the root namespace (selectors permitting)",
                    ));
                }
            }
            for s in model.services.values() {
                if !s.selector.is_empty()
                    && s.namespace == *class.namespace
                    && istiod_mesh::model::has_labels(&class.labels, &s.selector)
                {
                    sources.push(service_source(config, s));
                }
            }
            note = "the workload's inbound ports (services selecting its labels) and its namespace's and the root namespace's security and telemetry policies".into();
        }
        (Kind::Listener, _) => {
            let (vip, port) = name.rsplit_once('_').unwrap_or((name, ""));
            let port: u16 = port.parse().unwrap_or(0);
            for s in model
                .services
                .values()
                .filter(|s| s.vips.iter().any(|v| v == vip) && s.ports.iter().any(|p| p.port == port))
            {
                add_service(&mut sources, s);
            }
            note = format!("the TCP listener of address {vip} port {port}");
        }
        _ => note = "no explanation for this kind of resource yet".into(),
    }
    // EnvoyFilters whose patches may change it, in the order they apply.
    let envoy_filters = istiod_mesh::generator::patches::filters_touching(model, class, kind, name);
    json!({
        "type": kind.type_url(),
        "name": name,
        "proxy": { "namespace": &*class.namespace, "labels": class.labels.iter().map(|(k, v)| (k.to_string(), json!(&**v))).collect::<Map<String, Value>>() },
        "summary": note,
        "sources": sources,
        "visibility": visibility_of,
        "envoyFilters": envoy_filters.iter().map(|f| &**f).collect::<Vec<_>>(),
    })
}

/// istiod's `pilot_duplicate_envoy_clusters` and `pilot_vservice_dup_domain`,
/// counted from the configuration where istiod counts them per proxy
/// build: the (host, port) clusters more than one ServiceEntry declares,
/// and the hosts more than one mesh VirtualService claims (the later ones'
/// virtual hosts are dropped, istiod's `dedupeDomains`).
pub(super) fn duplicates(istio: &[IstioObject], domain: &str) -> (usize, usize) {
    let mut clusters: BTreeMap<(String, u32), usize> = BTreeMap::new();
    let mut hosts: BTreeMap<String, usize> = BTreeMap::new();
    for o in istio {
        let ns = o.meta.ns();
        match &o.spec {
            IstioSpec::ServiceEntry(se) => {
                for h in &se.hosts {
                    for p in &se.ports {
                        *clusters.entry((h.clone(), p.number)).or_default() += 1;
                    }
                }
            }
            IstioSpec::VirtualService(vs) if vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == "mesh") => {
                for h in &vs.hosts {
                    let fqdn = if h.contains('.') || h.starts_with('*') {
                        h.clone()
                    } else {
                        format!("{h}.{ns}.svc.{domain}")
                    };
                    *hosts.entry(fqdn).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    (clusters.values().filter(|n| **n > 1).count(), hosts.values().filter(|n| **n > 1).count())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use istiod_mesh::testing::class;

    fn model() -> Model {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        let loaded = istiod_kubewatch::config_dir::load(&dir).unwrap();
        let mut m = Model::build(&loaded.objects, "cluster.local");
        let objects = istiod_mesh::testing::istio_objects(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: deny-all\n  namespace: bookinfo\n\
             spec: {}\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: only-own\n  namespace: bookinfo\n\
             spec:\n  egress:\n  - hosts: [\"./*\"]\n",
        );
        let (security, sidecars): (Vec<_>, Vec<_>) =
            objects.into_iter().partition(|o| matches!(o.spec, IstioSpec::AuthorizationPolicy(_)));
        m.security = Arc::new(security);
        m.sidecars = Arc::new(sidecars);
        m
    }

    #[test]
    fn authorization_policies_by_namespace() {
        let v = authorizationz(&model());
        let p = &v["authorization_policies"]["namespace_to_policies"]["bookinfo"][0];
        assert_eq!(p["name"], "deny-all");
        assert_eq!(p["spec"], json!({}));
        assert_eq!(v["authorization_policies"]["root_namespace"], "istio-system");
    }

    #[test]
    fn sidecar_scope_names_its_sidecar_and_services() {
        let m = model();
        let v = sidecarz(&m, &class("bookinfo", &[]));
        assert_eq!(v["name"], "only-own");
        assert_eq!(v["sidecar"]["egress"][0]["hosts"][0], "./*");
        let hosts: Vec<&String> = v["servicesByHostname"].as_object().unwrap().keys().collect();
        assert!(!hosts.is_empty());
        assert!(hosts.iter().all(|h| h.ends_with(".bookinfo.svc.cluster.local")), "{hosts:?}");
        let other = sidecarz(&m, &class("elsewhere", &[]));
        assert_eq!(other["name"], "default-sidecar");
        assert!(other["sidecar"].is_null());
        assert_eq!(other["outboundTrafficPolicy"]["mode"], "ALLOW_ANY");
    }

    #[test]
    fn endpoint_shards_and_instances() {
        let m = model();
        let v = endpoint_shardz(&m, "Kubernetes");
        let (host, by_ns) = v.as_object().unwrap().iter().next().unwrap();
        let shard = by_ns.as_object().unwrap().values().next().unwrap();
        let eps = shard["Shards"]["Kubernetes/Kubernetes"].as_array().unwrap();
        assert!(!eps.is_empty(), "{host}: {shard}");
        let ip = eps[0]["Addresses"][0].as_str().unwrap().to_owned();
        let connected =
            |name: &str, ip: &str| super::Connected { name: name.into(), addresses: vec![ip.into()], sidecar: true };
        let inst = instancesz(&m, &[connected("p.bookinfo", &ip)]);
        assert!(!inst["p.bookinfo"].as_array().unwrap().is_empty(), "{inst}");
        assert_eq!(instancesz(&m, &[connected("q.x", "192.0.2.1")])["q.x"], json!([]));
        // A sidecar whose address no endpoint names; the draining pod.
        let status = push_status(&m, &[connected("p.bookinfo", &ip), connected("lost.x", "192.0.2.1")]);
        assert_eq!(status["pilot_no_ip"], json!({"lost.x": {"proxy": "lost.x"}}), "{status}");
        assert_eq!(status["pilot_endpoint_not_ready"].as_object().unwrap().len(), 1, "{status}");
    }

    #[test]
    fn explain_names_the_objects_behind_a_cluster() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        let loaded = istiod_kubewatch::config_dir::load(&dir).unwrap();
        let m = Model::build(&loaded.objects, "cluster.local");
        let config = loaded.objects.istio.clone();
        let who = class("bookinfo", &[("app", "productpage")]);
        let kind = istiod_xds::ads::Kind::Cluster;
        let v = explain(&m, &config, &who, kind, "outbound|9080|v1|reviews.bookinfo.svc.cluster.local");
        let kinds: Vec<&str> = v["sources"].as_array().unwrap().iter().map(|s| s["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Service", "DestinationRule"], "{v}");
        assert_eq!(v["sources"][1]["namespace"], "bookinfo");
        let why = &v["visibility"]["reviews.bookinfo.svc.cluster.local"];
        assert_eq!(why["visible"], true, "{v}");
        let routes = explain(&m, &config, &who, istiod_xds::ads::Kind::Route, "9080");
        assert!(routes["sources"].as_array().unwrap().iter().any(|s| s["kind"] == "VirtualService"), "{routes}");
        let gone = explain(&m, &config, &who, kind, "outbound|80||nowhere.example");
        assert_eq!(gone["summary"], "no service nowhere.example in the registry");
    }

    /// /debug/explain names the EnvoyFilters whose patches may change the
    /// resource, and only those.
    #[test]
    fn explain_names_the_envoy_filters_that_patch_a_resource() {
        let m = istiod_mesh::testing::model_in(
            "",
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
             spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}\n---\n\
             apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: timeouts, namespace: istio-system}\n\
             spec: {configPatches: [{applyTo: CLUSTER, match: {cluster: {service: web.shop.svc.cluster.local}}, \
             patch: {operation: MERGE, value: {connect_timeout: 2s}}}]}\n---\n\
             apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: other, namespace: istio-system}\n\
             spec: {configPatches: [{applyTo: CLUSTER, match: {cluster: {service: db.shop.svc.cluster.local}}, \
             patch: {operation: MERGE, value: {connect_timeout: 2s}}}]}\n---\n\
             apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: extra, namespace: istio-system}\n\
             spec: {configPatches: [{applyTo: LISTENER, match: {context: SIDECAR_OUTBOUND}, \
             patch: {operation: ADD, value: {name: extra}}}]}\n",
        );
        let who = class("shop", &[("app", "client")]);
        let kind = istiod_xds::ads::Kind::Cluster;
        let v = explain(&m, &[], &who, kind, "outbound|80||web.shop.svc.cluster.local");
        assert_eq!(v["envoyFilters"], json!(["istio-system/timeouts"]), "{v}");
        let none = explain(&m, &[], &who, istiod_xds::ads::Kind::Route, "80");
        assert_eq!(none["envoyFilters"], json!([]));
        // A LISTENER ADD adds a listener; it changes none of the others.
        let listener = explain(&m, &[], &who, istiod_xds::ads::Kind::Listener, "0.0.0.0_80");
        assert_eq!(listener["envoyFilters"], json!([]), "{listener}");
    }

    #[test]
    fn listener_conflicts_are_recorded() {
        let m = istiod_mesh::testing::model_in(
            "",
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a, namespace: ns}\n\
             spec: {hosts: [a.example], addresses: [240.0.0.1], ports: [{number: 5432, name: tcp, protocol: TCP}], resolution: DNS}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: b, namespace: ns}\n\
             spec: {hosts: [b.example], addresses: [240.0.0.1], ports: [{number: 5432, name: tcp, protocol: TCP}], resolution: DNS}\n",
        );
        let status = proxy_status(&m, &[]);
        let conflicts = &status["pilot_conflict_outbound_listener_tcp_over_current_tcp"];
        assert_eq!(conflicts.keys().collect::<Vec<_>>(), ["240.0.0.1:5432"]);
        assert!(conflicts["240.0.0.1:5432"].message.contains("RejectedTCP=b.example"), "{conflicts:?}");
    }
}
