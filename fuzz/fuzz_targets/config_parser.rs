//! Fuzz target: the --configDir parser (multi-document YAML/JSON into typed
//! objects) on arbitrary text: errors, never panics, and the same documents
//! whether the file is read whole or a document at a time. What it reads is
//! then built into a model (the Gateway API translated into Istio objects) and a
//! router's listeners and routes: never a panic either. The text is also
//! read as mesh networks, each line as an RFC 3339 time (WorkloadEntry
//! annotations), and the model's services give a name table.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = istiod_config::manifest::parse_file(text);
        // A syntax error ends the file: no document is reported after it.
        if let Some((index, _)) = parsed.syntax_error {
            assert_eq!(index, parsed.docs.len());
        }
        // Read a document at a time (what --configDir does when a file
        // changes), the file reads as it reads whole.
        if let Some(pieces) = istiod_config::manifest::split_documents(text) {
            let max = istiod_config::manifest::DEFAULT_MAX_DOCUMENTS;
            if let Some(read) = istiod_config::manifest::parse_split(&pieces, max, |_, _| None) {
                assert!(parsed.syntax_error.is_none(), "{text:?}");
                assert_eq!(read.docs, parsed.docs, "{text:?}");
            }
        }
        let mut objects = istiod_config::objects::Objects::default();
        for doc in parsed.docs.into_iter().flatten().flatten() {
            use istiod_config::manifest::Object;
            match doc {
                Object::Service(s) => objects.services.push(s),
                Object::Istio(o) => objects.istio.push(o),
                Object::GatewayApi(o) => objects.gateway_api.push(o),
                Object::Ingress(o) => objects.ingresses.push(o),
                Object::IngressClass(o) => objects.ingress_classes.push(o),
                Object::ConfigMap(o) => objects.config_maps.push(o),
                Object::Secret(s) => objects.secrets.push(s),
                Object::Namespace(n) => objects.namespaces.push(n),
                _ => {}
            }
        }
        let model = istiod_mesh::model::Model::build(&objects, "cluster.local");
        // Name tables: every name an address, every address an IP.
        let ips: Vec<std::sync::Arc<str>> = vec!["10.0.0.1".into(), "fd00::1".into()];
        let legacy = istiod_mesh::translate::dns::legacy_allocation(model.services.values().map(|s| &**s));
        for dual_stack in [false, true] {
            let asker = istiod_mesh::translate::dns::Asker {
                ips: &ips,
                network: "nw",
                cluster: "c",
                auto_allocated: true,
                legacy: dual_stack.then_some(&legacy),
            };
            let flags = istiod_mesh::translate::dns::Flags { multicluster_headless: true, dual_stack };
            let t = istiod_mesh::translate::dns::name_table(model.services.values().map(|s| &**s), &asker, flags);
            for info in t.table.values() {
                assert!(!info.ips.is_empty());
                assert!(info.ips.iter().all(|ip| ip.parse::<std::net::IpAddr>().is_ok()), "{info:?}");
            }
        }
        for line in text.lines() {
            if let Some(t) = istiod_proto::time::parse_rfc3339(line) {
                // What is read is written back and read the same.
                assert_eq!(istiod_proto::time::parse_rfc3339(&istiod_proto::time::rfc3339_nano(t)), Some(t), "{line}");
            }
        }
        // The same text as mesh networks (a ConfigMap's `meshNetworks`):
        // refused or read; read ones place the objects' endpoints and find
        // their gateways without a panic.
        if let Ok(networks) = istiod_config::networks::MeshNetworks::parse(text) {
            let mut mesh = istiod_mesh::meshconfig::MeshSettings::default();
            mesh.networks.mesh = networks;
            let m = istiod_mesh::model::Model::build_in(&objects, "cluster.local", std::sync::Arc::new(mesh));
            for g in &m.network_gateways.all {
                assert!(g.addr.parse::<std::net::IpAddr>().is_ok(), "{g:?}");
            }
        }
        for g in model.gateways.iter() {
            if let istiod_config::istio::IstioSpec::Gateway(spec) = &g.spec {
                let class = istiod_mesh::node::ProxyClass {
                    node_type: istiod_mesh::node::NodeType::Router,
                    namespace: g.meta.ns().into(),
                    generator: "".into(),
                    labels: spec.selector.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect(),
                    locality: "".into(),
                    verified: true,
                    service_account: "".into(),
                    ips: Vec::new(),
                    mesh_id: "".into(),
                    cluster_id: "".into(),
                    version: "".into(),
                    metadata: Vec::new(),
                };
                let m = istiod_mesh::generator::router::merged(&model, &class);
                let _ = istiod_mesh::generator::router::listeners(&model, &class);
                for name in m.by_route.keys() {
                    let _ = istiod_mesh::generator::router::route(&model, &class, name);
                }
            }
        }
    }
});
