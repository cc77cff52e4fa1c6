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

/// What `split_documents` and `parse_split` read is what the whole file
/// reads, wherever they agree to read it: the same documents, in the same
/// order. Over hand-written edge cases and the fuzz target's kept inputs.
#[test]
fn a_file_read_a_document_at_a_time_reads_as_it_reads_whole() {
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n";
    let mut texts: Vec<String> = vec![
        format!("{ns}---\n{SVC}"),
        format!("---\n{ns}---\n{SVC}---\n"),
        format!("# a comment\n\n---\n{ns}---\n---\n{SVC}"),
        format!("{ns}---\n---\n{SVC}---"),
        format!("--- {{apiVersion: v1, kind: Namespace, metadata: {{name: b}}}}\n---\n{SVC}"),
        format!("{ns}---\nkind: Service\nmetadata: {{name: A_b, namespace: x}}\n---\n{SVC}"),
        format!("{ns}--- # trailing comment\n{SVC}"),
        // A marker inside a block scalar ends it, in the file as alone.
        format!("{ns}---\nkind: ConfigMap\nmetadata: {{name: c, namespace: x}}\ndata:\n  k: |\n    line\n---\n{SVC}"),
        // A marker inside a flow collection or a quoted scalar: not cut.
        format!("{ns}---\nkind: X\nspec: [a,\n---\n]\n"),
        format!("{ns}---\nkind: X\nspec: \"a\n--- b\"\n---\n{SVC}"),
        // A syntax error in one document.
        format!("{ns}---\nkind: [\n---\n{SVC}"),
        // Directives, end markers, a byte order mark, carriage returns.
        format!("%YAML 1.2\n---\n{ns}---\n{SVC}"),
        format!("{ns}...\n---\n{SVC}"),
        format!("\u{feff}{ns}---\n{SVC}"),
        format!("{ns}\r---\r{SVC}"),
        format!("{}---\n{SVC}", ns.replace('\n', "\r\n")),
        "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"j\"}}\n".into(),
        format!("{ns}... # end\n{SVC}"),
        // Heads the parser reads otherwise than as nothing: a comment a
        // lone carriage return ends, a no-break space, a tab, a control
        // character, a byte order mark past the start.
        format!("# c\r{ns}---\n{SVC}"),
        format!("\u{a0}\n---\n{SVC}"),
        format!("\t\n---\n{SVC}"),
        format!("\x0c\n---\n{SVC}"),
        format!("# \x01\n---\n{SVC}"),
        format!("\n\u{feff}\n---\n{SVC}"),
        format!("# only a comment\r\n---\n{SVC}"),
        // Nesting the file's depth check counts across documents.
        format!("a: x\r  {}\n---\nb: y\r  {}\n", "[".repeat(65), "[".repeat(65)),
        format!("a: x\n  {}\n---\nb: y\n  {}\n", "[".repeat(65), "[".repeat(65)),
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/config_parser");
    for e in std::fs::read_dir(dir).unwrap() {
        if let Ok(text) = String::from_utf8(std::fs::read(e.unwrap().path()).unwrap()) {
            texts.push(text);
        }
    }
    let mut split = 0;
    for text in &texts {
        let whole = parse_file_limited(text, DEFAULT_MAX_DOCUMENTS);
        let Some(pieces) = split_documents(text) else { continue };
        assert!(text.ends_with(&pieces.concat()), "only a blank head is left out");
        let Some(read) = parse_split(&pieces, DEFAULT_MAX_DOCUMENTS, |_, _| None) else {
            // Refused: the whole file has an error or a cut the markers do
            // not show.
            continue;
        };
        split += 1;
        assert!(whole.syntax_error.is_none(), "{text:?}: {:?}", whole.syntax_error);
        assert_eq!(read.docs, whole.docs, "{text:?}");
    }
    assert!(split >= 8, "most of the cases are read a document at a time: {split}");
    // Refused: more documents than allowed, a syntax error.
    let many = format!("{ns}---\n{SVC}---\n{SVC}");
    assert!(parse_split(&split_documents(&many).unwrap(), 2, |_, _| None).is_none());
    let bad = format!("{ns}---\nkind: [\n");
    assert!(parse_split(&split_documents(&bad).unwrap(), 10, |_, _| None).is_none());
}

/// A document `known` answers for is taken as given, by its index, and
/// only the others are parsed.
#[test]
fn a_known_document_is_not_parsed_again() {
    let text = format!("{SVC}---\nkind: [\n---\n{SVC}");
    let pieces = split_documents(&text).unwrap();
    assert_eq!(pieces.len(), 3);
    // The broken middle document is known: the file reads.
    let mut asked = Vec::new();
    let read = parse_split(&pieces, 10, |i, t| {
        asked.push((i, t.to_owned()));
        (i == 1).then_some(None)
    })
    .unwrap();
    assert_eq!(asked.iter().map(|a| a.0).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(asked[1].1, "---\nkind: [\n");
    assert!(matches!(read.docs[..], [Ok(Some(Object::Service(_))), Ok(None), Ok(Some(Object::Service(_)))]));
    // A head said to be empty is refused all the same: in the file it may
    // be no document at all.
    let text = format!("# only a comment\r\n---\n{SVC}");
    let pieces = split_documents(&text).unwrap();
    assert_eq!(pieces.len(), 2);
    assert!(parse_split(&pieces, 10, |i, _| (i == 0).then_some(None)).is_none());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]
    /// The same, over files made of lines that cut, open and close
    /// documents, scalars and collections in every order.
    #[test]
    fn any_file_read_a_document_at_a_time_reads_as_it_reads_whole(
        lines in proptest::collection::vec(proptest::prop_oneof![
            // Mostly lines of well-formed documents...
            6 => proptest::sample::select(vec![
                "---", "--- ", "--- # c", "# c", "", "kind: Service", "metadata: {name: a, namespace: x}",
                "spec: {ports: [{port: 80}]}", "kind: Namespace", "apiVersion: v1", "metadata:", "  name: b",
                "data:", "  k: |", "    text", "- item", "a: &x 1", "b: *x",
            ]),
            // ...and some that open, close or cut what they are in.
            1 => proptest::sample::select(vec![
                "--- {a: 1}", "---x", "...", "  ", "spec: [a,", "]", "x: \"open", "close\"", "kind: [",
                "\t- tab", "%TAG ! x", "\r---", "\u{feff}a: 1",
            ]),
        ], 0..24)
    ) {
        let text = lines.join("\n");
        if let Some(pieces) = split_documents(&text) {
            proptest::prop_assert!(text.ends_with(&pieces.concat()));
            if let Some(read) = parse_split(&pieces, DEFAULT_MAX_DOCUMENTS, |_, _| None) {
                let whole = parse_file_limited(&text, DEFAULT_MAX_DOCUMENTS);
                proptest::prop_assert!(whole.syntax_error.is_none(), "{:?}: {:?}", text, whole.syntax_error);
                proptest::prop_assert_eq!(&read.docs, &whole.docs, "{:?}", text);
            }
        }
    }
}
