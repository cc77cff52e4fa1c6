//! Manifest parsing on its own: the parser's bounds and what the fuzz
//! target once found (reading and watching directories is kubewatch's).

use std::path::Path;

use super::*;

const SVC: &str = "kind: Service\nmetadata: {name: a, namespace: x}\nspec: {ports: [{port: 80}]}\n";

/// Replays the config-parser fuzz target's kept inputs (seeds and crashes).
#[test]
fn fuzz_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/config_parser");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let parsed = parse_file(text);
            if let Some((index, _)) = parsed.syntax_error {
                assert_eq!(index, parsed.docs.len());
            }
        }
        n += 1;
    }
    assert!(n >= 3);
}

#[test]
fn names_are_bounded_as_the_api_server_bounds_them() {
    // Issue #19, item 2: one Service with a 10 MiB name made a 10 MiB CDS.
    let long = "a".repeat(64);
    for (doc, want) in [
        (SVC.replace("name: a", &format!("name: {long}")), "invalid metadata.name \"aaaa"),
        (SVC.replace("name: a", "name: A_b"), "DNS-1123 label"),
        (SVC.replace("namespace: x", &format!("namespace: {long}")), "invalid metadata.namespace"),
        (
            format!("kind: Pod\nmetadata: {{name: {}, namespace: x}}\n", "b".repeat(10 << 20)),
            "(10485760 bytes): must be a DNS-1123 subdomain",
        ),
    ] {
        let parsed = parse_file(&doc);
        let e = parsed.docs[0].as_ref().unwrap_err();
        assert!(e.contains(want), "{e}");
        assert!(e.len() < 300, "the message does not quote the whole name: {} bytes", e.len());
    }
    // Subdomains may be long and dotted; labels may not.
    let ok = format!("kind: Pod\nmetadata: {{name: a.{}.c, namespace: x}}\n", "b".repeat(63));
    assert!(parse_file(&ok).docs[0].is_ok());
}

/// Nesting too deep for a linear scan ends the file where its document
/// starts (issue #31): the documents before it are read, it is the syntax
/// error, whether it follows a `---` line or stands on one.
#[test]
fn deep_nesting_ends_the_file_at_its_document() {
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n";
    for deep in [format!("---\nkind: X\nspec: {}\n", "[".repeat(200)), format!("--- {}\n", "[".repeat(200))] {
        let parsed = parse_file(&format!("{ns}{deep}"));
        assert_eq!(parsed.docs.len(), 1, "{deep}");
        let (index, message) = parsed.syntax_error.unwrap();
        assert_eq!(index, 1);
        assert!(message.contains("nests deeper than 128"), "{message}");
    }
}
