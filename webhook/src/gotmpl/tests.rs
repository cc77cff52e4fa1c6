//! Expected outputs are what Go's text/template gives for the same
//! template and data (Go 1.23 semantics, as documented in
//! docs/design/injection-notes.md §3.4 and §5).

use super::*;
use serde_json::json;

fn funcs() -> HashMap<&'static str, Func> {
    let mut f: HashMap<&'static str, Func> = HashMap::new();
    f.insert("list", |a| Ok(Value::List(std::sync::Arc::new(a.to_vec()))));
    f.insert("append", |a| match a {
        [Value::List(l), v] => {
            let mut l = std::mem::take(l);
            std::sync::Arc::make_mut(&mut l).push(v.clone());
            Ok(Value::List(l))
        }
        _ => Err("append wants a list and a value".into()),
    });
    f.insert("default", |a| match a {
        [d, given] => Ok(if given.truthy() { given.clone() } else { d.clone() }),
        [d] => Ok(d.clone()),
        _ => Err("default wants 1 or 2 arguments".into()),
    });
    f
}

fn render(src: &str, data: serde_json::Value) -> Result<String, Error> {
    Template::parse("t", src, funcs())?.render(&Value::from(&data))
}

/// `$x = append $x …` takes the list out of `$x` (issue #31: copying it at
/// each step made the chart's container loop quadratic); what another
/// variable shares keeps its value, as Go's values do.
#[test]
fn an_assignment_moves_its_variable_and_shared_values_stay() {
    let src = "{{ $a := list 0 }}{{ $b := $a }}{{ range .N }}{{ $a = append $a . }}{{ end }}{{ $b }} {{ $a }} \
               {{ $c := list }}{{ $c = append $c $c }}{{ $c }}";
    assert_eq!(render(src, json!({"N": [1, 2]})).unwrap(), "[0] [0 1 2] [[]]");
    // 100k appends in a loop: linear, within the step budget.
    let out =
        render("{{ $l := list }}{{ range .N }}{{ $l = append $l . }}{{ end }}{{ len $l }}", json!({"N": 100_000}));
    assert_eq!(out.unwrap(), "100000");
}

/// A render past its deadline stops with an error instead of running on.
#[test]
fn a_render_stops_at_its_deadline() {
    let t = Template::parse("t", "{{ range .N }}{{ range $.N }}x{{ end }}{{ end }}", funcs()).unwrap();
    let data = Value::from(&json!({"N": 2000}));
    let err = t.render_until(&data, Some(std::time::Instant::now())).unwrap_err();
    assert!(err.message.contains("ran out of time"), "{err}");
}

fn ok(src: &str, data: serde_json::Value) -> String {
    render(src, data).unwrap_or_else(|e| panic!("{src}: {e}"))
}

#[test]
fn values_print_as_go_prints_them() {
    let d = json!({"port": 15020, "big": 1000000, "half": 0.5, "tiny": 0.00001, "neg": -3, "n": null,
                   "m": {"b": "x", "a": 1}, "l": [1, "two", true], "t": true, "s": "str"});
    assert_eq!(ok("{{.port}} {{.big}} {{.half}} {{.tiny}} {{.neg}}", d.clone()), "15020 1e+06 0.5 1e-05 -3");
    assert_eq!(ok("{{.missing}}|{{.n}}|{{.t}}|{{.s}}", d.clone()), "<no value>|<no value>|true|str");
    assert_eq!(ok("{{.m}} {{.l}}", d.clone()), "map[a:1 b:x] [1 two true]");
    assert_eq!(ok("{{ 3 }} {{ 1.5 }} {{ \"q\" }} {{ `r` }}", d), "3 1.5 q r");
}

#[test]
fn trim_markers_and_conditionals() {
    let src = "a\n  {{- if .x }}\n  X\n  {{- else if .y }}\n  Y\n  {{- else }}\n  Z\n  {{- end }}\nb";
    assert_eq!(ok(src, json!({"x": 1})), "a\n  X\nb");
    assert_eq!(ok(src, json!({"y": "yes"})), "a\n  Y\nb");
    assert_eq!(ok(src, json!({"x": 0, "y": ""})), "a\n  Z\nb");
    assert_eq!(ok("istiod{{- if .r }}-{{ .r }}{{- end }}.svc", json!({"r": "canary"})), "istiod-canary.svc");
    assert_eq!(ok("istiod{{- if .r }}-{{ .r }}{{- end }}.svc", json!({})), "istiod.svc");
}

#[test]
fn truth_and_short_circuits_return_the_deciding_value() {
    let d = json!({"e": "", "z": 0, "l": [], "m": {}, "s": "v"});
    assert_eq!(ok("{{ or .e .z .s }}|{{ or .e .z }}|{{ and .s 7 }}|{{ and .s .l .m }}", d.clone()), "v|0|7|[]");
    // A short circuit does not evaluate what follows (a nil field would fail).
    assert_eq!(ok("{{ or .s .n.x }}|{{ and .e .n.x }}", json!({"s": "v", "e": "", "n": null})), "v|");
    assert_eq!(ok("{{ not .l }} {{ not .s }} {{ not .missing }}", d), "true false true");
}

#[test]
fn comparisons_follow_go() {
    let d = json!({"s": "b", "n": 2});
    assert_eq!(ok("{{ eq .s \"a\" \"b\" }} {{ ne .s \"b\" }} {{ eq .missing \"x\" }}", d.clone()), "true false false");
    assert_eq!(ok("{{ ge .n 1 }} {{ lt .n 1 }} {{ le \"a\" \"b\" }}", d.clone()), "true false true");
    let e = render("{{ eq .s 1 }}", d.clone()).unwrap_err();
    assert!(e.to_string().contains("incompatible types for comparison"), "{e}");
    assert!(render("{{ lt .missing 1 }}", d).is_err());
}

#[test]
fn variables_assign_outer_scopes_and_dollar_is_the_root() {
    let src = "{{- $c := list }}{{- range $i, $x := .names }}{{ if ne $x \"istio-proxy\" }}{{ $c = append $c $x }}{{ end }}{{- end }}{{ len $c }} {{ index $c 0 }}";
    assert_eq!(ok(src, json!({"names": ["istio-proxy", "app", "db"]})), "2 app");
    assert_eq!(ok("{{ range .l }}{{ $.root }}{{ . }}{{ end }}", json!({"root": "r", "l": [1, 2]})), "r1r2");
    let e = render("{{ $x = 1 }}", json!({})).unwrap_err();
    assert!(e.to_string().contains("undefined variable: $x"), "{e}");
    // A variable declared inside a block ends with it.
    assert!(render("{{ if 1 }}{{ $y := 1 }}{{ end }}{{ $y }}", json!({})).is_err());
}

#[test]
fn range_over_maps_in_key_order_and_else() {
    let d = json!({"m": {"b": 2, "a": 1}, "none": []});
    assert_eq!(ok("{{ range $k, $v := .m }}{{ $k }}={{ $v }};{{ end }}", d.clone()), "a=1;b=2;");
    assert_eq!(ok("{{ range .none }}x{{ else }}empty{{ end }}", d.clone()), "empty");
    assert_eq!(ok("{{ range .missing }}x{{ end }}done", d.clone()), "done");
    assert!(render("{{ range .m.a }}x{{ end }}", json!({"m": {"a": "str"}})).is_err());
}

#[test]
fn fields_indexes_and_nil() {
    let d = json!({"meta": {"labels": {"app": "x"}}, "n": null, "vals": {"k": 1}});
    assert_eq!(
        ok("{{ .meta.labels.app }}|{{ .meta.labels.none }}|{{ .meta.nope.deeper }}", d.clone()),
        "x|<no value>|<no value>"
    );
    let e = render("{{ .n.x }}", d.clone()).unwrap_err();
    assert!(e.to_string().contains("nil pointer evaluating interface {}.x"), "{e}");
    // A null out of a command is invalid: a field of it is invalid too
    // (the chart's `(.Values.pilot.env).ENABLE_...` with `env: null`).
    assert_eq!(ok("{{ (.n).x }}|{{ if (.n).x }}y{{ else }}n{{ end }}", d.clone()), "<no value>|n");
    // index: a string map's missing key is "", another map's nil.
    assert_eq!(
        ok("[{{ index .meta.labels \"none\" }}]|{{ index .vals \"none\" }}|{{ index .vals \"k\" }}", d.clone()),
        "[]|<no value>|1"
    );
    assert_eq!(ok("{{ (.meta).labels.app }} {{ with .meta.labels }}{{ .app }}{{ end }}", d.clone()), "x x");
    assert_eq!(ok("{{ index .l 1 }}", json!({"l": ["a", "b"]})), "b");
    assert!(render("{{ index .l 5 }}", json!({"l": ["a"]})).is_err());
    // Proto getters are nil-safe; `.String` of a string is itself.
    let pc = json!({"pc": {"interceptionMode": "REDIRECT", "tracing": null}});
    assert_eq!(ok("{{ .pc.GetInterceptionMode.String }}|{{ .pc.GetTracing.GetZipkin }}", pc), "REDIRECT|<no value>");
}

#[test]
fn define_template_printf_pipelines_and_multiline_actions() {
    let src = "{{- define \"r\" }}<{{ .x }}>{{- end }}{{ template \"r\" .inner }}{{ template \"r\" . }}";
    assert_eq!(ok(src, json!({"inner": {"x": 1}, "x": 2})), "<1><2>");
    assert_eq!(ok("{{ printf \"%s-%d-%t-%v%%\" \"a\" 3 true .l }}", json!({"l": [1]})), "a-3-true-[1]%");
    assert_eq!(ok("{{ .missing | default \"d\" | printf \"%s!\" }}", json!({})), "d!");
    let multi = "{{- $hold := and\n      (or .a .b)\n      (not .c) }}{{ $hold }}";
    assert_eq!(ok(multi, json!({"a": true, "c": false})), "true");
    assert_eq!(ok("a{{/* gone */}}b{{- /* trimmed */ -}} c", json!({})), "abc");
}

#[test]
fn bad_templates_fail_with_the_line() {
    for (src, want) in [
        ("{{ nope 1 }}", "function \"nope\" not defined"),
        ("{{ if 1 }}", "without end"),
        ("{{ end }}", "unexpected"),
        ("a\n{{ .x", "unclosed action"),
        ("{{ template \"none\" }}", "no such template"),
    ] {
        let e = render(src, json!({})).unwrap_err();
        assert!(e.to_string().contains(want), "{src}: {e}");
        assert!(e.to_string().starts_with("template: t:"), "{e}");
    }
    // Nesting is bounded (no stack overflow).
    assert!(render(&"{{ if 1 }}".repeat(100_000), json!({})).unwrap_err().to_string().contains("nest deeper"));
    assert!(render(&format!("{{{{ {}1{} }}}}", "(".repeat(100_000), ")".repeat(100_000)), json!({})).is_err());
    let chain = format!("{{{{ if 0 }}}}{}{{{{ end }}}}", "{{ else if 0 }}".repeat(100_000));
    assert!(render(&chain, json!({})).is_err());
    // Loops and output are bounded.
    for src in [
        "{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}",
        "{{ range 1e12 }}x{{ end }}",
        "{{ range 3000000 }}xxxxxxxxxx{{ end }}",
    ] {
        assert!(render(src, json!({})).is_err(), "{src}");
    }
    // Recursion is bounded.
    let e = render("{{ define \"a\" }}{{ template \"a\" . }}{{ end }}{{ template \"a\" . }}", json!({})).unwrap_err();
    assert!(e.to_string().contains("maximum template depth"), "{e}");
}

/// The chart's own injection templates (tests/data/istio-chart, from
/// istio/istio) parse: what the `gtmpl` crate could not do for three of
/// the four. Rendering them needs the injection functions (not here yet);
/// the stubs only let the parse check every call's name.
#[test]
fn the_charts_injection_templates_parse() {
    let names = [
        "annotation",
        "isset",
        "valueOrDefault",
        "toJSON",
        "fromJSON",
        "toJsonMap",
        "mergeMaps",
        "toYaml",
        "indent",
        "nindent",
        "directory",
        "contains",
        "toLower",
        "appendMultusNetwork",
        "env",
        "omit",
        "omitNil",
        "strdict",
        "includeInboundPorts",
        "excludeInboundPort",
        "applicationPorts",
        "structToJSON",
        "protoToJSON",
        "formatDuration",
        "otelResourceAttributes",
        "default",
        "quote",
        "list",
        "append",
        "join",
        "trunc",
        "trimAll",
    ];
    let mut stubs: HashMap<&'static str, Func> = HashMap::new();
    for n in names {
        stubs.insert(n, |_| Err("not implemented".into()));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/istio-chart");
    for file in ["injection-template.yaml", "gateway-injection-template.yaml", "grpc-agent.yaml", "grpc-simple.yaml"] {
        let src = std::fs::read_to_string(dir.join(file)).unwrap();
        let t = Template::parse(file, &src, stubs.clone()).unwrap_or_else(|e| panic!("{e}"));
        if file == "injection-template.yaml" {
            assert!(t.tree.defines.contains_key("resources"), "its define is kept");
        }
    }
    // A name the functions do not have fails the parse, as in Go.
    stubs.remove("annotation");
    let src = std::fs::read_to_string(dir.join("injection-template.yaml")).unwrap();
    let e = Template::parse("sidecar", &src, stubs).unwrap_err();
    assert!(e.to_string().contains("function \"annotation\" not defined"), "{e}");
}

/// Replays what the `go_template` fuzz target keeps
/// (fuzz/regressions/go_template/): each parses or fails, and renders or
/// fails, without a panic.
#[test]
fn kept_fuzz_inputs_do_not_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/go_template");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        if let Ok(src) = std::str::from_utf8(&data)
            && let Ok(t) = Template::parse("fuzz", src, funcs())
        {
            let _ = t.render(&Value::from(&json!({"Spec": {"Containers": [{"Name": "app"}]}})));
        }
        n += 1;
    }
    assert!(n >= 2);
}
