//! Fuzz target: the Go text/template renderer (lexer, parser, evaluator)
//! on arbitrary template text, rendered over a fixed pod-like value: an
//! error or an output, never a panic or a hang.
#![no_main]

use istiod_webhook::gotmpl::{Func, Template, Value};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let mut funcs: std::collections::HashMap<&'static str, Func> = std::collections::HashMap::new();
    funcs.insert("list", |a| Ok(Value::List(a.to_vec().into())));
    funcs.insert("default", |a| Ok(a.iter().rev().find(|v| v.truthy()).cloned().unwrap_or(Value::Nil)));
    let Ok(t) = Template::parse("fuzz", src, funcs) else { return };
    let pod = serde_json::json!({
        "ObjectMeta": {"Name": "p", "Labels": {"app": "a"}, "Annotations": {"x": "1"}},
        "Spec": {"Containers": [{"Name": "app", "Ports": [{"ContainerPort": 80}]}]},
        "Values": {"global": {"proxy": {"image": "proxyv2", "port": 15020}}, "n": null},
    });
    let _ = t.render(&Value::from(&pod));
});
