//! YAML from hands we do not trust (pod annotations, `--configDir` files,
//! admission objects), parsed at a cost linear in its size.
//!
//! libyaml's scanner (under serde_yaml_ng) revisits every open flow
//! level (`[`, `{`) at each token, so `[[[[…` unclosed costs depth ×
//! tokens: a 150 KB annotation took 32 s of CPU before serde_yaml_ng's own
//! depth limit (128) could refuse it, since that limit applies after the
//! whole document was scanned. [`check_depth`] reads the text once and
//! refuses flow nesting past that same limit first, so nothing a parse
//! would have accepted is refused.

use serde::de::DeserializeOwned;

/// How deep flow collections may nest: serde_yaml_ng's recursion limit,
/// which refuses any deeper document anyway.
pub const MAX_DEPTH: usize = 128;

/// A document nesting deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("YAML nests deeper than {MAX_DEPTH} levels (line {line}): not parsed")]
pub struct TooDeep {
    /// The line (from 1) where the limit was passed.
    pub line: usize,
}

fn blankz(c: Option<&u8>) -> bool {
    c.is_none_or(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
}

fn flow_indicator(c: u8) -> bool {
    matches!(c, b',' | b'[' | b']' | b'{' | b'}')
}

/// Refuses flow nesting deeper than [`MAX_DEPTH`], in one pass over
/// `text`. It splits the text into tokens where libyaml's scanner
/// (`yaml_parser_fetch_next_token`) does: a `[` or `{` where a token starts
/// opens a collection, whatever came before it; quoted scalars, plain
/// scalars (`a[0]`, `key: a [b`, their continuation lines), comments,
/// anchors, tags and block scalars (`|`, `>`) are read past.
pub fn check_depth(text: &str) -> Result<(), TooDeep> {
    let b = text.as_bytes();
    let (mut i, mut line, mut flow) = (0usize, 1usize, 0usize);
    // Block scalar: lines more indented than this belong to it.
    let mut block_scalar: Option<usize> = None;
    // A plain scalar (block context) that ended a line: more indented
    // lines continue it.
    let mut plain: Option<usize> = None;
    let mut line_indent = 0usize;
    let mut at_line_start = true;
    while i < b.len() {
        if at_line_start {
            at_line_start = false;
            let indent = b[i..].iter().take_while(|&&x| x == b' ').count();
            let rest = &b[i + indent..];
            let blank = rest.first().is_none_or(|&x| x == b'\n' || x == b'\r');
            if let Some(parent) = block_scalar {
                if blank || indent > parent {
                    i = skip_line(b, i, &mut line, &mut at_line_start);
                    continue;
                }
                block_scalar = None;
            }
            i += indent;
            if blank {
                continue;
            }
            if flow == 0 {
                if let Some(p) = plain.filter(|p| indent > *p) {
                    // The plain scalar goes on.
                    i = plain_scalar(b, i, flow);
                    plain = ends_line(b, i).then_some(p);
                    continue;
                }
                plain = None;
                line_indent = indent;
                if indent == 0 && rest.first() == Some(&b'%') {
                    i = skip_line(b, i, &mut line, &mut at_line_start);
                    continue;
                }
            }
            if indent == 0 && (rest.starts_with(b"---") || rest.starts_with(b"...")) && blankz(rest.get(3)) {
                i += 3;
                continue;
            }
        }
        let c = b[i];
        let next = b.get(i + 1);
        match c {
            b'\n' => {
                line += 1;
                at_line_start = true;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'#' => i = b[i..].iter().position(|&x| x == b'\n').map_or(b.len(), |p| i + p),
            b'[' | b'{' => {
                flow += 1;
                if flow > MAX_DEPTH {
                    return Err(TooDeep { line });
                }
                i += 1;
            }
            b']' | b'}' => {
                flow = flow.saturating_sub(1);
                i += 1;
            }
            b',' => i += 1,
            b'-' if blankz(next) => i += 1,
            b'?' | b':' if flow > 0 || blankz(next) => i += 1,
            // Anchors, aliases and tags: read past to a blank or a flow
            // indicator.
            b'&' | b'*' | b'!' => {
                i += 1;
                while i < b.len() && !blankz(b.get(i)) && !(flow > 0 && flow_indicator(b[i])) {
                    i += 1;
                }
            }
            b'|' | b'>' if flow == 0 => {
                block_scalar = Some(line_indent);
                i = b[i..].iter().position(|&x| x == b'\n').map_or(b.len(), |p| i + p);
            }
            b'"' | b'\'' => {
                // A quoted scalar, to its closing quote (`\"` escapes in
                // double quotes, `''` in single ones); it may span lines.
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\\' if c == b'"' => {
                            if b.get(i + 1) == Some(&b'\n') {
                                line += 1;
                            }
                            i += 2;
                        }
                        b'\'' if c == b'\'' && b.get(i + 1) == Some(&b'\'') => i += 2,
                        x if x == c => break,
                        b'\n' => {
                            line += 1;
                            i += 1;
                        }
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            _ => {
                i = plain_scalar(b, i, flow);
                if flow == 0 && ends_line(b, i) {
                    plain = Some(line_indent);
                }
            }
        }
    }
    Ok(())
}

/// Whether `i` is at the end of a line.
fn ends_line(b: &[u8], i: usize) -> bool {
    b.get(i).is_none_or(|&x| x == b'\n' || x == b'\r')
}

/// Past the end of the line at `i`, its newline counted.
fn skip_line(b: &[u8], i: usize, line: &mut usize, at_line_start: &mut bool) -> usize {
    match b[i..].iter().position(|&x| x == b'\n') {
        Some(p) => {
            *line += 1;
            *at_line_start = true;
            i + p + 1
        }
        None => b.len(),
    }
}

/// Where the plain scalar starting at `i` (at least that byte) ends on
/// this line, as libyaml's `yaml_parser_scan_plain_scalar` ends it: at
/// `: ` (in flow context also `:` before a flow indicator), at ` #`, at a
/// flow indicator in flow context, or at the line's end; blanks inside do
/// not end it.
fn plain_scalar(b: &[u8], mut i: usize, flow: usize) -> usize {
    i += 1;
    while i < b.len() {
        let x = b[i];
        if x == b'\n' || x == b'\r' {
            break;
        }
        if x == b':' && (blankz(b.get(i + 1)) || (flow > 0 && b.get(i + 1).is_some_and(|&y| flow_indicator(y)))) {
            break;
        }
        if flow > 0 && flow_indicator(x) {
            break;
        }
        if (x == b' ' || x == b'\t') && b.get(i + 1) == Some(&b'#') {
            break;
        }
        i += 1;
    }
    i
}

/// `serde_yaml_ng::from_str` after [`check_depth`].
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    check_depth(text).map_err(|e| e.to_string())?;
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        for open in ["[", "{", "{a: ", "- ["] {
            let deep = open.repeat(20_000);
            let t = std::time::Instant::now();
            assert_eq!(check_depth(&deep), Err(TooDeep { line: 1 }), "{open}");
            // Linear: far below the quadratic scanner's 0.59 s at this depth.
            assert!(t.elapsed() < std::time::Duration::from_millis(200), "{open}: {:?}", t.elapsed());
        }
        // serde_yaml_ng itself refuses the same depth: nothing it accepts is lost.
        let at_limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(check_depth(&at_limit).is_ok());
        let over = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(check_depth(&over).is_err());
        assert!(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&over).is_err(), "serde_yaml_ng refuses it too");
    }

    #[test]
    fn brackets_that_open_nothing_are_not_counted() {
        let many = "[".repeat(500);
        let docs = [
            format!("regex: \"{many}\"\n"),
            format!("regex: '{many}'\n"),
            format!("regex: a{many}\n"),
            format!("key: v # {many}\n"),
            format!("script: |\n  {many}\n  {many}\nnext: 1\n"),
            format!("- >-\n    {many}\n- b\n"),
            format!("list: [\"{many}\", '{many}']\n"),
            format!("url: http://a/{many}\n"),
        ];
        for d in &docs {
            assert_eq!(check_depth(d), Ok(()), "{d}");
            assert!(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(d).is_ok(), "a valid document: {d}");
        }
    }

    /// Shapes where libyaml opens a collection although no blank or
    /// indicator comes before it (the review of #31): compact JSON, anchors
    /// and tags, a document marker.
    #[test]
    fn every_opening_libyaml_sees_is_counted() {
        for open in ["{\"a\":[", "&a [", "!!seq [", "[&a ", "{a:{"] {
            let deep = open.repeat(MAX_DEPTH + 1);
            assert!(check_depth(&deep).is_err(), "{open}");
        }
        assert!(check_depth(&format!("--- {}", "[".repeat(MAX_DEPTH + 1))).is_err());
        assert!(check_depth(&format!("a: 1\n--- {}", "[".repeat(MAX_DEPTH + 1))).is_err());
    }

    /// What libyaml reads as text is not counted (the review of #31).
    #[test]
    fn text_that_looks_like_brackets_is_not_counted() {
        let many = "[".repeat(MAX_DEPTH + 1);
        let docs = [
            format!("key: a - {many}\n"),
            format!("a: x\n  {many}\n"),
            format!("[#,{many}\n]\n"),
            format!("[!!str \"x,{many}\"]\n"),
            format!("a: \"x\\\n  {many}\"\n"),
        ];
        for d in &docs {
            assert_eq!(check_depth(d), Ok(()), "{d}");
            assert!(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(d).is_ok(), "a valid document: {d}");
        }
    }

    #[test]
    fn the_line_is_reported() {
        let text = format!("a: 1\nb:\n  c: {}", "[".repeat(MAX_DEPTH + 1));
        assert_eq!(check_depth(&text), Err(TooDeep { line: 3 }));
        assert!(from_str::<serde_json::Value>(&text).unwrap_err().contains("line 3"));
    }
}
