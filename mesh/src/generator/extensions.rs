//! Extensions (TrafficExtensions, WasmPlugins) on what the generator
//! serves: inserted into the listeners of the proxies they select, as
//! istiod builds them in (before EnvoyFilters patch the result), and their
//! Wasm configs served over ECDS by name (`pilot/pkg/xds/ecds.go`). A
//! listener no extension applies to keeps its shared bytes and generation.

use std::sync::Arc;

use bytes::Bytes;
use istiod_proto::envoy::config::listener::v3::Listener;
use istiod_xds_api::snapshot::{Kind, Snapshot};
use prost::Message;

use super::{MeshInput, is_grpc, mesh, mix};
use crate::model::Model;
use crate::model::extensions::{Code, Extension, ListenerClass};
use crate::node::{NodeType, ProxyClass};
use crate::translate::extensions as build;

type BaseGeneration = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<u64>;
type BaseBody = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<Bytes>;

/// Which side listener `name` is of, for a proxy of `class`, and the
/// port it listens on; `None` for listeners no extension goes into (the
/// catch-all `virtualOutbound`).
fn listener_of(class: &ProxyClass, name: &str) -> Option<(ListenerClass, u32)> {
    let port = || name.rsplit('_').next().and_then(|p| p.parse().ok()).unwrap_or(0);
    match (class.node_type, name) {
        (NodeType::Router, _) => Some((ListenerClass::Gateway, port())),
        (_, crate::translate::inbound::VIRTUAL_INBOUND) => Some((ListenerClass::SidecarInbound, 0)),
        (_, crate::translate::listener::VIRTUAL_OUTBOUND) => None,
        _ => Some((ListenerClass::SidecarOutbound, port())),
    }
}

/// A hash of the extensions that may go into a proxy's listeners (`None`:
/// none may).
fn selected(model: &Model, class: &ProxyClass) -> Option<u64> {
    let exts = &model.extensions;
    if exts.is_empty() || is_grpc(class) {
        return None;
    }
    exts.digest_for(&class.namespace, &class.labels)
}

/// What ECDS name `name` is for a proxy of `class`.
enum Ecds<'a> {
    /// An EnvoyFilter's EXTENSION_CONFIG ADD, with the applying filters'
    /// digest: istiod serves these first, whatever their context
    /// (`InsertedExtensionConfigurations`; other operations do nothing
    /// there).
    Added(Arc<istiod_envoyfilter::filters::Applied>, usize),
    /// A Wasm extension, with what its pull secret variable carries: the
    /// secret's `.dockerconfigjson` for a proxy whose identity was
    /// verified, and only from a `kubernetes.io/dockerconfigjson` Secret
    /// (istiod's `GetDockerCredential`); empty otherwise.
    Wasm(&'a Arc<Extension>, Option<&'a [u8]>),
}

fn ecds<'a>(m: &'a MeshInput, class: &ProxyClass, name: &str) -> Option<Ecds<'a>> {
    use istiod_envoyfilter::filters::{ApplyTo, Operation};
    if is_grpc(class) {
        return None;
    }
    if let Some(applied) = super::patches::applied(m, class) {
        let adds = applied.of(ApplyTo::ExtensionConfig);
        let named = |p: &Arc<istiod_envoyfilter::filters::Patch>| {
            p.operation == Operation::Add
                && p.value.as_ref().and_then(|v| v.get_field_by_name("name")).is_some_and(|n| n.as_str() == Some(name))
        };
        if let Some(i) = adds.iter().position(named) {
            return Some(Ecds::Added(applied, i));
        }
    }
    let model = &m.model;
    let e = model.extensions.by_resource_name(&class.namespace, name)?;
    let Code::Wasm(w) = &e.code else { return None };
    // A pull secret goes only with an extension that attaches to the
    // proxy (istiod's `referencedSecrets` reads `TrafficExtensions(proxy)`);
    // the resource itself is served by name (`TrafficExtensionsByName`).
    let attached = e.attaches(&class.namespace, &class.labels, !model.extensions.no_gateway_selectors);
    let secret =
        w.pull_secret.as_ref().filter(|(ns, _)| attached && class.verified && !ns.is_empty()).and_then(|(ns, n)| {
            let s = model.secrets.get(&(ns.clone(), n.clone()))?;
            (s.type_ == "kubernetes.io/dockerconfigjson").then(|| s.data.get(".dockerconfigjson").map(Vec::as_slice))?
        });
    Some(Ecds::Wasm(e, secret))
}

/// The generation of `name`: the base one, mixed with the selected
/// extensions' where they go into a listener; an ECDS resource's own.
pub(crate) fn generation(
    snap: &Snapshot<MeshInput>,
    class: &ProxyClass,
    kind: Kind,
    name: &str,
    base: BaseGeneration,
) -> Option<u64> {
    let Some(m) = mesh(snap) else { return base(snap, class, kind, name) };
    match kind {
        Kind::ExtensionConfig => Some(match ecds(m, class, name)? {
            Ecds::Added(applied, i) => mix(("envoy-filter", applied.digest, i)),
            Ecds::Wasm(e, secret) => mix(("ecds", e.digest, secret)),
        }),
        Kind::Listener if listener_of(class, name).is_some() => {
            let g = base(snap, class, kind, name)?;
            Some(selected(&m.model, class).map_or(g, |d| mix((g, "extensions", d))))
        }
        _ => base(snap, class, kind, name),
    }
}

/// The bytes of `name`: the base ones with the extensions inserted; an
/// ECDS resource's config.
pub(crate) fn body(
    snap: &Snapshot<MeshInput>,
    class: &ProxyClass,
    kind: Kind,
    name: &str,
    base: BaseBody,
) -> Option<Bytes> {
    let Some(m) = mesh(snap) else { return base(snap, class, kind, name) };
    match kind {
        Kind::ExtensionConfig => match ecds(m, class, name)? {
            Ecds::Added(applied, i) => {
                let value = applied.of(istiod_envoyfilter::filters::ApplyTo::ExtensionConfig)[i].value.as_ref()?;
                Some(Bytes::from(istiod_envoyfilter::canonical::encode(value)))
            }
            Ecds::Wasm(e, secret) => {
                let secret = secret.map(String::from_utf8_lossy);
                build::ecds_config(e, secret.as_deref()).map(Bytes::from)
            }
        },
        Kind::Listener => {
            let bytes = base(snap, class, kind, name)?;
            let (Some((side, port)), Some(_)) = (listener_of(class, name), selected(&m.model, class)) else {
                return Some(bytes);
            };
            let Ok(mut l) = Listener::decode(bytes.clone()) else { return Some(bytes) };
            match build::apply(&m.model.extensions, &class.namespace, &class.labels, side, port, &mut l) {
                true => Some(Bytes::from(l.encode_to_vec())),
                false => Some(bytes),
            }
        }
        _ => base(snap, class, kind, name),
    }
}

/// Every ECDS name the model has: the Wasm extensions' and those
/// EnvoyFilter EXTENSION_CONFIG ADDs give (what a change of either marks).
pub fn all_names(model: &Model) -> Vec<(Kind, Arc<str>)> {
    use istiod_envoyfilter::filters::{ApplyTo, Operation};
    let filters = model.envoy_filters.by_namespace.values().flatten();
    let added = filters.flat_map(|f| &f.patches).filter(|p| p.apply_to == ApplyTo::ExtensionConfig);
    let added = added.filter(|p| p.operation == Operation::Add).filter_map(|p| {
        let name = p.value.as_ref()?.get_field_by_name("name")?;
        name.as_str().map(Arc::from)
    });
    let wasm = model.extensions.wasm().map(|e| Arc::from(e.resource_name.as_str()));
    wasm.chain(added).map(|n| (Kind::ExtensionConfig, n)).collect()
}

/// The ECDS names whose config carries a pull secret (what a change of
/// Secrets marks).
pub fn pulling_names(model: &Model) -> Vec<(Kind, Arc<str>)> {
    let pulls = |e: &&Arc<Extension>| matches!(&e.code, Code::Wasm(w) if w.pull_secret.is_some());
    let names = model.extensions.wasm().filter(pulls).map(|e| Arc::from(e.resource_name.as_str()));
    names.map(|n| (Kind::ExtensionConfig, n)).collect()
}

#[cfg(test)]
mod tests {
    use istiod_proto::envoy::config::core::v3::TypedExtensionConfig;
    use istiod_xds_api::snapshot::Generator;

    use super::*;
    use crate::generator::MeshGenerator;
    use crate::testing::{objects, snapshot};

    /// pilot/pkg/xds/ecds_test.go TestECDSGenerate's fixtures: three pull
    /// secrets (one of the wrong type), and WasmPlugins and
    /// TrafficExtensions with none, a good, a missing and a wrong-type
    /// secret, in `default` and the root namespace.
    fn fixtures() -> String {
        let mut y = String::from(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: default-pull-secret, namespace: default}\n\
             type: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: default-docker-credential}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: root-pull-secret, namespace: istio-system}\n\
             type: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: root-docker-credential}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: wrong-type-pull-secret, namespace: default}\n\
             type: kubernetes.io/tls\nstringData: {.dockerconfigjson: wrong-type-docker-credential}\n",
        );
        let plugins = [
            ("default", "default-plugin", ""),
            ("default", "default-plugin-with-sec", "default-pull-secret"),
            ("default", "default-plugin-wrong-sec", "wrong-secret"),
            ("default", "default-plugin-wrong-sec-type", "wrong-type-pull-secret"),
            ("istio-system", "root-plugin", "root-pull-secret"),
        ];
        for (ns, name, secret) in plugins {
            let secret = if secret.is_empty() { String::new() } else { format!(", imagePullSecret: {secret}") };
            y.push_str(&format!(
                "---\napiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {{name: {name}, namespace: {ns}}}\n\
                 spec: {{phase: AUTHN, url: 'oci://example.com/filter:v1'{secret}}}\n"
            ));
            let ext = name.replace("plugin", "extension");
            y.push_str(&format!(
                "---\napiVersion: extensions.istio.io/v1alpha1\nkind: TrafficExtension\nmetadata: {{name: {ext}, namespace: {ns}}}\n\
                 spec: {{phase: AUTHN, wasm: {{url: 'oci://example.com/filter:v1', type: HTTP{secret}}}}}\n"
            ));
        }
        y
    }

    fn router(ns: &str) -> ProxyClass {
        ProxyClass { node_type: NodeType::Router, verified: true, ..crate::testing::class(ns, &[]) }
    }

    const P: &str = "extensions.istio.io/trafficextension/";
    const W: &str = "~istio-translated-wasmplugin";

    /// (names served, non-empty pull secrets) for `names` asked by `class`.
    fn ecds(snap: &Snapshot<MeshInput>, class: &ProxyClass, names: &[String]) -> (Vec<String>, Vec<String>) {
        let (mut served, mut secrets) = (Vec::new(), Vec::new());
        for n in names {
            let Some(bytes) = MeshGenerator.generate(snap, class, Kind::ExtensionConfig, n) else { continue };
            let c = TypedExtensionConfig::decode(bytes).unwrap();
            assert_eq!(&c.name, n);
            let any = c.typed_config.unwrap();
            let wasm = istiod_envoyfilter::schema::decode(
                istiod_envoyfilter::schema::message(any.type_url.strip_prefix("type.googleapis.com/").unwrap())
                    .unwrap(),
                &any.value,
            )
            .unwrap();
            // (An empty Any has no JSON form: read the fields.)
            let mut at = prost_reflect::Value::Message(wasm);
            for f in ["config", "vm_config", "environment_variables"] {
                at = at.as_message().unwrap().get_field_by_name(f).unwrap().into_owned();
            }
            let vars = at.as_message().unwrap().get_field_by_name("key_values").unwrap().into_owned();
            let key = prost_reflect::MapKey::String("ISTIO_META_WASM_IMAGE_PULL_SECRET".into());
            if let Some(s) = vars.as_map().unwrap().get(&key).and_then(|v| v.as_str()).filter(|s| !s.is_empty()) {
                secrets.push(s.to_owned());
            }
            served.push(n.clone());
        }
        secrets.sort();
        (served, secrets)
    }

    /// pilot/pkg/xds/ecds_test.go TestECDSGenerate, the cases of a full
    /// push: which names are served to a router of `proxyNs`, and which
    /// pull secrets they carry.
    #[test]
    fn ecds_is_generated_as_istiods_ecds_generate_test() {
        let model = Arc::new(Model::build(&objects(&fixtures()), "cluster.local"));
        let snap = snapshot(&model);
        let plugin = |ns: &str, n: &str| format!("{P}{ns}.{n}{W}");
        let ext = |ns: &str, n: &str| format!("{P}{ns}.{n}");
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Vec<String>, Vec<&str>)> = vec![
            ("simple", "default", vec![plugin("default", "default-plugin")], vec![]),
            ("simple_with_secret", "default", vec![plugin("default", "default-plugin-with-sec")], vec!["default-docker-credential"]),
            ("miss_secret", "default", vec![plugin("default", "default-plugin-wrong-sec")], vec![]),
            ("wrong_secret_type", "default", vec![plugin("default", "default-plugin-wrong-sec-type")], vec![]),
            ("root_and_default", "default", vec![plugin("default", "default-plugin-with-sec"), plugin("istio-system", "root-plugin")],
                vec!["default-docker-credential", "root-docker-credential"]),
            ("only_root", "somenamespace", vec![plugin("istio-system", "root-plugin")], vec!["root-docker-credential"]),
            ("extensionfilter_simple", "default", vec![ext("default", "default-extension")], vec![]),
            ("extensionfilter_simple_with_secret", "default", vec![ext("default", "default-extension-with-sec")], vec!["default-docker-credential"]),
            ("extensionfilter_miss_secret", "default", vec![ext("default", "default-extension-wrong-sec")], vec![]),
            ("extensionfilter_wrong_secret_type", "default", vec![ext("default", "default-extension-wrong-sec-type")], vec![]),
            ("extensionfilter_root_and_default", "default", vec![ext("default", "default-extension-with-sec"), ext("istio-system", "root-extension")],
                vec!["default-docker-credential", "root-docker-credential"]),
            ("extensionfilter_only_root", "somenamespace", vec![ext("istio-system", "root-extension")], vec!["root-docker-credential"]),
            ("mixed_wasmplugin_and_extensionfilter", "default",
                vec![plugin("default", "default-plugin-with-sec"), ext("default", "default-extension-with-sec")],
                vec!["default-docker-credential", "default-docker-credential"]),
        ];
        for (case, ns, names, want_secrets) in cases {
            let (served, secrets) = ecds(&snap, &router(ns), &names);
            assert_eq!(served, names, "{case}");
            assert_eq!(secrets, want_secrets, "{case}");
        }
        // Another namespace's extension is not served (TrafficExtensionsByName),
        // nor a name without the prefix, nor a Lua one.
        let (served, _) = ecds(&snap, &router("somenamespace"), &[plugin("default", "default-plugin")]);
        assert!(served.is_empty());
        // An unauthenticated proxy gets no pull secret (GeneratePullSecrets).
        let unverified = ProxyClass { verified: false, ..router("default") };
        let (served, secrets) = ecds(&snap, &unverified, &[plugin("default", "default-plugin-with-sec")]);
        assert_eq!((served.len(), secrets.len()), (1, 0));
    }

    /// TestECDSGenerate's push cases, as generations: an unrelated config
    /// or Secret change leaves what is served alone
    /// (`no_relevant_config_update`, `non_relevant_secret_update`); a
    /// change of the referenced Secret changes it
    /// (`relevant_secret_update`).
    #[test]
    fn ecds_follows_the_secrets_it_carries() {
        let name = format!("{P}default.default-plugin-with-sec{W}");
        let generation = |yaml: &str| {
            let model = Arc::new(Model::build(&objects(yaml), "cluster.local"));
            MeshGenerator.input_generation(&snapshot(&model), &router("default"), Kind::ExtensionConfig, &name)
        };
        let base = generation(&fixtures());
        assert!(base.is_some());
        let policy = "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: default}\nspec: {}\n";
        assert_eq!(generation(&format!("{}{policy}", fixtures())), base, "no_relevant_config_update");
        let other =
            "---\napiVersion: v1\nkind: Secret\nmetadata: {name: other, namespace: default}\nstringData: {a: b}\n";
        assert_eq!(generation(&format!("{}{other}", fixtures())), base, "non_relevant_secret_update");
        let rotated = fixtures().replace(".dockerconfigjson: default-docker-credential", ".dockerconfigjson: rotated");
        assert_ne!(generation(&rotated), base, "relevant_secret_update");
    }

    /// pilot/pkg/networking/core/envoyfilter/extension_configuration_patch_test.go
    /// TestInsertedExtensionConfig: EnvoyFilter EXTENSION_CONFIG ADDs are
    /// served by name, a MERGE is not.
    #[test]
    fn envoy_filter_extension_configs_as_istiods_inserted_extension_config_test() {
        let mut yaml = String::new();
        for (i, (op, name)) in
            [("ADD", "add-extension-config1"), ("ADD", "add-extension-config2"), ("MERGE", "merge-extension-config")]
                .iter()
                .enumerate()
        {
            yaml.push_str(&format!(
                "---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\n\
                 metadata: {{name: test-envoyfilter-{i}, namespace: not-default}}\n\
                 spec: {{configPatches: [{{applyTo: EXTENSION_CONFIG, match: {{context: SIDECAR_OUTBOUND}}, \
                 patch: {{operation: {op}, value: {{name: {name}}}}}}}]}}\n"
            ));
        }
        let model = Arc::new(Model::build(&objects(&yaml), "cluster.local"));
        let snap = snapshot(&model);
        let proxy = crate::testing::class("not-default", &[]);
        let get = |n: &str| {
            MeshGenerator
                .generate(&snap, &proxy, Kind::ExtensionConfig, n)
                .map(|b| TypedExtensionConfig::decode(b).unwrap().name)
        };
        assert_eq!(get("add-extension-config1").as_deref(), Some("add-extension-config1"), "add extension config");
        assert_eq!(get("add-extension-config2").as_deref(), Some("add-extension-config2"));
        assert_eq!(get("random-extension-config"), None, "miss extension config");
        assert_eq!(get("merge-extension-config"), None, "only add extension config");
    }
}
