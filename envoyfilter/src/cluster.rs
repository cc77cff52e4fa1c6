//! CLUSTER patches (cluster_patch.go): MERGE (and
//! MERGE_AND_REPLACE_LIST) into the clusters a patch matches, a
//! transport socket of the same name merged at its typed config; REMOVE
//! drops the cluster; ADD appends a cluster (with context ANY, only for a
//! sidecar's outbound side and gateways). A cluster matches by name, or by
//! the port, subset and service its name (`direction|port|subset|host`)
//! carries, an inbound cluster's service being the proxy's.

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use crate::filters::{Applied, ApplyTo, Context, Operation, Patch};
use crate::merge::{merge, merge_any};
use crate::spec::ClusterMatch;

/// What became of one patch on one resource (istiod's
/// `pilot_envoy_filter_status`: applied or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The patch's filter (`namespace/name`).
    pub key: std::sync::Arc<str>,
    /// What it targets (`cluster`, `listener`, ...: istiod's patch label).
    pub kind: &'static str,
    /// Whether it changed the resource.
    pub applied: bool,
}

/// istiod's `ParseSubsetKey`: direction, port, subset and host of
/// `outbound|80|v1|foo.bar`.
pub fn parse_name(name: &str) -> Option<(&str, u32, &str, &str)> {
    // The DNS SRV form (`outbound_.80_.v1_.foo.bar`) separates by `_.`.
    let mut parts: Box<dyn Iterator<Item = &str>> =
        if name.contains('|') { Box::new(name.split('|')) } else { Box::new(name.splitn(4, "_.")) };
    let (direction, port, subset, host) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some((direction, port.parse().unwrap_or(0), subset, host))
}

/// `clusterMatch`: `hosts` are the proxy's services for an inbound cluster.
pub fn matches(name: &str, m: Option<&ClusterMatch>, hosts: &[&str]) -> bool {
    let Some(m) = m else { return true };
    if !m.name.is_empty() {
        return m.name == name;
    }
    let (direction, port, subset, host) = parse_name(name).unwrap_or(("", 0, "", ""));
    let inbound = direction == "inbound" && !hosts.is_empty();
    if !m.subset.is_empty() && m.subset != subset {
        return false;
    }
    if !m.service.is_empty() && !(if inbound { hosts.contains(&m.service.as_str()) } else { m.service == host }) {
        return false;
    }
    m.port_number == 0 || m.port_number == port
}

fn cluster_patches(applied: &Applied, ctx: Context) -> impl Iterator<Item = &std::sync::Arc<Patch>> {
    applied.of(ApplyTo::Cluster).iter().filter(move |p| p.in_context(ctx))
}

/// Whether a REMOVE patch drops cluster `name` (decided by its name).
pub fn removed(applied: &Applied, ctx: Context, name: &str, hosts: &[&str]) -> bool {
    cluster_patches(applied, ctx).any(|p| p.operation == Operation::Remove && matches(name, p.cluster.as_ref(), hosts))
}

/// `ApplyClusterMerge`: `c` with the patches applied, `None` when removed.
pub fn apply(
    applied: &Applied,
    ctx: Context,
    mut c: DynamicMessage,
    hosts: &[&str],
    outcomes: &mut Vec<Outcome>,
) -> Option<DynamicMessage> {
    let name = c.get_field_by_name("name").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    for p in applied.of(ApplyTo::Cluster) {
        let here = p.in_context(ctx) && matches(&name, p.cluster.as_ref(), hosts);
        if p.operation == Operation::Remove && here {
            return None;
        }
        if !p.operation.merges() {
            outcomes.push(Outcome { key: p.filter.clone(), kind: "cluster", applied: false });
            continue;
        }
        let mut ok = false;
        if let (true, Some(value)) = (here, &p.value) {
            match merge_transport_socket(&mut c, value) {
                Err(()) => {}
                Ok(true) => ok = true,
                Ok(false) => {
                    merge(&mut c, value, p.operation.lists());
                    ok = true;
                }
            }
        }
        outcomes.push(Outcome { key: p.filter.clone(), kind: "cluster", applied: ok });
    }
    Some(c)
}

/// `mergeTransportSocketCluster`: a patch's transport socket merges into
/// the cluster's of the same name (among its transport socket matches, or
/// its own), replaces a differently named one, or, when the cluster's
/// matches have none of that name, is dropped. Whether it handled the
/// patch (`false`: merge the patch whole); `Err` when the typed configs do
/// not merge.
fn merge_transport_socket(c: &mut DynamicMessage, value: &DynamicMessage) -> Result<bool, ()> {
    let Some(Value::Message(ts)) = value.get_field_by_name("transport_socket").map(|v| v.into_owned()) else {
        return Ok(false);
    };
    if !value.has_field_by_name("transport_socket") {
        return Ok(false);
    }
    let name = ts.get_field_by_name("name").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let typed = |m: &DynamicMessage| match m.get_field_by_name("typed_config").map(|v| v.into_owned()) {
        Some(Value::Message(a)) if m.has_field_by_name("typed_config") => Some(a),
        _ => None,
    };
    let merge_into = |target: &mut DynamicMessage| -> Result<(), ()> {
        if let (Some(dst), Some(src)) = (typed(target), typed(&ts)) {
            let merged = merge_any(&dst, &src).ok_or(())?;
            target.set_field_by_name("typed_config", Value::Message(merged));
        }
        Ok(())
    };
    let matches_field = c.descriptor().get_field_by_name("transport_socket_matches").expect("a cluster field");
    if c.has_field(&matches_field) {
        let Value::List(list) = c.get_field_mut(&matches_field) else { return Ok(true) };
        for m in list.iter_mut() {
            let Value::Message(m) = m else { continue };
            let Some(Value::Message(mut sock)) = m.get_field_by_name("transport_socket").map(|v| v.into_owned()) else {
                continue;
            };
            if m.has_field_by_name("transport_socket")
                && sock.get_field_by_name("name").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
                    == name
            {
                merge_into(&mut sock)?;
                m.set_field_by_name("transport_socket", Value::Message(sock));
                return Ok(true);
            }
        }
        // Merging would leave a transport socket beside the matches.
        return Ok(true);
    }
    match c.get_field_by_name("transport_socket").map(|v| v.into_owned()) {
        Some(Value::Message(mut own))
            if c.has_field_by_name("transport_socket")
                && own.get_field_by_name("name").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
                    == name =>
        {
            merge_into(&mut own)?;
            c.set_field_by_name("transport_socket", Value::Message(own));
        }
        _ => c.set_field_by_name("transport_socket", Value::Message(ts)),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::{EnvoyFilters, Proxy};
    use crate::schema;

    fn cluster(v: &serde_json::Value) -> DynamicMessage {
        schema::from_json(schema::message("envoy.config.cluster.v3.Cluster").unwrap(), v).unwrap()
    }

    /// Upstream `Test_clusterMatch` (cluster_patch_test.go).
    #[test]
    fn clusters_match_as_istiod_matches_them() {
        let m = |port: u32, service: &str, subset: &str, name: &str| ClusterMatch {
            port_number: port,
            service: service.into(),
            subset: subset.into(),
            name: name.into(),
        };
        let cases = [
            ("name mismatch", m(0, "", "", "scooby"), "scrappy", "", false),
            ("subset mismatch", m(80, "foo.bar", "v1", ""), "outbound|80|v2|foo.bar", "", false),
            ("service mismatch", m(80, "foo.bar", "v1", ""), "outbound|80|v1|google.com", "", false),
            ("service name match for inbound cluster", m(0, "foo.bar", "", ""), "inbound|80||", "foo.bar", true),
            ("port mismatch", m(80, "foo.bar", "v1", ""), "outbound|90|v1|foo.bar", "", false),
            ("full match", m(80, "foo.bar", "v1", ""), "outbound|80|v1|foo.bar", "", true),
        ];
        for (name, cm, cluster, host, want) in cases {
            assert_eq!(matches(cluster, Some(&cm), &[host]), want, "{name}");
        }
        // istiod's ParseSubsetKey reads the DNS SRV form too.
        assert_eq!(parse_name("outbound_.80_.v1_.foo.bar"), Some(("outbound", 80, "v1", "foo.bar")));
        assert!(matches("outbound_.80_.v1_.foo.bar", Some(&m(80, "foo.bar", "v1", "")), &[""]));
    }

    /// convertToEnvoyFilterWrapper: an INSERT_* where the level has no
    /// order (a cluster) is an ADD.
    #[test]
    fn inserting_a_cluster_adds_it() {
        let spec = serde_json::json!({"configPatches": [{"applyTo": "CLUSTER", "match": {"context": "SIDECAR_OUTBOUND"},
            "patch": {"operation": "INSERT_BEFORE", "value": {"name": "extra"}}}]});
        let filters = EnvoyFilters::new("istio-system", [("istio-system", "f", "", &spec)]);
        let applied = filters.applied(&Proxy { namespace: "a", labels: &[], version: "", metadata: &[] });
        assert_eq!(applied.added(ApplyTo::Cluster, Context::SidecarOutbound).count(), 1);
    }

    /// Upstream `TestClusterPatching` (cluster_patch_test.go), its patches
    /// and clusters as data (testdata/cluster_patch.yaml).
    #[test]
    fn clusters_are_patched_as_istiods_cluster_patching_test() {
        let data: serde_json::Value = serde_yaml_ng::from_str(include_str!("../testdata/cluster_patch.yaml")).unwrap();
        let filters = EnvoyFilters::new("istio-config", [("not-default", "ef", "", &data["spec"])]);
        let proxy = Proxy { namespace: "not-default", labels: &[], version: "", metadata: &[] };
        let applied = filters.applied(&proxy);
        assert_eq!(applied.of(ApplyTo::Cluster).len(), 9);
        for case in data["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let ctx = match case["context"].as_str().unwrap() {
                "SIDECAR_OUTBOUND" => Context::SidecarOutbound,
                "SIDECAR_INBOUND" => Context::SidecarInbound,
                _ => Context::Gateway,
            };
            let host = case["host"].as_str().unwrap();
            let mut got = Vec::new();
            let mut outcomes = Vec::new();
            for c in case["input"].as_array().unwrap() {
                got.extend(apply(&applied, ctx, cluster(c), &[host], &mut outcomes));
            }
            got.extend(applied.added(ApplyTo::Cluster, ctx).cloned());
            let want: Vec<DynamicMessage> = case["output"].as_array().unwrap().iter().map(cluster).collect();
            let show = |v: &[DynamicMessage]| v.iter().map(|m| serde_json::to_value(m).unwrap()).collect::<Vec<_>>();
            assert_eq!(show(&got), show(&want), "{name}");
            assert!(outcomes.iter().any(|o| o.applied), "{name}: {outcomes:?}");
        }
    }
}
