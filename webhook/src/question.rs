//! A what-if question (`/debug/whatif`): the objects it names, each read
//! and judged as the validation webhook judges it, in istiod's words.
//! The question is a request body: every byte of it is untrusted (the
//! `whatif_question` fuzz target reads it).

use istiod_config::manifest::{Object, ObjectRef};
use serde_json::{Value, json};

/// One object of a question, judged.
#[derive(Debug, Clone)]
pub struct Asked {
    /// What it names.
    pub head: ObjectRef,
    /// `apiVersion`.
    pub api_version: String,
    /// The object read, for a create or replace.
    pub object: Option<Object>,
    /// The webhook's warnings.
    pub warnings: Vec<String>,
    /// A kind the server reads (others change nothing and are only
    /// reported).
    pub read: bool,
}

/// Why a question is refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// Each object's verdict (`error` set on the refused ones).
    pub objects: Vec<Value>,
}

/// Reads and judges a question's objects: every document of `text`, to
/// create or replace, or (`delete`) to delete. `namespace`: the one
/// namespace the caller may change (debug callers limited to theirs).
pub fn judge(text: &str, delete: bool, namespace: Option<&str>) -> Result<Vec<Asked>, Refused> {
    use serde::Deserialize as _;
    // An alias expands where it is read: a few bytes can stand for more
    // than memory holds. A question uses none.
    if has_alias(text) {
        let e = "cannot decode configuration: YAML aliases are not accepted in a what-if question";
        return Err(Refused { objects: vec![json!({"error": e})] });
    }
    let mut asked = Vec::new();
    let mut verdicts = Vec::new();
    let mut refused = false;
    let docs = serde_yaml_ng::Deserializer::from_str(text);
    for (index, doc) in docs.enumerate() {
        let value = match serde_yaml_ng::Value::deserialize(doc) {
            Ok(v) if v.is_null() => continue,
            Ok(v) => v,
            Err(e) => {
                verdicts.push(json!({"document": index, "error": format!("cannot decode configuration: {e}")}));
                refused = true;
                break;
            }
        };
        let json = serde_json::to_value(&value).unwrap_or(Value::Null);
        let s = |p: &str| json.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (api_version, kind, name) = (s("/apiVersion"), s("/kind"), s("/metadata/name"));
        let ns = json.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default").to_owned();
        let mut verdict =
            json!({"document": index, "apiVersion": api_version, "kind": kind, "namespace": ns, "name": name});
        let mut fail = |verdict: &mut Value, e: String| {
            verdict["error"] = e.into();
            refused = true;
        };
        if kind.is_empty() || name.is_empty() {
            fail(&mut verdict, "an object needs a kind and metadata.name".into());
            verdicts.push(verdict);
            continue;
        }
        let explicit = json.pointer("/metadata/namespace").and_then(Value::as_str);
        if let Some(limit) = namespace.filter(|n| explicit != Some(*n)) {
            fail(&mut verdict, format!("this caller may only ask about namespace {limit}"));
            verdicts.push(verdict);
            continue;
        }
        let mut warnings = Vec::new();
        let mut read = true;
        // istiod's webhook judges Istio kinds (a delete is not judged).
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        if !delete && group.ends_with(".istio.io") {
            let answer = match review(&json, &ns) {
                Some(r) => crate::validate::validate(&r, &mut Default::default()),
                None => crate::admission::AdmissionResponse::deny("cannot decode configuration"),
            };
            if !answer.allowed {
                fail(&mut verdict, answer.message.unwrap_or_default());
                verdicts.push(verdict);
                continue;
            }
            warnings = answer.warnings;
        }
        let object = if delete {
            None
        } else {
            match istiod_config::manifest::parse_value(value) {
                Ok(Object::Skipped(k)) => {
                    warnings.push(format!("{k} is not read by istiod-rs: it changes nothing served"));
                    read = false;
                    None
                }
                Ok(o) => Some(o),
                Err(e) => {
                    fail(&mut verdict, e);
                    verdicts.push(verdict);
                    continue;
                }
            }
        };
        if !warnings.is_empty() {
            verdict["warnings"] = json!(warnings);
        }
        verdicts.push(verdict);
        let head = match &object {
            Some(o) => ObjectRef::of(o),
            None => ObjectRef { kind: ref_kind(&api_version, &kind), namespace: ns, name, service: None },
        };
        asked.push(Asked { head, api_version, object, warnings, read });
    }
    if refused {
        return Err(Refused { objects: verdicts });
    }
    if asked.is_empty() && !delete {
        return Err(Refused { objects: vec![json!({"error": "the question names no object"})] });
    }
    Ok(asked)
}

/// Whether `text` may use a YAML alias: a `*` that starts a token outside
/// quotes and comments (at the start of the text, or after a blank, a
/// line break of any of YAML's kinds, `[`, `{` or `,`) and is followed by
/// a name. (Anchors alone expand nothing; an alias needs one, and a `*`
/// in a quoted string or inside a word, as in `*.example.com` quoted or a
/// regex, is none.)
fn has_alias(text: &str) -> bool {
    let breaks = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}');
    let blank = |c: char| c == ' ' || c == '\t' || breaks(c);
    let chars: Vec<char> = text.chars().collect();
    let mut quote: Option<char> = None;
    let mut prev = '\n';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match quote {
            Some('"') if c == '\\' => {
                // An escaped character, whatever it is.
                prev = 'x';
                i += 2;
                continue;
            }
            Some('\'') if c == '\'' && next == Some('\'') => {
                i += 2;
                continue;
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => {
                let starts = blank(prev) || matches!(prev, '[' | '{' | ',');
                if c == '#' && blank(prev) {
                    // A comment, to the end of its line.
                    while i < chars.len() && !breaks(chars[i]) {
                        i += 1;
                    }
                    prev = '\n';
                    continue;
                }
                if starts && (c == '"' || c == '\'') {
                    quote = Some(c);
                } else if starts
                    && c == '*'
                    && next.is_some_and(|n| !blank(n) && !matches!(n, ',' | '[' | ']' | '{' | '}'))
                {
                    return true;
                }
            }
        }
        prev = c;
        i += 1;
    }
    false
}

#[cfg(test)]
mod alias_tests {
    use super::has_alias;

    #[test]
    fn aliases_are_found_and_ordinary_text_is_not_one() {
        for yes in ["a: &x [1]\nb: *x\n", "[&x 1, *x]", "b:\u{2028}*x", "- *x", "{a: *x}"] {
            assert!(has_alias(yes), "{yes:?}");
        }
        for no in [
            "expression: response.code >= 400 && request.path != '/x'\n",
            "command: [sh, -c, \"a && b\"]\n",
            "hosts: ['*.example.com', \"*\"]\n",
            "regex: \".*foo *bar\"\n",
            "url: http://x/?a=1&b=2\n",
            "{\"hosts\": [\"*\"], \"x\": \"a *b\"}",
            "# a comment with *x\nkey: 2 * 3\n",
            "'it''s *x'",
        ] {
            assert!(!has_alias(no), "{no:?}");
        }
    }
}

/// The kind as [`ObjectRef`] names it (Gateway API kinds carry their
/// group).
fn ref_kind(api_version: &str, kind: &str) -> String {
    if istiod_config::gateway_api::is_gateway_api(api_version) {
        format!("{kind}.{}", istiod_config::gateway_api::GROUP)
    } else {
        kind.to_owned()
    }
}

/// The admission request the webhook would be sent for creating `object`.
fn review(object: &Value, namespace: &str) -> Option<crate::admission::AdmissionRequest> {
    let api = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api.split_once('/').unwrap_or(("", api));
    let kind = object["kind"].as_str().unwrap_or_default();
    let resource = format!("{}s", kind.to_ascii_lowercase());
    serde_json::from_value(json!({
        "uid": "whatif",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "namespace": namespace,
        "operation": "CREATE",
        "dryRun": true,
        "object": object,
    }))
    .ok()
}

/// The `whatif_question` fuzz target's entry, with what must hold for any
/// body: the first byte picks a delete (bit 0) and a caller limited to
/// namespace `shop` (bit 1), the rest is the text. The question is judged
/// or refused, never a panic; a refusal gives a verdict per object read;
/// under the limit every object judged is of that namespace.
pub fn fuzz_entry(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let limit = (flags & 2 != 0).then_some("shop");
    match judge(&text, flags & 1 != 0, limit) {
        Ok(asked) => {
            if let Some(ns) = limit {
                assert!(asked.iter().all(|a| a.head.namespace == ns), "{asked:?}");
            }
        }
        Err(r) => assert!(!r.objects.is_empty()),
    }
}

/// Replays what the `whatif_question` fuzz target keeps
/// (fuzz/regressions/whatif_question/).
#[cfg(test)]
mod fuzz_regressions {
    #[test]
    fn kept_inputs_are_judged_or_refused() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/whatif_question");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            super::fuzz_entry(&std::fs::read(entry.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n >= 3, "the seeds are there");
    }

    #[test]
    fn a_limited_caller_cannot_ask_of_another_namespace() {
        let text = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x, namespace: bank}\nspec: {hosts: [a], http: [{route: [{destination: {host: a}}]}]}\n";
        let r = super::judge(text, false, Some("shop")).unwrap_err();
        assert_eq!(r.objects[0]["error"], "this caller may only ask about namespace shop");
        // Unnamed, it is not taken to be the caller's.
        let r = super::judge(&text.replace(", namespace: bank", ""), false, Some("shop")).unwrap_err();
        assert_eq!(r.objects[0]["error"], "this caller may only ask about namespace shop");
    }
}
