//! Istio documents, valid and not, written after Istio's reference docs.

use std::path::Path;

use super::*;

fn doc(yaml: &str) -> Result<IstioObject, FieldErrors> {
    parse(&serde_yaml_ng::from_str(yaml).unwrap())
}

fn errs(yaml: &str) -> Vec<String> {
    doc(yaml).expect_err("must be rejected").0.into_iter().map(|e| e.to_string()).collect()
}

fn has(errors: &[String], needle: &str) {
    assert!(errors.iter().any(|e| e.contains(needle)), "{needle:?} not in {errors:?}");
}

const VS: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
  - match: [{headers: {end-user: {exact: jason}}, uri: {prefix: /api}}]
    route: [{destination: {host: reviews, subset: v2}}]
    retries: {attempts: 3, perTryTimeout: 2s, retryOn: 5xx}
    timeout: 10s
  - route:
    - {destination: {host: reviews, subset: v1}, weight: 70}
    - {destination: {host: reviews, subset: v3}, weight: 30}
    fault: {delay: {fixedDelay: 7s, percentage: {value: 10}}}
"#;

#[test]
fn every_api_version_reads_alike() {
    for v in ["v1", "v1beta1", "v1alpha3"] {
        let o = doc(&VS.replace("networking.istio.io/v1", &format!("networking.istio.io/{v}"))).unwrap();
        assert_eq!(o.kind(), IstioKind::VirtualService);
        let IstioSpec::VirtualService(vs) = o.spec else { unreachable!() };
        assert_eq!(vs.http[1].route[1].weight, 30);
    }
}

#[test]
fn virtual_service_errors_name_their_field() {
    has(&errs(&VS.replace("weight: 30", "weight: 20")), "spec.http[1].route: total destination weight 90 != 100");
    has(&errs(&VS.replace("weight: 70", "weight: 170")), "spec.http[1].route[0].weight");
    has(&errs(&VS.replace("timeout: 10s", "timeout: 10x")), "spec.http[0].timeout: invalid duration");
    has(&errs(&VS.replace("timeout: 10s", "timeout: 10")), "spec.http[0].timeout: invalid type");
    has(&errs(&VS.replace("retryOn: 5xx", "retryOn: 5xx, tries: 3")), "spec.http[0].retries");
    // No hosts: a delegate, as istiod accepts it; with gateways it is refused in istiod's words.
    assert!(doc(&VS.replace("hosts: [reviews]", "hosts: []")).is_ok());
    has(
        &errs(&VS.replace("hosts: [reviews]", "hosts: []\n  gateways: [gw]")),
        "spec.gateways: delegate virtual service must have no gateways specified",
    );
    has(
        &errs(&VS.replace("percentage: {value: 10}", "percentage: {value: 110}")),
        "spec.http[1].fault.delay.percentage.value",
    );
    let unknown = errs(&VS.replace("subset: v2}", "subset: v2, weigth: 1}"));
    has(&unknown, "spec.http[0].route[0].destination");
    has(&unknown, "weigth");
}

#[test]
fn destination_rule() {
    let dr = r#"
apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    outlierDetection: {consecutive5xxErrors: 5, interval: 30s, baseEjectionTime: 1m, maxEjectionPercent: 50}
    tls: {mode: ISTIO_MUTUAL}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}, trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}}
"#;
    assert!(doc(dr).is_ok(), "{:?}", doc(dr));
    has(&errs(&dr.replace("name: v2,", "name: v1,")), "spec.subsets[1].name: duplicate subset name");
    has(&errs(&dr.replace("LEAST_REQUEST", "FASTEST")), "spec.trafficPolicy.loadBalancer.simple");
    has(
        &errs(&dr.replace("maxEjectionPercent: 50", "maxEjectionPercent: 150")),
        "spec.trafficPolicy.outlierDetection.maxEjectionPercent",
    );
    has(&errs(&dr.replace("{mode: ISTIO_MUTUAL}", "{mode: MUTUAL}")), "spec.trafficPolicy.tls: MUTUAL needs");
}

#[test]
fn service_entries_dns_and_static() {
    let dns = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: httpbin, namespace: egress}
spec:
  hosts: [httpbin.org]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: https, protocol: TLS}]
"#;
    let o = doc(dns).unwrap();
    let IstioSpec::ServiceEntry(se) = o.spec else { unreachable!() };
    assert_eq!(se.resolution, networking::Resolution::Dns);
    let stat = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db}
spec:
  hosts: [db.internal]
  addresses: [192.0.2.10]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  endpoints: [{address: 10.0.0.7, labels: {app: db}}]
"#;
    assert!(doc(stat).is_ok());
    has(
        &errs(&stat.replace("address: 10.0.0.7", "address: db.example")),
        "spec.endpoints[0].address: endpoint address \"db.example\" is not a valid IP address",
    );
    // istiod accepts STATIC without endpoints or selector (validation.go
    // has no such rule; ambient's upstream tests build one).
    assert!(doc(&stat.replace("  endpoints: [{address: 10.0.0.7, labels: {app: db}}]\n", "")).is_ok());
    has(&errs(&dns.replace("resolution: DNS", "resolution: MAGIC")), "spec.resolution");
    has(
        &errs(&dns.replace(
            "[{number: 443, name: https, protocol: TLS}]",
            "[{number: 443, name: a, protocol: TLS}, {number: 443, name: b, protocol: TLS}]",
        )),
        "spec.ports[1].number: duplicate",
    );
}

#[test]
fn security_policies() {
    let pa = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n";
    assert!(doc(pa).is_ok());
    has(&errs(&pa.replace("STRICT", "MAYBE")), "spec.mtls.mode");
    has(
        &errs(&pa.replace("{mtls: {mode: STRICT}}", "{portLevelMtls: {8080: {mode: DISABLE}}}")),
        "spec.portLevelMtls: port level mTLS needs a workload selector",
    );
    let ap = r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: details-viewer, namespace: bookinfo}
spec:
  selector: {matchLabels: {app: details}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/bookinfo/sa/bookinfo-productpage]}}]
    to: [{operation: {methods: [GET]}}]
    when: [{key: "request.headers[x-token]", values: [abc]}]
"#;
    assert!(doc(ap).is_ok(), "{:?}", doc(ap));
    has(
        &errs(&ap.replace("\"request.headers[x-token]\"", "request.color")),
        "spec.rules[0].when[0].key: unknown attribute",
    );
    has(&errs(&ap.replace("action: ALLOW", "action: CUSTOM")), "spec.provider: CUSTOM action needs a provider");
    let ra = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt}\nspec: {jwtRules: [{issuer: \"\", jwksUri: https://x/jwks}]}\n";
    has(&errs(ra), "spec.jwtRules[0].issuer");
}

#[test]
fn gateway_sidecar_workload_entry() {
    let gw = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec: {selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}\n";
    assert!(doc(gw).is_ok());
    has(&errs(&gw.replace("number: 80", "number: 80000")), "spec.servers[0].port.number");
    let sc = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default}\nspec: {egress: [{hosts: [./*, istio-system/*]}]}\n";
    assert!(doc(sc).is_ok());
    has(&errs(&sc.replace("./*, ", "nonamespace, ")), "spec.egress[0].hosts[0]");
    let we = "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm1}\nspec: {address: 10.0.0.9, labels: {app: vm}, serviceAccount: vm}\n";
    assert!(doc(we).is_ok());
    has(&errs(&we.replace("address: 10.0.0.9, ", "")), "spec.address: address is required");
}

#[test]
fn the_bundled_mesh_is_valid() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo/networking.yaml"))
            .unwrap();
    let mut n = 0;
    for d in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = serde_yaml_ng::Value::deserialize(d).unwrap();
        parse(&v).unwrap_or_else(|e| panic!("{e}"));
        n += 1;
    }
    assert!(n >= 8);
}

/// pkg/config/validation/validation.go `validateMetadata`.
#[test]
fn metadata_annotations_as_istiod_checks_them() {
    let ap = |action: &str, dry: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: p, namespace: ns, annotations: {{istio.io/dry-run: '{dry}'}}}}\nspec: {{action: {action}}}\n"
        )
    };
    assert!(doc(&ap("DENY", "true")).is_ok());
    has(&errs(&ap("DENY", "maybe")), "ns/p has annotation istio.io/dry-run with invalid value (maybe)");
    has(
        &errs(&ap("AUDIT", "true")),
        "the annotation istio.io/dry-run currently only supports action ALLOW/DENY, found action AUDIT in ns/p",
    );
    let gw = |ann: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: invalid-gateway, namespace: istio-system, annotations: {{{ann}: 'true'}}}}\nspec: {{servers: [{{port: {{number: 80, name: http, protocol: HTTP}}, hosts: ['*']}}]}}\n"
        )
    };
    has(&errs(&gw("istio.io/dry-run")), "istio-system/invalid-gateway has unsupported annotation istio.io/dry-run");
    has(
        &errs(&gw("internal.istio.io/webhook-always-reject")),
        "\"internal.istio.io/webhook-always-reject\" annotation found, rejecting",
    );
    has(
        &errs(&gw("internal.istio.io/parents")),
        "\"internal.istio.io/parents\" annotation found, this may not be set by users",
    );
}

/// What the CRDs' OpenAPI and CEL rules refuse
/// (manifests/charts/base/files/crd-all.gen.yaml), which a --configDir has
/// no API server to apply, and fields of the current API that were once
/// refused as unknown.
#[test]
fn crd_rules_are_enforced_and_current_fields_read() {
    let se = |spec: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: s, namespace: ns}}\nspec: {spec}\n"
        )
    };
    has(&errs(&se("{hosts: ['*'], ports: [{number: 80, name: http, protocol: HTTP}]}")), "hostname cannot be wildcard");
    has(
        &errs(&se(
            "{hosts: [a.com], resolution: NONE, ports: [{number: 80, name: http, protocol: HTTP}], endpoints: [{address: 1.1.1.1}]}",
        )),
        "NONE mode cannot set endpoints",
    );
    has(
        &errs(&se(
            "{hosts: [a.com], addresses: [10.0.0.0/8], resolution: DNS, ports: [{number: 80, name: http, protocol: HTTP}]}",
        )),
        "CIDR addresses are allowed only for NONE/STATIC resolution types",
    );
    has(
        &errs(&se(
            "{hosts: [a.com], resolution: DNS_ROUND_ROBIN, ports: [{number: 80, name: http, protocol: HTTP}], endpoints: [{address: a.com}, {address: b.com}]}",
        )),
        "DNS_ROUND_ROBIN mode cannot have multiple endpoints",
    );
    has(
        &errs(&se(
            "{hosts: [a.com], resolution: STATIC, ports: [{number: 80, name: http, protocol: HTTP}], endpoints: [{address: 'unix://rel/'}]}",
        )),
        "UDS must be an absolute path or abstract socket",
    );
    // An endpoint reached through its network's gateway needs no address.
    assert!(doc(&se("{hosts: [a.com], resolution: STATIC, ports: [{number: 80, name: http, protocol: HTTP}], endpoints: [{network: n2}]}")).is_ok());
    let we = |spec: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: w, namespace: ns}}\nspec: {spec}\n"
        )
    };
    assert!(doc(&we("{network: n2, labels: {app: a}}")).is_ok());
    has(&errs(&we("{address: 'unix:///var/s.sock', ports: {http: 80}}")), "UDS may not include ports");
    has(&errs(&we("{address: 1.1.1.1, ports: {http: 70000}}")), "port must be between 1-65535");
    has(&errs(&we("{address: 1.1.1.1, ports: {'bad name': 80}}")), "port name must be valid");

    let ap = |spec: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: p, namespace: ns}}\nspec: {spec}\n"
        )
    };
    has(
        &errs(&ap("{rules: [{from: [{source: {serviceAccounts: [ns/sa], namespaces: [ns]}}]}]}")),
        "Cannot set serviceAccounts with namespaces or principals",
    );
    has(&errs(&ap("{selector: {matchLabels: {app: '*'}}}")), "wildcard is not supported in selector");
    has(
        &errs(&ap(
            "{targetRef: {kind: Gateway, group: gateway.networking.k8s.io, name: g}, targetRefs: [{kind: Service, name: s}]}",
        )),
        "only one of targetRefs or selector can be set",
    );
    has(
        &errs(&ap("{targetRefs: [{kind: Service, name: s, namespace: other}]}")),
        "cross namespace referencing is not currently supported",
    );
    let ra = |spec: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: r, namespace: ns}}\nspec: {spec}\n"
        )
    };
    has(&errs(&ra("{jwtRules: [{issuer: i, jwksUri: 'ftp://keys'}]}")), "url must have scheme http:// or https://");
    has(
        &errs(&ra("{selector: {matchLabels: {a: b}}, targetRefs: [{kind: Service, name: s}]}")),
        "only one of targetRefs or selector can be set",
    );
    has(
        &errs(&ra("{jwtRules: [{issuer: i, outputClaimToHeaders: [{header: 'x y', claim: sub}]}]}")),
        "header must match",
    );
    assert!(doc(&ra("{jwtRules: [{issuer: i, jwksUri: 'https://k/jwks.json', presence: REQUIRED}]}")).is_ok());
    let pa = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: ns}\nspec: {selector: {matchLabels: {app: a}}, portLevelMtls: {}}\n";
    has(&errs(pa), "portLevelMtls must have at least one port");
    // Fields of the current API.
    let dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: ns}\nspec: {host: r, trafficPolicy: {loadBalancer: {backendUtilization: {weightUpdatePeriod: 1s}}}}\n";
    assert!(doc(dr).is_ok(), "{:?}", doc(dr).err());
    let gw = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: ns}\nspec: {servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: SIMPLE, credentialName: c, ecdhCurves: [P-256]}}]}\n";
    assert!(doc(gw).is_ok(), "{:?}", doc(gw).err());
}

/// istiod's string-match and rewrite checks (pkg/config/validation/
/// validation.go `validateHTTPRouteMatchRequest`, `validateStringMatch`,
/// `validateStringRegexp`, `validateAllowOrigins`, `validateHTTPRewrite`);
/// the messages are those functions' format strings.
#[test]
fn string_matches_and_rewrites_as_istiod_checks_them() {
    let vs = |http: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: v, namespace: ns}}\nspec: {{hosts: [r], http: [{http}]}}\n"
        )
    };
    let route = "route: [{destination: {host: r}}]";
    let with = |m: &str| vs(&format!("{{match: [{m}], {route}}}"));
    has(
        &errs(&with("{uri: {regex: 'a{2000}'}}")),
        "\"uri\": error parsing regexp: invalid repeat count: `{2000}`; Istio uses RE2 style regex-based match",
    );
    has(
        &errs(&with(&format!("{{uri: {{regex: '{}'}}}}", "a".repeat(1025)))),
        "\"uri\": regex is too large, max length allowed is 1024",
    );
    has(&errs(&with("{uri: {regex: ''}}")), "\"uri\": regex string match should not be empty");
    // A header name with a dot still reports istiod's `where`.
    has(&errs(&with("{headers: {x.y: {prefix: ''}}}")), "\"headers\": prefix string match should not be empty");
    has(
        &errs(&with("{queryParams: {q: {regex: '(?i'}}}")),
        "\"queryParams\": error parsing regexp: invalid or unsupported Perl syntax: `(?i`",
    );
    assert!(doc(&with("{uri: {prefix: ''}}")).is_ok(), "uri allows an empty prefix");
    assert!(doc(&with("{withoutHeaders: {x: {regex: '*'}}}")).is_ok(), "`*` means present");
    has(
        &errs(&with("{withoutHeaders: {x: {regex: '**'}}}")),
        "\"withoutHeaders\": error parsing regexp: missing argument to repetition operator: `*`",
    );
    let cors = |o: &str| vs(&format!("{{corsPolicy: {{allowOrigins: [{o}]}}, {route}}}"));
    has(&errs(&cors("{exact: ''}")), "'' is not a valid match type for CORS allow origins");
    has(
        &errs(&cors("{regex: 'a{2,1}'}")),
        "\"corsPolicy.allowOrigins\": error parsing regexp: invalid repeat count: `{2,1}`",
    );
    assert!(doc(&cors("{regex: '.*[.]example[.]com'}")).is_ok());
    let rw = |r: &str| vs(&format!("{{rewrite: {r}, {route}}}"));
    has(
        &errs(&rw("{uri: /a, uriRegexRewrite: {match: a, rewrite: b}}")),
        "rewrite may only contain one of URI or UriRegexRewrite",
    );
    has(&errs(&rw("{}")), "rewrite must specify at least one of URI, UriRegexRewrite, or authority");
    has(
        &errs(&rw("{uriRegexRewrite: {match: a}}")),
        "UriRegexRewrite requires both Rewrite and Match fields to be specified",
    );
    has(
        &errs(&rw("{uriRegexRewrite: {match: 'a{1001}', rewrite: b}}")),
        "\"HTTPRewrite.UriRegexRewrite.Match\": error parsing regexp: invalid repeat count",
    );
    assert!(doc(&rw("{uriRegexRewrite: {match: '^/z(/|$)(.*)', rewrite: '/\\2'}}")).is_ok());
}

/// The CRDs' one-of rules and durations on routes and traffic policies.
#[test]
fn crd_one_ofs_and_durations() {
    let vs = |http: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: v, namespace: ns}}\nspec: {{hosts: [r], http: [{http}]}}\n"
        )
    };
    let route = "route: [{destination: {host: r}}]";
    has(
        &errs(&vs(&format!("{{match: [{{uri: {{exact: /a, prefix: /}}}}], {route}}}"))),
        "spec.http[0].match[0].uri: only one of exact, prefix and regex",
    );
    has(
        &errs(&vs(&format!("{{match: [{{queryParams: {{q: {{exact: a, regex: b}}}}}}], {route}}}"))),
        "spec.http[0].match[0].queryParams[q]",
    );
    has(&errs(&vs(&format!("{{retries: {{attempts: 1, backoff: 0.1ms}}, {route}}}"))), "spec.http[0].retries.backoff");
    has(
        &errs(&vs(&format!("{{fault: {{abort: {{httpStatus: 503, grpcStatus: UNAVAILABLE}}}}, {route}}}"))),
        "only one of httpStatus, grpcStatus and http2Error",
    );
    has(
        &errs(&vs("{redirect: {uri: /x, port: 8080, derivePort: FROM_REQUEST_PORT}}")),
        "only one of port and derivePort",
    );
    has(&errs(&vs("{directResponse: {status: 200, body: {string: a, bytes: YQ==}}}")), "only one of string and bytes");
    let dr = |tp: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: d, namespace: ns}}\nspec: {{host: r, trafficPolicy: {tp}}}\n"
        )
    };
    has(
        &errs(&dr("{connectionPool: {tcp: {tcpKeepalive: {time: 1x}}}}")),
        "spec.trafficPolicy.connectionPool.tcp.tcpKeepalive.time",
    );
    has(
        &errs(&dr("{portLevelSettings: [{port: {number: 80}, connectionPool: {http: {idleTimeout: 0s}}}]}")),
        "spec.trafficPolicy.portLevelSettings[0].connectionPool.http.idleTimeout",
    );
    has(
        &errs(&dr("{loadBalancer: {consistentHash: {httpHeaderName: x, useSourceIp: true}}}")),
        "only one of httpHeaderName, httpCookie, useSourceIp and httpQueryParameterName",
    );
    has(&errs(&dr("{loadBalancer: {warmupDurationSecs: soon}}")), "spec.trafficPolicy.loadBalancer.warmupDurationSecs");
    let gw = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: ns}\nspec: {servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*'], tls: {mode: SIMPLE, credentialName: a, credentialNames: [b]}}]}\n";
    has(&errs(gw), "only one of credentialName or credentialNames can be set");
}

/// The CRDs' required fields and ranges.
#[test]
fn crd_required_fields_and_ranges() {
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: v, namespace: ns}\nspec: {hosts: [r], tls: [{match: [{port: 443}], route: [{destination: {host: r}}]}], http: [{route: [{destination: {host: r}}], mirrors: [{percentage: {value: 5}}]}]}\n";
    let e = errs(vs);
    has(&e, "spec.tls[0].match[0].sniHosts");
    has(&e, "spec.http[0].mirrors[0].destination.host: mirror host is required");
    let dr = |tp: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: d, namespace: ns}}\nspec: {{host: r, trafficPolicy: {tp}}}\n"
        )
    };
    has(&errs(&dr("{tunnel: {protocol: CONNECT}}")), "spec.trafficPolicy.tunnel.targetHost: targetHost is required");
    has(&errs(&dr("{outlierDetection: {outlierDetectionHttpErrorCodes: [99]}}")), "invalid HTTP status 99");
    has(
        &errs(&dr("{loadBalancer: {warmup: {minimumPercent: 10}}}")),
        "spec.trafficPolicy.loadBalancer.warmup.duration: duration is required",
    );
    let gw = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: ns}\nspec: {servers: [{port: {number: 80, protocol: HTTP}, hosts: ['*']}]}\n";
    has(&errs(gw), "spec.servers[0].port.name: port name is required");
    let sc = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: ns}\nspec: {ingress: [{defaultEndpoint: '127.0.0.1:8080'}], outboundTrafficPolicy: {mode: ALLOW_ANY, egressProxy: {port: {number: 80}}}}\n";
    let e = errs(sc);
    has(&e, "spec.ingress[0].port: port is required");
    has(&e, "spec.outboundTrafficPolicy.egressProxy.host: host is required");
    // istiod's validateSidecarOutboundTrafficPolicy.
    let dfp = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: ns}\nspec: {outboundTrafficPolicy: {mode: ALLOW_ANY_DYNAMIC_DNS}}\n";
    has(
        &errs(dfp),
        "spec.outboundTrafficPolicy.mode: sidecar: ALLOW_ANY_DYNAMIC_DNS mode is only supported in MeshConfig, not in Sidecar resource",
    );
}

/// A TCP idle timeout of 0s turns it off (istiod's validation.go skips it).
#[test]
fn a_zero_tcp_idle_timeout_is_valid() {
    let dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: ns}\nspec: {host: r, trafficPolicy: {connectionPool: {tcp: {idleTimeout: 0s}}}}\n";
    assert!(doc(dr).is_ok(), "{:?}", doc(dr).err());
    has(&errs(&dr.replace("0s", "0.1ms")), "spec.trafficPolicy.connectionPool.tcp.idleTimeout");
}

/// The CRDs' lengths and sizes on entries and selectors.
#[test]
fn crd_lengths_and_sizes() {
    let we = format!(
        "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: w, namespace: ns}}\nspec: {{address: 1.1.1.1, serviceAccount: '{}'}}\n",
        "a".repeat(254)
    );
    has(&errs(&we), "spec.serviceAccount: may not be longer than 253 characters");
    let se = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: s, namespace: ns}}\nspec: {{hosts: [a.com], addresses: ['{}'], ports: [{{number: 80, name: http, protocol: HTTP}}]}}\n",
        "1".repeat(65)
    );
    has(&errs(&se), "addresses may not be longer than 64 characters");
    let dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: ns}\nspec: {host: r, trafficPolicy: {loadBalancer: {zoneAwareLbSetting: {minClusterSize: 0}}}}\n";
    has(&errs(dr), "minClusterSize: must be in the range 1..4294967295");
}
