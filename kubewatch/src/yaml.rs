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

/// Where a scalar or collection may start: after indentation, `- `,
/// `? `, `: `, or (in flow context) `[`, `{`, `,`.
fn value_start(prev: Option<u8>, flow: usize) -> bool {
    match prev {
        None => true,
        Some(b'-' | b'?' | b':') => true,
        Some(b'[' | b'{' | b',') => flow > 0,
        _ => false,
    }
}

/// Refuses flow nesting deeper than [`MAX_DEPTH`], in one pass over
/// `text`. Quoted scalars, comments and block scalars (`|`, `>`) are
/// skipped; a bracket counts only where a collection can start, so
/// brackets inside plain scalars (`a[0]`) do not.
pub fn check_depth(text: &str) -> Result<(), TooDeep> {
    let b = text.as_bytes();
    let (mut i, mut line, mut flow) = (0usize, 1usize, 0usize);
    // The last significant byte on this line (None at a line's start).
    let mut prev: Option<u8> = None;
    // Block scalar: lines more indented than this belong to it.
    let mut block_scalar: Option<usize> = None;
    let mut line_indent = 0usize;
    let mut at_line_start = true;
    while i < b.len() {
        let c = b[i];
        if at_line_start {
            let indent = b[i..].iter().take_while(|&&x| x == b' ').count();
            let rest = &b[i + indent..];
            let blank = rest.first().is_none_or(|&x| x == b'\n' || x == b'\r');
            if let Some(parent) = block_scalar {
                if blank || indent > parent {
                    // A line of the block scalar: skipped whole, with its
                    // newline.
                    match rest.iter().position(|&x| x == b'\n') {
                        Some(p) => {
                            i += indent + p + 1;
                            line += 1;
                        }
                        None => i = b.len(),
                    }
                    continue;
                }
                block_scalar = None;
            }
            line_indent = indent;
            at_line_start = false;
            i += indent;
            if flow == 0 {
                prev = None;
            }
            continue;
        }
        match c {
            b'\n' => {
                line += 1;
                at_line_start = true;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'#' if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'\r') => {
                i = b[i..].iter().position(|&x| x == b'\n').map_or(b.len(), |p| i + p);
            }
            b'"' | b'\'' if value_start(prev, flow) => {
                // A quoted scalar, to its closing quote (`\"` escapes in
                // double quotes, `''` in single ones); it may span lines.
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\\' if c == b'"' => i += 2,
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
                prev = Some(b'"');
            }
            b'[' | b'{' if value_start(prev, flow) => {
                flow += 1;
                if flow > MAX_DEPTH {
                    return Err(TooDeep { line });
                }
                prev = Some(c);
                i += 1;
            }
            b']' | b'}' if flow > 0 => {
                flow -= 1;
                prev = Some(c);
                i += 1;
            }
            b'|' | b'>' if flow == 0 && value_start(prev, flow) => {
                block_scalar = Some(line_indent);
                i = b[i..].iter().position(|&x| x == b'\n').map_or(b.len(), |p| i + p);
            }
            b',' if flow > 0 => {
                prev = Some(c);
                i += 1;
            }
            b':' | b'-' | b'?' if b.get(i + 1).is_none_or(|x| matches!(x, b' ' | b'\t' | b'\n' | b'\r')) => {
                prev = Some(c);
                i += 1;
            }
            _ => {
                // A plain scalar (at least this byte): to the next space,
                // or (in flow context) to the next flow indicator.
                i += 1;
                while i < b.len() {
                    let x = b[i];
                    if matches!(x, b' ' | b'\t' | b'\n' | b'\r')
                        || (flow > 0 && matches!(x, b',' | b'[' | b']' | b'{' | b'}'))
                    {
                        break;
                    }
                    if x == b':' && b.get(i + 1).is_none_or(|y| matches!(y, b' ' | b'\t' | b'\n' | b'\r' | b',')) {
                        break;
                    }
                    i += 1;
                }
                prev = Some(b'a');
            }
        }
    }
    Ok(())
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

    #[test]
    fn the_line_is_reported() {
        let text = format!("a: 1\nb:\n  c: {}", "[".repeat(MAX_DEPTH + 1));
        assert_eq!(check_depth(&text), Err(TooDeep { line: 3 }));
        assert!(from_str::<serde_json::Value>(&text).unwrap_err().contains("line 3"));
    }
}
